// The reference trainer's checkpointed state, registered with a Session one
// entry per tensor so that a checkpoint opens in h5py/h5dump as named tensors
// with their shapes (docs/model.md, "Checkpointed state"):
//
//   <param>            f32 [shape]  role parameter   e.g. block0.attn.qkv.w [64, 192]
//   adamw.m.<param>    f32 [shape]  role optimizer   (the names the trace gives AdamW's
//   adamw.v.<param>    f32 [shape]  role optimizer    moment boundaries)
//   adamw.t            u64 [1]      role counter
//   cursor             u64 [1]      role cursor
//
// The fast-forward plan (model/training_program.h) and `--inject
// skip-restore:` speak of the program's variables (`params`, `adamw.m`,
// `adamw.v`, `adamw.t`, `cursor`); each tensor entry takes its variable's
// restore policy. Runs written before this layout hold one flat entry per
// variable (`params`, `adamw.m`, `adamw.v`, shape [num_params]);
// RestoreTrainState reads both.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/fast_forward.h"
#include "model/config.h"
#include "runtime/state_registry.h"

namespace dgrr::model {

// The buffers the entries point into; params, m and v hold layout.total_size()
// floats in layout order. Not owned: they must outlive the registration.
struct TrainStateBuffers {
  float* params = nullptr;
  float* adamw_m = nullptr;
  float* adamw_v = nullptr;
  uint64_t* adamw_t = nullptr;
  uint64_t* cursor = nullptr;
};

// Registers every entry (replicated: the ranks hold the same state), in
// layout order so that the parameter entries, streamed in registration order,
// are the flat parameter array byte for byte (the STEP records' parameter
// fingerprint does not depend on how the state is split).
Status RegisterTrainState(const ParameterLayout& layout, const TrainStateBuffers& buffers,
                          const checkpoint::FastForwardPlan& plan, StateRegistry& registry);

// Restores rank `rank` from `checkpoint`, per-tensor or flat (older runs),
// except the program variables named in `skip_variables` (skip-restore).
Status RestoreTrainState(const checkpoint::Checkpoint& checkpoint, int rank, const ParameterLayout& layout,
                         StateRegistry& registry, const std::set<std::string>& skip_variables);

}  // namespace dgrr::model
