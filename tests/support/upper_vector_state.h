// Whether the upper halves of the vector registers are left dirty, read from
// XINUSE (xgetbv with ecx = 1), which says which register state components
// are not in their initial configuration. While the upper YMM/ZMM state is
// dirty, legacy-SSE code that runs next (the optimizer, the model's scalar
// loops) pays the SSE/AVX transition penalty on every vector instruction, so
// every AVX kernel must leave with vzeroupper.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

namespace dgrr::test_support {

inline bool CpuReportsXinuse() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 2)) != 0;
}

inline uint32_t Xinuse() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return lo;
}

// Bit 2: the upper halves of YMM0-15. Bit 6: bits 256..511 of ZMM0-15
// (AVX-512's ZMM_Hi256), cleared by the same vzeroupper. ZMM16-31 (Hi16_ZMM)
// are not checked: legacy SSE cannot address them, so their state costs SSE
// code nothing.
inline constexpr uint32_t kUpperYmmInUse = 1u << 2;
inline constexpr uint32_t kUpperZmmInUse = 1u << 6;
inline constexpr uint32_t kDirtyUpperState = kUpperYmmInUse | kUpperZmmInUse;

}  // namespace dgrr::test_support

#define DGRR_HAVE_XINUSE_CHECK 1
#endif
