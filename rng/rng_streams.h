// RngStreams: the run's source of randomness. Constructed from the run's seed,
// it hands out PhiloxStreams by (purpose, coordinates); which stream a draw
// comes from never depends on the thread, rank or order that asks for it.
//
//   RngStreams rng(seed);
//   PhiloxStream s = rng.Stream(Purpose::kDropout, {step, example, layer, site});
//   FillBernoulliMask(s, mask, n, threshold);
//
// Two different (purpose, coordinate tuple) pairs never share a stream: they
// get different 128-bit identities (key, subsequence), see rng/stream_id.h.
// The object is a seed and nothing else: copy it freely, use it on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "rng/distributions.h"
#include "rng/philox_stream.h"
#include "rng/stream_id.h"

namespace dgrr::rng {

class RngStreams {
 public:
  DGRR_HD constexpr explicit RngStreams(uint64_t seed) : seed_(seed) {}

  DGRR_HD constexpr uint64_t seed() const { return seed_; }

  // The stream of (purpose) with no coordinates, at position 0.
  DGRR_HD constexpr PhiloxStream Stream(Purpose purpose) const {
    return PhiloxStream(DeriveStreamId(seed_, purpose, nullptr, 0));
  }
  // The stream of (purpose, coords), at position 0; 1 to 4 coordinates,
  // checked at compile time: rng.Stream(Purpose::kShuffle, {epoch}).
  // Coordinates are uint64_t; brace-initialising from a signed variable is a
  // narrowing error, so cast signed indices (static_cast<uint64_t>(layer)).
  template <size_t N>
  DGRR_HD constexpr PhiloxStream Stream(Purpose purpose, const uint64_t (&coords)[N]) const {
    static_assert(N <= kMaxStreamCoords, "a stream has at most 4 coordinates");
    return PhiloxStream(DeriveStreamId(seed_, purpose, coords, static_cast<int>(N)));
  }
  // Same for a run-time number of coordinates; more than 4 is InvalidArgument.
  StatusOr<PhiloxStream> StreamFor(Purpose purpose, std::span<const uint64_t> coords) const;

  // The data order of `epoch`: FillPermutation over Stream(kShuffle, {epoch}).
  // A pure function of (seed, epoch, n); n must be below 2^32.
  StatusOr<std::vector<uint32_t>> EpochPermutation(uint64_t epoch, uint64_t n) const;

 private:
  uint64_t seed_;
};

// llround(p_keep * 2^32) for p_keep in [0, 1]; NaN or out of range is InvalidArgument.
StatusOr<uint64_t> BernoulliThreshold(double p_keep);

// The dropout keep-mask convention of dgrr's programs, written once for the
// reference trainer (model/trainer.cc) and dgrr.torch (python/binding_rng.cc):
// keep[0..n) of example `example` at dropout site `site` of layer `layer` in
// step `step` is FillBernoulliMask of stream (dropout, {step, example, layer,
// site}) with `keep_threshold` (BernoulliThreshold(1 - p)): 1 keeps an
// element, 0 drops it. A mask depends on its example's key alone, never on
// the batch it sits in or the thread that asks.
DGRR_HD inline void FillDropoutKeepMask(const RngStreams& rng, uint64_t step, uint64_t example, uint64_t layer,
                                        uint64_t site, uint64_t keep_threshold, uint8_t* keep, size_t n) {
  PhiloxStream s = rng.Stream(Purpose::kDropout, {step, example, layer, site});
  FillBernoulliMask(s, keep, n, keep_threshold);
}

// "init", "dropout", "shuffle", "augment", "noise", or "user:<id>" / "unknown:<value>".
std::string PurposeName(Purpose purpose);

}  // namespace dgrr::rng
