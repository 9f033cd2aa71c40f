// How a run of `dgrr train` is started again: its launch record
// (docs/launch-record.md, "Runs of dgrr train").
//
// The reference trainer is one client of the re-execution contract like any
// program that links libdgrr: rank 0's session writes RUN_DIR/launch.json,
// and `dgrr replay`, `rollback` and `bisect` re-launch it under a control
// file. What it records is `dgrr train --out RUN --resume`: the run's
// settings are its config.json, the one complete and validated description
// that `--resume` already continues from, so a re-execution and a resume can
// never disagree about what the run computes. Nothing about how one
// invocation behaved (--force, -q, --json) is repeated, and a run made by
// `mpirun -np R dgrr train` is re-launched as R threads of one process
// (config.json says R ranks), which compute the same bits (docs/communicator.md).
//
// This file sits below the trainer, which records its launch and finishes an
// interrupted rollback with it; model/launch.h (LaunchOfRun, for the
// commands) sits above, where a run's config is checked by the trainer itself.
#pragma once

#include <string>

#include "base/status.h"
#include "runtime/launch_record.h"

namespace dgrr::model {

// The `dgrr` executable that re-runs reference runs. In order: the
// DGRR_EXECUTABLE environment variable (an explicit override; tests that run
// command lines in-process set it to the built binary), the path the `dgrr`
// binary registered at start-up (SetDgrrExecutable), or "" when neither is
// known (the trainer then writes no launch record and obeys no control file).
std::string DgrrExecutable();
// Called by the dgrr binary's main with /proc/self/exe.
void SetDgrrExecutable(const std::string& path);

// The launch record of `dgrr train --out RUN_DIR --resume`, started from
// this process's working directory with the environment that matters (less
// the MPI launcher's variables: see the header comment). FailedPrecondition
// when DgrrExecutable() is unknown.
StatusOr<LaunchRecord> TrainLaunch(const std::string& run_dir);

// How to run RUN_DIR, a run of dgrr train whose config.json the caller has
// checked, again: its launch.json with --out naming the run where it is now
// (a run directory moved or copied since the recording), or, for a run of an
// older `dgrr train` that kept none, TrainLaunch(RUN_DIR) with the current
// dgrr (whose digest is then the one checked).
StatusOr<LaunchRecord> LaunchOfTrainRun(const std::string& run_dir);

}  // namespace dgrr::model
