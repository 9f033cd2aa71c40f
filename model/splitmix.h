// splitmix64 (Steele, Lea, Flood 2014): a tiny integer mixer for things that
// must be a pure function of a seed and need no statistical pedigree: the
// embedded corpus text and the test-only init/dropout sources. The training
// randomness proper comes from Philox streams (rng/).
#pragma once

#include <cstdint>

#include "rng/stream_id.h"

namespace dgrr::model {

// The splitmix64 output function applied to x (stateless form).
inline uint64_t SplitMix64(uint64_t x) { return rng::MixSplitMix64(x + 0x9e3779b97f4a7c15ULL); }

// A sequential generator: the n-th draw is SplitMix64(seed + n * golden).
class SplitMixStream {
 public:
  explicit SplitMixStream(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    const uint64_t out = SplitMix64(state_);
    state_ += 0x9e3779b97f4a7c15ULL;
    return out;
  }
  // Uniform integer in [0, bound) by multiply-shift (bound < 2^32); the tiny
  // bias is irrelevant for corpus text.
  uint32_t Below(uint32_t bound) {
    return static_cast<uint32_t>(((Next() >> 32) * static_cast<uint64_t>(bound)) >> 32);
  }

 private:
  uint64_t state_;
};

}  // namespace dgrr::model
