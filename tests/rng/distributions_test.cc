// Distributions: exact bit mappings at edge values, and statistical sanity
// over 10^6 draws with a fixed seed (mean and variance within 5 sigma; a
// chi-square on 256 buckets below 377.2, its upper tail probability ~1e-6 for
// 255 degrees of freedom by the Wilson-Hilferty approximation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "base/coding.h"
#include "rng/distributions.h"
#include "rng/rng_streams.h"

namespace dgrr::rng {
namespace {

constexpr size_t kDraws = 1000000;
constexpr double kChiSquare255Limit = 377.2;

PhiloxStream TestStream(uint64_t which) {
  return RngStreams(0xd15c0).Stream(UserPurpose(1), {which});
}

struct Moments {
  double mean;
  double variance;
};
template <typename T>
Moments MomentsOf(const std::vector<T>& values) {
  double sum = 0;
  for (T v : values) sum += v;
  const double mean = sum / values.size();
  double squares = 0;
  for (T v : values) squares += (v - mean) * (v - mean);
  return {mean, squares / (values.size() - 1)};
}

double ChiSquare(const std::vector<uint64_t>& counts, double expected_per_bucket) {
  double chi = 0;
  for (uint64_t c : counts) chi += (c - expected_per_bucket) * (c - expected_per_bucket) / expected_per_bucket;
  return chi;
}

// Uniform(0,1): mean 1/2 with sd sqrt(1/12/N); sample variance 1/12 with sd
// sqrt((1/80 - 1/144)/N) (fourth central moment 1/80).
template <typename T>
void ExpectUniformMoments(const std::vector<T>& values) {
  const Moments m = MomentsOf(values);
  const double n = values.size();
  EXPECT_NEAR(m.mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(m.variance, 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
}

TEST(Uniform, U32TopByteChiSquare) {
  PhiloxStream s = TestStream(1);
  std::vector<uint32_t> draws(kDraws);
  s.Fill(draws.data(), draws.size());
  std::vector<uint64_t> buckets(256);
  for (uint32_t d : draws) ++buckets[d >> 24];
  EXPECT_LT(ChiSquare(buckets, kDraws / 256.0), kChiSquare255Limit);
  std::vector<uint64_t> low_buckets(256);  // the low byte too: all lanes matter
  for (uint32_t d : draws) ++low_buckets[d & 0xff];
  EXPECT_LT(ChiSquare(low_buckets, kDraws / 256.0), kChiSquare255Limit);
}

TEST(Uniform, FloatMomentsAndChiSquare) {
  PhiloxStream s = TestStream(2);
  std::vector<float> values(kDraws);
  FillUniformFloat(s, values.data(), values.size());
  EXPECT_EQ(s.position(), kDraws);
  ExpectUniformMoments(values);
  std::vector<uint64_t> buckets(256);
  for (float v : values) {
    ASSERT_GT(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    ++buckets[std::min<int>(255, static_cast<int>(v * 256))];
  }
  EXPECT_LT(ChiSquare(buckets, kDraws / 256.0), kChiSquare255Limit);
}

TEST(Uniform, DoubleMoments) {
  PhiloxStream s = TestStream(3);
  std::vector<double> values(kDraws);
  FillUniformDouble(s, values.data(), values.size());
  EXPECT_EQ(s.position(), 2 * kDraws);
  for (double v : values) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
  ExpectUniformMoments(values);
}

TEST(Uniform, BitMappingsAtTheEnds) {
  EXPECT_EQ(UniformFloatHalfOpenFromBits(0), 0.0f);
  EXPECT_EQ(UniformFloatHalfOpenFromBits(0xFFFFFFFFu), 1.0f - 0x1p-24f);
  EXPECT_EQ(UniformDoubleFromBits(0), 0.0);
  EXPECT_EQ(UniformDoubleFromBits(~uint64_t{0}), 1.0 - 0x1p-53);
  EXPECT_EQ(UniformDoubleCurandFromBits(0), 0x1p-32);
  EXPECT_EQ(UniformDoubleCurandFromBits(0xFFFFFFFFu), 1.0);
  EXPECT_EQ(UniformDoubleHqCurandFromBits(0, 0), 0x1p-54);
}

TEST(Normal, MomentsAndTails) {
  PhiloxStream s = TestStream(4);
  std::vector<double> values(kDraws);
  FillNormalDouble(s, values.data(), values.size());
  EXPECT_EQ(s.position(), 2 * kDraws);  // 4 draws per pair
  const Moments m = MomentsOf(values);
  const double n = values.size();
  EXPECT_NEAR(m.mean, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(m.variance, 1.0, 5 * std::sqrt(2 / n));
  // P(|z| > 2) = 0.0455003: binomial count within 5 sigma.
  const double p_tail = 0.04550026;
  const double tail = std::count_if(values.begin(), values.end(), [](double z) { return std::fabs(z) > 2; });
  EXPECT_NEAR(tail, p_tail * n, 5 * std::sqrt(n * p_tail * (1 - p_tail)));
}

TEST(Normal, FloatIsTheRoundedDoubleAndOddCountsUseWholePairs) {
  PhiloxStream a = TestStream(5);
  PhiloxStream b = a;
  std::vector<float> f(7);
  std::vector<double> d(8);
  FillNormalFloat(a, f.data(), f.size(), 1.5, 2.0);
  FillNormalDouble(b, d.data(), d.size());
  EXPECT_EQ(a.position(), 16u);  // 4 * ceil(7 / 2)
  EXPECT_EQ(b.position(), 16u);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], static_cast<float>(1.5 + 2.0 * d[i])) << i;
}

TEST(Normal, BoxMullerFormulaAtKnownPoints) {
  // x = 0 gives u1 = 2^-53 (the smallest), y = 0 gives theta = 0.
  const double r_max = std::sqrt(-2.0 * std::log(0x1p-53));
  const DoublePair at_zero = NormalPairFromBits(0, 0);
  EXPECT_EQ(at_zero.first, r_max);
  EXPECT_EQ(at_zero.second, 0.0);
  EXPECT_NEAR(r_max, 8.5717, 1e-4);
  // x = all ones gives u1 = 1 and radius 0.
  const DoublePair at_one = NormalPairFromBits(~uint64_t{0}, 12345);
  EXPECT_EQ(std::fabs(at_one.first), 0.0);
  // y = 2^62 gives u2 = 1/4, theta = pi/2: all the mass in `second`.
  const DoublePair quarter = NormalPairFromBits(0, uint64_t{1} << 62);
  EXPECT_NEAR(quarter.second, r_max, 1e-12);
  EXPECT_NEAR(quarter.first, 0.0, 1e-12);
}

TEST(Bernoulli, ThresholdDefinition) {
  EXPECT_EQ(*BernoulliThreshold(0.0), 0u);
  EXPECT_EQ(*BernoulliThreshold(1.0), uint64_t{1} << 32);
  EXPECT_EQ(*BernoulliThreshold(0.5), uint64_t{1} << 31);
  EXPECT_EQ(*BernoulliThreshold(0.9), 3865470566u);  // 0.9 * 2^32 = 3865470566.4
  EXPECT_EQ(*BernoulliThreshold(0x1p-33), 1u);       // exactly half: rounds away from zero
  EXPECT_TRUE(BernoulliThreshold(-0.01).status().IsInvalidArgument());
  EXPECT_TRUE(BernoulliThreshold(1.01).status().IsInvalidArgument());
  EXPECT_TRUE(BernoulliThreshold(std::numeric_limits<double>::quiet_NaN()).status().IsInvalidArgument());
}

TEST(Bernoulli, MaskIsDrawBelowThreshold) {
  const uint64_t threshold = *BernoulliThreshold(0.3);
  for (uint64_t start : std::initializer_list<uint64_t>{0, 3}) {
    PhiloxStream masks = TestStream(6);
    masks.SkipTo(start);
    PhiloxStream draws = masks;
    std::vector<uint8_t> mask(1001);
    FillBernoulliMask(masks, mask.data(), mask.size(), threshold);
    for (size_t i = 0; i < mask.size(); ++i) {
      ASSERT_EQ(mask[i], draws.NextU32() < threshold ? 1 : 0) << i;
    }
    EXPECT_EQ(masks, draws);
  }
}

TEST(Bernoulli, EdgeProbabilitiesAndRate) {
  std::vector<uint8_t> mask(kDraws);
  PhiloxStream all = TestStream(7);
  FillBernoulliMask(all, mask.data(), 1000, *BernoulliThreshold(1.0));
  EXPECT_EQ(std::accumulate(mask.begin(), mask.begin() + 1000, 0), 1000);
  EXPECT_EQ(all.position(), 1000u);
  PhiloxStream none = TestStream(7);
  FillBernoulliMask(none, mask.data(), 1000, *BernoulliThreshold(0.0));
  EXPECT_EQ(std::accumulate(mask.begin(), mask.begin() + 1000, 0), 0);
  EXPECT_EQ(none.position(), 1000u);

  PhiloxStream s = TestStream(8);
  const double p = 0.9;
  FillBernoulliMask(s, mask.data(), mask.size(), *BernoulliThreshold(p));
  const double kept = std::accumulate(mask.begin(), mask.end(), 0.0);
  EXPECT_NEAR(kept, p * kDraws, 5 * std::sqrt(kDraws * p * (1 - p)));
}

// Lemire's method from its definition: accept u when (u * range) mod 2^32 is
// at least 2^32 mod range; the value is (u * range) >> 32.
uint32_t ReferenceUniformBelow(PhiloxStream& s, uint32_t range) {
  const uint64_t reject_below = (uint64_t{1} << 32) % range;
  for (;;) {
    const uint64_t m = uint64_t{s.NextU32()} * range;
    if ((m & 0xFFFFFFFFu) >= reject_below) return static_cast<uint32_t>(m >> 32);
  }
}

TEST(UniformBelow, MatchesDefinitionIncludingRejections) {
  for (uint32_t range : {1u, 2u, 3u, 10u, 1000003u, (1u << 31) + 1, 0xFFFFFFFFu}) {
    PhiloxStream a = TestStream(9);
    PhiloxStream b = a;
    for (int i = 0; i < 2000; ++i) {
      const uint32_t value = UniformBelow(a, range);
      ASSERT_LT(value, range);
      ASSERT_EQ(value, ReferenceUniformBelow(b, range)) << "range " << range << " i " << i;
    }
    EXPECT_EQ(a, b);
    // About half of the draws are rejected for 2^31 + 1.
    if (range == (1u << 31) + 1) {
      EXPECT_GT(a.position(), 3000u);
    }
  }
}

TEST(UniformBelow, ZeroRangeMeansTwoToThe32) {
  PhiloxStream a = TestStream(11);
  PhiloxStream b = a;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(UniformBelow(a, 0), b.NextU32());
}

TEST(UniformBelow, ChiSquareOnSmallRange) {
  PhiloxStream s = TestStream(10);
  std::vector<uint64_t> buckets(256);
  for (size_t i = 0; i < 256 * 1000; ++i) ++buckets[UniformBelow(s, 256)];
  EXPECT_LT(ChiSquare(buckets, 1000.0), kChiSquare255Limit);
}

// ---- Permutations ------------------------------------------------------------

TEST(Permutation, IsABijection) {
  const RngStreams rng(11);
  for (uint64_t n : {0u, 1u, 2u, 3u, 10u, 1000u, 100003u}) {
    StatusOr<std::vector<uint32_t>> order = rng.EpochPermutation(4, n);
    ASSERT_TRUE(order.ok());
    ASSERT_EQ(order->size(), n);
    std::vector<uint32_t> sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n " << n;
  }
  EXPECT_TRUE(rng.EpochPermutation(0, uint64_t{1} << 32).status().IsInvalidArgument());
}

TEST(Permutation, PureFunctionOfSeedAndEpoch) {
  constexpr uint64_t kN = 50000;
  const RngStreams replayed(1234);
  std::vector<std::vector<uint32_t>> epochs;
  for (uint64_t epoch = 0; epoch <= 7; ++epoch) epochs.push_back(*replayed.EpochPermutation(epoch, kN));
  const std::vector<uint32_t> direct = *RngStreams(1234).EpochPermutation(7, kN);
  EXPECT_EQ(direct, epochs[7]);
  EXPECT_NE(epochs[6], epochs[7]);
  EXPECT_NE(*RngStreams(1235).EpochPermutation(7, kN), direct);
  // The same as running FillPermutation on the (shuffle, epoch) stream.
  PhiloxStream s = RngStreams(1234).Stream(Purpose::kShuffle, {7});
  std::vector<uint32_t> by_hand(kN);
  FillPermutation(s, by_hand.data(), kN);
  EXPECT_EQ(by_hand, direct);
}

TEST(Permutation, AllOrdersOfThreeEquallyLikely) {
  const RngStreams rng(77);
  std::map<std::vector<uint32_t>, uint64_t> counts;
  constexpr int kEpochs = 60000;
  for (int epoch = 0; epoch < kEpochs; ++epoch) ++counts[*rng.EpochPermutation(epoch, 3)];
  ASSERT_EQ(counts.size(), 6u);
  std::vector<uint64_t> buckets;
  for (const auto& [order, count] : counts) buckets.push_back(count);
  EXPECT_LT(ChiSquare(buckets, kEpochs / 6.0), 35.9);  // 5 d.o.f., tail ~1e-6
}

}  // namespace
}  // namespace dgrr::rng
