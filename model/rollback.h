// Rollback of a reference-model run (dgrr rollback RUN_DIR --step S): the
// stages of replay/rollback.h, with the state after step S re-executed, when
// the run has no good checkpoint of S, by launching `dgrr train` again under a
// control file like any program (replay/reexecute.h; the launch is the run's
// launch.json, or model/launch.h's for a run that kept none). Re-running
// `dgrr train --resume` then continues from step S+1 and ends bitwise where
// the uninterrupted run ended (docs/rollback.md).
#pragma once

#include "base/status.h"
#include "replay/rollback.h"

namespace dgrr::model {

using replay::PendingRollback;
using replay::RollbackOptions;
using replay::RollbackRankResult;
using replay::RollbackResult;
using replay::RollbackStage;

// Rolls the reference run in `options.run_dir` back to just after
// `options.step`. Errors as replay::RollBackRun, plus FailedPrecondition for
// a run recorded in mode `off` (no STEP records to cut at) and NotFound when
// run_dir is not a dgrr run (exit 2). `reexecute.launch` is filled in.
StatusOr<RollbackResult> Rollback(const RollbackOptions& options, replay::ReexecuteOptions reexecute = {});

}  // namespace dgrr::model
