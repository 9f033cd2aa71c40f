// The reference training loop described in the program IR (runtime/
// program_ir.h), so the checkpoint contents and the resume procedure come from
// DETrain's Needed analysis (checkpoint/fast_forward.h) instead of being
// hard-coded: what the plan marks Saved goes into every checkpoint, what it
// marks FastForward is regenerated on resume, the rest is dropped.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/fast_forward.h"
#include "runtime/program_ir.h"
#include "runtime/state_registry.h"

namespace dgrr::model {

// The loop of model/trainer.cc, statement for statement:
//   params, adamw.* = init(seed); cursor = 0
//   for step:
//     tokens, cursor = data.next(cursor)       (the epoch's Philox permutation)
//     dropout_rng = create_generator(seed, step)
//     masks = random_gen(dropout_rng)
//     loss = params(tokens, masks)
//     grads = backward(loss); grads = allreduce(grads)
//     params, adamw.m, adamw.v, adamw.t = update(...)
//     checkpoint(params, adamw.m, adamw.v, adamw.t)
ir::Program TrainingProgram();

// The fast-forward plan of TrainingProgram()'s checkpoint.
StatusOr<checkpoint::FastForwardPlan> TrainingPlan();

// How the plan says state `name` is restored: kCheckpoint when Saved,
// kFastForward when FastForward, kNone when Dropped; NotFound when the program
// has no such variable.
StatusOr<RestorePolicy> RestorePolicyFromPlan(const checkpoint::FastForwardPlan& plan,
                                              const std::string& name);

}  // namespace dgrr::model
