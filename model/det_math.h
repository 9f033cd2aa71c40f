// Elementary functions written out in plain float/double arithmetic.
//
// glibc picks among several builds of expf, tanhf, logf, cos and pow at run
// time (FMA and non-FMA variants), and nothing promises they agree in every
// last bit. A run replayed on another CPU must reproduce every bit, so the
// float training path uses these instead: range reduction, a fixed polynomial
// evaluated by Horner, and exact power-of-two scaling. With -ffp-contract=off
// every step is an IEEE operation, so the result depends on the input only.
// Accuracy: ExpF and LogF within a few ulp, TanhF within 2e-7 absolute
// (tested against libm in double). Results below 2^-126 flush to zero.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dgrr::model {

// 2^k as a float for k in [-126, 127].
inline float PowerOfTwoF(int k) {
  const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// exp(x) for x in [-86, 88.7], branch-free so loops over it vectorise.
inline float ExpFInRange(float x) {
  // x = k ln2 + r, |r| <= ln2/2; k rounded to nearest by the 1.5 * 2^23 trick
  // (exact for |k| < 2^22, no libm call); ln2 split so k * ln2_hi is exact.
  constexpr float kRound = 12582912.0f;
  const float k = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723e-06f;
  // exp(r) by its Taylor polynomial to degree 7 (remainder < 2e-8 relative on |r| <= 0.35).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // Multiply by 2^k exactly by adding k to p's exponent field: p is in
  // [0.7, 1.42] and k in [-124, 128), so the result stays a normal float.
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<uint32_t>(static_cast<int32_t>(k)) << 23;  // wraps: adds k to the exponent
  std::memcpy(&p, &bits, sizeof p);
  return p;
}

// NaN stays NaN; x >= 88.7 is infinity, x < -87.3 zero; [-87.3, -86) is
// exp(x + 20) e^-20 so the scaling by 2^k stays in the normal range. Written
// with selects, not branches, so loops over it vectorise (the cases are
// computed side by side and one is kept; the input of ExpFInRange is moved
// to 0 where no case uses it, so its integer conversion stays in range).
inline float ExpF(float x) {
  const bool scaled = x < -86.0f;
  const bool in_range = x >= -87.3f && x < 88.7f;  // false for NaN
  const float shifted = x + 20.0f;
  float arg = scaled ? shifted : x;
  arg = in_range ? arg : 0.0f;
  const float e = ExpFInRange(arg);
  const float e_scaled = e * 2.06115362e-09f;  // e^-20
  float result = scaled ? e_scaled : e;
  result = x < -87.3f ? 0.0f : result;
  result = x < 88.7f ? result : INFINITY;
  return x != x ? x : result;
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|), with |u| clamped at 9
// where tanh is 1 to float precision; NaN in, NaN out. Written with integer
// selects on the bit patterns (no float compare, no branch) so GCC vectorises
// loops over it.
inline float TanhF(float u) {
  constexpr uint32_t kNineBits = 0x41100000u;  // 9.0f
  constexpr uint32_t kInfBits = 0x7f800000u;
  uint32_t u_bits;
  std::memcpy(&u_bits, &u, sizeof u_bits);
  const uint32_t sign = u_bits & 0x80000000u;
  const uint32_t abs_bits = u_bits ^ sign;
  // For non-negative floats the bit patterns order like the values.
  const uint32_t below = 0u - static_cast<uint32_t>(abs_bits < kNineBits);  // all ones or zero
  const uint32_t clamped_bits = (abs_bits & below) | (kNineBits & ~below);
  float a;
  std::memcpy(&a, &clamped_bits, sizeof a);
  const float e = ExpFInRange(-2.0f * a);  // in (0, 1]: no overflow
  const float t = (1.0f - e) / (1.0f + e);
  uint32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof t_bits);
  t_bits |= sign;  // t >= 0, so OR-ing the sign in is copysign
  const uint32_t is_nan = 0u - static_cast<uint32_t>(abs_bits > kInfBits);
  const uint32_t result_bits = (u_bits & is_nan) | (t_bits & ~is_nan);
  float result;
  std::memcpy(&result, &result_bits, sizeof result);
  return result;
}

inline float LogF(float x) {
  if (!(x > 0.0f)) return x == 0.0f ? -INFINITY : NAN;
  if (x == INFINITY) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits >> 23) == 0) {  // subnormal: scale into the normal range first
    return LogF(x * 8388608.0f) - 23.0f * 0.693147180559945309f;
  }
  int e = static_cast<int>(bits >> 23) - 127;
  bits = (bits & 0x007fffffu) | 0x3f800000u;  // mantissa m in [1, 2)
  float m;
  std::memcpy(&m, &bits, sizeof m);
  if (m > 1.41421356f) {
    m = m * 0.5f;
    e += 1;
  }
  // log m = 2 atanh(f), f = (m - 1)/(m + 1), |f| <= 0.172.
  const float f = (m - 1.0f) / (m + 1.0f);
  const float f2 = f * f;
  float s = 1.0f / 11.0f;
  s = s * f2 + 1.0f / 9.0f;
  s = s * f2 + 1.0f / 7.0f;
  s = s * f2 + 1.0f / 5.0f;
  s = s * f2 + 1.0f / 3.0f;
  s = s * f2 + 1.0f;
  const float log_m = 2.0f * f * s;
  const float ef = static_cast<float>(e);
  return (ef * 0.693145751953125f + log_m) + ef * 1.42860682030941723e-06f;
}

// cos(pi * r) for r in [0, 1], by the Taylor series of cos on [0, pi/2]
// (20 terms: the remainder is far below double precision).
inline double CosPi(double r) {
  const bool flip = r > 0.5;
  const double x = (flip ? 1.0 - r : r) * 3.14159265358979323846;
  const double x2 = x * x;
  double term = 1.0, sum = 1.0;
  for (int n = 1; n <= 20; ++n) {
    term = -term * x2 / static_cast<double>((2 * n - 1) * (2 * n));
    sum += term;
  }
  return flip ? -sum : sum;
}

// base^n for n >= 0 by binary exponentiation (a fixed sequence of multiplies).
inline double PowInt(double base, int64_t n) {
  double result = 1.0;
  while (n > 0) {
    if (n & 1) result *= base;
    base *= base;
    n >>= 1;
  }
  return result;
}

// Scalar-generic spellings for the layer templates: float takes the
// deterministic versions above, double (the reference path) takes libm.
inline float Exp(float x) { return ExpF(x); }
inline double Exp(double x) { return std::exp(x); }
inline float Tanh(float x) { return TanhF(x); }
inline double Tanh(double x) { return std::tanh(x); }
inline float Log(float x) { return LogF(x); }
inline double Log(double x) { return std::log(x); }

}  // namespace dgrr::model
