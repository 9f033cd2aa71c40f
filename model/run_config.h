// A run of `dgrr train` as its config.json describes it (docs/model.md, "The
// run directory"), with the one codec that writes and reads that file.
//
// The trainer builds a RunConfig from the options it validated and writes
// ToJson(); `train --resume`, `plan`, `replay`, `rollback` and `bisect` read
// it back with FromJson/ReadRunConfig. Writer and reader are side by side
// here so that they cannot drift apart: a field is added in four places of
// this file and nowhere else (the struct, ToJson, FromJson, kRunConfigKeys
// with whether it changes results, and, when it never changes what a step
// computes, kScheduleOnlyKeys).
//
// FromJson checks every field for presence, type and range against the same
// limits the trainer applies to command-line values, and the fields across
// each other, so that a damaged or hand-edited config.json is reported as
// the run's file (Corruption, exit 3, naming file and key), never as if it
// were a flag the user passed. Older files stay readable: a key added later
// is optional on reading and takes the value runs had before it existed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/numerics.h"
#include "model/faults.h"
#include "runtime/recording_mode.h"

namespace dgrr::model {

inline constexpr const char* kRunConfigSchema = "dgrr.run-config/1";

// Limits every run keeps, checked on command-line values (exit 1) and on a
// run's own config.json (exit 3). They are fixed rather than taken from this
// machine so that a run recorded here resumes and replays on any machine.
// Each rank is a thread running up to `threads` workers: 256 x 256 is within
// what Linux grants a process by default, and a thread the system refuses
// anyway becomes a Status, not an abort.
inline constexpr int kMaxRanks = 256;
inline constexpr int kMaxThreads = 256;
inline constexpr int kMaxBatch = 1 << 16;
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;
inline constexpr double kMaxLearningRate = 1000;

struct RunConfig {
  // The arithmetic the run computed with (model/numerics.h; docs/model.md,
  // "Numerics version"): config.json's "numerics", 1 when the key is absent.
  // FromJson refuses any other version than this build's (exit 3): a run of
  // another arithmetic cannot be resumed or re-executed bit for bit.
  int64_t numerics = kNumericsVersion;
  uint64_t seed = 1;
  int64_t steps = 0;
  struct Model {
    std::string preset;
    int layers = 0, dim = 0, heads = 0, seq = 0;
    // Fixed by the preset: written for the reader's information, checked
    // against the preset on reading and never taken from the file.
    float attn_dropout = 0, resid_dropout = 0;
  } model;
  struct Data {
    std::string source = "embedded";  // "embedded" (the arithmetic corpus) or "file"
    std::string path;                 // the corpus file ("" when embedded; not read back then)
    uint64_t bytes = 0;               // the corpus' size, for information (0 when unreadable)
    // Hex64 of the corpus' XXH3: `--resume` refuses a corpus that changed.
    // Only a resume needs it, so a file without it stays readable by plan,
    // replay and rollback, and a resume reports this reading error.
    StatusOr<std::string> xxh3 = std::string();
  } data;
  struct Optimizer {
    float lr = 0;
    // Fixed by the preset and lr, like Model's dropouts.
    float min_lr = 0;
    int warmup_steps = 0;
    float weight_decay = 0;
    float grad_clip = 0;
  } optimizer;
  int batch = 0;
  int ranks = 1;
  int threads = 1;
  RecordMode mode = RecordMode::kFull;
  int64_t ckpt_every = 0;
  int64_t audit_every = 0;  // absent in runs recorded before the audit: 0
  // Where the steps ran: "cpu", "cuda-sim" (the device kernels on the grid
  // emulator) or "cuda". Never changes a result (the device kernels are
  // bitwise the CPU layers, docs/gpu.md), so a schedule-only key: a resume
  // may cross devices and `compare` of a cpu and a cuda-sim run is exit 0.
  // Written only when not "cpu"; absent (cpu runs, and runs recorded before
  // the key): "cpu".
  std::string device = "cpu";
  // The matrix products' kernel: "exact" (the canonical fma chain, on every
  // device) or "cublas" (the pinned deterministic cuBLAS handle, --device
  // cuda only: deterministic run to run but NOT equal to exact, so it is a
  // result-changing setting). Written only when "cublas"; absent: "exact".
  std::string gemm = "exact";
  // The run's faults (never skip-restore: that is a property of one resume).
  std::vector<FaultSpec> inject;

  // The keys that only say how the run is recorded or scheduled: the state
  // after a step does not depend on them (Trainer's state config leaves them
  // out, so a checkpoint of an `sdc` run with 4 threads restores into a
  // `full` replay with 1).
  static constexpr const char* kScheduleOnlyKeys[] = {"mode", "threads", "ckpt_every", "audit_every",
                                                       "device"};

  // The document config.json holds (the session writes it with dump(2), keys
  // sorted). Every value must be valid: FromJson(ToJson()) gives it back.
  nlohmann::json ToJson() const;

  // Reads and checks `doc`; `source` names it in errors (usually the path).
  static StatusOr<RunConfig> FromJson(const nlohmann::json& doc, const std::string& source);
};

// Every key ToJson writes, dotted as `dgrr compare` names a config.json
// difference ("optimizer.lr"; an array's elements are "inject[0]", ...), with
// whether two runs that differ in it can record different values.
// changes_results is false only for what the runs' results are shown not to
// depend on: the rank and thread counts (the parameters after every step are
// identical for any R and T) and the checkpoint and audit intervals (they
// read the state, never change it). Not the same list as kScheduleOnlyKeys:
// the recording mode changes which boundaries are recorded (so what compare
// sees) but not the state, and the rank count changes how a checkpoint is
// sharded but not the results. tests/model/run_config_test.cc checks that
// the table and ToJson name the same keys.
struct RunConfigKey {
  const char* key;
  bool changes_results;
};
inline constexpr RunConfigKey kRunConfigKeys[] = {
    {"schema", true},
    {"numerics", true},
    {"seed", true},
    {"steps", true},  // the learning-rate schedule spans the run
    {"model.preset", true},
    {"model.layers", true},
    {"model.dim", true},
    {"model.heads", true},
    {"model.seq", true},
    {"model.attn_dropout", true},
    {"model.resid_dropout", true},
    {"data.source", true},
    {"data.path", true},
    {"data.bytes", true},
    {"data.xxh3", true},
    {"optimizer.lr", true},
    {"optimizer.min_lr", true},
    {"optimizer.warmup_steps", true},
    {"optimizer.weight_decay", true},
    {"optimizer.grad_clip", true},
    {"batch", true},
    {"ranks", false},
    {"threads", false},
    {"mode", true},
    {"ckpt_every", false},
    {"audit_every", false},
    {"inject", true},  // and each inject[i]
    {"device", false},  // cpu, cuda-sim and cuda compute the same bits (docs/model.md, "Devices")
    {"gemm", true},     // cublas is deterministic, not equal to exact
};

// Whether a config.json difference in `key` (dotted, as above) can change a
// recorded value: the table's attribute; an array element takes its array's;
// a key the table does not know may (true). `dgrr compare` and `dgrr report`
// mark the others "never changes results" (docs/compare.md).
bool RunConfigKeyChangesResults(std::string_view key);

// Whether `doc` says it is a run config (its schema), whatever else it holds.
bool IsRunConfig(const nlohmann::json& doc);

// RUN_DIR/config.json, read and checked (FromJson). A file that cannot be
// read is "not a dgrr run" (NotFound when it does not exist, I/O otherwise).
StatusOr<RunConfig> ReadRunConfig(const std::string& run_dir);

}  // namespace dgrr::model
