// How to run a recorded run again, for the commands that re-execute one
// (`dgrr replay`, `rollback`, `bisect`): its launch.json, or, for a run of
// dgrr train, model/train_launch.h's, after the trainer has checked the run's
// config.json as the re-launch will read it.
#pragma once

#include <string>

#include "base/status.h"
#include "model/train_launch.h"
#include "runtime/launch_record.h"

namespace dgrr::model {

// How to run RUN_DIR's program again: its launch.json, or, for a run of an
// older `dgrr train` that kept none, TrainLaunch(RUN_DIR) with the current
// dgrr (whose digest is then the one checked). A run of dgrr train has its
// config.json checked first, as the re-launch will read it: a damaged one is
// Corruption naming file and key (exit 3). NotFound for a directory that does
// not exist ("not a dgrr run"); Corruption for one that says nothing about
// how to run it again.
StatusOr<LaunchRecord> LaunchOfRun(const std::string& run_dir);

}  // namespace dgrr::model
