// The extension points through which the runtime watches and drives the model
// without the model depending on it: boundary observation, fault injection,
// dropout masks and parameter initialisation. All are optional except the
// dropout masks when a dropout probability is above zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "fingerprint/fingerprint.h"

namespace dgrr::model {

// Where a boundary lies in a training step; the trainer maps it to its own.
enum class Phase : uint8_t { kForward = 0, kBackward = 1, kOptimizer = 2, kData = 3 };
const char* PhaseName(Phase phase);

// What kind of operator produced a boundary's tensor, as the model knows it
// and reports it at each boundary; the trainer maps it to the runtime's
// OpKind, which decides what `trusted` mode leaves out (docs/api.md).
enum class Operator : uint8_t {
  kOther = 0,    // e.g. a per-batch sum of gradients
  kMatmul,       // a matrix product with its bias (qkv, projections, fc, lm_head)
  kElementwise,  // activation, dropout apply, residual add, AdamW's input and moments
  kNorm,         // layernorm
  kAttention,    // the softmax and the attention-weighted sum
  kEmbedding,    // token plus position embedding
  kLoss,         // cross-entropy
  kOptimizer,    // the updated parameters
};
const char* OperatorName(Operator op);

// Called at every model-level operator boundary with a view of the tensor
// (no copy) and the kind of operator that produced it. `dims` is row-major; an empty span is a scalar. Per-example
// boundaries carry (first_example = that example's index, example_count = 1);
// per-batch ones (reduced parameter gradients, optimizer) carry the batch's
// first index and size. Workers call it CONCURRENTLY for different examples:
// implementations must be thread-safe. For one example the calls come in one
// fixed order (docs/model.md lists it).
class BoundaryObserver {
 public:
  virtual ~BoundaryObserver() = default;
  virtual void OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                          std::span<const int64_t> dims, uint64_t first_example,
                          uint32_t example_count) = 0;
  // Whether OnBoundary would use this per-example boundary at all. An engine
  // whose tensors live on a device asks before copying one to the host for
  // the observer, so a boundary the recording mode skips costs no copy.
  // Thread-safe like OnBoundary. The default: every boundary.
  virtual bool Wants(std::string_view name, Phase phase) const {
    (void)name;
    (void)phase;
    return true;
  }
  // Whether the tensor's fingerprint is all this observer needs of this
  // per-example boundary (it may change at each step: a dump needs the
  // bytes). An engine whose tensors live on a device then fingerprints the
  // tensor there and calls OnBoundaryFingerprint instead of copying it to the
  // host for OnBoundary. The default: never (OnBoundary is then called).
  virtual bool TakesFingerprint(std::string_view name, Phase phase) const {
    (void)name;
    (void)phase;
    return false;
  }
  // OnBoundary for an observer that TakesFingerprint: `fp` is FingerprintBytes
  // of the tensor's bytes, computed where they live.
  virtual void OnBoundaryFingerprint(std::string_view name, Phase phase, Operator op, bool is_output,
                                     const Fingerprint& fp, std::span<const int64_t> dims, uint64_t first_example,
                                     uint32_t example_count) {
    (void)name, (void)phase, (void)op, (void)is_output, (void)fp, (void)dims, (void)first_example,
        (void)example_count;
  }
};

// Fault injection: called right AFTER the observer at the same boundary with
// a mutable view of the very tensor the next operator will read, so a fault
// (a flipped bit) is invisible at this boundary and shows at the next ones.
class TensorMutator {
 public:
  virtual ~TensorMutator() = default;
  virtual void AfterBoundary(std::string_view name, Phase phase, float* data, size_t count,
                             uint64_t first_example) = 0;
};

// Dropout sites of one block.
enum class DropoutSite : uint8_t {
  kAttentionProbs = 0,     // attention probabilities [NH,T,T]
  kAttentionResidual = 1,  // attention projection output before the residual add [T,C]
  kMlpResidual = 2,        // MLP projection output before the residual add [T,C]
};
const char* DropoutSiteName(DropoutSite site);

// Supplies keep masks: keep[i] = 1 keeps element i (scaled by 1/(1-p)), 0 drops
// it. Must be a pure function of its arguments (and of whatever the caller
// keys it by, e.g. the step) and thread-safe: workers ask concurrently.
// Never called when p == 0.
class DropoutMaskSource {
 public:
  virtual ~DropoutMaskSource() = default;
  virtual void FillKeepMask(uint64_t example_index, int layer, DropoutSite site,
                            float drop_probability, uint8_t* keep, size_t count) const = 0;
  // True when the masks are rng::FillDropoutKeepMask's of (seed, step): the
  // device engine (model/device_engine.h) then draws them per element on the
  // device instead of asking FillKeepMask on the host. Default: no.
  virtual bool PhiloxKey(uint64_t* seed, uint64_t* step) const {
    (void)seed, (void)step;
    return false;
  }
};

// Fills `out[0..count)` with standard normal draws for the parameter tensor
// `name` (its index in ParameterLayout::tensors() is `tensor_index`). The
// model scales the draws by each tensor's init standard deviation.
using NormalFill =
    std::function<void(std::string_view name, size_t tensor_index, float* out, size_t count)>;

// Everything one example's forward/backward may call out to.
struct ExampleHooks {
  BoundaryObserver* observer = nullptr;     // nullptr: no observation, no cost
  TensorMutator* mutator = nullptr;         // nullptr: no fault injection
  const DropoutMaskSource* masks = nullptr; // required iff a dropout probability > 0
};

}  // namespace dgrr::model
