#include "runtime/session.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "base/coding.h"
#include "base/file.h"
#include "base/version.h"
#include "runtime/environment.h"
#include "runtime/json_input.h"
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

}  // namespace

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

std::string TracePathFor(const std::string& run_dir, int rank) {
  return run_dir + "/rank" + std::to_string(rank) + ".trace";
}
std::string EnvPathFor(const std::string& run_dir, int rank) {
  return run_dir + "/rank" + std::to_string(rank) + ".env.json";
}
std::string ConfigPathFor(const std::string& run_dir) { return run_dir + "/config.json"; }

Session::Session(const SessionOptions& options) : options_(options), rng_(options.seed) {}

Session::~Session() {
  if (!closed_) (void)Close();
}

StatusOr<std::unique_ptr<Session>> Session::Open(const SessionOptions& options) {
  if (options.run_dir.empty()) return Status::InvalidArgument("session needs a run directory");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is outside a world of size " +
                                   std::to_string(options.world_size));
  }
  if (options.group != nullptr && options.group->world_size() != options.world_size) {
    return Status::InvalidArgument("rank group size differs from the session's world size");
  }
  std::unique_ptr<Session> session(new Session(options));
  DGRR_RETURN_IF_ERROR(session->Init());
  return session;
}

Status Session::Init() {
  // Controls first: NCCL and cuBLAS read their settings when they initialise.
  DeterminismOptions det;
  det.threads = options_.threads;
  det.gpu = options_.gpu.value_or(DGRR_HAVE_CUDA_BUILD != 0);
  ProcessEnvironment& env =
      options_.environment ? *options_.environment : RealProcessEnvironment();
  // setenv and getenv are not thread-safe against each other, and ranks often
  // open their sessions from parallel threads: one process-wide lock covers
  // applying the controls (the first session sets them, later ones only read)
  // and collecting the environment (the CUDA runtime reads variables too).
  static std::mutex environment_mutex;
  std::unique_lock<std::mutex> environment_lock(environment_mutex);
  DGRR_ASSIGN_OR_RETURN(controls_, DeterminismControls::Apply(det, env));

  // The caller's argument, not a file: a bad one is a usage error.
  auto parsed = ParseJson(options_.config_json, "session config");
  if (!parsed.ok()) return Status::InvalidArgument(parsed.status().message());
  const nlohmann::json config = std::move(parsed).value();
  const std::string canonical_config = config.dump();
  config_digest_ = Xxh3(canonical_config.data(), canonical_config.size());

  DGRR_RETURN_IF_ERROR(CheckWritableDirectory(options_.run_dir));
  trace_path_ = TracePathFor(options_.run_dir, options_.rank);
  const bool exists = PathExists(trace_path_);
  if (options_.open_mode == OpenMode::kCreate && exists) {
    return Status::FailedPrecondition(trace_path_ +
                                      " already exists: pass overwrite or resume explicitly");
  }
  if (options_.open_mode == OpenMode::kResume && !exists) {
    return Status::NotFound(trace_path_ + ": no trace to resume");
  }

  const nlohmann::json env_json = CollectEnvironment(controls_);
  environment_lock.unlock();
  env_digest_ = EnvironmentDigest(env_json);
  DGRR_RETURN_IF_ERROR(OpenTrace());
  // The trace exists and is valid; the JSON files beside it are written
  // atomically, so each is either absent, the old one, or complete.
  DGRR_RETURN_IF_ERROR(
      WriteFileAtomically(EnvPathFor(options_.run_dir, options_.rank), env_json.dump(2) + "\n"));
  if (options_.rank == 0) {
    DGRR_RETURN_IF_ERROR(
        WriteFileAtomically(ConfigPathFor(options_.run_dir), config.dump(2) + "\n"));
  }
  return Status::OK();
}

Status Session::OpenTrace() {
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
  if (IsZero(options_.run_id)) options_.run_id = NewRunId();
  trace::TraceHeader header;
  header.run_id = options_.run_id;
  header.seed = options_.seed;
  header.rank = static_cast<uint32_t>(options_.rank);
  header.world_size = static_cast<uint32_t>(options_.world_size);
  header.config_digest = config_digest_;
  header.env_digest = env_digest_;
  header.created_unix_ns = NowNs();
  trace::TraceWriterOptions wopts;
  wopts.overwrite = options_.open_mode == OpenMode::kOverwrite;
  DGRR_ASSIGN_OR_RETURN(writer_, trace::TraceWriter::Create(trace_path_, header, wopts));
  return Status::OK();
}

StatusOr<BoundaryHandle> Session::DeclareBoundary(std::string_view name, trace::Phase phase,
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
  if (h.recorded) {
    DGRR_ASSIGN_OR_RETURN(h.name_id, writer_->InternName(name));
    if (h.name_id >= names_.size()) names_.resize(h.name_id + 1);
    names_[h.name_id] = std::string(name);
  }
  return h;
}

Status Session::Record(const BoundaryHandle& boundary, const TensorRef& tensor,
                       ExampleRange examples, Fingerprint* out) {
  if (!boundary.recorded && out == nullptr) return Status::OK();
  DGRR_RETURN_IF_ERROR(tensor.Validate());
  const Fingerprint fp = FingerprintBytes(tensor.data, tensor.bytes);
  if (out != nullptr) *out = fp;
  if (!boundary.recorded) return Status::OK();
  return AppendBoundary(boundary, tensor, fp, examples);
}

Status Session::RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor,
                                  const Fingerprint& fingerprint, ExampleRange examples) {
  if (!boundary.recorded) return Status::OK();
  TensorRef meta = tensor;
  if (meta.data == nullptr) meta.data = &meta;  // only the metadata is checked, never read
  DGRR_RETURN_IF_ERROR(meta.Validate());
  return AppendBoundary(boundary, tensor, fingerprint, examples);
}

Status Session::AppendBoundary(const BoundaryHandle& boundary, const TensorRef& tensor,
                               const Fingerprint& fp, ExampleRange examples) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  trace::BoundaryRecord r;
  r.step = step_;
  r.seq = next_seq_++;
  r.name_id = boundary.name_id;
  r.phase = boundary.phase;
  r.direction = boundary.direction;
  r.dtype = tensor.dtype;
  r.rank = static_cast<uint32_t>(options_.rank);
  uint64_t dims[kMaxTensorDims];
  const auto shape = tensor.shape();
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = static_cast<uint64_t>(shape[i]);
  DGRR_RETURN_IF_ERROR(trace::SetShape(&r, dims, shape.size()));
  r.byte_count = tensor.bytes;
  r.first_example = examples.first;
  r.example_count = examples.count;
  r.xor64 = fp.xor64;
  r.xxh3 = fp.xxh3;
  r.host_time_ns = NowNs();
  if (options_.check != nullptr) {
    DGRR_RETURN_IF_ERROR(options_.check->CheckBoundary(r, names_[r.name_id]));
  }
  return writer_->AppendBoundary(r);
}

Status Session::Record(std::string_view name, trace::Phase phase, trace::Direction direction,
                       const TensorRef& tensor, ExampleRange examples, OpKind kind) {
  DGRR_ASSIGN_OR_RETURN(BoundaryHandle h, DeclareBoundary(name, phase, direction, kind));
  return Record(h, tensor, examples);
}

Status Session::BeginStep(uint64_t step) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  step_ = step;
  if (options_.mode == RecordMode::kOff) return Status::OK();
  trace::StepRecord r;
  r.step = step;
  r.kind = trace::StepKind::kBegin;
  r.host_time_ns = NowNs();
  return writer_->AppendStep(r);
}

Status Session::EndStep(uint64_t step, float loss) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (step != step_) {
    return Status::InvalidArgument("EndStep(" + std::to_string(step) + ") does not match BeginStep(" +
                                   std::to_string(step_) + ")");
  }
  DGRR_RETURN_IF_ERROR(deferred_error_);
  if (options_.mode == RecordMode::kOff) return Status::OK();
  const Fingerprint params = state_.ParameterFingerprint();
  trace::StepRecord r;
  r.step = step;
  r.kind = trace::StepKind::kEnd;
  r.host_time_ns = NowNs();
  r.loss_dtype = DType::kF32;
  r.loss_bits = FloatBits(loss);
  r.params_xor64 = params.xor64;
  r.params_xxh3 = params.xxh3;
  if (options_.check != nullptr) DGRR_RETURN_IF_ERROR(options_.check->CheckStep(r));
  DGRR_RETURN_IF_ERROR(writer_->AppendStep(r));
  return CheckSdc(step, params);
}

Status Session::CheckSdc(uint64_t step, const Fingerprint& mine) {
  if (options_.group == nullptr || options_.world_size < 2) return Status::OK();
  std::vector<Fingerprint> all;
  DGRR_RETURN_IF_ERROR(options_.group->AllGather(options_.rank, mine, &all));
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

Status Session::RecordEvent(trace::EventKind kind, std::string_view payload) {
  if (closed_) return Status::FailedPrecondition("session is closed");
  if (options_.mode == RecordMode::kOff) return Status::OK();
  trace::EventRecord e;
  e.step = step_;
  e.kind = kind;
  e.host_time_ns = NowNs();
  e.payload = std::string(payload.substr(0, trace::kMaxEventPayload));
  return writer_->AppendEvent(e);
}

uint64_t Session::trace_position() const { return writer_ ? writer_->records_written() : 0; }

Status Session::Flush() { return writer_ ? writer_->Flush() : Status::OK(); }
Status Session::Sync() { return writer_ ? writer_->Sync() : Status::OK(); }

Status Session::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  Status s = writer_ ? writer_->Close() : Status::OK();
  return deferred_error_.ok() ? s : deferred_error_;
}

}  // namespace dgrr
