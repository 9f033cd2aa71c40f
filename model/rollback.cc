#include "model/rollback.h"

#include <unistd.h>

#include <optional>

#include "base/run_lock.h"
#include "model/launch.h"
#include "model/run_config.h"
#include "runtime/session.h"

namespace dgrr::model {

StatusOr<RollbackResult> Rollback(const RollbackOptions& options, replay::ReexecuteOptions reexecute) {
  if (options.step < 0) {
    return Status::InvalidArgument("--step must not be negative, got " + std::to_string(options.step));
  }
  // Before anything else: a second writer must change nothing.
  // (Not in a directory that is no run: ReadRunConfig says why.)
  std::optional<RunLock> lock;
  if (!options.run_dir_locked && ::access(ConfigPathFor(options.run_dir).c_str(), F_OK) == 0) {
    DGRR_ASSIGN_OR_RETURN(RunLock held, RunLock::Acquire(options.run_dir));
    lock.emplace(std::move(held));
  }
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
