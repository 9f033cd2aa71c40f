// Elementary functions written out in plain float/double arithmetic.
//
// glibc picks among several builds of expf, tanhf, logf, cos and pow at run
// time (FMA and non-FMA variants), and nothing promises they agree in every
// last bit, nor with the device's libdevice. A run replayed on another CPU,
// or on a GPU, must reproduce every bit, so the float training path uses
// these instead: range reduction, a fixed polynomial evaluated by Horner with
// one fma per step (model/numerics.h), and exact power-of-two scaling. Every
// step is an IEEE operation or an fma, so the result depends on the input
// only; the float functions are DGRR_HD, the one definition host and device
// kernels share. Accuracy: ExpF and LogF within a few ulp, TanhF within 2e-7
// absolute (tested against libm in double). Results below 2^-126 flush to
// zero.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/numerics.h"

namespace dgrr::model {

// 2^k as a float for k in [-126, 127].
DGRR_HD inline float PowerOfTwoF(int k) {
  return BitsFloat(static_cast<uint32_t>(k + 127) << 23);
}

// exp(x) for x in [-86, 88.7], branch-free so loops over it vectorise.
DGRR_HD inline float ExpFInRange(float x) {
  // x = k ln2 + r, |r| <= ln2/2 (a little more: k is rounded from the fused
  // x log2e); k rounded to nearest by the 1.5 * 2^23 trick (exact for
  // |k| < 2^22, no libm call); r = x - k ln2_hi - k ln2_lo, each step one fma.
  constexpr float kRound = 12582912.0f;
  const float k = Fma(x, 1.44269504088896341f, kRound) - kRound;
  const float r = Fma(-k, 1.42860682030941723e-06f, Fma(-k, 0.693145751953125f, x));
  // exp(r) by its Taylor polynomial to degree 7 (remainder < 2e-8 relative on |r| <= 0.35).
  float p = 1.0f / 5040.0f;
  p = Fma(p, r, 1.0f / 720.0f);
  p = Fma(p, r, 1.0f / 120.0f);
  p = Fma(p, r, 1.0f / 24.0f);
  p = Fma(p, r, 1.0f / 6.0f);
  p = Fma(p, r, 0.5f);
  p = Fma(p, r, 1.0f);
  p = Fma(p, r, 1.0f);
  // Multiply by 2^k exactly by adding k to p's exponent field: p is in
  // [0.7, 1.42] and k in [-124, 128), so the result stays a normal float.
  uint32_t bits = FloatBits(p);
  bits += static_cast<uint32_t>(static_cast<int32_t>(k)) << 23;  // wraps: adds k to the exponent
  return BitsFloat(bits);
}

// a where `take_a`, else b, as an AND/OR of the bit patterns (no branch).
DGRR_HD inline float SelectF(bool take_a, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(take_a);
  return BitsFloat((FloatBits(a) & mask) | (FloatBits(b) & ~mask));
}

// NaN stays NaN; x >= 88.7 is infinity, x < -87.3 zero; [-87.3, -86) is
// exp(x + 20) e^-20 so the scaling by 2^k stays in the normal range. Written
// with selects, not branches, so loops over it vectorise (the cases are
// computed side by side and one is kept; the input of ExpFInRange is moved
// to 0 where no case uses it, so its integer conversion stays in range). The
// case tests compare bit patterns as integers, not floats: GCC keeps a float
// comparison (which may raise an IEEE flag, -ftrapping-math) as a branch and
// then does not vectorise the loop. For a non-NaN x and c > 0, x < -c is
// "negative and |x| > c" and x < c is "negative or |x| < c" on the bits.
DGRR_HD inline float ExpF(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  const bool negative = (bits >> 31) != 0;
  const bool nan = abs_bits > 0x7f800000u;
  const bool below_86 = negative & (abs_bits > 0x42ac0000u);        // x < -86
  const bool below_87_3 = negative & (abs_bits > 0x42ae999au);      // x < -87.3f
  const bool below_88_7 = negative | (abs_bits < 0x42b16666u);      // x < 88.7f
  const bool scaled = below_86;
  const bool in_range = !below_87_3 & below_88_7 & !nan;
  const float shifted = x + 20.0f;
  float arg = SelectF(scaled, shifted, x);
  arg = SelectF(in_range, arg, 0.0f);
  const float e = ExpFInRange(arg);
  const float e_scaled = e * 2.06115362e-09f;  // e^-20
  float result = SelectF(scaled, e_scaled, e);
  result = SelectF(below_87_3, 0.0f, result);
  result = SelectF(below_88_7, result, INFINITY);
  return SelectF(nan, x, result);
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|), with |u| clamped at 9
// where tanh is 1 to float precision; NaN in, NaN out. Written with integer
// selects on the bit patterns (no float compare, no branch) so GCC vectorises
// loops over it.
DGRR_HD inline float TanhF(float u) {
  constexpr uint32_t kNineBits = 0x41100000u;  // 9.0f
  constexpr uint32_t kInfBits = 0x7f800000u;
  const uint32_t u_bits = FloatBits(u);
  const uint32_t sign = u_bits & 0x80000000u;
  const uint32_t abs_bits = u_bits ^ sign;
  // For non-negative floats the bit patterns order like the values.
  const uint32_t below = 0u - static_cast<uint32_t>(abs_bits < kNineBits);  // all ones or zero
  const uint32_t clamped_bits = (abs_bits & below) | (kNineBits & ~below);
  const float a = BitsFloat(clamped_bits);
  const float e = ExpFInRange(-2.0f * a);  // in (0, 1]: no overflow
  const float t = (1.0f - e) / (1.0f + e);
  const uint32_t t_bits = FloatBits(t) | sign;  // t >= 0, so OR-ing the sign in is copysign
  const uint32_t is_nan = 0u - static_cast<uint32_t>(abs_bits > kInfBits);
  return BitsFloat((u_bits & is_nan) | (t_bits & ~is_nan));
}

DGRR_HD inline float LogF(float x) {
  if (!(x > 0.0f)) return x == 0.0f ? -INFINITY : NAN;
  if (x == INFINITY) return x;
  uint32_t bits = FloatBits(x);
  if ((bits >> 23) == 0) {  // subnormal: scale into the normal range first
    return LogF(x * 8388608.0f) - 23.0f * 0.693147180559945309f;
  }
  int e = static_cast<int>(bits >> 23) - 127;
  float m = BitsFloat((bits & 0x007fffffu) | 0x3f800000u);  // mantissa m in [1, 2)
  if (m > 1.41421356f) {
    m = m * 0.5f;
    e += 1;
  }
  // log m = 2 atanh(f), f = (m - 1)/(m + 1), |f| <= 0.172.
  const float f = (m - 1.0f) / (m + 1.0f);
  const float f2 = f * f;
  float s = 1.0f / 11.0f;
  s = Fma(s, f2, 1.0f / 9.0f);
  s = Fma(s, f2, 1.0f / 7.0f);
  s = Fma(s, f2, 1.0f / 5.0f);
  s = Fma(s, f2, 1.0f / 3.0f);
  s = Fma(s, f2, 1.0f);
  const float log_m = (2.0f * f) * s;
  const float ef = static_cast<float>(e);
  return Fma(ef, 1.42860682030941723e-06f, Fma(ef, 0.693145751953125f, log_m));
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
DGRR_HD inline float Exp(float x) { return ExpF(x); }
inline double Exp(double x) { return std::exp(x); }
DGRR_HD inline float Tanh(float x) { return TanhF(x); }
inline double Tanh(double x) { return std::tanh(x); }
DGRR_HD inline float Log(float x) { return LogF(x); }
inline double Log(double x) { return std::log(x); }
// Correctly rounded on both sides (sqrtss; __fsqrt_rn, which nvcc's sqrtf is
// unless built with -prec-sqrt=false, never the case here).
DGRR_HD inline float Sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}
inline double Sqrt(double x) { return std::sqrt(x); }

// ---------------------------------------------------------------- GELU
// The tanh approximation used by GPT-2: 0.5 x (1 + tanh(k (x + 0.044715 x^3))),
// k = sqrt(2/pi), with u = k * fma(0.044715 x^2, x, x) and the result
// fma(0.5 x, tanh u, 0.5 x). One element function (GeluAt, GeluGradAt) for
// the host loops and the device kernels.
template <typename S>
DGRR_HD inline S GeluInner(S x) {  // k (x + 0.044715 x^3)
  const S k = S(0.7978845608028654);  // sqrt(2/pi), rounded once to S
  return k * Fma((S(0.044715) * x) * x, x, x);
}

template <typename S>
DGRR_HD inline S GeluAt(S x) {
  const S half_x = S(0.5) * x;
  return Fma(half_x, Tanh(GeluInner(x)), half_x);
}

// d gelu / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2), th = tanh u.
template <typename S>
DGRR_HD inline S GeluGradAt(S x) {
  const S k = S(0.7978845608028654);
  const S th = Tanh(GeluInner(x));
  const S sech2 = Fma(-th, th, S(1));
  const S du = k * Fma(S(3) * S(0.044715) * x, x, S(1));
  return Fma((S(0.5) * x) * sech2, du, Fma(S(0.5), th, S(0.5)));
}

}  // namespace dgrr::model
