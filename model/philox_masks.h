// Dropout keep-masks by dgrr's convention (rng::FillDropoutKeepMask), keyed
// by (seed, step, example, layer, site): a pure function of those, whatever
// thread or device asks. The trainer's masks, and the tests' whenever they
// want the trainer's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/hooks.h"
#include "rng/rng_streams.h"

namespace dgrr::model {

class PhiloxDropoutMasks final : public DropoutMaskSource {
 public:
  PhiloxDropoutMasks(const rng::RngStreams& rng, uint64_t step) : rng_(rng), step_(step) {}
  PhiloxDropoutMasks(uint64_t seed, uint64_t step) : rng_(seed), step_(step) {}

  void FillKeepMask(uint64_t example, int layer, DropoutSite site, float p, uint8_t* keep,
                    size_t n) const override {
    rng::FillDropoutKeepMask(rng_, step_, example, static_cast<uint64_t>(layer),
                             static_cast<uint64_t>(site), rng::BernoulliThresholdUnchecked(1.0 - p),
                             keep, n);
  }
  // Drawn per element on the device by the device engine (model/device_engine.h).
  bool PhiloxKey(uint64_t* seed, uint64_t* step) const override {
    *seed = rng_.seed();
    *step = step_;
    return true;
  }

 private:
  rng::RngStreams rng_;  // a seed: copied, not referred to
  uint64_t step_;
};

}  // namespace dgrr::model
