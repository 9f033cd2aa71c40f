// Session: one rank of one run, recorded. It owns the rank's determinism
// controls, environment fingerprint, RNG streams, trace writer and state
// registry, and is the only object a training program talks to.
//
//   SessionOptions o;  o.run_dir = "runs/a"; o.seed = 7; o.rank = r; o.world_size = R;
//   auto session = Session::Open(o);                // applies controls, writes env + header
//   auto fc_out = (*session)->DeclareBoundary("block0.mlp.fc.out", Phase::kForward,
//                                             Direction::kOutput, OpKind::kMatmul);
//   (*session)->BeginStep(step);
//   (*session)->Record(fc_out, tensor, {first_example, count});
//   (*session)->EndStep(step, loss);                // STEP record with the params fingerprint
//   (*session)->Close();
//
// A program that checkpoints and resumes (docs/api.md) opens with
// OpenMode::kContinue and a CheckpointStore (dgrr::Open in <dgrr/dgrr.h>
// supplies the HDF5 one), registers its state, takes its first step from
// Resume(), and after each step asks ShouldCheckpoint/ShouldStop. Started by
// `dgrr replay|rollback|bisect`, the same loop obeys the control file named
// by DGRR_CONTROL (runtime/control_file.h): the session restores, verifies,
// stops, checkpoints and dumps as told, and the program does not change.
//
// Not thread-safe: a session belongs to its rank's training thread. Worker
// threads compute; the rank's thread records (the trace's order is the rank's
// program order, never the scheduler's).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "fingerprint/tensor.h"
#include "rng/rng_streams.h"
#include "runtime/checkpoint_store.h"
#include "runtime/control_file.h"
#include "runtime/determinism.h"
#include "runtime/launch_record.h"
#include "runtime/communicator.h"
#include "runtime/recording_mode.h"
#include "runtime/state_registry.h"
#include "trace_format/record.h"

namespace dgrr {

// What tests, the trainer and the re-execution machinery substitute inside a
// session (its run directory, the process environment, a record check, the
// device): runtime/session_seams.h, in the tree only (not installed).
struct SessionSeams;

using RunId = std::array<uint8_t, 16>;
// 16 random bytes from the OS; shared by every rank of one run.
RunId NewRunId();
std::string RunIdHex(const RunId& id);

enum class OpenMode {
  kCreate,     // this rank's files must not exist yet
  kOverwrite,  // replace this rank's files
  kResume,     // append to this rank's existing trace (after a checkpoint cut)
  // Continue the run when it has a checkpoint, start it afresh otherwise:
  // the trace opens in Resume(), which finds the newest good checkpoint,
  // cuts the trace there and restores the registered state. What a program
  // that checkpoints uses, so re-running the same command resumes.
  kContinue,
};

struct SessionOptions {
  std::string run_dir;          // created if missing
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  int threads = 1;              // worker threads per rank (recorded; never changes results)
  RecordMode mode = RecordMode::kFull;
  OpenMode open_mode = OpenMode::kCreate;
  RunId run_id{};               // all zero: NewRunId()
  // The run's configuration as JSON text: everything needed to run it again.
  // Its digest goes into the trace header; rank 0 writes it as config.json.
  std::string config_json = "{}";
  // The part of the configuration that decides the state after a step, as
  // JSON text: checkpoints carry its digest and restore only into a session
  // whose digest is the same. Leave it "" (then config_json is used) unless
  // the configuration also holds settings that only say how the run is
  // recorded or scheduled (recording mode, threads, checkpoint interval), so
  // that a checkpoint of an `sdc` run restores into a `full` re-execution.
  std::string state_config_json;
  // This rank's communicator (rank() == rank, size() == world_size; it must
  // outlive the session), over which the session makes its own few
  // cross-rank exchanges, each an all-gather of one small value per rank:
  // the run id at open, the per-step SDC check, a checkpoint's agreement on
  // the replicated state and its shard records. Null: none of these (a
  // checkpoint of several ranks then fails). The same communicator may carry
  // the program's own collectives (CanonicalAllReduce) between the session's.
  Communicator* communicator = nullptr;
  // Apply the GPU controls (NCCL, cuBLAS). Default: when built with CUDA.
  std::optional<bool> gpu;

  // --- Checkpoints, resume and re-execution (docs/api.md) ---
  // Where checkpoints go; dgrr::Open (<dgrr/dgrr.h>) sets the HDF5 store.
  // Null: Checkpoint() and a resuming Resume() are FailedPrecondition.
  CheckpointStore* checkpoints = nullptr;
  // ShouldCheckpoint(step) is true after every this many steps (steps N-1,
  // 2N-1, ...), after step total_steps-1, and at a requested stop; 0: never.
  uint64_t checkpoint_every = 0;
  uint64_t total_steps = 0;     // 0: unknown
  // Resume passes over a damaged newest checkpoint for an older good one
  // (otherwise the damage is an error naming the file).
  bool resume_fallback = false;
  // The fast-forward plan stored in each checkpoint (programs that describe
  // their loop in the program IR: checkpoint::PlansToJson); "": none.
  std::string plan_json;
  // The program can be run again by dgrr: rank 0 writes launch.json and the
  // session obeys a control file named by DGRR_CONTROL. A program that
  // re-executes itself some other way sets false.
  bool reexecutable = true;
  // What launch.json records; nullopt: this process (CaptureLaunchRecord).
  // A language binding sets the script and its digest here.
  std::optional<LaunchRecord> launch;
  // The program's own build (compiler, flags, version, anything that could
  // change its numbers) as a JSON object text, recorded in rank<R>.env.json
  // under "program" and so compared by `dgrr compare`; "": none.
  std::string program_info_json;
};

// A pre-interned boundary: its name id and fixed attributes, so the hot path
// does no string work.
struct BoundaryHandle {
  uint32_t name_id = 0;
  trace::Phase phase = trace::Phase::kForward;
  trace::Direction direction = trace::Direction::kOutput;
  OpKind kind = OpKind::kOther;
  bool recorded = true;  // false when the session's mode skips it
};

struct ExampleRange {
  uint64_t first = 0;
  uint32_t count = 0;
};

// A cross-rank disagreement found at a step end.
struct SdcMismatch {
  uint64_t step = 0;
  int rank = 0;                 // the rank whose parameters differ
  Fingerprint rank_fingerprint;
  Fingerprint reference;        // what the other ranks hold
};

class Session {
 public:
  static StatusOr<std::unique_ptr<Session>> Open(const SessionOptions& options);
  // Open with the seams (runtime/session_seams.h; internal, not installed):
  // the trainer's run directory, a test's environment or device, a check.
  static StatusOr<std::unique_ptr<Session>> Open(const SessionOptions& options, const SessionSeams& seams);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The options in effect: the caller's, with what a control file decides
  // (run_dir, mode, open_mode) and what opening the trace settles (run_id;
  // open_mode kResume once Resume() has continued a run).
  const SessionOptions& options() const;
  int rank() const;
  RecordMode mode() const;
  const rng::RngStreams& rng() const;
  const DeterminismControls& controls() const;
  StateRegistry& state();
  const std::string& trace_path() const;
  uint64_t env_digest() const;
  uint64_t config_digest() const;

  // Interns `name` (a stable model-level identity such as
  // "block3.mlp.fc.out", at most trace::kMaxNameLength bytes).
  StatusOr<BoundaryHandle> DeclareBoundary(std::string_view name, trace::Phase phase,
                                           trace::Direction direction,
                                           OpKind kind = OpKind::kOther);
  // Fingerprints `tensor` in place (no copy) and appends a BOUNDARY record,
  // unless the mode skips this boundary. Returns the fingerprint through `out`
  // when given (and computes it even in a skipping mode when asked).
  //
  // A device tensor (tensor.where not host) is fingerprinted by a kernel on
  // its own stream and the call returns at once: its record, and every
  // record after it, waits in program order until the stream has produced
  // the fingerprint, and is appended by a later call that finds it ready
  // (never blocking), or by Flush/Sync/Checkpoint/Close, which wait. Asking
  // for the value (`out`) waits for it, and so does a boundary the control
  // file dumps (its bytes are copied to the host on the tensor's stream).
  Status Record(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                Fingerprint* out = nullptr);
  // Appends a BOUNDARY record for a tensor fingerprinted elsewhere (on a
  // worker thread, say, so the cost is spread over the workers while the
  // rank's thread keeps the trace in program order). `tensor.data` may be
  // null; dtype, shape and bytes are recorded. Under a control file that
  // dumps this boundary, the bytes are read from `tensor.data` (the very
  // bytes fingerprinted): a program that dumps passes them.
  Status RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor,
                           const Fingerprint& fingerprint, ExampleRange examples);
  // Convenience: DeclareBoundary + Record (interns on every call).
  Status Record(std::string_view name, trace::Phase phase, trace::Direction direction,
                const TensorRef& tensor, ExampleRange examples, OpKind kind = OpKind::kOther);

  // Where the program's loop starts, called once after the state is
  // registered and before the first BeginStep. Fresh run: 0. kContinue with
  // a checkpoint in the run: the trace is cut at the checkpoint, the state
  // restored, and the step after the checkpoint's returned. Under a control
  // file: the control's checkpoint is restored (or 0) and verification, if
  // asked, starts. NotFound for a control file's missing checkpoint.
  StatusOr<uint64_t> Resume();
  // Whether the program should checkpoint after `step` (its schedule, a stop
  // request, or the control file's steps).
  bool ShouldCheckpoint(uint64_t step) const;
  // Writes the registered state after `step` and records the trace position
  // to cut at on resume. Every rank calls it, threads or processes alike:
  // each writes its own shard, the replicated state is checked by digests
  // over the communicator, and rank 0 commits the checkpoint once every shard is
  // durable (docs/checkpoint-format.md). Call it after EndStep(step).
  Status Checkpoint(uint64_t step);
  // Whether the loop should stop after `step`: a stop was requested, or the
  // control file's last step is done.
  bool ShouldStop(uint64_t step) const;
  // Asks the loop to stop after the current step (async-signal-safe: a
  // SIGINT/SIGTERM handler may call it).
  void RequestStop();
  // The control file this session obeys; null when none.
  const ControlFile* control() const;

  Status BeginStep(uint64_t step);
  // STEP end record: the loss and the fingerprint of every registered
  // parameter buffer. With a communicator, the fingerprints of all ranks are
  // compared; a rank that differs gets an SDC EVENT record and the call
  // returns Divergence naming rank, step and both fingerprints. Parameters on
  // a device are fingerprinted on their stream and the record waits in
  // program order like a device boundary; only the SDC check waits for that
  // fingerprint (the ranks exchange it now).
  Status EndStep(uint64_t step, float loss);
  Status RecordEvent(trace::EventKind kind, std::string_view payload);

  uint64_t current_step() const;
  // Between BeginStep and EndStep of the same step. Hooks that record
  // whatever runs through a model (dgrr.torch's) record only then: a
  // forward pass outside a step (an evaluation between steps) is not part
  // of any step's record.
  bool in_step() const;
  // Index of the next trace record (what a checkpoint stores to cut at).
  // Records still waiting for a device fingerprint are not counted: Sync()
  // first for the position after everything recorded so far.
  uint64_t trace_position() const;
  // Records waiting for a device fingerprint (and those behind them).
  size_t records_waiting() const;
  const std::vector<SdcMismatch>& sdc_mismatches() const;

  // The first error of a recording that could not report it (an OpGuard
  // finishing in its destructor); EndStep and Close return it too.
  const Status& deferred_error() const;
  void DeferError(const Status& status);

  Status Flush();
  Status Sync();
  // Flushes and closes the trace; the trace is complete afterwards.
  Status Close();

 private:
  // Everything else (the trace writer, the records waiting for a device,
  // the control file's state, the checkpoint machinery) is in runtime/session.cc.
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgrr
