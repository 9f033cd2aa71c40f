#include "rng/rng_streams.h"

#include <cmath>

namespace dgrr::rng {

StatusOr<PhiloxStream> RngStreams::StreamFor(Purpose purpose,
                                             std::span<const uint64_t> coords) const {
  if (coords.size() > static_cast<size_t>(kMaxStreamCoords)) {
    return Status::InvalidArgument("rng stream for purpose " + PurposeName(purpose) + ": " +
                                   std::to_string(coords.size()) +
                                   " coordinates, at most 4 are allowed");
  }
  return PhiloxStream(
      DeriveStreamId(seed_, purpose, coords.data(), static_cast<int>(coords.size())));
}

StatusOr<std::vector<uint32_t>> RngStreams::EpochPermutation(uint64_t epoch, uint64_t n) const {
  if (n > 0xFFFFFFFFull) {
    return Status::InvalidArgument("epoch permutation of " + std::to_string(n) +
                                   " elements: at most 2^32 - 1 are supported");
  }
  std::vector<uint32_t> order(n);
  PhiloxStream stream = Stream(Purpose::kShuffle, {epoch});
  FillPermutation(stream, order.data(), static_cast<uint32_t>(n));
  return order;
}

StatusOr<uint64_t> BernoulliThreshold(double p_keep) {
  if (!(p_keep >= 0.0 && p_keep <= 1.0)) {  // also rejects NaN
    return Status::InvalidArgument("Bernoulli keep probability " + std::to_string(p_keep) +
                                   " is not in [0, 1]");
  }
  return BernoulliThresholdUnchecked(p_keep);
}

std::string PurposeName(Purpose purpose) {
  const uint64_t value = static_cast<uint64_t>(purpose);
  switch (purpose) {
    case Purpose::kInit: return "init";
    case Purpose::kDropout: return "dropout";
    case Purpose::kShuffle: return "shuffle";
    case Purpose::kAugment: return "augment";
    case Purpose::kNoise: return "noise";
  }
  if (value >= (uint64_t{1} << 32) && value - (uint64_t{1} << 32) <= 0xFFFFFFFFull) {
    return "user:" + std::to_string(value - (uint64_t{1} << 32));
  }
  return "unknown:" + std::to_string(value);
}

}  // namespace dgrr::rng
