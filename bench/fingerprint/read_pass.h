// The memory-speed baseline both fingerprint benchmarks compare against:
// every 64-bit word read once and summed, with as many independent
// accumulators as the xor loop. Callers make the sum escape so the loads
// cannot be removed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dgrr::bench {

inline uint64_t ReadPass(const uint8_t* p, size_t n) {
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

}  // namespace dgrr::bench
