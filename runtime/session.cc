#include "runtime/session.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "base/coding.h"
#include "base/environment.h"
#include "base/file.h"
#include "base/kill_point.h"
#include "base/version.h"
#include "runtime/environment.h"
#include "runtime/host_state_copy.h"
#include "runtime/json_input.h"
#include "runtime/outlier_ranks.h"
#include "runtime/run_directory.h"
#include "runtime/session_seams.h"
#include "runtime/trace_check.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool IsZero(const RunId& id) {
  for (uint8_t b : id) {
    if (b != 0) return false;
  }
  return true;
}

Status CheckWritableDirectory(const std::string& dir) {
  DGRR_RETURN_IF_ERROR(CreateDirectories(dir));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::FromErrno("open run directory for writing", dir, errno);
  }
  return Status::OK();
}

Status NoCheckpointStore() {
  return Status::FailedPrecondition(
      "the session has no checkpoint store: open it with dgrr::Open (<dgrr/dgrr.h>) or set "
      "SessionOptions::checkpoints");
}

// The settings that differ between a recorded config.json and this session's
// configuration, as "key recorded -> now, ..." ("lr 0.03 -> 0.05, seed 1 ->
// 2"); "" when that file cannot be read (the caller's message still says the
// configurations differ).
std::string ConfigDifference(const std::string& recorded_path, const std::string& now_text) {
  auto text = ReadFileToString(recorded_path, uint64_t{1} << 20);
  if (!text.ok()) return "";
  auto recorded = ParseJson(*text, recorded_path);
  auto now = ParseJson(now_text, "session config");
  if (!recorded.ok() || !now.ok() || !recorded->is_object() || !now->is_object()) return "";
  std::string diff;
  auto add = [&](const std::string& key, const std::string& was, const std::string& is) {
    diff += (diff.empty() ? "" : ", ") + key + " " + was + " -> " + is;
  };
  for (const auto& [key, value] : recorded->items()) {
    const auto it = now->find(key);
    if (it == now->end()) {
      add(key, value.dump(), "(absent)");
    } else if (*it != value) {
      add(key, value.dump(), it->dump());
    }
  }
  for (const auto& [key, value] : now->items()) {
    if (!recorded->contains(key)) add(key, "(absent)", value.dump());
  }
  return diff;
}

}  // namespace

// Everything a session holds, behind Session's pointer (session.h shows only
// the API). The operations are the Session's own, forwarded at the end of
// this file; the rest are their helpers.
struct Session::Impl {
  Impl(const SessionOptions& options, const SessionSeams& seams)
      : options_(options), seams_(seams), rng_(options.seed) {
    comm_ = options.communicator;
    // Device state registers before the training loop: the device
    // fingerprinter is made then. Where that fails, the first device record
    // tries again and reports why.
    state_.set_first_device_entry_hook([this] { (void)DeviceFingerprinter(); });
  }

  // --- Session's operations (documented in session.h) ---
  Status LoadControl();
  Status Init();
  StatusOr<BoundaryHandle> DeclareBoundary(std::string_view name, trace::Phase phase, trace::Direction direction,
                                           OpKind kind);
  Status Record(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                Fingerprint* out = nullptr);
  Status RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor, const Fingerprint& fingerprint,
                           ExampleRange examples);
  Status Record(std::string_view name, trace::Phase phase, trace::Direction direction, const TensorRef& tensor,
                ExampleRange examples, OpKind kind);
  StatusOr<uint64_t> Resume();
  bool ShouldCheckpoint(uint64_t step) const;
  Status Checkpoint(uint64_t step);
  bool ShouldStop(uint64_t step) const;
  Status BeginStep(uint64_t step);
  Status EndStep(uint64_t step, float loss);
  Status RecordEvent(trace::EventKind kind, std::string_view payload);
  uint64_t trace_position() const;
  Status Flush();
  Status Sync();
  Status Close();

  // --- Helpers ---
  Status OpenTrace();
  Status WriteLaunchRecordIfFresh();
  Status WriteRunFiles();
  // The checkpoint at `path` ("": the run's newest good one), checked to fit
  // this session's world and configuration.
  StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadForRestore(const std::string& path,
                                                             uint64_t max_step = UINT64_MAX);
  // Whether this rank decides with others (a communicator of several ranks).
  bool Collective() const { return options_.world_size > 1 && comm_ != nullptr; }
  // Every rank's verdict on one question about `at`: each passes its own
  // (`mine`); OK when every rank's is OK, else its own error or one naming
  // the first rank that failed, `failed` saying what it could not do, with
  // that rank's code (so that every rank decides alike). Without other
  // ranks, `mine`. Every rank calls it the same number of times, in order.
  Status AgreeAcrossRanks(const std::string& at, const Status& mine, const std::string& failed);
  StatusOr<uint64_t> ResumeUnderControl();
  StatusOr<uint64_t> ContinueRun();
  Status CheckReplicatedStateAgrees(uint64_t step, const StateRegistry& state,
                                    std::map<std::string, uint64_t>* xxh3_of);
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

  // A control file's dump request as this rank follows it.
  struct PendingDump {
    ControlDump request;
    std::string path;                    // with {rank} replaced
    std::vector<CapturedTensor> tensors;  // captured so far
    bool written = false;
  };

  SessionOptions options_;
  // The rank's communicator (SessionOptions::communicator; null without
  // one), over which the session makes its own few cross-rank exchanges:
  // the run id, the per-step SDC check, the resume's and a checkpoint's
  // agreements, each an all-gather of one small value per rank (AllGather).
  Communicator* comm_ = nullptr;
  // One trivially copyable value per rank, `all` indexed by rank. Copied as
  // native bytes: the ranks of one job share an architecture, and the values
  // are only used within the job, never stored.
  template <typename T>
  Status AllGather(const T& mine, std::vector<T>* all) {
    static_assert(std::is_trivially_copyable_v<T>);
    all->assign(static_cast<size_t>(comm_->size()), T{});
    return comm_->AllGather(&mine, sizeof(T), all->data());
  }
  // The seams; check is also set by a control file that verifies.
  SessionSeams seams_;
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
  // The run directory: seams_.directory, or own_directory_ (made over
  // run_dir, whose lock the session then holds until Close).
  RunDirectory* directory_ = nullptr;
  std::unique_ptr<RunDirectory> own_directory_;
  std::vector<PendingDump> dumps_;
  std::shared_ptr<AsyncFingerprinter> device_fingerprinter_;
  std::deque<QueuedRecord> waiting_;
};

RunId NewRunId() {
  RunId id{};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = ::read(fd, id.data(), id.size());
    ::close(fd);
    if (n == static_cast<ssize_t>(id.size()) && !IsZero(id)) return id;
  }
  // No /dev/urandom: time and pid are unique enough for a run label.
  EncodeFixed64(id.data(), NowNs());
  EncodeFixed64(id.data() + 8, static_cast<uint64_t>(::getpid()) | (1ull << 63));
  return id;
}

std::string RunIdHex(const RunId& id) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : id) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Session::~Session() {
  if (!impl_->closed_) (void)impl_->Close();
}

StatusOr<std::unique_ptr<Session>> Session::Open(const SessionOptions& options) {
  return Open(options, SessionSeams{});
}

StatusOr<std::unique_ptr<Session>> Session::Open(const SessionOptions& options, const SessionSeams& seams) {
  if (options.run_dir.empty()) return Status::InvalidArgument("session needs a run directory");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is outside a world of size " +
                                   std::to_string(options.world_size));
  }
  if (options.communicator != nullptr &&
      (options.communicator->size() != options.world_size || options.communicator->rank() != options.rank)) {
    return Status::InvalidArgument("the session is rank " + std::to_string(options.rank) + " of " +
                                   std::to_string(options.world_size) + " but its communicator is rank " +
                                   std::to_string(options.communicator->rank()) + " of " +
                                   std::to_string(options.communicator->size()));
  }
  std::unique_ptr<Session> session(new Session(std::make_unique<Impl>(options, seams)));
  Impl& impl = *session->impl_;
  DGRR_RETURN_IF_ERROR(impl.LoadControl());
  Status init = impl.Init();
  if (!init.ok()) return impl.Report(init);
  return session;
}

Status Session::Impl::LoadControl() {
  if (!options_.reexecutable) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(std::optional<ControlFile> active, ReadActiveControl());
  if (!active) return Status::OK();
  ControlFile control = std::move(*active);
  // The control decides where and how this execution records; the program's
  // own choices describe the recorded run, not this one.
  options_.run_dir = control.run_dir;
  if (control.mode) options_.mode = *control.mode;
  options_.open_mode = OpenMode::kCreate;
  result_.rank = options_.rank;
  for (const ControlDump& d : control.dumps) {
    if (d.rank && *d.rank != options_.rank) continue;
    PendingDump pending;
    pending.request = d;
    pending.path = d.path;
    const size_t at = pending.path.find("{rank}");
    if (at != std::string::npos) pending.path.replace(at, 6, std::to_string(options_.rank));
    dumps_.push_back(std::move(pending));
  }
  control_ = std::move(control);
  return Status::OK();
}

Status Session::Impl::Init() {
  // Controls first: NCCL and cuBLAS read their settings when they initialise.
  DeterminismOptions det;
  det.threads = options_.threads;
  det.gpu = options_.gpu.value_or(DGRR_HAVE_CUDA_BUILD != 0);
  ProcessEnvironment& env =
      seams_.environment ? *seams_.environment : RealProcessEnvironment();
  // setenv and getenv are not thread-safe against each other, and ranks often
  // open their sessions from parallel threads: the process-wide environment
  // lock (base/environment.h) covers applying the controls (the first session
  // sets them, later ones only read) and collecting the environment (the CUDA
  // runtime reads variables too).
  auto environment_lock = LockEnvironment();
  DGRR_ASSIGN_OR_RETURN(controls_, DeterminismControls::Apply(det, env));

  // The caller's argument, not a file: a bad one is a usage error.
  auto parsed = ParseJson(options_.config_json, "session config");
  if (!parsed.ok()) return Status::InvalidArgument(parsed.status().message());
  const nlohmann::json config = std::move(parsed).value();
  const std::string canonical_config = config.dump();
  config_digest_ = Xxh3(canonical_config.data(), canonical_config.size());
  state_config_digest_ = config_digest_;
  if (!options_.state_config_json.empty()) {
    auto state_config = ParseJson(options_.state_config_json, "session state config");
    if (!state_config.ok()) return Status::InvalidArgument(state_config.status().message());
    const std::string canonical_state = state_config->dump();
    state_config_digest_ = Xxh3(canonical_state.data(), canonical_state.size());
  }

  DGRR_RETURN_IF_ERROR(CheckWritableDirectory(options_.run_dir));
  if (seams_.directory != nullptr && seams_.directory->path() == options_.run_dir) {
    directory_ = seams_.directory;
  } else {
    own_directory_ = std::make_unique<RunDirectory>(options_.run_dir);
    directory_ = own_directory_.get();
  }
  // One writer per run: rank 0 holds the directory's lock for the session's
  // life (the other ranks are its peers, not rival writers). Programs that
  // manage their directory themselves (kCreate, kOverwrite, kResume) lock it
  // themselves, as `dgrr train` does (a directory already locked by its
  // owner stays so).
  if (options_.rank == 0 && (options_.open_mode == OpenMode::kContinue || control_)) {
    DGRR_RETURN_IF_ERROR(directory_->Lock());
  }
  trace_path_ = TracePathFor(options_.run_dir, options_.rank);
  const bool exists = PathExists(trace_path_);
  if (options_.open_mode == OpenMode::kCreate && exists) {
    return Status::FailedPrecondition(trace_path_ +
                                      " already exists: pass overwrite or resume explicitly");
  }
  if (options_.open_mode == OpenMode::kResume && !exists) {
    return Status::NotFound(trace_path_ + ": no trace to resume");
  }

  nlohmann::json env_json = CollectEnvironment(controls_);
  environment_lock.unlock();
  if (!options_.program_info_json.empty()) {
    auto program = ParseJson(options_.program_info_json, "session program info");
    if (!program.ok() || !program->is_object()) {
      return Status::InvalidArgument("program_info_json must be a JSON object");
    }
    env_json["program"] = std::move(program).value();
  }
  env_digest_ = EnvironmentDigest(env_json);
  env_text_ = env_json.dump(2) + "\n";
  config_text_ = config.dump(2) + "\n";
  if (control_) DGRR_RETURN_IF_ERROR(WriteResult());
  // kContinue opens the trace in Resume(), once it knows whether to cut it,
  // and writes nothing before: a resume refused leaves the run as it was.
  if (options_.open_mode == OpenMode::kContinue) return Status::OK();
  DGRR_RETURN_IF_ERROR(OpenTrace());
  return WriteRunFiles();
}

Status Session::Impl::WriteRunFiles() {
  // The trace exists and is valid; the JSON files beside it are written
  // atomically, so each is either absent, the old one, or complete.
  DGRR_RETURN_IF_ERROR(WriteFileAtomicallyIfChanged(directory_->EnvPath(options_.rank), env_text_));
  if (options_.rank == 0) DGRR_RETURN_IF_ERROR(directory_->WriteConfig(config_text_));
  return WriteLaunchRecordIfFresh();
}

Status Session::Impl::WriteLaunchRecordIfFresh() {
  if (options_.rank != 0 || !options_.reexecutable) return Status::OK();
  if (options_.open_mode == OpenMode::kResume && PathExists(LaunchPathFor(options_.run_dir))) {
    return Status::OK();
  }
  LaunchRecord record;
  if (options_.launch) {
    record = *options_.launch;
  } else {
    DGRR_ASSIGN_OR_RETURN(record, CaptureLaunchRecord());
  }
  return WriteLaunchRecord(options_.run_dir, record);
}

Status Session::Impl::OpenTrace() {
  if (options_.open_mode == OpenMode::kResume) {
    DGRR_ASSIGN_OR_RETURN(writer_, trace::TraceWriter::OpenForAppend(trace_path_));
    const trace::TraceHeader& h = writer_->header();
    if (h.rank != static_cast<uint32_t>(options_.rank) ||
        h.world_size != static_cast<uint32_t>(options_.world_size) || h.seed != options_.seed) {
      return Status::FailedPrecondition(trace_path_ +
                                        ": trace belongs to a different rank, world size or seed");
    }
    options_.run_id = h.run_id;
    next_seq_ = writer_->next_seq();
    return Status::OK();
  }
  if (IsZero(options_.run_id)) {
    options_.run_id = NewRunId();
    // Ranks that are separate processes each drew their own id: the run's is
    // rank 0's, so that every trace header and checkpoint shard names one run.
    if (comm_ != nullptr && options_.world_size > 1) {
      std::vector<RunId> all;
      DGRR_RETURN_IF_ERROR(AllGather(options_.run_id, &all));
      options_.run_id = all[0];
    }
  }
  trace::TraceHeader header;
  header.run_id = options_.run_id;
  header.seed = options_.seed;
  header.rank = static_cast<uint32_t>(options_.rank);
  header.world_size = static_cast<uint32_t>(options_.world_size);
  header.config_digest = config_digest_;
  header.env_digest = env_digest_;
  header.created_unix_ns = NowNs();
  trace::TraceWriterOptions wopts;
  wopts.overwrite = options_.open_mode == OpenMode::kOverwrite ||
                    options_.open_mode == OpenMode::kContinue;
  DGRR_ASSIGN_OR_RETURN(writer_, trace::TraceWriter::Create(trace_path_, header, wopts));
  return Status::OK();
}

StatusOr<BoundaryHandle> Session::Impl::DeclareBoundary(std::string_view name, trace::Phase phase,
                                                        trace::Direction direction, OpKind kind) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (name.size() > trace::kMaxNameLength) {
    return Status::InvalidArgument("boundary name of " + std::to_string(name.size()) +
                                   " bytes exceeds the trace format's limit of " +
                                   std::to_string(trace::kMaxNameLength));
  }
  BoundaryHandle h;
  h.phase = phase;
  h.direction = direction;
  h.kind = kind;
  h.recorded = ShouldRecordBoundary(options_.mode, phase, kind);
  if (!dumps_.empty()) {
    // A boundary a dump asks for is recorded whatever the mode, so that its
    // bytes pass through Record.
    for (const PendingDump& d : dumps_) h.recorded = h.recorded || d.request.boundary == name;
  }
  if (h.recorded) {
    const auto [it, added] = name_ids_.try_emplace(std::string(name), static_cast<uint32_t>(names_.size()));
    h.name_id = it->second;
    if (added) {
      names_.emplace_back(name);
      writer_ids_.push_back(-1);
    }
  }
  return h;
}

StatusOr<uint32_t> Session::Impl::WriterNameId(uint32_t local_id) {
  if (local_id >= names_.size()) return Status::InvalidArgument("boundary handle from another session");
  int64_t& id = writer_ids_[local_id];
  if (id < 0) {
    DGRR_ASSIGN_OR_RETURN(uint32_t assigned, writer_->InternName(names_[local_id]));
    id = assigned;
  }
  return static_cast<uint32_t>(id);
}

Status Session::Impl::Record(const BoundaryHandle& boundary, const TensorRef& tensor,
                             ExampleRange examples, Fingerprint* out) {
  if (!boundary.recorded && out == nullptr) return Status::OK();
  DGRR_RETURN_IF_ERROR(tensor.Validate());
  if (!tensor.where.host()) return RecordDevice(boundary, tensor, examples, out);
  const Fingerprint fp = FingerprintBytes(tensor.data, tensor.bytes);
  if (out != nullptr) *out = fp;
  if (!boundary.recorded) return Status::OK();
  if (!dumps_.empty()) DGRR_RETURN_IF_ERROR(CaptureDump(boundary, tensor, fp, examples));
  return AppendBoundary(boundary, tensor, fp, examples);
}

Status Session::Impl::RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor,
                                        const Fingerprint& fingerprint, ExampleRange examples) {
  if (!boundary.recorded) return Status::OK();
  TensorRef meta = tensor;
  if (meta.data == nullptr) meta.data = &meta;  // only the metadata is checked, never read
  DGRR_RETURN_IF_ERROR(meta.Validate());
  if (!dumps_.empty()) DGRR_RETURN_IF_ERROR(CaptureDump(boundary, tensor, fingerprint, examples));
  return AppendBoundary(boundary, tensor, fingerprint, examples);
}

StatusOr<trace::BoundaryRecord> Session::Impl::BoundaryRecordFor(const BoundaryHandle& boundary,
                                                                 const TensorRef& tensor, ExampleRange examples) {
  trace::BoundaryRecord r;
  uint64_t dims[kMaxTensorDims];
  const auto shape = tensor.shape();
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = static_cast<uint64_t>(shape[i]);
  DGRR_RETURN_IF_ERROR(trace::SetShape(&r, dims, shape.size()));
  r.step = step_;
  r.seq = next_seq_++;
  r.phase = boundary.phase;
  r.direction = boundary.direction;
  r.dtype = tensor.dtype;
  r.rank = static_cast<uint32_t>(options_.rank);
  r.byte_count = tensor.bytes;
  r.first_example = examples.first;
  r.example_count = examples.count;
  r.host_time_ns = NowNs();
  return r;
}

Status Session::Impl::AppendBoundary(const BoundaryHandle& boundary, const TensorRef& tensor,
                                     const Fingerprint& fp, ExampleRange examples) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (!writer_) return Report(Status::FailedPrecondition("call Resume() before recording: the trace opens there"));
  DGRR_ASSIGN_OR_RETURN(trace::BoundaryRecord r, BoundaryRecordFor(boundary, tensor, examples));
  r.xor64 = fp.xor64;
  r.xxh3 = fp.xxh3;
  // The hot path: nothing waits for a device, so straight to the writer.
  if (waiting_.empty()) return WriteBoundary(r, boundary.name_id);
  return Emit({r, boundary.name_id, std::nullopt});
}

// A device tensor's record: its fingerprint is enqueued on the tensor's
// stream and the record waits, in program order, until the stream gets there.
Status Session::Impl::RecordDevice(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                                   Fingerprint* out) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (!writer_) return Report(Status::FailedPrecondition("call Resume() before recording: the trace opens there"));
  DGRR_ASSIGN_OR_RETURN(AsyncFingerprinter * fingerprinter, DeviceFingerprinter());
  DGRR_ASSIGN_OR_RETURN(AsyncFingerprinter::Ticket ticket, fingerprinter->Enqueue(tensor));
  if (boundary.recorded && DumpWanted(boundary)) return RecordDeviceDump(boundary, tensor, examples, ticket, out);
  if (out != nullptr) {
    // The caller wants the value now: that waits for the device (documented).
    DGRR_ASSIGN_OR_RETURN(*out, fingerprinter->Wait(ticket));
    if (!boundary.recorded) return Status::OK();
    return AppendBoundary(boundary, tensor, *out, examples);
  }
  DGRR_ASSIGN_OR_RETURN(trace::BoundaryRecord r, BoundaryRecordFor(boundary, tensor, examples));
  waiting_.push_back({r, boundary.name_id, ticket});
  return DrainWaiting(/*wait=*/false);
}

bool Session::Impl::DumpWanted(const BoundaryHandle& boundary) const {
  for (const PendingDump& d : dumps_) {
    if (!d.written && d.request.step == step_ && d.request.boundary == names_[boundary.name_id]) return true;
  }
  return false;
}

// A boundary the control file dumps: its bytes come to the host on the
// tensor's stream, behind its fingerprint, and this waits for them (a dump
// belongs to a re-execution, never to the recording path of a training run).
// The dump carries the device's fingerprint, as the trace does.
Status Session::Impl::RecordDeviceDump(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                                       AsyncFingerprinter::Ticket ticket, Fingerprint* out) {
  std::vector<uint8_t> bytes(tensor.bytes);
  const Status copied = device_fingerprinter_->CopyToHost(tensor.data, tensor.bytes, tensor.where, bytes.data());
  StatusOr<Fingerprint> waited = device_fingerprinter_->Wait(ticket);  // collected either way: no slot left in flight
  DGRR_RETURN_IF_ERROR(Report(copied));
  if (!waited.ok()) return Report(waited.status());
  const Fingerprint fp = *waited;
  if (out != nullptr) *out = fp;
  TensorRef on_host = tensor;
  on_host.data = bytes.data();
  on_host.where = Placement::Host();
  DGRR_RETURN_IF_ERROR(CaptureDump(boundary, on_host, fp, examples));
  return AppendBoundary(boundary, tensor, fp, examples);
}

StatusOr<AsyncFingerprinter*> Session::Impl::DeviceFingerprinter() {
  if (!device_fingerprinter_) device_fingerprinter_ = seams_.device_fingerprinter;
  if (!device_fingerprinter_) {
    DGRR_ASSIGN_OR_RETURN(std::unique_ptr<AsyncFingerprinter> made, MakeCudaFingerprinter());
    device_fingerprinter_ = std::move(made);
  }
  return device_fingerprinter_.get();
}

Status Session::Impl::Emit(QueuedRecord record) {
  if (waiting_.empty()) return Write(record);
  waiting_.push_back(std::move(record));
  return DrainWaiting(/*wait=*/false);
}

// Where records reach the writer. Names are interned here, so a NAME record
// lands right before the first record that uses it, in order.
Status Session::Impl::WriteBoundary(trace::BoundaryRecord& r, uint32_t name_id) {
  DGRR_ASSIGN_OR_RETURN(r.name_id, WriterNameId(name_id));
  if (seams_.check != nullptr) DGRR_RETURN_IF_ERROR(Report(seams_.check->CheckBoundary(r, names_[name_id])));
  return writer_->AppendBoundary(r);
}

Status Session::Impl::Write(QueuedRecord& q) {
  if (auto* r = std::get_if<trace::BoundaryRecord>(&q.record)) return WriteBoundary(*r, q.name_id);
  if (auto* r = std::get_if<trace::StepRecord>(&q.record)) {
    if (seams_.check != nullptr && r->kind == trace::StepKind::kEnd) {
      DGRR_RETURN_IF_ERROR(Report(seams_.check->CheckStep(*r)));
    }
    return writer_->AppendStep(*r);
  }
  return writer_->AppendEvent(std::get<trace::EventRecord>(q.record));
}

Status Session::Impl::DrainWaiting(bool wait) {
  while (!waiting_.empty()) {
    QueuedRecord& front = waiting_.front();
    if (front.ticket) {
      Fingerprint fp;
      if (wait) {
        DGRR_ASSIGN_OR_RETURN(fp, device_fingerprinter_->Wait(*front.ticket));
      } else {
        DGRR_ASSIGN_OR_RETURN(std::optional<Fingerprint> ready, device_fingerprinter_->Poll(*front.ticket));
        if (!ready) return Status::OK();
        fp = *ready;
      }
      if (auto* b = std::get_if<trace::BoundaryRecord>(&front.record)) {
        b->xor64 = fp.xor64;
        b->xxh3 = fp.xxh3;
      } else if (auto* step_end = std::get_if<trace::StepRecord>(&front.record)) {
        step_end->params_xor64 = fp.xor64;  // the parameters' fingerprint
        step_end->params_xxh3 = fp.xxh3;
      }
      front.ticket.reset();
    }
    QueuedRecord record = std::move(front);
    waiting_.pop_front();
    DGRR_RETURN_IF_ERROR(Write(record));
  }
  return Status::OK();
}

Status Session::Impl::Record(std::string_view name, trace::Phase phase, trace::Direction direction,
                             const TensorRef& tensor, ExampleRange examples, OpKind kind) {
  DGRR_ASSIGN_OR_RETURN(BoundaryHandle h, DeclareBoundary(name, phase, direction, kind));
  return Record(h, tensor, examples);
}

Status Session::Impl::BeginStep(uint64_t step) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (!writer_ || (control_ && !resumed_)) {
    // Under a control file the refusal is the re-execution's result: the
    // re-executor says it in its one line (a program that skips Resume()
    // and ends quietly would otherwise look "completed").
    return Report(Status::FailedPrecondition("call Resume() before the first step: it says where the run starts"));
  }
  step_ = step;
  in_step_ = true;
  if (options_.mode == RecordMode::kOff) return Status::OK();
  trace::StepRecord r;
  r.step = step;
  r.kind = trace::StepKind::kBegin;
  r.host_time_ns = NowNs();
  return Emit({r, 0, std::nullopt});
}

Status Session::Impl::EndStep(uint64_t step, float loss) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (step != step_) {
    return Status::InvalidArgument("EndStep(" + std::to_string(step) + ") does not match BeginStep(" +
                                   std::to_string(step_) + ")");
  }
  in_step_ = false;
  DGRR_RETURN_IF_ERROR(deferred_error_);
  if (options_.mode == RecordMode::kOff) return Status::OK();
  trace::StepRecord r;
  r.step = step;
  r.kind = trace::StepKind::kEnd;
  r.host_time_ns = NowNs();
  r.loss_dtype = DType::kF32;
  r.loss_bits = FloatBits(loss);
  if (!state_.parameter_placement().host()) return EndStepOnDevice(r);
  const Fingerprint params = state_.ParameterFingerprint();
  r.params_xor64 = params.xor64;
  r.params_xxh3 = params.xxh3;
  DGRR_RETURN_IF_ERROR(Emit({r, 0, std::nullopt}));
  return FinishStep(step, params);
}

namespace {

// When the last progress line of a re-execution was printed (steady clock, ns;
// one per process: only rank 0's session prints).
std::atomic<int64_t> g_last_progress_ns{0};

// A re-execution's progress, on stderr, which is the program's output the
// re-executor reads (dgrr rollback shows these lines as its own,
// docs/rollback.md): "dgrr: re-executed step N[, verified against the
// traces]" at the first step, then every few seconds, and at the control's
// last step.
void ReportReexecutionProgress(const ControlFile& control, bool first, uint64_t step) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const bool last = control.stop_after_step && step == *control.stop_after_step;
  if (!first && !last && now - g_last_progress_ns.load() < int64_t{3'000'000'000}) return;
  g_last_progress_ns.store(now);
  std::fprintf(stderr, "dgrr: re-executed step %llu%s\n", static_cast<unsigned long long>(step),
               control.verify_run_dir.empty() ? "" : ", verified against the traces");
  std::fflush(stderr);
}

}  // namespace

// A completed step's records go to the kernel (write(2), no fsync) before
// EndStep returns, so a process killed after it keeps the whole step in its
// trace: a kill loses at most the step in flight. Records still waiting for a
// device fingerprint follow once they are ready (the next drain), as they
// would without this: nothing here waits for a device.
Status Session::Impl::HandStepToKernel() { return Report(writer_->Flush()); }

Status Session::Impl::FinishStep(uint64_t step, const std::optional<Fingerprint>& params) {
  DGRR_RETURN_IF_ERROR(HandStepToKernel());
  if (control_) {
    if (options_.rank == 0) ReportReexecutionProgress(*control_, !result_.last_step, step);
    result_.last_step = step;
  }
  if (!dumps_.empty()) DGRR_RETURN_IF_ERROR(Report(WriteDumps(step)));
  return params ? CheckSdc(step, *params) : Status::OK();
}

// Parameters on a device: one fingerprint over all of them, enqueued on
// their stream behind the step's updates. The STEP record waits for it in
// program order like a device boundary, unless the SDC check needs the value
// now: the exchange across ranks waits for this one fingerprint's event.
Status Session::Impl::EndStepOnDevice(trace::StepRecord& r) {
  StatusOr<AsyncFingerprinter*> device = DeviceFingerprinter();
  if (!device.ok()) return Report(device.status());
  const std::vector<MemorySegment> segments = state_.ParameterSegments();
  StatusOr<AsyncFingerprinter::Ticket> ticket = (*device)->EnqueueSegments(segments, state_.parameter_placement());
  if (!ticket.ok()) return Report(ticket.status());
  if (!ChecksSdc()) {
    waiting_.push_back({r, 0, *ticket});
    DGRR_RETURN_IF_ERROR(DrainWaiting(/*wait=*/false));
    return FinishStep(r.step, std::nullopt);
  }
  StatusOr<Fingerprint> waited = (*device)->Wait(*ticket);
  if (!waited.ok()) return Report(waited.status());
  const Fingerprint params = *waited;
  r.params_xor64 = params.xor64;
  r.params_xxh3 = params.xxh3;
  DGRR_RETURN_IF_ERROR(Emit({r, 0, std::nullopt}));
  return FinishStep(r.step, params);
}

bool Session::Impl::ChecksSdc() const { return comm_ != nullptr && options_.world_size >= 2; }

Status Session::Impl::CheckSdc(uint64_t step, const Fingerprint& mine) {
  if (!ChecksSdc()) return Status::OK();
  std::vector<Fingerprint> all;
  DGRR_RETURN_IF_ERROR(AllGather(mine, &all));
  const std::vector<int> outliers = OutlierRanks(all);
  if (outliers.empty()) return Status::OK();
  // The reference is what the non-outlier ranks agree on.
  Fingerprint reference = mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (std::find(outliers.begin(), outliers.end(), static_cast<int>(r)) == outliers.end()) {
      reference = all[r];
      break;
    }
  }
  std::string message;
  for (int bad : outliers) {
    SdcMismatch m{step, bad, all[static_cast<size_t>(bad)], reference};
    sdc_mismatches_.push_back(m);
    std::string line = "rank=" + std::to_string(bad) + " xor64=" + Hex64(m.rank_fingerprint.xor64) +
                       " xxh3=" + Hex64(m.rank_fingerprint.xxh3);
    DGRR_RETURN_IF_ERROR(RecordEvent(trace::EventKind::kSdcMismatch, line));
    if (!message.empty()) message += "; ";
    message += "rank " + std::to_string(bad) + " holds xor64 " + Hex64(m.rank_fingerprint.xor64) +
               " xxh3 " + Hex64(m.rank_fingerprint.xxh3);
  }
  return Status::Divergence("silent data corruption suspected after step " + std::to_string(step) +
                            ": parameters differ across ranks: " + message + " where the others hold xor64 " +
                            Hex64(reference.xor64) + " xxh3 " + Hex64(reference.xxh3));
}

Status Session::Impl::RecordEvent(trace::EventKind kind, std::string_view payload) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (!writer_) return Report(Status::FailedPrecondition("call Resume() before recording: the trace opens there"));
  if (options_.mode == RecordMode::kOff) return Status::OK();
  trace::EventRecord e;
  e.step = step_;
  e.kind = kind;
  e.host_time_ns = NowNs();
  e.payload = std::string(payload.substr(0, trace::kMaxEventPayload));
  return Emit({std::move(e), 0, std::nullopt});
}

uint64_t Session::Impl::trace_position() const { return writer_ ? writer_->records_written() : 0; }

// Flush, Sync and Close make the trace whole: they wait for the records
// still waiting for a device fingerprint.
Status Session::Impl::Flush() {
  if (!writer_) return Status::OK();
  DGRR_RETURN_IF_ERROR(DrainWaiting(/*wait=*/true));
  return writer_->Flush();
}

Status Session::Impl::Sync() {
  if (!writer_) return Status::OK();
  DGRR_RETURN_IF_ERROR(DrainWaiting(/*wait=*/true));
  return writer_->Sync();
}

Status Session::Impl::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  Status s = writer_ ? DrainWaiting(/*wait=*/true) : Status::OK();
  if (writer_) {
    Status closed = writer_->Close();
    if (s.ok()) s = closed;
  }
  if (!deferred_error_.ok()) s = deferred_error_;
  if (control_ && result_.outcome == ControlOutcome::kRunning) {
    for (const PendingDump& d : dumps_) {
      if (!d.written && s.ok()) {
        s = Status::FailedPrecondition("dump of " + d.request.boundary + " at step " +
                                       std::to_string(d.request.step) + ": the boundary was not recorded at that step");
      }
    }
    result_.outcome = s.ok() ? ControlOutcome::kCompleted : ControlOutcome::kFailed;
    result_.message = s.ok() ? "" : s.ToString();
    if (!s.ok()) result_.failure_code = s.code();
    if (trace_check_) {
      result_.boundaries_verified = trace_check_->boundaries_verified();
      result_.steps_verified = trace_check_->steps_verified();
    }
    Status w = WriteResult();
    if (s.ok()) s = w;
  }
  if (own_directory_) own_directory_->Unlock();
  return s;
}

// --- Resume, checkpoints, stops and the control file ---

StatusOr<uint64_t> Session::Impl::Resume() {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (resumed_) return Status::FailedPrecondition("Resume() is called once, before the first step");
  StatusOr<uint64_t> start = control_ ? ResumeUnderControl() : ContinueRun();
  if (!start.ok()) return Report(start.status());
  resumed_ = true;
  return start;
}

Status Session::Impl::AgreeAcrossRanks(const std::string& at, const Status& mine, const std::string& failed) {
  if (!Collective()) return mine;
  const uint8_t code = static_cast<uint8_t>(mine.code());
  std::vector<uint8_t> all;
  DGRR_RETURN_IF_ERROR(AllGather(code, &all));
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == static_cast<uint8_t>(StatusCode::kOk)) continue;
    // Its code, so that every rank decides alike (NotFound: start afresh).
    const std::string msg =
        at + ": rank " + std::to_string(r) + " " + failed + " (rank " + std::to_string(r) + "'s error says why)";
    switch (static_cast<StatusCode>(all[r])) {
      case StatusCode::kNotFound: return Status::NotFound(msg);
      case StatusCode::kIOError: return Status::IOError(msg);
      case StatusCode::kInvalidArgument: return Status::InvalidArgument(msg);
      case StatusCode::kFailedPrecondition: return Status::FailedPrecondition(msg);
      case StatusCode::kInternal: return Status::Internal(msg);
      default: return Status::Corruption(msg);
    }
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<LoadedCheckpoint>> Session::Impl::LoadForRestore(const std::string& path,
                                                                          uint64_t max_step) {
  if (options_.checkpoints == nullptr) return NoCheckpointStore();
  std::unique_ptr<LoadedCheckpoint> ckpt;
  if (Collective()) {
    // Each rank reads and verifies its own part; the ranks then agree on
    // every checkpoint tried, so all of them resume, fall back or fail as one.
    CheckpointStore::Agreement agree = [this](const std::string& at, const Status& mine) -> Status {
      return AgreeAcrossRanks(at, mine, "could not read its part of this checkpoint");
    };
    if (path.empty()) {
      DGRR_ASSIGN_OR_RETURN(ckpt, options_.checkpoints->FindNewestForRank(options_.run_dir, options_.resume_fallback,
                                                                          options_.rank, agree, max_step));
    } else {
      DGRR_ASSIGN_OR_RETURN(ckpt, options_.checkpoints->LoadForRank(path, options_.rank, agree));
    }
  } else if (path.empty()) {
    DGRR_ASSIGN_OR_RETURN(ckpt, options_.checkpoints->FindNewest(options_.run_dir, options_.resume_fallback, max_step));
  } else {
    DGRR_ASSIGN_OR_RETURN(ckpt, options_.checkpoints->Load(path));
  }
  if (ckpt->world_size() != options_.world_size) {
    // Under torchrun or mpirun: the job was started with another number of
    // processes than the run was recorded with.
    return Status::FailedPrecondition(ckpt->path() + ": the run was recorded at world size " +
                                      std::to_string(ckpt->world_size()) + ", this resume has world size " +
                                      std::to_string(options_.world_size) +
                                      ": resume it with the world size it was recorded at, or use another "
                                      "run directory");
  }
  if (ckpt->config_digest() != state_config_digest_) {
    // The checkpoint's run: RUN/ckpt/step-N.h5 beside RUN/config.json.
    const std::string diff = ConfigDifference(
        (std::filesystem::path(ckpt->path()).parent_path().parent_path() / "config.json").string(), config_text_);
    return Status::FailedPrecondition(
        ckpt->path() + ": written by a run with another configuration" +
        (diff.empty() ? std::string() : " (" + diff + ")") + " (config digest " +
        Hex64(ckpt->config_digest()) + ", this run's " + Hex64(state_config_digest_) +
        "): run it with the recorded settings, or start a new run directory");
  }
  return ckpt;
}

StatusOr<uint64_t> Session::Impl::ContinueRun() {
  // kCreate, kOverwrite and kResume: the program positions its own trace.
  if (options_.open_mode != OpenMode::kContinue) return uint64_t{0};
  auto start_fresh = [&]() -> StatusOr<uint64_t> {
    DGRR_RETURN_IF_ERROR(OpenTrace());  // kContinue: replaces a trace left without a checkpoint
    DGRR_RETURN_IF_ERROR(WriteRunFiles());
    return uint64_t{0};
  };
  // The ranks of a job decide together, taking the same exchanges in the
  // same order, so that they all resume from one checkpoint or all start
  // afresh; nothing in the directory changes before they have agreed.
  const bool have_trace = PathExists(trace_path_);
  bool any_trace = have_trace;
  if (Collective()) {
    std::vector<uint8_t> all;
    DGRR_RETURN_IF_ERROR(AllGather(static_cast<uint8_t>(have_trace ? 1 : 0), &all));
    any_trace = std::find(all.begin(), all.end(), uint8_t{1}) != all.end();
  }
  if (!any_trace) return start_fresh();
  // Before anything is read: no unfinished rollback, somewhere to restore
  // from.
  Status ready = Status::OK();
  if (directory_->HasPendingRollback()) {
    ready = Status::FailedPrecondition(options_.run_dir +
                                       " has an unfinished rollback: run the same `dgrr rollback` again to "
                                       "finish it, then resume");
  } else if (options_.checkpoints == nullptr) {
    ready = NoCheckpointStore();
  }
  DGRR_RETURN_IF_ERROR(AgreeAcrossRanks(options_.run_dir, ready, "cannot resume"));
  // Nothing in the directory changes until everything says it is this run.
  // The newest checkpoint that reads and verifies (the configuration it was
  // written by checked) and that every rank's trace still reaches: a trace
  // cut shorter since (an interrupted rollback, a user's truncation) does
  // not. Without resume_fallback a damaged or unreachable newest one is
  // refused; with it older ones are tried. The trace is read to its end
  // once, when there is a checkpoint to reach (a rank without a trace
  // reaches none that recorded something for it); then the trace header's
  // rank, world size and seed are checked.
  uint64_t max_step = UINT64_MAX;
  std::unique_ptr<LoadedCheckpoint> found;
  std::optional<TraceEnd> end;
  for (;;) {
    auto loaded = LoadForRestore("", max_step);
    if (loaded.status().code() == StatusCode::kNotFound) break;
    if (!loaded.ok()) return loaded.status();
    if (!end) {
      StatusOr<TraceEnd> scanned = TraceEnd{};
      if (have_trace) scanned = directory_->ScanTraceEnd(options_.rank);
      DGRR_RETURN_IF_ERROR(AgreeAcrossRanks(options_.run_dir, scanned.status(), "cannot read its trace"));
      end = std::move(scanned).value();
    }
    const std::string why = end->Unreachable(**loaded, options_.rank);
    const Status reached = AgreeAcrossRanks((*loaded)->path(), why.empty() ? Status::OK() : Status::Corruption(why),
                                            "does not reach it");
    if (reached.ok()) {
      found = std::move(loaded).value();
      break;
    }
    if (!options_.resume_fallback) {
      return Status::Corruption(reached.message() + " (pass --fallback to resume from an older checkpoint)");
    }
    if ((*loaded)->step() == 0) break;
    max_step = (*loaded)->step() - 1;
  }
  if (!found) {
    // A run killed before its first checkpoint (or one that never writes
    // any, or whose traces reach none) starts again from step 0, if it is
    // the same run.
    DGRR_RETURN_IF_ERROR(CheckConfigIsThisRun());
    if (have_trace) DGRR_RETURN_IF_ERROR(CheckTraceBelongsToThisRun());
    return start_fresh();
  }
  const LoadedCheckpoint& ckpt = *found;
  DGRR_RETURN_IF_ERROR(AgreeAcrossRanks(options_.run_dir,
                                        have_trace ? CheckTraceBelongsToThisRun() : Status::OK(),
                                        "holds a trace of another run"));
  // Restoring checks every entry before copying any: a program whose state
  // does not fit the checkpoint is refused, on every rank, before any trace
  // is cut.
  DGRR_RETURN_IF_ERROR(AgreeAcrossRanks(ckpt.path(), RestoreState(ckpt), "could not restore its state from it"));
  if (options_.rank == 0) DGRR_RETURN_IF_ERROR(directory_->RemoveTemporaries(*options_.checkpoints));
  DGRR_RETURN_IF_ERROR(directory_->CutTrace(options_.rank, ckpt));
  options_.open_mode = OpenMode::kResume;
  DGRR_RETURN_IF_ERROR(OpenTrace());
  DGRR_RETURN_IF_ERROR(WriteRunFiles());
  step_ = ckpt.step();
  DGRR_RETURN_IF_ERROR(RecordEvent(trace::EventKind::kResumed,
                                   "from the checkpoint of step " + std::to_string(ckpt.step())));
  return ckpt.step() + 1;
}

// State on a device is restored through a host copy, taken from the device
// first so that entries a program's own restorer leaves alone come back as
// they were.
Status Session::Impl::RestoreState(const LoadedCheckpoint& ckpt) {
  if (!state_.has_device_entries()) return ckpt.Restore(options_.rank, state_);
  StatusOr<std::unique_ptr<HostStateCopy>> host_copy = CopyStateToHost();
  if (!host_copy.ok()) return host_copy.status();
  DGRR_RETURN_IF_ERROR(ckpt.Restore(options_.rank, (*host_copy)->registry()));
  const Status copied_back = (*host_copy)->CopyBack();
  if (copied_back.ok()) return copied_back;
  // Entries before the failing one hold the checkpoint's values, the rest
  // their old ones: say so, since the program must not train on from here.
  return Report(copied_back.WithPrefix("device state only partly restored from the checkpoint of step " +
                                        std::to_string(ckpt.step())));
}

StatusOr<std::unique_ptr<HostStateCopy>> Session::Impl::CopyStateToHost() {
  StatusOr<AsyncFingerprinter*> device = DeviceFingerprinter();
  if (!device.ok()) return Report(device.status());
  StatusOr<std::unique_ptr<HostStateCopy>> made = HostStateCopy::Make(state_, **device);
  if (!made.ok()) return Report(made.status());
  return made;
}

Status Session::Impl::CheckTraceBelongsToThisRun() const {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(trace_path_));
  const trace::TraceHeader& h = reader->header();
  if (h.rank != static_cast<uint32_t>(options_.rank) ||
      h.world_size != static_cast<uint32_t>(options_.world_size) || h.seed != options_.seed) {
    return Status::FailedPrecondition(trace_path_ + ": recorded by rank " + std::to_string(h.rank) + " of " +
                                      std::to_string(h.world_size) + " with seed " + std::to_string(h.seed) +
                                      ", this is rank " + std::to_string(options_.rank) + " of " +
                                      std::to_string(options_.world_size) + " with seed " +
                                      std::to_string(options_.seed) + ": use another run directory");
  }
  return Status::OK();
}

Status Session::Impl::CheckConfigIsThisRun() const {
  const std::string path = ConfigPathFor(options_.run_dir);
  if (!PathExists(path)) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(nlohmann::json recorded, ReadJsonFile(path));
  DGRR_ASSIGN_OR_RETURN(nlohmann::json now, ParseJson(config_text_, "session config"));
  if (recorded == now) return Status::OK();
  const std::string diff = ConfigDifference(path, config_text_);
  return Status::FailedPrecondition(options_.run_dir + " holds a run of another configuration" +
                                    (diff.empty() ? std::string() : " (" + diff + ")") +
                                    " and no checkpoint to resume: use another run directory");
}

StatusOr<uint64_t> Session::Impl::ResumeUnderControl() {
  uint64_t start = 0;
  uint64_t first_record = 0;
  if (!control_->restore_checkpoint.empty()) {
    DGRR_ASSIGN_OR_RETURN(auto ckpt, LoadForRestore(control_->restore_checkpoint));
    DGRR_RETURN_IF_ERROR(RestoreState(*ckpt));
    start = ckpt->step() + 1;
    first_record = ckpt->trace_position(options_.rank);
    result_.restored_step = ckpt->step();
  }
  if (!control_->verify_run_dir.empty()) {
    DGRR_ASSIGN_OR_RETURN(trace_check_,
                          TraceCheck::Open(TracePathFor(control_->verify_run_dir, options_.rank), first_record));
    seams_.check = trace_check_.get();
  }
  DGRR_RETURN_IF_ERROR(WriteResult());
  return start;
}

bool Session::Impl::ShouldCheckpoint(uint64_t step) const {
  if (control_) {
    const auto& steps = control_->checkpoint_steps;
    if (std::find(steps.begin(), steps.end(), step) != steps.end()) return true;
    if (!control_->periodic_checkpoints) return false;
  }
  const uint64_t every = options_.checkpoint_every;
  if (every == 0) return false;
  if ((step + 1) % every == 0) return true;
  if (options_.total_steps != 0 && step + 1 == options_.total_steps) return true;
  return stop_requested_.load(std::memory_order_relaxed);
}

bool Session::Impl::ShouldStop(uint64_t step) const {
  if (stop_requested_.load(std::memory_order_relaxed)) return true;
  return control_ && control_->stop_after_step && step >= *control_->stop_after_step;
}

Status Session::Impl::Checkpoint(uint64_t step) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (options_.checkpoints == nullptr) return NoCheckpointStore();
  if (!writer_ || !resumed_) return Report(Status::FailedPrecondition("call Resume() before the first checkpoint"));
  if (step != step_) {
    return Status::InvalidArgument("Checkpoint(" + std::to_string(step) + ") after step " + std::to_string(step_) +
                                   ": checkpoint the step just ended");
  }
  DGRR_RETURN_IF_ERROR(Report(RecordEvent(trace::EventKind::kCheckpoint, "step " + std::to_string(step))));
  DGRR_RETURN_IF_ERROR(Report(Sync()));
  if (options_.world_size > 1 && comm_ == nullptr) {
    return Status::FailedPrecondition("a checkpoint of several ranks needs the session's communicator (SessionOptions::communicator)");
  }
  // State on a device is written from a host copy (a checkpoint waits anyway).
  std::unique_ptr<HostStateCopy> host_copy;
  const StateRegistry* state = &state_;
  if (state_.has_device_entries()) {
    StatusOr<std::unique_ptr<HostStateCopy>> made = CopyStateToHost();
    if (!made.ok()) return made.status();
    host_copy = std::move(made).value();
    state = &host_copy->registry();
  }
  // Every rank writes its own shard from its own memory, whether the ranks
  // are threads or processes; only digests and shard records cross between
  // them, and rank 0 commits once every shard is durable.
  std::map<std::string, uint64_t> replicated_xxh3;  // hashed once, for the check and the shard
  DGRR_RETURN_IF_ERROR(Report(CheckReplicatedStateAgrees(step, *state, &replicated_xxh3)));
  CheckpointRequest request;
  request.run_dir = options_.run_dir;
  request.step = step;
  request.config_digest = state_config_digest_;
  request.run_id_hex = RunIdHex(options_.run_id);
  request.world_size = options_.world_size;
  request.plan_json = options_.plan_json;
  request.rank = {options_.rank, state, trace_position(), &replicated_xxh3};
  StatusOr<CheckpointShard> shard = options_.checkpoints->WriteShard(request);
  if (shard.ok()) KillPoint("ckpt-shard", static_cast<int64_t>(step), options_.rank);
  std::vector<CheckpointShard> shards;
  Status written = ExchangeShards(shard, &shards);
  if (written.ok() && options_.rank == 0) {
    written = options_.checkpoints->Commit(request, shards);
    if (written.ok()) KillPoint("ckpt-commit", static_cast<int64_t>(step));
  }
  if (options_.world_size > 1) {
    // Nobody reports the checkpoint before it is committed.
    const uint8_t committed = written.ok() ? 1 : 0;
    std::vector<uint8_t> all;
    DGRR_RETURN_IF_ERROR(Report(AllGather(committed, &all)));
    if (written.ok() && all[0] == 0) {
      written = Status::IOError("rank 0 could not commit the checkpoint of step " + std::to_string(step));
    }
  }
  DGRR_RETURN_IF_ERROR(Report(written));
  result_.checkpoints_written.push_back(step);
  return Status::OK();
}

// The replicated entries (restored from checkpoints) must be the same on
// every rank, since each is written once, by one rank: first their names,
// types and shapes, then each one's content fingerprint, all over the
// communicator. Every rank sees the same fingerprints, so all of them fail or
// go on together. `xxh3_of` receives each entry's XXH3-64 (the shard writer's
// dataset hash, not computed twice).
Status Session::Impl::CheckReplicatedStateAgrees(uint64_t step, const StateRegistry& state,
                                                 std::map<std::string, uint64_t>* xxh3_of) {
  if (options_.world_size <= 1) return Status::OK();
  std::vector<const StateEntry*> replicated;
  for (const StateEntry& e : state.entries()) {
    if (e.restore == RestorePolicy::kCheckpoint && e.replicated) replicated.push_back(&e);
  }
  std::sort(replicated.begin(), replicated.end(),
            [](const StateEntry* a, const StateEntry* b) { return a->name < b->name; });
  std::string layout;
  for (const StateEntry* e : replicated) {
    PutFixed32(&layout, static_cast<uint32_t>(e->name.size()));
    layout += e->name;
    layout.push_back(static_cast<char>(e->dtype));
    PutFixed64(&layout, e->bytes);
    PutFixed32(&layout, static_cast<uint32_t>(e->shape.size()));
    for (int64_t d : e->shape) PutFixed64(&layout, static_cast<uint64_t>(d));
  }
  // Each entry's fingerprint, and one of them all: one round trip when the
  // ranks agree, one per entry only to name the first that differs.
  std::vector<Fingerprint> contents;
  for (const StateEntry* e : replicated) {
    contents.push_back(FingerprintBytes(e->data, e->bytes));
    (*xxh3_of)[e->name] = contents.back().xxh3;
  }
  const Fingerprint all_contents = FingerprintBytes(contents.data(), contents.size() * sizeof(Fingerprint));
  const std::string what = "checkpoint of step " + std::to_string(step) + " not written: ";
  struct Layout {
    uint64_t entries = 0, digest = 0;
    Fingerprint contents;
  };
  std::vector<Layout> layouts;
  DGRR_RETURN_IF_ERROR(AllGather(
      Layout{replicated.size(), FingerprintBytes(layout.data(), layout.size()).xxh3, all_contents}, &layouts));
  bool same_contents = true;
  for (size_t r = 1; r < layouts.size(); ++r) {
    if (layouts[r].entries != layouts[0].entries || layouts[r].digest != layouts[0].digest) {
      return Status::FailedPrecondition(what + "the replicated state entries (names, dtypes, sizes or shapes) "
                                        "differ between rank 0 and rank " + std::to_string(r));
    }
    same_contents = same_contents && layouts[r].contents == layouts[0].contents;
  }
  if (same_contents) return Status::OK();
  std::vector<Fingerprint> all;
  for (size_t i = 0; i < replicated.size(); ++i) {
    DGRR_RETURN_IF_ERROR(AllGather(contents[i], &all));
    for (size_t r = 1; r < all.size(); ++r) {
      if (!(all[r] == all[0])) {
        return Status::Divergence(what + "replicated state entry '" + replicated[i]->name +
                                  "' differs between rank 0 and rank " + std::to_string(r));
      }
    }
  }
  return Status::Internal(what + "the replicated entries' fingerprints differ between ranks, but no entry's does");
}

// Every rank's shard record, in rank order, over the communicator (one round
// of the records themselves); an error when any rank's shard failed.
Status Session::Impl::ExchangeShards(const StatusOr<CheckpointShard>& mine, std::vector<CheckpointShard>* shards) {
  if (options_.world_size <= 1) {
    if (!mine.ok()) return mine.status();
    shards->assign(1, *mine);
    return Status::OK();
  }
  struct Written {
    uint8_t ok = 0;  // 0: the rank could not write its shard
    CheckpointShard shard;
  };
  Written w;
  if (mine.ok()) w = {1, *mine};
  std::vector<Written> all;
  DGRR_RETURN_IF_ERROR(AllGather(w, &all));
  if (!mine.ok()) return mine.status();
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].ok != 1) {
      return Status::IOError("checkpoint not committed: rank " + std::to_string(r) + " could not write its shard");
    }
    shards->push_back(all[r].shard);
  }
  return Status::OK();
}

Status Session::Impl::Report(Status status) {
  if (!control_ || status.ok() || result_.outcome != ControlOutcome::kRunning) return status;
  result_.outcome = ControlOutcome::kFailed;
  result_.failure_code = status.code();
  if (status.code() == StatusCode::kIntegrityFailure && trace_check_ && trace_check_->mismatch()) {
    const ReplayMismatch& m = *trace_check_->mismatch();
    result_.outcome = ControlOutcome::kMismatch;
    result_.mismatch = ControlMismatch{m.step,           static_cast<int>(m.rank), m.what,
                                       m.recorded_index, m.first_example,           m.example_count,
                                       m.recorded_xor64, m.recorded_xxh3,           m.replayed_xor64,
                                       m.replayed_xxh3};
  }
  result_.message = status.ToString();
  (void)WriteResult();  // the error being reported matters more than this one
  return status;
}

Status Session::Impl::WriteResult() {
  if (!control_) return Status::OK();
  if (trace_check_) {
    result_.boundaries_verified = trace_check_->boundaries_verified();
    result_.steps_verified = trace_check_->steps_verified();
  }
  return WriteControlResult(ControlResultPath(options_.run_dir, options_.rank), result_);
}

Status Session::Impl::CaptureDump(const BoundaryHandle& boundary, const TensorRef& tensor, const Fingerprint& fp,
                                  ExampleRange examples) {
  for (PendingDump& d : dumps_) {
    if (d.written || d.request.step != step_ || d.request.boundary != names_[boundary.name_id]) continue;
    if (tensor.data == nullptr) {
      return Status::InvalidArgument("dump of " + d.request.boundary +
                                     ": the program records it from a fingerprint only, without its bytes");
    }
    CapturedTensor t;
    t.example_first = examples.first;
    t.example_count = examples.count;
    t.phase = std::string(trace::PhaseName(boundary.phase));
    t.dtype = tensor.dtype;
    t.shape.assign(tensor.shape().begin(), tensor.shape().end());
    t.xor64 = fp.xor64;
    t.xxh3 = fp.xxh3;
    const auto* bytes = static_cast<const uint8_t*>(tensor.data);
    t.bytes.assign(bytes, bytes + tensor.bytes);
    d.tensors.push_back(std::move(t));
  }
  return Status::OK();
}

Status Session::Impl::WriteDumps(uint64_t step) {
  for (PendingDump& d : dumps_) {
    if (d.written || d.request.step != step) continue;
    if (d.tensors.empty()) {
      return Status::FailedPrecondition("dump of " + d.request.boundary + " at step " + std::to_string(step) +
                                        ": the boundary was not recorded at that step");
    }
    if (options_.checkpoints == nullptr) return NoCheckpointStore();
    DGRR_RETURN_IF_ERROR(options_.checkpoints->WriteTensorDump(d.path, control_->verify_run_dir.empty()
                                                                            ? options_.run_dir
                                                                            : control_->verify_run_dir,
                                                               d.request.boundary, step, options_.rank, d.tensors));
    d.written = true;
    d.tensors.clear();
    result_.dumps_written.push_back(d.path);
  }
  return Status::OK();
}


// --- Session: the API, over its Impl ---

const SessionOptions& Session::options() const { return impl_->options_; }
int Session::rank() const { return impl_->options_.rank; }
RecordMode Session::mode() const { return impl_->options_.mode; }
const rng::RngStreams& Session::rng() const { return impl_->rng_; }
const DeterminismControls& Session::controls() const { return impl_->controls_; }
StateRegistry& Session::state() { return impl_->state_; }
const std::string& Session::trace_path() const { return impl_->trace_path_; }
uint64_t Session::env_digest() const { return impl_->env_digest_; }
uint64_t Session::config_digest() const { return impl_->config_digest_; }

StatusOr<BoundaryHandle> Session::DeclareBoundary(std::string_view name, trace::Phase phase,
                                                  trace::Direction direction, OpKind kind) {
  return impl_->DeclareBoundary(name, phase, direction, kind);
}
Status Session::Record(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                       Fingerprint* out) {
  return impl_->Record(boundary, tensor, examples, out);
}
Status Session::RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor,
                                  const Fingerprint& fingerprint, ExampleRange examples) {
  return impl_->RecordFingerprint(boundary, tensor, fingerprint, examples);
}
Status Session::Record(std::string_view name, trace::Phase phase, trace::Direction direction,
                       const TensorRef& tensor, ExampleRange examples, OpKind kind) {
  return impl_->Record(name, phase, direction, tensor, examples, kind);
}

StatusOr<uint64_t> Session::Resume() { return impl_->Resume(); }
bool Session::ShouldCheckpoint(uint64_t step) const { return impl_->ShouldCheckpoint(step); }
Status Session::Checkpoint(uint64_t step) { return impl_->Checkpoint(step); }
bool Session::ShouldStop(uint64_t step) const { return impl_->ShouldStop(step); }
// An atomic store through a pointer set at Open: still async-signal-safe.
void Session::RequestStop() { impl_->stop_requested_.store(true, std::memory_order_relaxed); }
const ControlFile* Session::control() const { return impl_->control_ ? &*impl_->control_ : nullptr; }

Status Session::BeginStep(uint64_t step) { return impl_->BeginStep(step); }
Status Session::EndStep(uint64_t step, float loss) { return impl_->EndStep(step, loss); }
Status Session::RecordEvent(trace::EventKind kind, std::string_view payload) {
  return impl_->RecordEvent(kind, payload);
}

uint64_t Session::current_step() const { return impl_->step_; }
bool Session::in_step() const { return impl_->in_step_; }
uint64_t Session::trace_position() const { return impl_->trace_position(); }
size_t Session::records_waiting() const { return impl_->waiting_.size(); }
const std::vector<SdcMismatch>& Session::sdc_mismatches() const { return impl_->sdc_mismatches_; }

const Status& Session::deferred_error() const { return impl_->deferred_error_; }
void Session::DeferError(const Status& status) {
  if (impl_->deferred_error_.ok()) impl_->deferred_error_ = status;
}

Status Session::Flush() { return impl_->Flush(); }
Status Session::Sync() { return impl_->Sync(); }
Status Session::Close() { return impl_->Close(); }

}  // namespace dgrr
