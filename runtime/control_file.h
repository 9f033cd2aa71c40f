// The control file: what `dgrr` asks of a training program it re-launches
// (docs/control-file.md, schema "dgrr.control/1").
//
// `dgrr replay`, `rollback` and `bisect` run a recorded program again with
// DGRR_CONTROL naming a control file. The program's loop does not change:
// its Session reads the file when it opens and obeys it (where to write,
// which checkpoint to restore, which recorded run to verify against, when to
// stop, which steps to checkpoint, which boundaries to dump), and reports
// what happened in a result file per rank ("dgrr.control-result/1") that
// `dgrr` reads back whatever the program's own exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/recording_mode.h"

namespace dgrr {

inline constexpr const char* kControlSchema = "dgrr.control/1";
inline constexpr const char* kControlResultSchema = "dgrr.control-result/1";
inline constexpr const char* kControlEnvVar = "DGRR_CONTROL";

struct ControlDump {
  std::string boundary;
  uint64_t step = 0;
  std::optional<int> rank;  // nullopt: every rank
  std::string path;         // "{rank}" is replaced by the rank
};

struct ControlFile {
  std::string path;                      // where it was read from
  std::string run_dir;                   // where the session writes (replaces the program's)
  std::optional<RecordMode> mode;        // replaces the program's recording mode
  std::string restore_checkpoint;        // start from this checkpoint file ("": from step 0)
  std::string verify_run_dir;            // compare every record with this run's traces
  std::optional<uint64_t> stop_after_step;
  std::vector<uint64_t> checkpoint_steps;  // write checkpoints of these steps
  bool periodic_checkpoints = false;     // also the program's own checkpoint schedule
  std::vector<ControlDump> dumps;
};

// Parses and checks a control file; Corruption naming the file and key for
// anything it does not understand (an unknown key included: a newer dgrr's
// instruction must not be silently ignored).
StatusOr<ControlFile> ReadControlFile(const std::string& path);
// The control file this process runs under: the one DGRR_CONTROL names, read
// and checked; nullopt when the variable is unset or empty. A program that
// prepares its own run directory before opening its sessions (dgrr train
// does) asks first: under a control file it must leave that directory alone
// and write where the control says.
StatusOr<std::optional<ControlFile>> ReadActiveControl();
// The dgrr.control/1 document for `control`: ControlFileJson in
// runtime/control_file_json.h (kept out of this installed header).

// The result a rank reports back.
struct ControlMismatch {
  uint64_t step = 0;
  int rank = 0;
  std::string boundary;          // or "step end (parameters)"
  uint64_t recorded_index = 0;
  uint64_t first_example = 0, example_count = 0;  // the boundary's examples (count 0: none)
  uint64_t recorded_xor64 = 0, recorded_xxh3 = 0;
  uint64_t replayed_xor64 = 0, replayed_xxh3 = 0;
};

enum class ControlOutcome {
  kRunning,    // written at open: the program has not finished (yet)
  kCompleted,  // the session closed normally
  kMismatch,   // verification found a record that differs (mismatch is set)
  kFailed,     // the session hit an error (message says which)
};

struct ControlResult {
  int rank = 0;
  ControlOutcome outcome = ControlOutcome::kRunning;
  std::string message;
  std::optional<uint64_t> restored_step;  // the checkpoint the run started from
  std::optional<uint64_t> last_step;      // the last step the session ended
  uint64_t boundaries_verified = 0;
  uint64_t steps_verified = 0;
  std::optional<ControlMismatch> mismatch;
  // For kFailed: the code of the failing Status, so that the re-executor can
  // report a program's own divergence check (exit 4) or a request it refused
  // (exit 1) as such; nullopt when unknown.
  std::optional<StatusCode> failure_code;
  std::vector<uint64_t> checkpoints_written;
  std::vector<std::string> dumps_written;
};

const char* ControlOutcomeName(ControlOutcome outcome);
// RUN_DIR/control-result.rank<R>.json
std::string ControlResultPath(const std::string& run_dir, int rank);
Status WriteControlResult(const std::string& path, const ControlResult& result);
StatusOr<ControlResult> ReadControlResult(const std::string& path);

}  // namespace dgrr
