#include "model/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/splitmix.h"

namespace dgrr::model {
namespace {

template <typename S>
std::vector<S> RandomVector(size_t n, uint64_t seed) {
  SplitMixStream rng(seed);
  std::vector<S> v(n);
  for (S& x : v) x = static_cast<S>(static_cast<double>(rng.Next() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  return v;
}

template <typename S>
void ExpectBitwiseEqualToReference(int M, int K, int N, bool accumulate) {
  const auto a = RandomVector<S>(static_cast<size_t>(M) * K, 1);
  const auto b = RandomVector<S>(static_cast<size_t>(K) * N, 2);
  auto fast = RandomVector<S>(static_cast<size_t>(M) * N, 3);
  auto reference = fast;
  Gemm(fast.data(), a.data(), b.data(), M, K, N, accumulate);
  MatmulReference(reference.data(), a.data(), b.data(), M, K, N, accumulate);
  ASSERT_EQ(0, std::memcmp(fast.data(), reference.data(), fast.size() * sizeof(S)))
      << "M=" << M << " K=" << K << " N=" << N << " accumulate=" << accumulate;
}

// The blocked, vectorised kernel keeps the reference's per-element order, so
// it must agree to the last bit on every shape, including ragged edges.
TEST(Matmul, FloatGemmMatchesReferenceBitwise) {
  for (int M : {1, 3, 4, 7, 32, 33}) {
    for (int K : {1, 5, 32, 128}) {
      for (int N : {1, 8, 15, 16, 17, 96, 256}) {
        ExpectBitwiseEqualToReference<float>(M, K, N, false);
        ExpectBitwiseEqualToReference<float>(M, K, N, true);
      }
    }
  }
}

TEST(Matmul, DoubleGemmMatchesReferenceBitwise) {
  for (int M : {1, 4, 9}) {
    for (int K : {1, 7, 64}) {
      for (int N : {1, 8, 13, 40}) {
        ExpectBitwiseEqualToReference<double>(M, K, N, false);
        ExpectBitwiseEqualToReference<double>(M, K, N, true);
      }
    }
  }
}

// Bitwise equality where every NaN counts as equal: a vector add may take its
// operands in the other order, which changes only which NaN's payload wins.
bool SameBitsOrBothNan(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return false;
  }
  return true;
}

std::vector<GemmIsa> SupportedIsas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kSse2, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

// Every instruction set the CPU offers (SSE2 always; AVX2 and AVX-512 where
// present), with either operand transposed, on ragged shapes and on k longer
// than one k-block (256), gives the reference loop's bits.
TEST(Matmul, EveryIsaAndTransposeMatchesReferenceBitwise) {
  int checked = 0;
  for (GemmIsa isa : SupportedIsas()) {
    for (int M : {1, 5, 8, 13, 64}) {
      for (int K : {1, 7, 64, 300, 513}) {
        for (int N : {1, 9, 16, 33, 64, 130}) {
          for (int trans = 0; trans < 4; ++trans) {
            const bool ta = trans & 1, tb = trans & 2, acc = (M + K + N + trans) % 2 == 0;
            const auto a = RandomVector<float>(static_cast<size_t>(M) * K, 11);
            const auto b = RandomVector<float>(static_cast<size_t>(K) * N, 12);
            auto fast = RandomVector<float>(static_cast<size_t>(M) * N, 13);
            auto reference = fast;
            GemmFloatWith(isa, fast.data(), a.data(), b.data(), M, K, N, acc, ta, tb);
            MatmulReference(reference.data(), a.data(), b.data(), M, K, N, acc, ta, tb);
            ASSERT_EQ(0, std::memcmp(fast.data(), reference.data(), fast.size() * sizeof(float)))
                << GemmIsaName(isa) << " M=" << M << " K=" << K << " N=" << N
                << " trans_a=" << ta << " trans_b=" << tb << " accumulate=" << acc;
            ++checked;
          }
        }
      }
    }
  }
  RecordProperty("isas", static_cast<int>(SupportedIsas().size()));
  EXPECT_GT(checked, 0);
}

// Infinities, NaNs, signed zeros, subnormals and values whose products
// overflow go through every instruction set exactly as through the scalar loop.
TEST(Matmul, SpecialValuesAgreeAcrossIsas) {
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 3e38f,
                            -3e38f, 1.0f, -1.0f, 1e-20f};
  const int M = 11, K = 37, N = 45;
  std::vector<float> a(M * K), b(K * N), c0(M * N);
  SplitMixStream rng(21);
  // One value in four special, so most sums stay finite and exercise -0,
  // subnormals and overflow rather than all turning into NaN.
  auto pick = [&]() {
    const uint64_t r = rng.Next();
    if (r % 4 != 0) return static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    return specials[(r >> 8) % (sizeof specials / sizeof specials[0])];
  };
  for (float& x : a) x = pick();
  for (float& x : b) x = pick();
  for (float& x : c0) x = pick();
  for (bool acc : {false, true}) {
    auto reference = c0;
    MatmulReference(reference.data(), a.data(), b.data(), M, K, N, acc);
    for (GemmIsa isa : SupportedIsas()) {
      auto fast = c0;
      GemmFloatWith(isa, fast.data(), a.data(), b.data(), M, K, N, acc);
      EXPECT_TRUE(SameBitsOrBothNan(fast, reference)) << GemmIsaName(isa) << " accumulate=" << acc;
    }
  }
}

// Each term is ONE fused multiply-add: x = 1 + 2^-23 squared is
// 1 + 2^-22 + 2^-46, and fma(x, x, -(1 + 2^-22)) keeps the 2^-46 that a
// separate multiply would round away. Every instruction set (full vectors and
// ragged lanes, every row of a tile), the reference loop and the plain entry
// points under ScopedGemmIsa compute it.
TEST(Matmul, EveryTermIsOneFusedMultiplyAdd) {
  const float x = 1.0f + 0x1.0p-23f, minus = -(1.0f + 0x1.0p-22f);
  for (int M : {1, 7}) {
    for (int N : {1, 5, 16, 40}) {
      const std::vector<float> a(M, x), b(N, x);
      std::vector<float> want(static_cast<size_t>(M) * N, minus);
      MatmulReference(want.data(), a.data(), b.data(), M, 1, N, /*accumulate=*/true);
      for (float v : want) ASSERT_EQ(v, 0x1.0p-46f) << "reference M=" << M << " N=" << N;
      for (GemmIsa isa : SupportedIsas()) {
        std::vector<float> c(want.size(), minus);
        GemmFloatWith(isa, c.data(), a.data(), b.data(), M, 1, N, /*accumulate=*/true);
        EXPECT_EQ(c, want) << GemmIsaName(isa) << " M=" << M << " N=" << N;
        std::vector<float> scoped(want.size(), minus);
        const ScopedGemmIsa chosen(isa);
        Gemm(scoped.data(), a.data(), b.data(), M, 1, N, /*accumulate=*/true);
        EXPECT_EQ(scoped, want) << GemmIsaName(isa) << " scoped, M=" << M << " N=" << N;
      }
    }
  }
}

// ScopedGemmIsa picks the kernel of the plain entry points on its thread and
// restores the previous choice when it ends (checked through the portable
// kernel's bits, which every kernel shares, and through nesting).
TEST(Matmul, ScopedIsaNestsAndEveryChoiceGivesTheSameBits) {
  const int M = 13, K = 300, N = 45;
  const auto a = RandomVector<float>(static_cast<size_t>(M) * K, 41);
  const auto b = RandomVector<float>(static_cast<size_t>(K) * N, 42);
  std::vector<float> want(static_cast<size_t>(M) * N);
  MatmulReference(want.data(), a.data(), b.data(), M, K, N, false, false, true);
  for (GemmIsa outer : {GemmIsa::kSse2, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    const ScopedGemmIsa o(outer);
    for (GemmIsa inner : {GemmIsa::kSse2, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      std::vector<float> got(want.size());
      {
        const ScopedGemmIsa i(inner);
        GemmTransB(got.data(), a.data(), b.data(), M, K, N, false);
      }
      EXPECT_EQ(got, want) << GemmIsaName(outer) << "/" << GemmIsaName(inner);
      std::vector<float> after(want.size());
      GemmTransB(after.data(), a.data(), b.data(), M, K, N, false);
      EXPECT_EQ(after, want) << GemmIsaName(outer);
    }
  }
}

// Stacking examples' rows into one call gives each row the bits it gets in a
// call of its own: what lets the model multiply a whole block of examples at
// once without changing any example's result.
TEST(Matmul, StackedRowsEqualSeparateCalls) {
  const int T = 64, K = 128, N = 384, examples = 7;
  const auto a = RandomVector<float>(static_cast<size_t>(examples) * T * K, 31);
  const auto b = RandomVector<float>(static_cast<size_t>(K) * N, 32);
  for (bool tb : {false, true}) {
    std::vector<float> stacked(static_cast<size_t>(examples) * T * N), separate(stacked.size());
    GemmFloatWith(BestGemmIsa(), stacked.data(), a.data(), b.data(), examples * T, K, N, false,
                  false, tb);
    for (int e = 0; e < examples; ++e) {
      GemmFloatWith(BestGemmIsa(), separate.data() + static_cast<size_t>(e) * T * N,
                    a.data() + static_cast<size_t>(e) * T * K, b.data(), T, K, N, false, false, tb);
    }
    EXPECT_EQ(0, std::memcmp(stacked.data(), separate.data(), stacked.size() * sizeof(float)));
  }
}

// The pair kernel writes what two GemmTransA calls and the tree's first
// level (left + right) make, on every instruction set, on ragged shapes, on
// a k beyond one block (the by-parts path) and on k = 0; the two operand
// pairs lie wherever the caller's examples do.
template <typename S>
void ExpectPairSumEqualsTwoProducts(int M, int K, int N, const char* what) {
  const auto a0 = RandomVector<S>(static_cast<size_t>(K) * M, 51);
  const auto b0 = RandomVector<S>(static_cast<size_t>(K) * N, 52);
  const auto a1 = RandomVector<S>(static_cast<size_t>(K) * M, 53);
  const auto b1 = RandomVector<S>(static_cast<size_t>(K) * N, 54);
  std::vector<S> left(static_cast<size_t>(M) * N), right(left.size());
  GemmTransA(left.data(), a0.data(), b0.data(), M, K, N, false);
  GemmTransA(right.data(), a1.data(), b1.data(), M, K, N, false);
  std::vector<S> want(left.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = left[i] + right[i];
  // Overwritten, never read; guard values after it stay as they are.
  auto got = RandomVector<S>(want.size() + 64, 55);
  const std::vector<S> guard(got.end() - 64, got.end());
  GemmTransAPairSum(got.data(), a0.data(), b0.data(), a1.data(), b1.data(), M, K, N);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(S)))
      << what << " M=" << M << " K=" << K << " N=" << N;
  ASSERT_TRUE(std::equal(guard.begin(), guard.end(), got.end() - 64)) << what << " wrote past c";
}

TEST(Matmul, PairSumEqualsTwoProductsThenTheirSum) {
  for (GemmIsa isa : SupportedIsas()) {
    const ScopedGemmIsa scoped(isa);
    for (int M : {1, 5, 6, 8, 13, 128}) {
      for (int K : {0, 1, 7, 64, 256, 300}) {
        for (int N : {1, 9, 16, 33, 130}) {
          ExpectPairSumEqualsTwoProducts<float>(M, K, N, GemmIsaName(isa));
        }
      }
    }
  }
  ExpectPairSumEqualsTwoProducts<double>(9, 64, 40, "double");
}

// The SSE2 baseline entry point keeps working (benchmarks compare with it).
TEST(Matmul, DispatchTargetsAgreeBitwise) {
  const int M = 32, K = 64, N = 192;
  const auto a = RandomVector<float>(M * K, 5), b = RandomVector<float>(K * N, 6);
  std::vector<float> dispatched(M * N), baseline(M * N);
  Gemm(dispatched.data(), a.data(), b.data(), M, K, N, false);
  GemmFloatBaseline(baseline.data(), a.data(), b.data(), M, K, N, false);
  EXPECT_EQ(0, std::memcmp(dispatched.data(), baseline.data(), dispatched.size() * sizeof(float)));
  RecordProperty("best_isa", GemmIsaName(BestGemmIsa()));
}

TEST(Matmul, SmallProductByHand) {
  // [1 2; 3 4] . [5 6; 7 8] = [19 22; 43 50]; accumulate adds onto c.
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[] = {1, 1, 1, 1};
  Gemm(c, a, b, 2, 2, 2, /*accumulate=*/false);
  EXPECT_EQ(c[0], 19);
  EXPECT_EQ(c[1], 22);
  EXPECT_EQ(c[2], 43);
  EXPECT_EQ(c[3], 50);
  Gemm(c, a, b, 2, 2, 2, /*accumulate=*/true);
  EXPECT_EQ(c[3], 100);
}

TEST(Matmul, TransposeRoundTrips) {
  const int rows = 37, cols = 70;
  const auto in = RandomVector<float>(static_cast<size_t>(rows) * cols, 4);
  std::vector<float> t(in.size()), back(in.size());
  Transpose(t.data(), in.data(), rows, cols);
  EXPECT_EQ(t[5 * rows + 2], in[2 * cols + 5]);
  Transpose(back.data(), t.data(), cols, rows);
  EXPECT_EQ(back, in);
}

}  // namespace
}  // namespace dgrr::model
