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
#include "runtime/determinism.h"
#include "runtime/rank_group.h"
#include "runtime/recording_mode.h"
#include "runtime/state_registry.h"
#include "trace_format/record.h"

namespace dgrr {

namespace trace {
class TraceWriter;
}

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
  // Cross-rank fingerprint exchange for the per-step SDC check; null: no check.
  RankGroup* group = nullptr;
  // Apply the GPU controls (NCCL, cuBLAS). Default: when built with CUDA.
  std::optional<bool> gpu;
  // Tests substitute the environment; null: the real process environment.
  ProcessEnvironment* environment = nullptr;
  // Checks each BOUNDARY and STEP record before it is appended; null: none.
  RecordCheck* check = nullptr;
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
  Status Record(const BoundaryHandle& boundary, const TensorRef& tensor, ExampleRange examples,
                Fingerprint* out = nullptr);
  // Appends a BOUNDARY record for a tensor fingerprinted elsewhere (on a
  // worker thread, say, so the cost is spread over the workers while the
  // rank's thread keeps the trace in program order). `tensor.data` is not
  // read and may be null; dtype, shape and bytes are recorded.
  Status RecordFingerprint(const BoundaryHandle& boundary, const TensorRef& tensor,
                           const Fingerprint& fingerprint, ExampleRange examples);
  // Convenience: DeclareBoundary + Record (interns on every call).
  Status Record(std::string_view name, trace::Phase phase, trace::Direction direction,
                const TensorRef& tensor, ExampleRange examples, OpKind kind = OpKind::kOther);

  Status BeginStep(uint64_t step);
  // STEP end record: the loss and the fingerprint of every registered
  // parameter buffer. With a RankGroup, the fingerprints of all ranks are
  // compared; a rank that differs gets an SDC EVENT record and the call
  // returns Divergence naming rank, step and both fingerprints.
  Status EndStep(uint64_t step, float loss);
  Status RecordEvent(trace::EventKind kind, std::string_view payload);

  uint64_t current_step() const { return step_; }
  // Index of the next trace record (what a checkpoint stores to cut at).
  uint64_t trace_position() const;
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
  Status OpenTrace();
  Status CheckSdc(uint64_t step, const Fingerprint& mine);
  Status AppendBoundary(const BoundaryHandle& boundary, const TensorRef& tensor,
                        const Fingerprint& fp, ExampleRange examples);

  SessionOptions options_;
  rng::RngStreams rng_;
  DeterminismControls controls_;
  StateRegistry state_;
  std::unique_ptr<trace::TraceWriter> writer_;
  std::string trace_path_;
  uint64_t env_digest_ = 0;
  uint64_t config_digest_ = 0;
  uint64_t step_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<SdcMismatch> sdc_mismatches_;
  std::vector<std::string> names_;  // by name id, for RecordCheck
  Status deferred_error_;
  bool closed_ = false;
};

// File names inside a run directory.
std::string TracePathFor(const std::string& run_dir, int rank);
std::string EnvPathFor(const std::string& run_dir, int rank);
std::string ConfigPathFor(const std::string& run_dir);

}  // namespace dgrr
