#include "model/matmul.h"

#include <algorithm>

namespace dgrr::model {
namespace {

typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

// One register tile: rows [m0, m0+MR) x two vectors of columns from n0. The k
// loop is outermost, so each accumulator lane (one output element) sees its
// products in ascending k, exactly as the reference loop does. Lanes are
// independent IEEE operations (GCC vector extensions) and the build forbids
// contraction, so every multiply and every add rounds on its own.
template <typename Vec, int MR>
[[gnu::always_inline]] inline void VectorTile(float* c, const float* a, const float* b, int m0,
                                              int n0, int K, int N, bool accumulate) {
  constexpr int W = sizeof(Vec) / sizeof(float);
  Vec acc[MR][2];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < 2; ++j) {
      if (accumulate) {
        __builtin_memcpy(&acc[i][j], c + static_cast<size_t>(m0 + i) * N + n0 + j * W, sizeof(Vec));
      } else {
        acc[i][j] = Vec{};
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    const float* b_row = b + static_cast<size_t>(k) * N + n0;
    Vec b0, b1;
    __builtin_memcpy(&b0, b_row, sizeof(Vec));
    __builtin_memcpy(&b1, b_row + W, sizeof(Vec));
    for (int i = 0; i < MR; ++i) {
      const float a_ik = a[static_cast<size_t>(m0 + i) * K + k];
      Vec a_vec;
      for (int l = 0; l < W; ++l) a_vec[l] = a_ik;
      acc[i][0] += a_vec * b0;
      acc[i][1] += a_vec * b1;
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < 2; ++j) {
      __builtin_memcpy(c + static_cast<size_t>(m0 + i) * N + n0 + j * W, &acc[i][j], sizeof(Vec));
    }
  }
}

// Ragged edge: same order, no blocking.
template <typename S>
inline void EdgeTile(S* c, const S* a, const S* b, int m0, int m1, int n0, int n1, int K, int N,
                     bool accumulate) {
  for (int m = m0; m < m1; ++m) {
    for (int n = n0; n < n1; ++n) {
      S acc = accumulate ? c[static_cast<size_t>(m) * N + n] : S(0);
      for (int k = 0; k < K; ++k) {
        acc += a[static_cast<size_t>(m) * K + k] * b[static_cast<size_t>(k) * N + n];
      }
      c[static_cast<size_t>(m) * N + n] = acc;
    }
  }
}

// Full tiles in vectors, the ragged right and bottom edges scalar.
template <typename Vec, int MR>
[[gnu::always_inline]] inline void TiledGemmFloat(float* c, const float* a, const float* b, int M,
                                                  int K, int N, bool accumulate) {
  constexpr int NR = 2 * static_cast<int>(sizeof(Vec) / sizeof(float));
  const int m_full = M - M % MR;
  const int n_full = N - N % NR;
  for (int m0 = 0; m0 < m_full; m0 += MR) {
    for (int n0 = 0; n0 < n_full; n0 += NR) VectorTile<Vec, MR>(c, a, b, m0, n0, K, N, accumulate);
    EdgeTile(c, a, b, m0, m0 + MR, n_full, N, K, N, accumulate);
  }
  EdgeTile(c, a, b, m_full, M, 0, N, K, N, accumulate);
}

// Runtime dispatch between an AVX2 build (8 lanes) and the SSE2 baseline (4
// lanes) of the same source: wider vectors hold more output elements, the
// per-element order is untouched, so both give identical bits (tested).
[[gnu::target("avx2")]] void GemmFloatAvx2(float* c, const float* a, const float* b, int M, int K,
                                           int N, bool accumulate) {
  TiledGemmFloat<Float8, 4>(c, a, b, M, K, N, accumulate);
}

void GemmFloatSse2(float* c, const float* a, const float* b, int M, int K, int N,
                   bool accumulate) {
  TiledGemmFloat<Float4, 4>(c, a, b, M, K, N, accumulate);
}

}  // namespace

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

template <>
void Gemm<float>(float* c, const float* a, const float* b, int M, int K, int N, bool accumulate) {
  if (CpuHasAvx2()) {
    GemmFloatAvx2(c, a, b, M, K, N, accumulate);
  } else {
    GemmFloatSse2(c, a, b, M, K, N, accumulate);
  }
}

template <>
void Gemm<double>(double* c, const double* a, const double* b, int M, int K, int N,
                  bool accumulate) {
  // The double path serves the finite-difference checks: the plain loop suffices.
  MatmulReference(c, a, b, M, K, N, accumulate);
}

void GemmFloatBaseline(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate) {
  GemmFloatSse2(c, a, b, M, K, N, accumulate);
}

template <typename S>
void MatmulReference(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate) {
  EdgeTile(c, a, b, 0, M, 0, N, K, N, accumulate);
}

template <typename S>
void Transpose(S* out, const S* in, int rows, int cols) {
  constexpr int kBlock = 32;  // keeps both sides of the copy in L1
  for (int r0 = 0; r0 < rows; r0 += kBlock) {
    for (int c0 = 0; c0 < cols; c0 += kBlock) {
      const int r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      for (int r = r0; r < r1; ++r) {
        for (int col = c0; col < c1; ++col) {
          out[static_cast<size_t>(col) * rows + r] = in[static_cast<size_t>(r) * cols + col];
        }
      }
    }
  }
}

template void MatmulReference<float>(float*, const float*, const float*, int, int, int, bool);
template void MatmulReference<double>(double*, const double*, const double*, int, int, int, bool);
template void Transpose<float>(float*, const float*, int, int);
template void Transpose<double>(double*, const double*, int, int);

}  // namespace dgrr::model
