// The memory-speed baseline both fingerprint benchmarks compare against:
// every byte read once and summed (64-bit words modulo 2^64, then the bytes
// after the last whole 64-byte chunk one by one). Callers make the sum escape
// so the loads cannot be removed.
//
// A baseline must be at least as fast as the loop the fingerprint is compared
// with (torch.sum over float32, which streams with AVX2 vectors and four
// independent accumulators): the portable form, eight scalar 64-bit lanes,
// ran at 0.82-0.89x of such a float sum over 256 MiB on a 2-core AMD EPYC with
// AVX2 (CPU time), so where the CPU has AVX2 the pass runs as four 256-bit
// accumulators over 128 bytes an iteration (0.98-1.04x there). Both forms
// give the same sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace dgrr::bench {

inline uint64_t ReadPassPortable(const uint8_t* p, size_t n) {
  uint64_t lanes[8] = {};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (size_t k = 0; k < 8; ++k) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * k, 8);
      lanes[k] += v;
    }
  }
  uint64_t sum = 0;
  for (; i < n; ++i) sum += p[i];
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"), always_inline)) inline __m256i ReadPassLoad(const uint8_t* q) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
}

__attribute__((target("avx2"))) inline uint64_t ReadPassAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, ReadPassLoad(p + i));
    a1 = _mm256_add_epi64(a1, ReadPassLoad(p + i + 32));
    a2 = _mm256_add_epi64(a2, ReadPassLoad(p + i + 64));
    a3 = _mm256_add_epi64(a3, ReadPassLoad(p + i + 96));
  }
  if (i + 64 <= n) {
    a0 = _mm256_add_epi64(a0, ReadPassLoad(p + i));
    a1 = _mm256_add_epi64(a1, ReadPassLoad(p + i + 32));
    i += 64;
  }
  alignas(32) uint64_t words[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(words),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  _mm256_zeroupper();
  uint64_t sum = words[0] + words[1] + words[2] + words[3];
  for (; i < n; ++i) sum += p[i];
  return sum;
}

inline bool ReadPassUsesAvx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return dgrr::IsaAllowed(dgrr::IsaLevel::kAvx2) && __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}
#else
inline bool ReadPassUsesAvx2() { return false; }
#endif

// "avx2" or "portable": the form ReadPass runs on this CPU.
inline const char* ReadPassIsa() { return ReadPassUsesAvx2() ? "avx2" : "portable"; }

inline uint64_t ReadPass(const uint8_t* p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (ReadPassUsesAvx2()) return ReadPassAvx2(p, n);
#endif
  return ReadPassPortable(p, n);
}

}  // namespace dgrr::bench
