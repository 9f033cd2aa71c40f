#include "model/det_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace dgrr::model {
namespace {

double UlpError(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

TEST(DetMath, ExpWithinTwoUlp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.0137f) worst = std::max(worst, UlpError(ExpF(x), std::exp(static_cast<double>(x))));
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-200.0f), 0.0f);
  EXPECT_EQ(ExpF(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(ExpF(NAN)));
  EXPECT_GT(ExpF(88.6f), 3e38f);  // the top binade, not overflow
}

// ExpF as it was written before it became branch-free (the golden
// fingerprints were recorded with it).
float ExpFBranching(float x) {
  if (!(x < 88.7f)) return x != x ? x : INFINITY;
  if (x < -87.3f) return 0.0f;
  if (x < -86.0f) return ExpFInRange(x + 20.0f) * 2.06115362e-09f;
  return ExpFInRange(x);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Every 1021st bit pattern (all signs, exponents, NaNs, infinities, subnormals)
// plus the boundaries of each case and their neighbours.
std::vector<float> ExpInputs() {
  std::vector<float> xs;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 1021) {
    float f;
    const uint32_t bits = static_cast<uint32_t>(b);
    std::memcpy(&f, &bits, sizeof f);
    xs.push_back(f);
  }
  for (float edge : {88.7f, -87.3f, -86.0f, 0.0f, -0.0f, INFINITY, -INFINITY}) {
    xs.push_back(std::nextafter(edge, -INFINITY));
    xs.push_back(edge);
    xs.push_back(std::nextafter(edge, INFINITY));
  }
  return xs;
}

// The loop a vectorising compiler turns into 16-lane code.
[[gnu::target("avx512f")]] void ExpFAvx512(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = ExpF(in[i]);
}

TEST(DetMath, ExpBranchFreeEqualsBranchingBitForBit) {
  const std::vector<float> xs = ExpInputs();
  std::vector<float> vectorised(xs.size());
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) ExpFAvx512(vectorised.data(), xs.data(), xs.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint32_t want = Bits(ExpFBranching(xs[i]));
    if (Bits(ExpF(xs[i])) != want || (avx512 && Bits(vectorised[i]) != want)) {
      if (++mismatches <= 5) ADD_FAILURE() << "x bits " << std::hex << Bits(xs[i]);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << xs.size() << (avx512 ? " (scalar and AVX-512)" : "");
}

// The element functions compiled for the vector builds (vfmadd, 8 or 16
// lanes) against this file's portable scalar build (libm's fmaf for every
// fma), bit for bit over every 1021st float: host libraries never decide a
// result.
[[gnu::target("avx2,fma")]] void ElementFunctionsAvx2(float* e, float* t, float* l, const float* in,
                                                      size_t n) {
  for (size_t i = 0; i < n; ++i) e[i] = ExpF(in[i]);
  for (size_t i = 0; i < n; ++i) t[i] = TanhF(in[i]);
  for (size_t i = 0; i < n; ++i) l[i] = LogF(in[i]);
}
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,fma")]] void ElementFunctionsAvx512(
    float* e, float* t, float* l, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) e[i] = ExpF(in[i]);
  for (size_t i = 0; i < n; ++i) t[i] = TanhF(in[i]);
  for (size_t i = 0; i < n; ++i) l[i] = LogF(in[i]);
}

TEST(DetMath, VectorBuildsEqualThePortableBuildBitForBit) {
  const std::vector<float> xs = ExpInputs();
  const size_t n = xs.size();
  std::vector<float> e(n), t(n), l(n);
  for (size_t i = 0; i < n; ++i) {
    e[i] = ExpF(xs[i]);
    t[i] = TanhF(xs[i]);
    l[i] = LogF(xs[i]);
  }
  int builds = 0;
  for (int build = 0; build < 2; ++build) {
    std::vector<float> ve(n), vt(n), vl(n);
    if (build == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      ElementFunctionsAvx2(ve.data(), vt.data(), vl.data(), xs.data(), n);
    } else if (build == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      ElementFunctionsAvx512(ve.data(), vt.data(), vl.data(), xs.data(), n);
    } else {
      continue;
    }
    ++builds;
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      if (Bits(ve[i]) != Bits(e[i]) || Bits(vt[i]) != Bits(t[i]) || Bits(vl[i]) != Bits(l[i])) {
        if (++mismatches <= 5) ADD_FAILURE() << "build " << build << " x bits " << std::hex << Bits(xs[i]);
      }
    }
    EXPECT_EQ(mismatches, 0u) << "build " << build;
  }
  RecordProperty("vector_builds", builds);
}

// The polynomials' steps are fused: ExpF at a point where the fused and the
// unfused Horner steps round differently gives the fused result. (A regression
// to a separate multiply and add changes some of these bits.)
TEST(DetMath, HornerStepsAreFused) {
  size_t differ = 0, n = 0;
  for (float x = -10.0f; x < 10.0f; x += 0.001f, ++n) {
    constexpr float kRound = 12582912.0f;
    const float k = std::fma(x, 1.44269504088896341f, kRound) - kRound;
    const float r = std::fma(-k, 1.42860682030941723e-06f, std::fma(-k, 0.693145751953125f, x));
    float fused = 1.0f / 5040.0f, plain = fused;
    for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
      fused = std::fma(fused, r, c);
      plain = plain * r + c;  // -ffp-contract=off: two roundings
    }
    const float want = std::ldexp(fused, static_cast<int>(k));
    ASSERT_EQ(Bits(ExpF(x)), Bits(want)) << x;
    differ += Bits(fused) != Bits(plain);
  }
  EXPECT_GT(differ, n / 100) << "the sample should tell fused from unfused steps apart";
}

TEST(DetMath, TanhAbsoluteError) {
  double worst = 0;
  for (float u = -12.0f; u < 12.0f; u += 0.00731f) {
    worst = std::max(worst, std::abs(static_cast<double>(TanhF(u)) - std::tanh(static_cast<double>(u))));
  }
  EXPECT_LE(worst, 2e-7);
  EXPECT_EQ(TanhF(0.0f), 0.0f);
  EXPECT_EQ(TanhF(-20.0f), -1.0f);
  EXPECT_TRUE(std::isnan(TanhF(NAN)));
  EXPECT_TRUE(std::signbit(TanhF(-0.0f)));
}

TEST(DetMath, LogWithinTwoUlp) {
  double worst = 0;
  for (float x = 1e-30f; x < 1e30f; x *= 1.0317f) {
    if (std::abs(x - 1.0f) < 1e-3f) continue;  // relative ulp error is ill-posed near log = 0
    worst = std::max(worst, UlpError(LogF(x), std::log(static_cast<double>(x))));
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(LogF(1.0f), 0.0f);
  EXPECT_EQ(LogF(0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(LogF(-1.0f)));
  EXPECT_NEAR(LogF(1e-40f), std::log(1e-40), 1e-5);  // subnormal input
  EXPECT_NEAR(LogF(1.0001f), std::log(static_cast<double>(1.0001f)), 1e-11);
}

TEST(DetMath, CosPiAndPowInt) {
  for (double r = 0; r <= 1.0; r += 0.01) EXPECT_NEAR(CosPi(r), std::cos(M_PI * r), 1e-15) << r;
  EXPECT_EQ(CosPi(0), 1.0);
  EXPECT_EQ(CosPi(1), -1.0);
  EXPECT_EQ(PowInt(0.5, 10), 1.0 / 1024);
  EXPECT_EQ(PowInt(3.0, 0), 1.0);
  EXPECT_NEAR(PowInt(0.95, 1000), std::pow(0.95, 1000), 1e-12 * std::pow(0.95, 1000));
}

}  // namespace
}  // namespace dgrr::model
