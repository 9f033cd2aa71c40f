// The re-executor: runs a recorded program again under a control file
// (docs/control-file.md), the one way `dgrr replay`, `rollback` and `bisect`
// re-execute any program that links libdgrr.
//
//   ControlFile c;  c.restore_checkpoint = ...;  c.verify_run_dir = run;  c.stop_after_step = 9;
//   auto r = Reexecute(run, "/tmp/replay-1", c, {});   // launches it, waits, reads its results
//   if (r.ok() && r->mismatch) ...                       // step, rank, boundary, both fingerprints
//
// From RUN_DIR/launch.json (runtime/launch_record.h) it takes the argv,
// working directory and the environment that matters; it checks that the
// executable (and script) still has the recorded digest, writes the control
// file into the output directory, starts the program with DGRR_CONTROL naming
// it, and collects each rank's dgrr.control-result/1. One rank of an MPI job
// is started again as the whole job under mpirun, one worker of a torchrun
// job as the whole job under torchrun (docs/launch-record.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/control_file.h"
#include "runtime/launch_record.h"
#include "replay/trust.h"

namespace dgrr::replay {

struct ReexecuteOptions {
  // Re-execute even when the executable's or script's digest differs from
  // the recording (the records are still verified when the control asks).
  bool allow_changed_program = false;
  // Called with each line the program writes to stderr (progress); null: the
  // program's output only goes to OUT_DIR/program.log.
  std::function<void(const std::string&)> output;
  // How to start the program; nullopt: RUN_DIR/launch.json. A caller that
  // knows a run's program without a record (dgrr train's older runs,
  // model/launch.h) supplies it.
  std::optional<LaunchRecord> launch;
  // --trust: the record is taken as written (replay/trust.h). Without it a
  // run directory that is not the user's own is refused before anything
  // starts (FailedPrecondition, exit 1), and for the user's own run the
  // variables that name code (LaunchVariableNamesCode) and a script's
  // interpreter come from the caller's environment, not the record.
  bool trust = false;
  // Called once, just before the program starts, with the lines that say
  // what runs: the command line, its working directory, and every way its
  // environment differs from the caller's (docs/launch-record.md, Security).
  // `security_relevant`: the record sets a variable that names code, or the
  // interpreter, to something the caller's environment does not have (a
  // quiet command prints the lines then too). Null: nothing is said.
  std::function<void(const std::vector<std::string>& lines, bool security_relevant)> preview;
};

struct ReexecuteResult {
  std::string out_dir;
  LaunchRecord launch;
  int exit_code = 0;                    // the program's (128+N for signal N)
  std::vector<ControlResult> ranks;     // index == rank
  uint64_t boundaries_verified = 0;     // all ranks
  uint64_t steps_verified = 0;
  // The first mismatch over all ranks (lowest step, then rank).
  std::optional<ControlMismatch> mismatch;
  std::string log_path;                 // OUT_DIR/program.log
};

// The number of ranks of a recorded run (from its traces' headers).
StatusOr<int> RecordedWorldSize(const std::string& run_dir);

// Runs `run_dir`'s program under `control` (its run_dir is set to
// `out_dir`, which must not exist yet and is created). A program that ran as
// the ranks of an MPI job (its launch record holds the launcher's variables)
// is started again as such a job: `mpirun --oversubscribe -np N` (N the
// recorded world size, mpirun from PATH; FailedPrecondition when there is
// none) with the recorded executable and arguments. Errors:
// NotFound/IOError when the run has no launch record or the program cannot
// be started (exit 2); IntegrityFailure when the executable or script
// changed since the recording (exit 5) unless allowed; IntegrityFailure
// when the program failed or ended without its session reporting back
// (exit 5), with the program's last output line; FailedPrecondition (exit 1)
// for a run that is not trusted (replay/trust.h: CheckRunTrust), before
// anything is read or started; but a rank that failed with
// Divergence (the program's own cross-rank check, exit 4), InvalidArgument
// (it refused what the control asked, exit 1) or Corruption (a damaged
// checkpoint or run file, exit 3) is reported with that code. A
// verification mismatch is not an error: it is in the result.
StatusOr<ReexecuteResult> Reexecute(const std::string& run_dir, const std::string& out_dir,
                                    ControlFile control, const ReexecuteOptions& options);

// The one-line description of a mismatch: step, rank, boundary, its examples
// and its record index in the recorded trace (as compare names them), both
// fingerprints.
std::string MismatchText(const ControlMismatch& m);

}  // namespace dgrr::replay
