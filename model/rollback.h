// Rollback of a reference-model run (dgrr rollback RUN_DIR --step S): the
// stages of replay/rollback.h, with the state after step S re-executed by the
// in-process trainer when the run has no good checkpoint of S. Re-running
// `dgrr train --resume` then continues from step S+1 and ends bitwise where
// the uninterrupted run ended (docs/rollback.md).
#pragma once

#include <functional>

#include "base/status.h"
#include "model/trainer.h"
#include "replay/rollback.h"

namespace dgrr::model {

using replay::PendingRollback;
using replay::RollbackRankResult;
using replay::RollbackResult;
using replay::RollbackStage;

struct RollbackOptions : replay::RollbackOptions {
  // Called from the re-execution's rank 0 after each re-executed step.
  std::function<void(const TrainProgress&)> progress;
};

// Rolls the reference run in `options.run_dir` back to just after
// `options.step`. Errors as replay::RollBackRun, plus FailedPrecondition for
// a run recorded in mode `off` (no STEP records to cut at) and NotFound when
// run_dir is not a dgrr run (exit 2).
StatusOr<RollbackResult> Rollback(const RollbackOptions& options);

}  // namespace dgrr::model
