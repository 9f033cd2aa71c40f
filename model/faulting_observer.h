// The tensor fault of one rank at one step (`--inject` bitflip, multibit,
// stuck-byte, random, nan, inf: model/faults.h) on the recording path: a
// decorator around the rank's StepRecorder (model/step_recorder.h), which the
// trainer installs in the recorder's place only at a step where such a fault
// fires on the rank, so that a step without one pays nothing for it.
//   - the tokens: the injector corrupted them when it was armed; the EVENT
//     goes just before the example's tokens record;
//   - a per-example target: the EVENT goes among the example's records, just
//     before the target's, and the recorder is handed a corrupted copy (the
//     real tensor is corrupted by the injector, the model's TensorMutator, for
//     the operators that read it next);
//   - a per-batch target (an all-reduced gradient, the clipped gradient, a
//     parameter, an AdamW moment): the rank's own copy is corrupted in place
//     once the recorder has declared the boundary, the EVENT recorded, and
//     only then the tensor recorded, as a real fault would show.
// What to corrupt, how, and the EVENT's text are the injector's
// (model/fault_injector.h); recording is the recorder's. This class decides
// neither, and knows nothing of the other faults (shared-rng, race,
// reduce-order, skip-restore), which the trainer records itself.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "base/status.h"
#include "model/config.h"
#include "model/fault_injector.h"
#include "model/hooks.h"
#include "model/step_recorder.h"

namespace dgrr::model {

// The rank's own buffers a per-batch fault may hit, laid out as the
// ParameterLayout: the (all-reduced, then clipped) gradient, the parameters
// and AdamW's two moments.
struct RankTensors {
  float* grad = nullptr;
  float* params = nullptr;
  float* moment_m = nullptr;
  float* moment_v = nullptr;
};

class FaultingObserver final : public BoundaryObserver {
 public:
  // At a step's start, after recorder.BeginStep and fault.Arm (with a fault
  // armed), before the workers start: notes the tokens fault's EVENT with
  // the recorder. All four must outlive this step's use of it.
  FaultingObserver(StepRecorder& recorder, const TensorFaultInjector& fault, const ParameterLayout& layout,
                   RankTensors tensors);

  // BoundaryObserver, in the recorder's place (the same threads call it).
  void OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                  std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) override;

  // StepRecorder::RecordCollective, with the fault applied to its target
  // (this rank's copy of one all-reduced gradient) before it is recorded.
  Status RecordCollective(const float* grad, uint64_t first, uint32_t count);

 private:
  // A per-batch fault: this rank's own copy of the tensor `name` (at `seen`,
  // where the recorder is about to read it) is corrupted before it is
  // fingerprinted and before the optimizer or the next step reads it.
  void FlipBatchTensor(std::string_view name, const float* seen);

  StepRecorder& recorder_;
  const TensorFaultInjector& fault_;
  const ParameterLayout& layout_;
  const RankTensors tensors_;
};

}  // namespace dgrr::model
