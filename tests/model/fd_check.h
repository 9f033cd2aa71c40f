// Central finite differences in double precision for gradient checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "model/splitmix.h"

namespace dgrr::model::testing {

// Uniform values in [-scale, scale), a pure function of seed.
inline std::vector<double> RandomDoubles(size_t n, uint64_t seed, double scale = 1.0) {
  SplitMixStream rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = (static_cast<double>(rng.Next() >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale;
  return v;
}

// Step and tolerance: with h = 1e-5 the central difference's truncation error
// (h^2/6 f''') and rounding error (eps/h) are both far below 1e-8 for these
// smooth, O(1) functions; we require agreement to 1e-7 * max(1, |numeric|).
inline constexpr double kFdStep = 1e-5;
inline constexpr double kFdTolerance = 1e-7;

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for
// every i (or the listed indices). Returns the largest scaled error seen.
inline double CheckGradient(const std::string& what, std::vector<double>& x,
                            const std::vector<double>& analytic,
                            const std::function<double()>& loss,
                            const std::vector<size_t>& indices = {}) {
  EXPECT_EQ(x.size(), analytic.size()) << what;
  std::vector<size_t> which = indices;
  if (which.empty()) {
    for (size_t i = 0; i < x.size(); ++i) which.push_back(i);
  }
  double worst = 0;
  for (size_t i : which) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double plus = loss();
    x[i] = saved - kFdStep;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * kFdStep);
    const double err = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, err);
    EXPECT_LE(err, kFdTolerance) << what << "[" << i << "]: analytic " << analytic[i]
                                 << " numeric " << numeric;
  }
  return worst;
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace dgrr::model::testing
