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
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "fingerprint/async_fingerprint.h"
#include "fingerprint/tensor.h"
#include "rng/rng_streams.h"
#include "runtime/checkpoint_store.h"
#include "runtime/control_file.h"
#include "runtime/determinism.h"
#include "runtime/launch_record.h"
#include "runtime/rank_group.h"
#include "runtime/recording_mode.h"
#include "runtime/run_directory.h"
#include "runtime/state_registry.h"
#include "trace_format/record.h"

namespace dgrr {

namespace trace {
class TraceWriter;
}
class TraceCheck;
class HostStateCopy;

// Checks every record a session is about to append; a non-OK result stops
// the append and is returned to the caller. Replay uses it to compare a
// re-execution with the recorded trace as it goes (replay/trace_check.h).
class RecordCheck {
 public:
  virtual ~RecordCheck() = default;
  virtual Status CheckBoundary(const trace::BoundaryRecord& record, std::string_view name) = 0;
  virtual Status CheckStep(const trace::StepRecord& record) = 0;
};

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
  // The run directory's owner, when the program holds one (the trainer
  // does, locked, for the whole run): the session locks and cuts through it.
  // Null, or another directory than the one this session writes (a control
  // file's): the session makes its own over run_dir.
  RunDirectory* directory = nullptr;
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
  // Cross-rank fingerprint exchange for the per-step SDC check; null: no check.
  RankGroup* group = nullptr;
  // Apply the GPU controls (NCCL, cuBLAS). Default: when built with CUDA.
  std::optional<bool> gpu;
  // Tests substitute the environment; null: the real process environment.
  ProcessEnvironment* environment = nullptr;
  // Checks each BOUNDARY and STEP record before it is appended; null: none.
  RecordCheck* check = nullptr;
  // The session's device: fingerprints the device tensors passed to Record
  // (TensorRef::where) and the device parameters (StateEntry::where) on their
  // own streams, and copies device state and dumped tensors to and from the
  // host; null: a CUDA one is made on first use (MakeCudaFingerprinter).
  // Tests substitute their own.
  std::shared_ptr<AsyncFingerprinter> device_fingerprinter;

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
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionOptions& options() const { return options_; }
  int rank() const { return options_.rank; }
  RecordMode mode() const { return options_.mode; }
  const rng::RngStreams& rng() const { return rng_; }
  const DeterminismControls& controls() const { return controls_; }
  StateRegistry& state() { return state_; }
  const std::string& trace_path() const { return trace_path_; }
  uint64_t env_digest() const { return env_digest_; }
  uint64_t config_digest() const { return config_digest_; }

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
  // over the RankGroup, and rank 0 commits the checkpoint once every shard is
  // durable (docs/checkpoint-format.md). Call it after EndStep(step).
  Status Checkpoint(uint64_t step);
  // Whether the loop should stop after `step`: a stop was requested, or the
  // control file's last step is done.
  bool ShouldStop(uint64_t step) const;
  // Asks the loop to stop after the current step (async-signal-safe: a
  // SIGINT/SIGTERM handler may call it).
  void RequestStop() { stop_requested_.store(true, std::memory_order_relaxed); }
  // The control file this session obeys; null when none.
  const ControlFile* control() const { return control_ ? &*control_ : nullptr; }

  Status BeginStep(uint64_t step);
  // STEP end record: the loss and the fingerprint of every registered
  // parameter buffer. With a RankGroup, the fingerprints of all ranks are
  // compared; a rank that differs gets an SDC EVENT record and the call
  // returns Divergence naming rank, step and both fingerprints. Parameters on
  // a device are fingerprinted on their stream and the record waits in
  // program order like a device boundary; only the SDC check waits for that
  // fingerprint (the ranks exchange it now).
  Status EndStep(uint64_t step, float loss);
  Status RecordEvent(trace::EventKind kind, std::string_view payload);

  uint64_t current_step() const { return step_; }
  // Between BeginStep and EndStep of the same step. Hooks that record
  // whatever runs through a model (dgrr.torch's) record only then: a
  // forward pass outside a step (an evaluation between steps) is not part
  // of any step's record.
  bool in_step() const { return in_step_; }
  // Index of the next trace record (what a checkpoint stores to cut at).
  // Records still waiting for a device fingerprint are not counted: Sync()
  // first for the position after everything recorded so far.
  uint64_t trace_position() const;
  // Records waiting for a device fingerprint (and those behind them).
  size_t records_waiting() const { return waiting_.size(); }
  const std::vector<SdcMismatch>& sdc_mismatches() const { return sdc_mismatches_; }

  // The first error of a recording that could not report it (an OpGuard
  // finishing in its destructor); EndStep and Close return it too.
  const Status& deferred_error() const { return deferred_error_; }
  void DeferError(const Status& status) {
    if (deferred_error_.ok()) deferred_error_ = status;
  }

  Status Flush();
  Status Sync();
  // Flushes and closes the trace; the trace is complete afterwards.
  Status Close();

 private:
  explicit Session(const SessionOptions& options);
  Status Init();
  Status LoadControl();
  Status OpenTrace();
  Status WriteLaunchRecordIfFresh();
  Status WriteRunFiles();
  // The checkpoint at `path` ("": the run's newest good one), checked to fit
  // this session's world and configuration.
  StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadForRestore(const std::string& path);
  StatusOr<uint64_t> ResumeUnderControl();
  StatusOr<uint64_t> ContinueRun();
  Status CheckReplicatedStateAgrees(uint64_t step, const StateRegistry& state);
  // ckpt's state for this rank into the registered buffers (device ones
  // through a host copy).
  Status RestoreState(const LoadedCheckpoint& ckpt);
  // Device state copied into a host mirror of the registry (checkpoints and
  // restores go through it); errors are reported to the control file.
  StatusOr<std::unique_ptr<HostStateCopy>> CopyStateToHost();
  Status ExchangeShards(const StatusOr<CheckpointShard>& mine, std::vector<CheckpointShard>* shards);
  // kContinue refuses a directory holding another run (rank, world, seed in
  // the trace header; config.json when there is no checkpoint to check).
  Status CheckTraceBelongsToThisRun() const;
  Status CheckConfigIsThisRun() const;
  StatusOr<uint32_t> WriterNameId(uint32_t local_id);
  // Under a control file: notes a failure (or the first mismatch) in the
  // rank's result file before it is returned.
  Status Report(Status status);
  Status WriteResult();
  Status CaptureDump(const BoundaryHandle& boundary, const TensorRef& tensor, const Fingerprint& fp,
                     ExampleRange examples);
  Status WriteDumps(uint64_t step);
  bool ChecksSdc() const;
  Status CheckSdc(uint64_t step, const Fingerprint& mine);
  Status EndStepOnDevice(trace::StepRecord& record);
  // After the STEP record: the step's records to the kernel, the control
  // file's dumps, then the SDC check of `params` (nullopt: no check this step).
  Status FinishStep(uint64_t step, const std::optional<Fingerprint>& params);
  Status HandStepToKernel();
  bool DumpWanted(const BoundaryHandle& boundary) const;
  Status RecordDeviceDump(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                          AsyncFingerprinter::Ticket ticket, Fingerprint* out);
  Status AppendBoundary(const BoundaryHandle& boundary, const TensorRef& tensor,
                        const Fingerprint& fp, ExampleRange examples);
  // Records in program order: straight to the trace when nothing waits for
  // a device, behind the waiting ones otherwise.
  struct QueuedRecord {
    std::variant<trace::BoundaryRecord, trace::StepRecord, trace::EventRecord> record;
    uint32_t name_id = 0;  // a boundary's: the session's id of its name
    // A boundary waiting for its fingerprint, or a STEP end for its parameters'.
    std::optional<AsyncFingerprinter::Ticket> ticket;
  };
  // The record of `tensor` at `boundary` without its fingerprint; takes the
  // next sequence number.
  StatusOr<trace::BoundaryRecord> BoundaryRecordFor(const BoundaryHandle& boundary, const TensorRef& tensor,
                                                    ExampleRange examples);
  Status RecordDevice(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                      Fingerprint* out);
  StatusOr<AsyncFingerprinter*> DeviceFingerprinter();
  Status Emit(QueuedRecord record);
  Status Write(QueuedRecord& record);
  Status WriteBoundary(trace::BoundaryRecord& record, uint32_t name_id);
  // Appends the waiting records whose fingerprints are there, in order;
  // with `wait`, waits for each one (everything is written afterwards).
  Status DrainWaiting(bool wait);

  SessionOptions options_;
  rng::RngStreams rng_;
  DeterminismControls controls_;
  StateRegistry state_;
  std::unique_ptr<trace::TraceWriter> writer_;
  std::string trace_path_;
  uint64_t env_digest_ = 0;
  uint64_t config_digest_ = 0;
  uint64_t state_config_digest_ = 0;  // what checkpoints carry (state_config_json)
  std::string env_text_, config_text_;  // rank<R>.env.json and config.json, written with the trace
  uint64_t step_ = 0;
  bool in_step_ = false;
  uint64_t next_seq_ = 0;
  std::vector<SdcMismatch> sdc_mismatches_;
  // Boundary names by the session's own id (BoundaryHandle::name_id): the
  // writer's ids are assigned when a name is first written, so boundaries
  // can be declared before Resume() opens the trace.
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_ids_;  // name -> session id
  std::vector<int64_t> writer_ids_;  // session id -> writer id, -1 not yet interned
  Status deferred_error_;
  bool closed_ = false;
  bool resumed_ = false;
  std::atomic<bool> stop_requested_{false};
  std::optional<ControlFile> control_;
  ControlResult result_;
  std::unique_ptr<TraceCheck> trace_check_;
  // The run directory: options_.directory, or own_directory_ (made over
  // run_dir, whose lock the session then holds until Close).
  RunDirectory* directory_ = nullptr;
  std::unique_ptr<RunDirectory> own_directory_;
  struct PendingDump;
  std::vector<PendingDump> dumps_;
  std::shared_ptr<AsyncFingerprinter> device_fingerprinter_;
  std::deque<QueuedRecord> waiting_;
};

}  // namespace dgrr
