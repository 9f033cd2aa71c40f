#include "model/matmul.h"

#include <gtest/gtest.h>

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

// Both dispatch targets (AVX2 where the CPU has it, the SSE2 baseline always)
// give the same bits.
TEST(Matmul, DispatchTargetsAgreeBitwise) {
  const int M = 32, K = 64, N = 192;
  const auto a = RandomVector<float>(M * K, 5), b = RandomVector<float>(K * N, 6);
  std::vector<float> dispatched(M * N), baseline(M * N);
  Gemm(dispatched.data(), a.data(), b.data(), M, K, N, false);
  GemmFloatBaseline(baseline.data(), a.data(), b.data(), M, K, N, false);
  EXPECT_EQ(0, std::memcmp(dispatched.data(), baseline.data(), dispatched.size() * sizeof(float)));
  RecordProperty("avx2", CpuHasAvx2() ? "yes" : "no");
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
