// Rollback (dgrr rollback RUN_DIR --step S): leaves a run directory as if
// training had stopped right after step S, so that resuming it (re-running
// the program's command, or `dgrr train --resume` for the reference model)
// continues from step S+1 and ends bitwise where the uninterrupted run ended.
// Any program's run: the one program-specific stage, re-executing to step S,
// is a RollbackReexecutor (replay/reexecute.h's launcher for programs with a
// launch record, the in-process trainer for the reference model).
//
// The stages, in the order that keeps a kill at any moment harmless
// (docs/rollback.md):
//   1. get the state after step S: RUN_DIR's own checkpoint of step S when it
//      is good, otherwise re-execute from the newest good checkpoint before S
//      (or from the start) in a scratch directory, checking every record
//      against RUN_DIR's traces, and checkpoint step S there;
//   2. write that state as RUN_DIR/ckpt/step-S.h5 (atomically) with each
//      rank's trace position just past the rollback EVENT of stage 3;
//   3. cut each rank's trace right after step S's STEP end record and append
//      an EVENT kRolledBack, durably;
//   4. only then remove the checkpoints of later steps and stale temporaries.
// From stage 2 until stage 4 is done, RUN_DIR/rollback-pending.json names S,
// so that `train --resume` finishes an interrupted rollback before resuming.
// The whole rollback holds RUN_DIR's writer lock (base/run_lock.h).
// Nothing in RUN_DIR changes before stage 2, so a failed re-execution (a
// replay mismatch, say) leaves the run as it was. Every stage notices when an
// interrupted earlier rollback already did it, so running the same rollback
// again finishes the job.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replay/reexecute.h"
#include "checkpoint/checkpoint_file.h"
#include "runtime/session.h"

namespace dgrr::replay {

// A durable point reached by a rollback (for the interruption hook).
enum class RollbackStage {
  kCheckpointWritten,  // stage 2 done (also reached when the checkpoint already fit)
  kTraceCut,           // stage 3 done for one rank (the hook's `index` is the rank)
  kCheckpointRemoved,  // stage 4 removed one later checkpoint (`index` is its step)
};

struct RollbackOptions {
  std::string run_dir;
  int64_t step = -1;
  // A corrupt checkpoint at or before `step` is skipped for an older good one
  // (as `train --resume --fallback`); without it, it is refused (Corruption).
  bool fallback = false;
  // Where the scratch run goes (a fresh directory is made inside); empty:
  // the system's temporary directory.
  std::string scratch_parent;
  // Test hook standing in for a kill: called after each durable point; a
  // non-OK result stops the rollback there and is returned.
  std::function<Status(RollbackStage stage, int64_t index)> interrupt;
  // The caller already holds run_dir's RunLock (train --resume finishing an
  // interrupted rollback); otherwise Rollback takes it.
  bool run_dir_locked = false;
};

// The step an interrupted rollback of `run_dir` was rolling back to; nullopt
// when none is pending. Corruption for an unreadable marker.
StatusOr<std::optional<int64_t>> PendingRollback(const std::string& run_dir);

struct RollbackRankResult {
  int rank = 0;
  uint64_t cut_at = 0;        // records kept: the trace ends with step S's STEP end record
  bool already_cut = false;   // an earlier (interrupted) rollback had done it
};

struct RollbackResult {
  int64_t step = 0;                  // S
  int64_t previous_last_step = -1;   // the last step any rank had recorded
  bool reexecuted = false;
  std::optional<uint64_t> from_checkpoint;  // the checkpoint the state after S came from
  int64_t first_reexecuted_step = 0;        // when reexecuted: from_checkpoint + 1, or 0
  uint64_t boundaries_verified = 0;         // by the re-execution, all ranks
  uint64_t steps_verified = 0;
  std::string checkpoint_path;              // RUN_DIR/ckpt/step-S.h5
  bool checkpoint_written = false;          // false: the one there already fit
  std::vector<RollbackRankResult> ranks;
  std::vector<uint64_t> removed_checkpoints;  // steps, ascending
  std::vector<std::string> skipped_checkpoints;  // corrupt ones passed over (--fallback)
  // The per-rank shard files (step-N.rank-R.h5) of the removed checkpoints.
  int removed_checkpoint_shards = 0;
  // Leftover temporaries only: *.tmp.* files and shards whose checkpoint was
  // never committed (no manifest) before this rollback.
  int removed_temporaries = 0;
};

// Stage 1 when RUN_DIR has no good checkpoint of step S: re-executes the run
// from `from` (nullopt: the start) through step S in a scratch directory,
// verifying every record against RUN_DIR's traces, and returns the
// checkpoint of step S it wrote there (loaded). It fills the result's
// reexecuted, first_reexecuted_step and *_verified fields. A re-execution
// that does not reproduce the run is IntegrityFailure.
class RollbackReexecutor {
 public:
  virtual ~RollbackReexecutor() = default;
  virtual StatusOr<checkpoint::Checkpoint> StateAfter(const RollbackOptions& options,
                                                      const std::optional<checkpoint::Checkpoint>& from,
                                                      RollbackResult* result) = 0;
};

// Rolls the run in `options.run_dir`, of `world_size` ranks, back to just
// after `options.step`; the caller holds its writer lock.
// Errors: IOError when another writer holds the run (exit 2); InvalidArgument for a negative step or one past the last step every
// rank recorded (exit 1); FailedPrecondition for a run recorded in mode `off`
// (no STEP records to cut at); NotFound when run_dir is not a dgrr run
// (exit 2); Corruption for a damaged trace or checkpoint (exit 3);
// IntegrityFailure when the re-execution does not reproduce the recorded
// traces (exit 5, the run directory untouched).
StatusOr<RollbackResult> RollBackRun(const RollbackOptions& options, int world_size,
                                     RollbackReexecutor& reexecutor);

// Re-executes with the launch record (replay/reexecute.h).
class LaunchRollbackReexecutor final : public RollbackReexecutor {
 public:
  explicit LaunchRollbackReexecutor(ReexecuteOptions options = {}) : options_(std::move(options)) {}
  StatusOr<checkpoint::Checkpoint> StateAfter(const RollbackOptions& options,
                                              const std::optional<checkpoint::Checkpoint>& from,
                                              RollbackResult* result) override;

 private:
  ReexecuteOptions options_;
};

// Rollback of a run recorded by any program with a launch record (or the
// one `reexecute.launch` gives): takes the writer lock, learns the world
// size from the traces, and re-executes with LaunchRollbackReexecutor when
// it must.
StatusOr<RollbackResult> RollbackLaunchedRun(const RollbackOptions& options, const ReexecuteOptions& reexecute);

}  // namespace dgrr::replay
