// Distributions over a PhiloxStream, each a fixed bit-level mapping of the
// stream's 32-bit draws (docs/rng.md, "Distributions"). Everything here
// compiles for host and device; results are identical wherever only integer
// and correctly rounded IEEE operations are involved (everything except the
// log/sqrt/cos/sin inside the normal mapping, see NormalPairFromBits).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rng/philox_stream.h"

namespace dgrr::rng {

// ---- Bit mappings (pure functions of draws) ---------------------------------

// cuRAND's curand_uniform: RN(RN(float(u)) * 2^-32 + 2^-33), in (0, 1].
// The product is exact (power-of-two scale), so contraction could not change
// it either; u >= 0xFFFFFF80 gives exactly 1.0f.
DGRR_HD constexpr float UniformFloatFromBits(uint32_t u) {
  return static_cast<float>(u) * 0x1p-32f + 0x1p-33f;
}

// Top 24 bits scaled by 2^-24: every float in [0, 1) on a 2^-24 grid, exact.
DGRR_HD constexpr float UniformFloatHalfOpenFromBits(uint32_t u) {
  return static_cast<float>(u >> 8) * 0x1p-24f;
}

// cuRAND's curand_uniform_double for Philox: (u + 1) * 2^-32, in (0, 1],
// exact, only 32 bits of resolution.
DGRR_HD constexpr double UniformDoubleCurandFromBits(uint32_t u) {
  return static_cast<double>(u) * 0x1p-32 + 0x1p-32;
}

// cuRAND's _curand_uniform_double_hq (curand_uniform2_double): z = x ^ (y << 21),
// a 53-bit integer, then RN(z * 2^-53 + 2^-54), in (0, 1].
DGRR_HD constexpr double UniformDoubleHqCurandFromBits(uint32_t x, uint32_t y) {
  const uint64_t z = static_cast<uint64_t>(x) ^ (static_cast<uint64_t>(y) << 21);
  return static_cast<double>(z) * 0x1p-53 + 0x1p-54;
}

// Top 53 bits of a 64-bit draw scaled by 2^-53: [0, 1), exact.
DGRR_HD constexpr double UniformDoubleFromBits(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1p-53;
}

namespace detail {
// libm on the host, CUDA's math library on the device (both double precision).
DGRR_HD inline double Log(double x) { return ::log(x); }
DGRR_HD inline double Sqrt(double x) { return ::sqrt(x); }
DGRR_HD inline double Cos(double x) { return ::cos(x); }
DGRR_HD inline double Sin(double x) { return ::sin(x); }
}  // namespace detail

// 2*pi rounded to double.
inline constexpr double kTwoPi = 6.283185307179586;

struct DoublePair {
  double first;
  double second;
};

// Box-Muller in double precision on two 64-bit draws x, y:
//   u1 = ((x >> 11) + 1) * 2^-53            in (0, 1]   (log never sees 0)
//   u2 = (y >> 11) * 2^-53                  in [0, 1)
//   r  = sqrt(-2 * log(u1)), theta = RN(kTwoPi * u2)
//   first = r * cos(theta), second = r * sin(theta)
// sqrt is correctly rounded everywhere; log, cos and sin are not required to
// be, so glibc versions or CPU vs GPU may differ in the last bit of a double.
// Rounding the double to float hides such a difference unless it straddles a
// float rounding boundary (probability at most on the order of 2^-28 per value).
DGRR_HD inline DoublePair NormalPairFromBits(uint64_t x, uint64_t y) {
  const double u1 = static_cast<double>((x >> 11) + 1) * 0x1p-53;
  const double u2 = static_cast<double>(y >> 11) * 0x1p-53;
  const double radius = detail::Sqrt(-2.0 * detail::Log(u1));
  const double theta = kTwoPi * u2;
  return DoublePair{radius * detail::Cos(theta), radius * detail::Sin(theta)};
}

// ---- Single values from a stream --------------------------------------------

DGRR_HD constexpr float UniformFloat(PhiloxStream& s) { return UniformFloatFromBits(s.NextU32()); }
DGRR_HD constexpr float UniformFloatHalfOpen(PhiloxStream& s) {
  return UniformFloatHalfOpenFromBits(s.NextU32());
}
DGRR_HD constexpr double UniformDouble(PhiloxStream& s) { return UniformDoubleFromBits(s.NextU64()); }
DGRR_HD constexpr double UniformDoubleCurand(PhiloxStream& s) {
  return UniformDoubleCurandFromBits(s.NextU32());
}
// Two doubles from four draws, as curand_uniform2_double returns them.
DGRR_HD constexpr DoublePair UniformDouble2Curand(PhiloxStream& s) {
  const uint32_t a = s.NextU32(), b = s.NextU32(), c = s.NextU32(), d = s.NextU32();
  return DoublePair{UniformDoubleHqCurandFromBits(a, b), UniformDoubleHqCurandFromBits(c, d)};
}
// Four draws -> two standard normals.
DGRR_HD inline DoublePair NormalPairFrom(PhiloxStream& s) {
  const uint64_t x = s.NextU64();
  const uint64_t y = s.NextU64();
  return NormalPairFromBits(x, y);
}

// Unbiased integer in [0, range), range >= 1: Lemire's multiply-and-reject
// ("Fast random integer generation in an interval", 2019). m = u * range;
// reject while the low 32 bits of m are below 2^32 mod range; return m >> 32.
// range = 0 stands for 2^32 (the formula's limit): one draw, returned as is.
DGRR_HD constexpr uint32_t UniformBelow(PhiloxStream& s, uint32_t range) {
  if (range == 0) return s.NextU32();
  uint64_t m = static_cast<uint64_t>(s.NextU32()) * range;
  uint32_t low = static_cast<uint32_t>(m);
  if (low < range) {
    const uint32_t reject_below = (0u - range) % range;  // 2^32 mod range
    while (low < reject_below) {
      m = static_cast<uint64_t>(s.NextU32()) * range;
      low = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// ---- Bulk fills --------------------------------------------------------------
// Each consumes exactly the draws stated and leaves the stream after them.

namespace detail {
inline constexpr size_t kFillChunk = 256;

// Draws in chunks of kFillChunk through PhiloxStream::Fill (SIMD on the host)
// and hands each chunk to `consume(draws, count, first_index)`.
template <typename Consume>
DGRR_HD void ForEachDrawChunk(PhiloxStream& s, size_t n, Consume consume) {
  uint32_t draws[kFillChunk];
  for (size_t done = 0; done < n;) {
    const size_t count = n - done < kFillChunk ? n - done : kFillChunk;
    s.Fill(draws, count);
    consume(draws, count, done);
    done += count;
  }
}
}  // namespace detail

// n draws: out[i] = UniformFloatFromBits(draw i).
DGRR_HD inline void FillUniformFloat(PhiloxStream& s, float* out, size_t n) {
  detail::ForEachDrawChunk(s, n, [out](const uint32_t* d, size_t count, size_t at) {
    for (size_t i = 0; i < count; ++i) out[at + i] = UniformFloatFromBits(d[i]);
  });
}

// 2n draws: out[i] = UniformDoubleFromBits(draw 2i | draw 2i+1 << 32).
DGRR_HD inline void FillUniformDouble(PhiloxStream& s, double* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = UniformDouble(s);
}

// Standard normals scaled as RN_float(mean + stddev * z) with the arithmetic in
// double. Pair k (elements 2k, 2k+1) comes from draws 4k..4k+3; an odd n uses
// four draws for its last element (its partner is discarded): 4*ceil(n/2) draws.
DGRR_HD inline void FillNormalFloat(PhiloxStream& s, float* out, size_t n, double mean = 0.0,
                                    double stddev = 1.0) {
  for (size_t i = 0; i < n; i += 2) {
    const DoublePair z = NormalPairFrom(s);
    out[i] = static_cast<float>(mean + stddev * z.first);
    if (i + 1 < n) out[i + 1] = static_cast<float>(mean + stddev * z.second);
  }
}
DGRR_HD inline void FillNormalDouble(PhiloxStream& s, double* out, size_t n, double mean = 0.0,
                                     double stddev = 1.0) {
  for (size_t i = 0; i < n; i += 2) {
    const DoublePair z = NormalPairFrom(s);
    out[i] = mean + stddev * z.first;
    if (i + 1 < n) out[i + 1] = mean + stddev * z.second;
  }
}

// Keep-threshold for probability p_keep: llround(p_keep * 2^32), so
// 0 <= threshold <= 2^32 (2^32 keeps everything). The product is exact; the
// rounding is half away from zero. Callers validate p (BernoulliThreshold in
// rng/rng_streams.h rejects NaN and values outside [0, 1]).
DGRR_HD inline uint64_t BernoulliThresholdUnchecked(double p_keep) {
  return static_cast<uint64_t>(::llround(p_keep * 0x1p32));
}

// n draws: mask[i] = 1 if draw i < threshold else 0.
DGRR_HD inline void FillBernoulliMask(PhiloxStream& s, uint8_t* mask, size_t n, uint64_t threshold) {
  if (threshold > 0xFFFFFFFFull) {  // every u32 is below 2^32
    s.Skip(n);
    for (size_t i = 0; i < n; ++i) mask[i] = 1;
    return;
  }
  const uint32_t below = static_cast<uint32_t>(threshold);
  detail::ForEachDrawChunk(s, n, [mask, below](const uint32_t* d, size_t count, size_t at) {
    for (size_t i = 0; i < count; ++i) mask[at + i] = d[i] < below ? 1 : 0;
  });
}

// A uniformly random permutation of [0, n), n < 2^32: out[i] = i, then
// Fisher-Yates from the top: for i = n-1 down to 1, j = UniformBelow(s, i+1),
// swap(out[i], out[j]). O(n) time, about n draws (plus rare rejections).
DGRR_HD inline void FillPermutation(PhiloxStream& s, uint32_t* out, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) out[i] = i;
  for (uint32_t i = n; i-- > 1;) {
    const uint32_t j = UniformBelow(s, i + 1);
    const uint32_t held = out[i];
    out[i] = out[j];
    out[j] = held;
  }
}

}  // namespace dgrr::rng
