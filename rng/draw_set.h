// DrawSet: a fixed menu of draws from a list of streams, computed on the host
// (here) or on the GPU (rng/device.h), for comparing the two bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rng/philox_stream.h"

namespace dgrr::rng {

// Per stream, `per_stream` values of each kind, each kind drawn from its own
// copy of the stream as given (so every kind starts at the stream's position):
//   u32: Fill;  uniform_float: FillUniformFloat;  uniform_double: FillUniformDouble;
//   normal_float / normal_double: FillNormalFloat / FillNormalDouble (mean 0, sd 1);
//   mask: FillBernoulliMask with `threshold`.
// Stream i's values are at [i * per_stream, (i + 1) * per_stream).
struct DrawSet {
  std::vector<uint32_t> u32;
  std::vector<float> uniform_float;
  std::vector<double> uniform_double;
  std::vector<float> normal_float;
  std::vector<double> normal_double;
  std::vector<uint8_t> mask;
};

// The reference computation on the host (same layout).
DrawSet DrawOnHost(const std::vector<PhiloxStream>& streams, size_t per_stream, uint64_t threshold);

}  // namespace dgrr::rng
