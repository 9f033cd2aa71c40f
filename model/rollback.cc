#include "model/rollback.h"

#include <unistd.h>

#include <optional>

#include "base/file.h"
#include "base/run_lock.h"
#include "checkpoint/checkpoint_file.h"
#include "runtime/session.h"

namespace dgrr::model {
namespace {

// Stage 1 by re-execution in this process: from `from` (or the start)
// through `step`, in a scratch run verified against the run's traces,
// checkpointing `step` there.
class TrainerRollbackReexecutor final : public replay::RollbackReexecutor {
 public:
  TrainerRollbackReexecutor(const TrainOptions& run, const RollbackOptions& options)
      : run_(run), options_(options) {}

  StatusOr<checkpoint::Checkpoint> StateAfter(const replay::RollbackOptions& rollback,
                                              const std::optional<checkpoint::Checkpoint>& from,
                                              RollbackResult* result) override {
    DGRR_ASSIGN_OR_RETURN(ScratchDirectory scratch,
                          ScratchDirectory::Create("dgrr-rollback", rollback.scratch_parent));
    TrainOptions o = run_;
    o.out_dir = scratch.path() + "/run";
    o.verify_against = rollback.run_dir;
    o.last_step = rollback.step;
    o.write_checkpoints = false;
    o.checkpoint_last_step = true;
    if (from) o.restore_checkpoint = from->path;
    DGRR_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o));
    TrainResult train;
    Status s = trainer->Run(options_.progress, &train);
    if (!s.ok()) {
      return s.code() == StatusCode::kIntegrityFailure
                 ? s.WithPrefix("re-executing to step " + std::to_string(rollback.step) +
                                " did not reproduce " + rollback.run_dir + " (left untouched)")
                 : s;
    }
    result->reexecuted = true;
    result->first_reexecuted_step = from ? static_cast<int64_t>(from->meta.step) + 1 : 0;
    result->boundaries_verified = train.boundaries_verified;
    result->steps_verified = train.steps_verified;
    return checkpoint::ReadCheckpoint(
        checkpoint::CheckpointPath(o.out_dir, static_cast<uint64_t>(rollback.step)));
  }

 private:
  const TrainOptions& run_;
  const RollbackOptions& options_;
};

}  // namespace

StatusOr<RollbackResult> Rollback(const RollbackOptions& options) {
  if (options.step < 0) {
    return Status::InvalidArgument("--step must not be negative, got " + std::to_string(options.step));
  }
  // Before anything else: a second writer must change nothing.
  // (Not in a directory that is no run: TrainOptionsFromRun says why.)
  std::optional<RunLock> lock;
  if (!options.run_dir_locked && ::access(ConfigPathFor(options.run_dir).c_str(), F_OK) == 0) {
    DGRR_ASSIGN_OR_RETURN(RunLock held, RunLock::Acquire(options.run_dir));
    lock.emplace(std::move(held));
  }
  DGRR_ASSIGN_OR_RETURN(TrainOptions run, TrainOptionsFromRun(options.run_dir));
  if (run.mode == RecordMode::kOff) {
    return Status::FailedPrecondition(options.run_dir +
                                      " was recorded in mode off: its traces hold no step ends to cut at");
  }
  TrainerRollbackReexecutor reexecutor(run, options);
  return replay::RollBackRun(options, run.ranks, reexecutor);
}

}  // namespace dgrr::model
