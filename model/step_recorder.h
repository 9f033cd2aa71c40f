// One rank's recording of a training step (`dgrr train`): turns the model's
// boundaries into the session's records. It is the BoundaryObserver the
// trainer gives the model (ExampleHooks::observer, AdamW's observer):
//   - per-example boundaries arrive on the worker threads, each for its own
//     example; they are fingerprinted there into the example's slots, and
//     RecordExamples records them on the rank's thread in example order
//     (tokens, forward, backward), so the trace never depends on the number
//     of threads;
//   - per-batch boundaries (AdamW's) arrive on the rank's thread and are
//     recorded at once, their names interned at first sight;
//   - RecordCollective records the all-reduced gradients, tensor by tensor.
// When a control file dumps a boundary at this step on this rank, a worker
// keeps the very bytes it fingerprinted for the session to write.
//
// It holds no fault logic: a tensor fault is a decorator around it
// (FaultingObserver, model/faulting_observer.h) that hands it corrupted
// copies and places the fault's EVENTs through AddExampleEvent and
// AddTokensEvent, or, for a per-batch tensor, between DeclareBatch and
// RecordBatch. It does not run the model, reduce, checkpoint, or decide what
// the mode records (the session's BoundaryHandle::recorded does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "model/config.h"
#include "model/hooks.h"
#include "runtime/session.h"
#include "trace_format/record.h"

namespace dgrr::model {

class StepRecorder final : public BoundaryObserver {
 public:
  // The boundary of an example's input bytes.
  static constexpr const char* kTokensBoundary = "data.tokens";

  // The recorder of rank `rank`, whose shard holds `shard` examples a step;
  // `per_example_names` (the model's per-example boundaries, in the order an
  // example reports them) must outlive it.
  StepRecorder(int rank, size_t shard, const std::vector<std::string>& per_example_names);
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // Declares with `session` every boundary known up front, before any worker
  // reports one: the tokens, the per-example boundaries (`per_example_ops`:
  // the phase and operator of each, same order as the names) and the
  // all-reduced gradient of each tensor of `layout`. `session` and `layout`
  // must outlive the recorder.
  Status Open(Session& session, const std::vector<std::pair<Phase, Operator>>& per_example_ops,
              const ParameterLayout& layout);

  // At the start of step `step`, before the workers start: the shard starts
  // at global example `shard_first`; the slots are emptied and the
  // boundaries a control file dumps at this step on this rank looked up.
  void BeginStep(int64_t step, uint64_t shard_first);

  // BoundaryObserver, called by workers (per example) and by the rank thread
  // (per batch: AdamW). Per-example calls touch only their example's slots.
  void OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                  std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) override;
  // False for a per-example boundary the session's mode does not record
  // (OnBoundary would drop it): a device engine then copies nothing for it.
  bool Wants(std::string_view name, Phase phase) const override;
  // True for a per-example boundary it records and no control file dumps at
  // this step: a device engine then hands over the fingerprint alone.
  bool TakesFingerprint(std::string_view name, Phase phase) const override;
  void OnBoundaryFingerprint(std::string_view name, Phase phase, Operator op, bool is_output, const Fingerprint& fp,
                             std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) override;

  // An EVENT recorded among example `example`'s boundaries, before the next
  // one it reports (on the worker running it, like OnBoundary).
  void AddExampleEvent(uint64_t example, trace::EventKind kind, std::string payload);
  // An EVENT recorded just before example `example`'s tokens (before the
  // workers start).
  void AddTokensEvent(uint64_t example, trace::EventKind kind, std::string payload);

  // OnBoundary's per-batch path in its two halves, for a decorator that acts
  // in between: the handle of the per-batch boundary `name`, declared at
  // first sight (null: the declaration failed, and the session holds the
  // error), then its record (an error is deferred to the session).
  const BoundaryHandle* DeclareBatch(std::string_view name, Phase phase, Operator op, bool is_output);
  void RecordBatch(const BoundaryHandle& handle, const float* data, std::span<const int64_t> dims,
                   uint64_t first_example, uint32_t example_count);

  // On the rank's thread after the workers are done: every example's tokens
  // (`window` bytes each, back to back) and slots, in example order.
  Status RecordExamples(const uint8_t* tokens, size_t window);

  // The all-reduced gradients (`grad`, laid out as Open's layout) of the
  // examples [first, first + count), tensor by tensor; RecordCollectiveTensor
  // records tensor `i` alone (after checking the session's deferred error),
  // collective_name(i) is its boundary.
  Status RecordCollective(const float* grad, uint64_t first, uint32_t count);
  Status RecordCollectiveTensor(size_t i, const float* grad, uint64_t first, uint32_t count);
  size_t collective_count() const { return allreduce_handles_.size(); }
  const std::string& collective_name(size_t i) const { return allreduce_names_[i]; }

  Session& session() const { return *session_; }
  uint64_t shard_first() const { return shard_first_; }
  size_t shard() const { return slots_.size(); }

 private:
  // One recorded item of one example, fingerprinted on a worker thread.
  struct Slot {
    int boundary = -1;  // index into example_handles_; -1: an event
    int ndim = 0;
    int64_t dims[kMaxTensorDims] = {};
    uint64_t bytes = 0;
    Fingerprint fp;
    trace::EventKind kind = trace::EventKind::kFaultInjected;  // of an event
    std::string event;                                          // payload of an event
    bool captured = false;                // a dump wants this tensor: `bytes_captured` holds it
    std::vector<uint8_t> bytes_captured;  // exactly the bytes `fp` was computed over
  };
  // Appends example `local`'s slot for boundary `index` with its shape and
  // byte count; the caller fills in the fingerprint (and a dump's bytes).
  Slot& PushExampleSlot(int index, size_t local, std::span<const int64_t> dims);
  // Looks boundary names up by string_view: the workers ask for every
  // boundary of every example, and must not allocate a std::string each time.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  using BatchHandles = std::unordered_map<std::string, BoundaryHandle, NameHash, std::equal_to<>>;

  int ExampleBoundaryIndex(std::string_view name, size_t local);
  BatchHandles::value_type* BatchBoundary(std::string_view name);

  const int rank_;
  const std::vector<std::string>& names_;
  Session* session_ = nullptr;
  const ParameterLayout* layout_ = nullptr;
  uint64_t shard_first_ = 0;                   // global example index of the shard's first
  std::vector<std::vector<Slot>> slots_;       // per local example
  std::vector<std::vector<Slot>> before_tokens_;  // per local example: events only
  std::vector<uint32_t> next_boundary_;        // per local example: see ExampleBoundaryIndex
  std::unordered_map<std::string, int, NameHash, std::equal_to<>> example_index_;
  std::vector<BoundaryHandle> example_handles_;
  BoundaryHandle tokens_handle_;
  BatchHandles batch_handles_;
  std::vector<BatchHandles::value_type*> batch_order_;  // in the order first reported (nodes stay put)
  size_t batch_next_ = 0;  // see BatchBoundary; 0 at each step's start
  std::vector<BoundaryHandle> allreduce_handles_;  // per parameter tensor
  std::vector<std::string> allreduce_names_;       // the same, their boundary names
  // The boundaries a control file dumps on this rank at the current step: set
  // before the workers start (they only look names up), so that a worker
  // keeps the bytes it fingerprints for the session to capture.
  std::set<std::string, std::less<>> dumps_due_;
};

}  // namespace dgrr::model
