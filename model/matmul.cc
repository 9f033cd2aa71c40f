#include "model/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/cpu_isa.h"
#include "model/numerics.h"

namespace dgrr::model {
namespace {

typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));
typedef float Float16 __attribute__((vector_size(64)));

// Operand views by strides: A(m,k) = a[m*rs + k*cs], B(k,n) = b[k*rs + n*cs],
// so transposed operands need no copy.
struct Strided {
  const float* p;
  ptrdiff_t rs, cs;
};

// Rows k0..k0+kc of B's columns n0..n0+nv, laid out [kc][NR] contiguous, the
// lanes past nv zero (they are computed but never stored).
template <int NR>
[[gnu::always_inline]] inline void PackPanel(float* packed, Strided b, int k0, int kc, int n0,
                                             int nv) {
  const float* src = b.p + k0 * b.rs + n0 * b.cs;
  if (b.cs == 1 && nv == NR) {  // a whole panel: fixed-size copies (no rep movs)
    for (int k = 0; k < kc; ++k) {
      std::memcpy(packed + static_cast<size_t>(k) * NR, src + k * b.rs, sizeof(float) * NR);
    }
    return;
  }
  if (b.cs == 1) {
    for (int k = 0; k < kc; ++k) {
      float* dst = packed + static_cast<size_t>(k) * NR;
      std::memcpy(dst, src + k * b.rs, sizeof(float) * nv);
      for (int j = nv; j < NR; ++j) dst[j] = 0.0f;
    }
    return;
  }
  for (int j = 0; j < NR; ++j) {
    if (j < nv) {
      const float* col = src + j * b.cs;
      for (int k = 0; k < kc; ++k) packed[static_cast<size_t>(k) * NR + j] = col[k * b.rs];
    } else {
      for (int k = 0; k < kc; ++k) packed[static_cast<size_t>(k) * NR + j] = 0.0f;
    }
  }
}

// acc[j] = fma(a, b[j], acc[j]) for every lane j. Written per lane with the
// scalar Fma, which GCC turns into one broadcast and one vfmadd per vector in
// the builds with FMA (AVX2+FMA, AVX-512); the portable build calls libm's
// fmaf per lane. Either way each lane is one correctly rounded fma.
template <typename Vec>
[[gnu::always_inline]] inline void FmaLanes(float a, const Vec& b, Vec& acc) {
  constexpr int W = sizeof(Vec) / sizeof(float);
#pragma GCC unroll 16
  for (int j = 0; j < W; ++j) acc[j] = Fma(a, b[j], acc[j]);
}

// One register tile: MR rows x two vectors of columns. The k loop is
// outermost, so each accumulator lane (one output element) sees its terms
// in ascending k, exactly as the reference loop does, each term one fma
// (acc = fma(a_ik, b_kj, acc)). Lanes are independent (GCC vector
// extensions), so the vector width cannot change a result.
// With `left` (MR rows of NR floats, contiguous), each result is left + the
// product before it is stored (GemmTransAPairSum's first tree level).
template <typename Vec, int MR>
[[gnu::always_inline]] inline void Tile(float* c, int ldc, const float* a, ptrdiff_t a_rs,
                                        ptrdiff_t a_cs, const float* packed, int kc, int nv,
                                        bool load_c, const float* left = nullptr) {
  constexpr int W = sizeof(Vec) / sizeof(float), NR = 2 * W;
  Vec acc[MR][2];
  for (int i = 0; i < MR; ++i) {
    const float* row = c + static_cast<size_t>(i) * ldc;
    if (!load_c) {
      acc[i][0] = acc[i][1] = Vec{};
    } else if (nv == NR) {
      std::memcpy(&acc[i][0], row, sizeof(Vec));
      std::memcpy(&acc[i][1], row + W, sizeof(Vec));
    } else {
      float tmp[NR] = {};
      std::memcpy(tmp, row, sizeof(float) * nv);
      std::memcpy(&acc[i][0], tmp, sizeof(Vec));
      std::memcpy(&acc[i][1], tmp + W, sizeof(Vec));
    }
  }
  for (int k = 0; k < kc; ++k) {
    Vec b0, b1;
    std::memcpy(&b0, packed + static_cast<size_t>(k) * NR, sizeof(Vec));
    std::memcpy(&b1, packed + static_cast<size_t>(k) * NR + W, sizeof(Vec));
    const float* a_k = a + k * a_cs;
    // Unrolled, so the accumulators stay in registers.
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const float a_ik = a_k[i * a_rs];
      FmaLanes(a_ik, b0, acc[i][0]);
      FmaLanes(a_ik, b1, acc[i][1]);
    }
  }
  if (left != nullptr) {
    for (int i = 0; i < MR; ++i) {
      Vec l0, l1;
      std::memcpy(&l0, left + i * NR, sizeof(Vec));
      std::memcpy(&l1, left + i * NR + W, sizeof(Vec));
      acc[i][0] = l0 + acc[i][0];
      acc[i][1] = l1 + acc[i][1];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* row = c + static_cast<size_t>(i) * ldc;
    if (nv == NR) {
      std::memcpy(row, &acc[i][0], sizeof(Vec));
      std::memcpy(row + W, &acc[i][1], sizeof(Vec));
    } else {
      float tmp[NR];
      std::memcpy(tmp, &acc[i][0], sizeof(Vec));
      std::memcpy(tmp + W, &acc[i][1], sizeof(Vec));
      std::memcpy(row, tmp, sizeof(float) * nv);
    }
  }
}

// The bottom rows that do not fill a whole tile: a tile of exactly that height.
template <typename Vec, int R>
[[gnu::always_inline]] inline void TileOfRows(int rows, float* c, int ldc, const float* a,
                                              ptrdiff_t a_rs, ptrdiff_t a_cs, const float* packed,
                                              int kc, int nv, bool load_c,
                                              const float* left = nullptr) {
  if constexpr (R > 0) {
    if (rows == R) {
      Tile<Vec, R>(c, ldc, a, a_rs, a_cs, packed, kc, nv, load_c, left);
    } else {
      TileOfRows<Vec, R - 1>(rows, c, ldc, a, a_rs, a_cs, packed, kc, nv, load_c, left);
    }
  }
}

// The depth of one k block: a packed panel of KC x NR floats stays in L1.
// The pair kernel takes products of at most one block.
constexpr int KC = 256;

// k in blocks of KC, then panels of NR columns, then tiles of MR rows. Each
// output element still sees k ascending: a block after the first starts from
// the float the previous block stored.
template <typename Vec, int MR>
[[gnu::always_inline]] inline void BlockedGemm(float* c, int ldc, Strided a, Strided b, int M,
                                               int K, int N, bool accumulate) {
  constexpr int W = sizeof(Vec) / sizeof(float), NR = 2 * W;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate) {
      for (int m = 0; m < M; ++m) std::fill(c + static_cast<size_t>(m) * ldc, c + static_cast<size_t>(m) * ldc + N, 0.0f);
    }
    return;
  }
  alignas(64) float packed[KC * NR];
  for (int k0 = 0; k0 < K; k0 += KC) {
    const int kc = std::min(KC, K - k0);
    const bool load_c = accumulate || k0 > 0;
    for (int n0 = 0; n0 < N; n0 += NR) {
      const int nv = std::min(NR, N - n0);
      PackPanel<NR>(packed, b, k0, kc, n0, nv);
      const float* a_k0 = a.p + k0 * a.cs;
      int m0 = 0;
      for (; m0 + MR <= M; m0 += MR) {
        Tile<Vec, MR>(c + static_cast<size_t>(m0) * ldc + n0, ldc, a_k0 + m0 * a.rs, a.rs, a.cs,
                      packed, kc, nv, load_c);
      }
      TileOfRows<Vec, MR - 1>(M - m0, c + static_cast<size_t>(m0) * ldc + n0, ldc, a_k0 + m0 * a.rs,
                              a.rs, a.cs, packed, kc, nv, load_c);
    }
  }
}

// The pair kernel: c = a0^T.b0 + a1^T.b1 where each product is exactly what
// BlockedGemm writes for it (K <= KC: one k block, no accumulation) and the
// two floats are then added: the first level of the canonical tree (left +
// right) done while the products are in registers, so c is stored once for
// the pair instead of once per product. Per register tile: the left product
// into a small tile in L1 (whole width: its lanes past nv are zero columns,
// never stored to c), then the right one, added to left in registers and
// stored.
//
// One whole register tile of it, written (never accumulated), plus `left`
// when given. Called, not inlined: with the two examples' tiles
// inlined into one function, GCC -O3 left the AVX-512 build's lanes as
// scalar fmas (5 GFLOP/s instead of ~130); each ISA's copy alone vectorises
// as BlockedGemm's tiles do. A call per 2 x K fmas of a tile costs nothing.
using PairTileFn = void (*)(float* c, int ldc, const float* a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                            const float* packed, int K, int nv, const float* left);

[[gnu::target("avx512f,fma"), gnu::noinline]] void PairTileAvx512(
    float* c, int ldc, const float* a, ptrdiff_t a_rs, ptrdiff_t a_cs, const float* packed, int K,
    int nv, const float* left) {
  Tile<Float16, 8>(c, ldc, a, a_rs, a_cs, packed, K, nv, false, left);
}
[[gnu::target("avx2,fma"), gnu::noinline]] void PairTileAvx2(float* c, int ldc, const float* a,
                                                          ptrdiff_t a_rs, ptrdiff_t a_cs,
                                                          const float* packed, int K, int nv,
                                                          const float* left) {
  Tile<Float8, 6>(c, ldc, a, a_rs, a_cs, packed, K, nv, false, left);
}
[[gnu::noinline]] void PairTileSse2(float* c, int ldc, const float* a, ptrdiff_t a_rs,
                                    ptrdiff_t a_cs, const float* packed, int K, int nv,
                                    const float* left) {
  Tile<Float4, 4>(c, ldc, a, a_rs, a_cs, packed, K, nv, false, left);
}

template <int MR, int NR, PairTileFn TileFn>
[[gnu::always_inline]] inline void PairTile(float* c, int ldc, int rows, const float* a0,
                                            const float* a1, ptrdiff_t a_rs, ptrdiff_t a_cs,
                                            const float* packed0, const float* packed1, int K,
                                            int nv) {
  alignas(64) float left[MR * NR];
  TileFn(left, NR, a0, a_rs, a_cs, packed0, K, NR, nullptr);
  if (rows == MR) {
    TileFn(c, ldc, a1, a_rs, a_cs, packed1, K, nv, left);
    return;
  }
  // The last tile of rows: a whole tile over the zero rows PackRowTiles
  // added, its first `rows` rows stored.
  alignas(64) float sum[MR * NR];
  TileFn(sum, NR, a1, a_rs, a_cs, packed1, K, NR, left);
  for (int i = 0; i < rows; ++i) {
    std::memcpy(c + static_cast<size_t>(i) * ldc, sum + i * NR, sizeof(float) * nv);
  }
}

// A's rows m0..m0+MR for every k, as [tile][k][MR] (rows past M zero): the
// tile then reads its MR values of each k from one contiguous run instead
// of from one cache line per k (A is a transposed activation, read down its
// columns), which kept both examples' operands from staying in L1.
template <int MR>
[[gnu::always_inline]] inline void PackRowTiles(float* packed, Strided a, int M, int K) {
  const int tiles = (M + MR - 1) / MR;
  for (int k = 0; k < K; ++k) {
    for (int t = 0; t < tiles; ++t) {
      float* dst = packed + (static_cast<size_t>(t) * K + k) * MR;
      const int m0 = t * MR, rows = std::min(MR, M - m0);
      for (int i = 0; i < rows; ++i) dst[i] = a.p[(m0 + i) * a.rs + k * a.cs];
      for (int i = rows; i < MR; ++i) dst[i] = 0.0f;
    }
  }
}

template <typename Vec, int MR, PairTileFn TileFn>
[[gnu::always_inline]] inline void BlockedPairSumGemm(float* c, int ldc, Strided a0, Strided b0,
                                                      Strided a1, Strided b1, int M, int K, int N) {
  constexpr int W = sizeof(Vec) / sizeof(float), NR = 2 * W;
  // The two panels and both examples' row tiles in one buffer per thread
  // (the panels are 64 KiB in the AVX-512 build: off the stack). Panels
  // first: 64-byte aligned floats, so the vector loads stay aligned.
  const int tiles = (M + MR - 1) / MR;
  const size_t tile_floats = static_cast<size_t>(K) * MR;
  const size_t panel_floats = static_cast<size_t>(KC) * NR;
  static thread_local std::vector<float> scratch;
  const size_t need = 2 * panel_floats + 2 * tiles * tile_floats + 16;
  if (scratch.size() < need) scratch.resize(need);
  float* const base = scratch.data() + (16 - (reinterpret_cast<uintptr_t>(scratch.data()) / 4) % 16) % 16;
  float* const packed0 = base;
  float* const packed1 = packed0 + panel_floats;
  float* const tiles0 = packed1 + panel_floats;
  float* const tiles1 = tiles0 + tiles * tile_floats;
  PackRowTiles<MR>(tiles0, a0, M, K);
  PackRowTiles<MR>(tiles1, a1, M, K);
  const ptrdiff_t a_rs = 1, a_cs = MR;
  for (int n0 = 0; n0 < N; n0 += NR) {
    const int nv = std::min(NR, N - n0);
    PackPanel<NR>(packed0, b0, 0, K, n0, nv);
    PackPanel<NR>(packed1, b1, 0, K, n0, nv);
    for (int t = 0; t < tiles; ++t) {
      const int m0 = t * MR, rows = std::min(MR, M - m0);
      float* const c_tile = c + static_cast<size_t>(m0) * ldc + n0;
      const float* const t0 = tiles0 + t * tile_floats;
      const float* const t1 = tiles1 + t * tile_floats;
      PairTile<MR, NR, TileFn>(c_tile, ldc, rows, t0, t1, a_rs, a_cs, packed0, packed1, K, nv);
    }
  }
}

// Builds of the same source for three vector widths, chosen at run time:
// wider vectors hold more output elements, the per-element order is
// untouched, so all give identical bits (tested). Register tiles: SSE2 and
// AVX2 have 16 vector registers (4 or 6 rows x 2 vectors of accumulators),
// AVX-512 has 32 (8 rows x 2). The AVX2 build needs FMA as well (every CPU
// with AVX2 has it); the SSE2 build is the portable one, with libm's fmaf.
[[gnu::target("avx512f,fma")]] void GemmAvx512(float* c, int ldc, Strided a, Strided b, int M, int K,
                                           int N, bool accumulate) {
  BlockedGemm<Float16, 8>(c, ldc, a, b, M, K, N, accumulate);
}

[[gnu::target("avx2,fma")]] void GemmAvx2(float* c, int ldc, Strided a, Strided b, int M, int K, int N,
                                      bool accumulate) {
  BlockedGemm<Float8, 6>(c, ldc, a, b, M, K, N, accumulate);
}

void GemmSse2(float* c, int ldc, Strided a, Strided b, int M, int K, int N, bool accumulate) {
  BlockedGemm<Float4, 4>(c, ldc, a, b, M, K, N, accumulate);
}

[[gnu::target("avx512f,fma")]] void PairSumAvx512(float* c, Strided a0, Strided b0, Strided a1,
                                               Strided b1, int M, int K, int N) {
  BlockedPairSumGemm<Float16, 8, PairTileAvx512>(c, N, a0, b0, a1, b1, M, K, N);
}
[[gnu::target("avx2,fma")]] void PairSumAvx2(float* c, Strided a0, Strided b0, Strided a1,
                                          Strided b1, int M, int K, int N) {
  BlockedPairSumGemm<Float8, 6, PairTileAvx2>(c, N, a0, b0, a1, b1, M, K, N);
}
void PairSumSse2(float* c, Strided a0, Strided b0, Strided a1, Strided b1, int M, int K, int N) {
  BlockedPairSumGemm<Float4, 4, PairTileSse2>(c, N, a0, b0, a1, b1, M, K, N);
}

Strided ViewA(const float* a, int M, int K, bool trans) {
  return trans ? Strided{a, 1, M} : Strided{a, K, 1};
}
Strided ViewB(const float* b, int K, int N, bool trans) {
  return trans ? Strided{b, 1, K} : Strided{b, N, 1};
}

void GemmFloatStrided(GemmIsa isa, float* c, int ldc, Strided a, Strided b, int M, int K, int N,
                      bool accumulate) {
  switch (isa) {
    case GemmIsa::kAvx512: return GemmAvx512(c, ldc, a, b, M, K, N, accumulate);
    case GemmIsa::kAvx2: return GemmAvx2(c, ldc, a, b, M, K, N, accumulate);
    case GemmIsa::kSse2: return GemmSse2(c, ldc, a, b, M, K, N, accumulate);
  }
}

void GemmFloat(GemmIsa isa, float* c, const float* a, const float* b, int M, int K, int N,
               bool accumulate, bool trans_a, bool trans_b) {
  GemmFloatStrided(isa, c, N, ViewA(a, M, K, trans_a), ViewB(b, K, N, trans_b), M, K, N,
                   accumulate);
}

template <typename S>
void ReferenceLoop(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate,
                   bool trans_a, bool trans_b) {
  const ptrdiff_t a_rs = trans_a ? 1 : K, a_cs = trans_a ? M : 1;
  const ptrdiff_t b_rs = trans_b ? 1 : N, b_cs = trans_b ? K : 1;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      S acc = accumulate ? c[static_cast<size_t>(m) * N + n] : S(0);
      for (int k = 0; k < K; ++k) acc = Fma(a[m * a_rs + k * a_cs], b[k * b_rs + n * b_cs], acc);
      c[static_cast<size_t>(m) * N + n] = acc;
    }
  }
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512: return "avx512";
    case GemmIsa::kAvx2: return "avx2";
    case GemmIsa::kSse2: return "sse2";
  }
  return "unknown";
}

bool CpuSupports(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return IsaAllowed(IsaLevel::kAvx512) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case GemmIsa::kAvx2:
      return IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kSse2: return true;  // x86-64 baseline
  }
  return false;
}

GemmIsa BestGemmIsa() {
  static const GemmIsa best = CpuSupports(GemmIsa::kAvx512) ? GemmIsa::kAvx512
                              : CpuSupports(GemmIsa::kAvx2) ? GemmIsa::kAvx2
                                                            : GemmIsa::kSse2;
  return best;
}

bool CpuHasAvx2() { return CpuSupports(GemmIsa::kAvx2); }

namespace {
// The instruction set a ScopedGemmIsa chose for this thread, or none.
thread_local int current_isa_override = -1;
GemmIsa CurrentGemmIsa() {
  return current_isa_override < 0 ? BestGemmIsa() : static_cast<GemmIsa>(current_isa_override);
}
}  // namespace

ScopedGemmIsa::ScopedGemmIsa(GemmIsa isa) : previous_(current_isa_override) {
  GemmIsa chosen = isa;
  if (!CpuSupports(chosen)) chosen = CpuSupports(GemmIsa::kAvx2) ? GemmIsa::kAvx2 : GemmIsa::kSse2;
  if (!CpuSupports(chosen)) chosen = GemmIsa::kSse2;
  current_isa_override = static_cast<int>(chosen);
}
ScopedGemmIsa::~ScopedGemmIsa() { current_isa_override = previous_; }

void GemmFloatWith(GemmIsa isa, float* c, const float* a, const float* b, int M, int K, int N,
                   bool accumulate, bool trans_a, bool trans_b) {
  GemmFloat(isa, c, a, b, M, K, N, accumulate, trans_a, trans_b);
}

template <>
void Gemm<float>(float* c, const float* a, const float* b, int M, int K, int N, bool accumulate) {
  GemmFloat(CurrentGemmIsa(), c, a, b, M, K, N, accumulate, false, false);
}
template <>
void GemmTransA<float>(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate) {
  GemmFloat(CurrentGemmIsa(), c, a, b, M, K, N, accumulate, true, false);
}
template <>
void GemmTransB<float>(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate) {
  GemmFloat(CurrentGemmIsa(), c, a, b, M, K, N, accumulate, false, true);
}

// The double path serves the finite-difference checks: the plain loop suffices.
template <>
void Gemm<double>(double* c, const double* a, const double* b, int M, int K, int N,
                  bool accumulate) {
  ReferenceLoop(c, a, b, M, K, N, accumulate, false, false);
}
template <>
void GemmTransA<double>(double* c, const double* a, const double* b, int M, int K, int N,
                        bool accumulate) {
  ReferenceLoop(c, a, b, M, K, N, accumulate, true, false);
}
template <>
void GemmTransB<double>(double* c, const double* a, const double* b, int M, int K, int N,
                        bool accumulate) {
  ReferenceLoop(c, a, b, M, K, N, accumulate, false, true);
}

namespace {
// Both products, then their sum: the form every shape and type can take.
template <typename S>
void PairSumByParts(S* c, const S* a0, const S* b0, const S* a1, const S* b1, int M, int K, int N) {
  GemmTransA(c, a0, b0, M, K, N, /*accumulate=*/false);
  std::vector<S> right(static_cast<size_t>(std::max(M, 0)) * static_cast<size_t>(std::max(N, 0)));
  GemmTransA(right.data(), a1, b1, M, K, N, /*accumulate=*/false);
  for (size_t i = 0; i < right.size(); ++i) c[i] = c[i] + right[i];
}
}  // namespace

template <>
void GemmTransAPairSum<float>(float* c, const float* a0, const float* b0, const float* a1,
                              const float* b1, int M, int K, int N) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || K > KC) return PairSumByParts(c, a0, b0, a1, b1, M, K, N);
  const Strided va0 = ViewA(a0, M, K, true), vb0 = ViewB(b0, K, N, false);
  const Strided va1 = ViewA(a1, M, K, true), vb1 = ViewB(b1, K, N, false);
  switch (CurrentGemmIsa()) {
    case GemmIsa::kAvx512: return PairSumAvx512(c, va0, vb0, va1, vb1, M, K, N);
    case GemmIsa::kAvx2: return PairSumAvx2(c, va0, vb0, va1, vb1, M, K, N);
    case GemmIsa::kSse2: return PairSumSse2(c, va0, vb0, va1, vb1, M, K, N);
  }
}
template <>
void GemmTransAPairSum<double>(double* c, const double* a0, const double* b0, const double* a1,
                               const double* b1, int M, int K, int N) {
  if (M <= 0 || N <= 0) return;
  PairSumByParts(c, a0, b0, a1, b1, M, K, N);
}

template <>
void GemmStrided<float>(float* c, int ldc, const float* a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                        const float* b, ptrdiff_t b_rs, ptrdiff_t b_cs, int M, int K, int N,
                        bool accumulate) {
  GemmFloatStrided(CurrentGemmIsa(), c, ldc, Strided{a, a_rs, a_cs}, Strided{b, b_rs, b_cs}, M, K, N,
                   accumulate);
}
template <>
void GemmStrided<double>(double* c, int ldc, const double* a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                         const double* b, ptrdiff_t b_rs, ptrdiff_t b_cs, int M, int K, int N,
                         bool accumulate) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = accumulate ? c[static_cast<size_t>(m) * ldc + n] : 0.0;
      for (int k = 0; k < K; ++k) acc = Fma(a[m * a_rs + k * a_cs], b[k * b_rs + n * b_cs], acc);
      c[static_cast<size_t>(m) * ldc + n] = acc;
    }
  }
}

void GemmFloatBaseline(float* c, const float* a, const float* b, int M, int K, int N,
                       bool accumulate) {
  GemmFloat(GemmIsa::kSse2, c, a, b, M, K, N, accumulate, false, false);
}

template <typename S>
void MatmulReference(S* c, const S* a, const S* b, int M, int K, int N, bool accumulate,
                     bool trans_a, bool trans_b) {
  ReferenceLoop(c, a, b, M, K, N, accumulate, trans_a, trans_b);
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

template void MatmulReference<float>(float*, const float*, const float*, int, int, int, bool, bool,
                                     bool);
template void MatmulReference<double>(double*, const double*, const double*, int, int, int, bool,
                                      bool, bool);
template void Transpose<float>(float*, const float*, int, int);
template void Transpose<double>(double*, const double*, int, int);

}  // namespace dgrr::model
