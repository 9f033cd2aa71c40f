#include "model/training_program.h"

namespace dgrr::model {

ir::Program TrainingProgram() {
  ir::ProgramBuilder b;
  b.Assign({"params", "adamw.m", "adamw.v", "adamw.t"}, "init", {"seed"},
           "params, adamw.* = init(seed)");
  b.Assign({"cursor"}, "zero", {}, "cursor = 0");
  b.For("step", [&] {
    b.Assign({"tokens", "cursor"}, "data.next", {"cursor", "seed"},
             "tokens, cursor = data.next(cursor)");
    b.CreateGenerator("dropout_rng", {"seed", "step"}, "dropout_rng = philox(seed, dropout, step)");
    b.RandomGen("dropout_rng", {"masks"}, "masks = random_gen(dropout_rng)");
    b.ModelCall({"loss"}, "params", {"tokens", "masks"}, "loss = model(params, tokens, masks)");
    b.Backward({"grads"}, {"loss"}, "grads = backward(loss)");
    b.Assign({"grads"}, "allreduce", {"grads"}, "grads = allreduce(grads)");
    b.Update({"params", "adamw.m", "adamw.v", "adamw.t"},
             {"params", "adamw.m", "adamw.v", "adamw.t", "grads"}, "adamw.step");
    b.Checkpoint({"params", "adamw.m", "adamw.v", "adamw.t"}, "checkpoint every K steps");
  });
  b.Outputs({"params"});
  return b.Build();
}

StatusOr<checkpoint::FastForwardPlan> TrainingPlan() {
  DGRR_ASSIGN_OR_RETURN(auto plans, checkpoint::PlanFastForward(TrainingProgram()));
  if (plans.size() != 1) return Status::Internal("the training program has one checkpoint statement");
  return plans[0];
}

StatusOr<RestorePolicy> RestorePolicyFromPlan(const checkpoint::FastForwardPlan& plan,
                                              const std::string& name) {
  const checkpoint::VariablePlan* v = plan.Find(name);
  if (v == nullptr) return Status::NotFound("the training program has no state '" + name + "'");
  switch (v->action) {
    case checkpoint::VarAction::kSaved: return RestorePolicy::kCheckpoint;
    case checkpoint::VarAction::kFastForward: return RestorePolicy::kFastForward;
    case checkpoint::VarAction::kDropped: return RestorePolicy::kNone;
  }
  return RestorePolicy::kNone;
}

}  // namespace dgrr::model
