// Rollback of a run recorded by any program with a launch record: stage 1
// re-executes the program under a control file (replay/reexecute.h).
#include <optional>

#include "base/file.h"
#include "runtime/run_directory.h"
#include "checkpoint/checkpoint_file.h"
#include "replay/reexecute.h"
#include "replay/rollback.h"

namespace dgrr::replay {

StatusOr<checkpoint::Checkpoint> LaunchRollbackReexecutor::StateAfter(
    const RollbackOptions& options, const std::optional<checkpoint::Checkpoint>& from,
    RollbackResult* result) {
  DGRR_ASSIGN_OR_RETURN(ScratchDirectory scratch,
                        ScratchDirectory::Create("dgrr-rollback", options.scratch_parent));
  const std::string out_dir = scratch.path() + "/run";
  const uint64_t step = static_cast<uint64_t>(options.step);
  ControlFile control;
  if (from) control.restore_checkpoint = from->path;
  control.verify_run_dir = options.run_dir;
  control.stop_after_step = step;
  control.checkpoint_steps = {step};
  DGRR_ASSIGN_OR_RETURN(ReexecuteResult run, Reexecute(options.run_dir, out_dir, control, options_));
  if (run.mismatch) {
    return Status::IntegrityFailure("re-executing to step " + std::to_string(step) + " did not reproduce " +
                                    options.run_dir + " (left untouched): " + MismatchText(*run.mismatch));
  }
  // A program that ended its loop before S (it stopped early, or skipped
  // work) did not reproduce the run through S: said as such (exit 5), never
  // as the missing checkpoint it leaves behind.
  for (const ControlResult& r : run.ranks) {
    if (!r.last_step || *r.last_step < step) {
      return Status::IntegrityFailure(
          "re-executing to step " + std::to_string(step) + " did not reproduce " + options.run_dir +
          " (left untouched): rank " + std::to_string(r.rank) + " stopped " +
          (r.last_step ? "after step " + std::to_string(*r.last_step) : std::string("before its first step")) +
          ", before step " + std::to_string(step) + " (the program ended its loop early)");
    }
  }
  result->reexecuted = true;
  result->first_reexecuted_step = from ? static_cast<int64_t>(from->meta.step) + 1 : 0;
  result->boundaries_verified = run.boundaries_verified;
  result->steps_verified = run.steps_verified;
  return checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(out_dir, step));
}

StatusOr<RollbackResult> RollbackLaunchedRun(const RollbackOptions& options, const ReexecuteOptions& reexecute) {
  // Before anything else: a second writer must change nothing.
  RunDirectory directory(options.run_dir);
  if (!options.run_dir_locked) DGRR_RETURN_IF_ERROR(directory.LockExisting());
  DGRR_ASSIGN_OR_RETURN(int world_size, RecordedWorldSize(options.run_dir));
  LaunchRollbackReexecutor reexecutor(reexecute);
  return RollBackRun(options, world_size, reexecutor);
}

}  // namespace dgrr::replay
