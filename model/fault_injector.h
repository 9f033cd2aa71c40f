// The tensor fault of one rank at one step (`--inject` bitflip, multibit,
// stuck-byte, random, nan, inf: model/faults.h) as the trainer applies it.
// Armed at the step's start, it corrupts the input tokens at once (before
// anything reads them); a per-example target is corrupted as the model
// produces it (AfterBoundary, the TensorMutator the model calls) and its
// record shows the corrupted copy (Corrupt on the recorder's copy); a
// per-batch target (a gradient, parameter or AdamW moment) is corrupted in
// the rank's own buffer before it is fingerprinted. The recording path
// applies it through FaultingObserver (model/faulting_observer.h), the
// decorator around the rank's StepRecorder: this class only says what to
// corrupt, where, and how the EVENT reads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/faults.h"
#include "model/hooks.h"

namespace dgrr::model {

class TensorFaultInjector final : public TensorMutator {
 public:
  // The fault due this step (null: none) on the rank whose shard starts at
  // global example `shard_first`, whose tokens (window bytes per example,
  // its whole shard) are `tokens`. `f` must name a target of `targets`
  // (the trainer's Validate checked it), which must outlive this step.
  void Arm(const FaultSpec* f, const FaultTargets& targets, uint64_t seed, uint64_t shard_first,
           std::span<uint8_t> tokens);

  // Whether a fault was armed for this step (at any site).
  bool armed() const { return flip_ != nullptr; }
  bool FiresAt(FlipSite site) const { return flip_ != nullptr && target_->site == site; }
  bool FiresInOptimizer() const {
    return FiresAt(FlipSite::kGradient) || FiresAt(FlipSite::kParameter) ||
           FiresAt(FlipSite::kMomentM) || FiresAt(FlipSite::kMomentV);
  }
  // The tokens fault's EVENT text when it hit `example`'s tokens, else null.
  const std::string* TokensFiredAt(uint64_t example) const {
    return FiresAt(FlipSite::kTokens) && example_ == example ? &tokens_fired_ : nullptr;
  }
  // Whether the per-example boundary `name` of example `first_example` is
  // the one to corrupt.
  bool IsExampleTarget(std::string_view name, uint64_t first_example) const {
    return FiresAt(FlipSite::kExample) && name == flip_->at && first_example == example_;
  }
  // The per-batch target, when `name` is it this step; else null.
  const FlipTarget* BatchTarget(std::string_view name) const {
    return flip_ != nullptr && !target_->per_example() && name == flip_->at ? target_ : nullptr;
  }
  // Corrupts the fault's elements of one occurrence of its target (`count`
  // floats at `data`); the index and span were checked against the model.
  void Corrupt(float* data, uint64_t count) const;
  // The EVENT text, from the tensor before the fault.
  std::string FiredText(const float* original) const;

  // TensorMutator: the per-example fault, applied to the real tensor.
  void AfterBoundary(std::string_view name, Phase, float* data, size_t count,
                     uint64_t first_example) override {
    if (IsExampleTarget(name, first_example)) Corrupt(data, count);
  }

 private:
  uint32_t CorruptBits(uint64_t element, uint32_t bits) const {
    return CorruptElement(*flip_, *target_, seed_, example_, element, bits);
  }

  const FaultSpec* flip_ = nullptr;
  const FlipTarget* target_ = nullptr;
  uint64_t seed_ = 0;
  uint64_t example_ = 0;        // per-example sites: the example it hits (per batch: the shard's first)
  std::string tokens_fired_;    // the tokens fault's EVENT text
};

}  // namespace dgrr::model
