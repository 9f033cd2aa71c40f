#include "model/det_math.h"

#include <gtest/gtest.h>

#include <cmath>

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
