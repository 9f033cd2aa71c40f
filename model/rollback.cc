#include "model/rollback.h"

#include "model/launch.h"
#include "model/run_config.h"
#include "runtime/run_directory.h"

namespace dgrr::model {

StatusOr<RollbackResult> Rollback(const RollbackOptions& options, replay::ReexecuteOptions reexecute) {
  if (options.step < 0) {
    return Status::InvalidArgument("--step must not be negative, got " + std::to_string(options.step));
  }
  // Before anything else: a second writer must change nothing.
  // (Not in a directory that is no run: ReadRunConfig says why.)
  RunDirectory directory(options.run_dir);
  if (!options.run_dir_locked && directory.HasConfig()) DGRR_RETURN_IF_ERROR(directory.LockExisting());
  DGRR_ASSIGN_OR_RETURN(const RunConfig run, ReadRunConfig(options.run_dir));
  if (run.mode == RecordMode::kOff) {
    return Status::FailedPrecondition(options.run_dir +
                                      " was recorded in mode off: its traces hold no step ends to cut at");
  }
  DGRR_ASSIGN_OR_RETURN(reexecute.launch, LaunchOfRun(options.run_dir));
  RollbackOptions locked = options;
  locked.run_dir_locked = true;
  return replay::RollbackLaunchedRun(locked, reexecute);
}

}  // namespace dgrr::model
