#include "model/fault_injector.h"

#include "base/coding.h"

namespace dgrr::model {

void TensorFaultInjector::Arm(const FaultSpec* f, const FaultTargets& targets, uint64_t seed,
                              uint64_t shard_first, std::span<uint8_t> tokens) {
  flip_ = f;
  tokens_fired_.clear();
  if (flip_ == nullptr) return;
  target_ = targets.Find(flip_->at);
  seed_ = seed;
  example_ = flip_->example.value_or(shard_first);
  if (target_->site == FlipSite::kTokens && flip_->index < target_->elements) {
    uint8_t* example = tokens.data() + (example_ - shard_first) * target_->elements;
    const uint8_t old = example[flip_->index];
    for (uint64_t i = flip_->index; i < flip_->index + flip_->elements; ++i) {
      example[i] = static_cast<uint8_t>(CorruptBits(i, example[i]));
    }
    tokens_fired_ = model::FiredText(*flip_, *target_, example_, old, example[flip_->index]);
  }
}

void TensorFaultInjector::Corrupt(float* data, uint64_t count) const {
  for (uint64_t i = flip_->index; i < count && i < flip_->index + flip_->elements; ++i) {
    data[i] = BitsToFloat(CorruptBits(i, FloatBits(data[i])));
  }
}

std::string TensorFaultInjector::FiredText(const float* original) const {
  const uint32_t old = FloatBits(original[flip_->index]);
  return model::FiredText(*flip_, *target_, example_, old, CorruptBits(flip_->index, old));
}

}  // namespace dgrr::model
