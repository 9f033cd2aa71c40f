#include "model/step_recorder.h"

#include <algorithm>

#include "runtime/control_file.h"
#include "runtime/recording_mode.h"

namespace dgrr::model {
namespace {

std::vector<uint8_t> CopyBytes(const void* data, uint64_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(p, p + bytes);
}

// The runtime's kind of a boundary's operator (what `trusted` mode may leave
// out), from the operator the model reports at the boundary. The allowlist
// applies to the forward pass and the optimizer; backward boundaries are
// passed on as kOther, so `trusted` records the whole backward pass.
OpKind RecordedKind(Phase phase, Operator op) {
  if (phase != Phase::kForward && phase != Phase::kOptimizer) return OpKind::kOther;
  switch (op) {
    case Operator::kOther: return OpKind::kOther;
    case Operator::kMatmul: return OpKind::kMatmul;
    case Operator::kElementwise: return OpKind::kElementwise;
    case Operator::kNorm: return OpKind::kNorm;
    case Operator::kAttention: return OpKind::kAttention;
    case Operator::kEmbedding: return OpKind::kEmbedding;
    case Operator::kLoss: return OpKind::kLoss;
    case Operator::kOptimizer: return OpKind::kOptimizer;
  }
  return OpKind::kOther;
}

trace::Phase TracePhase(Phase p) {
  switch (p) {
    case Phase::kForward: return trace::Phase::kForward;
    case Phase::kBackward: return trace::Phase::kBackward;
    case Phase::kOptimizer: return trace::Phase::kOptimizer;
    case Phase::kData: return trace::Phase::kData;
  }
  return trace::Phase::kForward;
}

// Copies `dims` into `out` (kMaxTensorDims entries) and `*ndim`; returns the
// element count.
uint64_t CopyShape(std::span<const int64_t> dims, int64_t* out, int* ndim) {
  *ndim = static_cast<int>(dims.size());
  uint64_t elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    out[i] = dims[i];
    elements *= static_cast<uint64_t>(dims[i]);
  }
  return elements;
}

}  // namespace

StepRecorder::StepRecorder(int rank, size_t shard, const std::vector<std::string>& per_example_names)
    : rank_(rank), names_(per_example_names), slots_(shard), before_tokens_(shard), next_boundary_(shard) {}

Status StepRecorder::Open(Session& session, const std::vector<std::pair<Phase, Operator>>& per_example_ops,
                          const ParameterLayout& layout) {
  session_ = &session;
  layout_ = &layout;
  DGRR_ASSIGN_OR_RETURN(tokens_handle_, session.DeclareBoundary(kTokensBoundary, trace::Phase::kData,
                                                                trace::Direction::kInput, OpKind::kData));
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::string& name = names_[i];
    const auto [phase, op] = per_example_ops[i];
    DGRR_ASSIGN_OR_RETURN(auto h, session.DeclareBoundary(name, TracePhase(phase), trace::Direction::kOutput,
                                                          RecordedKind(phase, op)));
    example_index_.emplace(name, static_cast<int>(example_handles_.size()));
    example_handles_.push_back(h);
  }
  for (const auto& tensor : layout.tensors()) {
    std::string name = "allreduce." + GradientName(tensor.name);
    DGRR_ASSIGN_OR_RETURN(auto h, session.DeclareBoundary(name, trace::Phase::kCollective,
                                                          trace::Direction::kOutput, OpKind::kCollective));
    allreduce_handles_.push_back(h);
    allreduce_names_.push_back(std::move(name));
  }
  return Status::OK();
}

void StepRecorder::BeginStep(int64_t step, uint64_t shard_first) {
  shard_first_ = shard_first;
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].clear();
    before_tokens_[i].clear();
    next_boundary_[i] = 0;
  }
  batch_next_ = 0;
  // The boundaries a control file dumps on this rank at `step` (the session
  // writes the files; the workers keep the bytes of these for it).
  dumps_due_.clear();
  const ControlFile* control = session_->control();
  if (control == nullptr) return;
  for (const ControlDump& d : control->dumps) {
    if (d.step != static_cast<uint64_t>(step) || (d.rank && *d.rank != rank_)) continue;
    dumps_due_.insert(d.boundary);
  }
}

void StepRecorder::OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                              std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) {
  if (example_count == 1 && phase != Phase::kOptimizer) {
    const size_t local = first_example - shard_first_;
    const int index = ExampleBoundaryIndex(name, local);
    if (index < 0) return;  // cannot happen: names learned up front
    if (!example_handles_[static_cast<size_t>(index)].recorded) return;  // the mode skips it
    Slot& s = PushExampleSlot(index, local, dims);
    // A dump takes the very bytes fingerprinted here, while the tensor exists.
    s.captured = dumps_due_.find(name) != dumps_due_.end();
    s.fp = FingerprintBytes(data, s.bytes);
    if (s.captured) s.bytes_captured = CopyBytes(data, s.bytes);
    return;
  }
  // Per batch, on the rank thread: intern lazily, record at once.
  const BoundaryHandle* handle = DeclareBatch(name, phase, op, is_output);
  if (handle == nullptr) return;
  RecordBatch(*handle, data, dims, first_example, example_count);
}

bool StepRecorder::Wants(std::string_view name, Phase phase) const {
  if (phase == Phase::kOptimizer) return true;
  const auto it = example_index_.find(name);
  if (it == example_index_.end()) return true;  // OnBoundary decides
  return example_handles_[static_cast<size_t>(it->second)].recorded;
}

bool StepRecorder::TakesFingerprint(std::string_view name, Phase phase) const {
  if (phase == Phase::kOptimizer) return false;
  const auto it = example_index_.find(name);
  return it != example_index_.end() && example_handles_[static_cast<size_t>(it->second)].recorded &&
         dumps_due_.find(name) == dumps_due_.end();
}

StepRecorder::Slot& StepRecorder::PushExampleSlot(int index, size_t local, std::span<const int64_t> dims) {
  Slot& s = slots_[local].emplace_back();
  s.boundary = index;
  s.bytes = CopyShape(dims, s.dims, &s.ndim) * sizeof(float);
  return s;
}

void StepRecorder::OnBoundaryFingerprint(std::string_view name, Phase phase, Operator op, bool is_output,
                                         const Fingerprint& fp, std::span<const int64_t> dims, uint64_t first_example,
                                         uint32_t example_count) {
  (void)op, (void)is_output;
  if (example_count != 1 || phase == Phase::kOptimizer) return;  // never offered: TakesFingerprint says no
  const size_t local = first_example - shard_first_;
  const int index = ExampleBoundaryIndex(name, local);
  if (index < 0) return;
  PushExampleSlot(index, local, dims).fp = fp;
}

void StepRecorder::AddExampleEvent(uint64_t example, trace::EventKind kind, std::string payload) {
  Slot event;
  event.kind = kind;
  event.event = std::move(payload);
  slots_[example - shard_first_].push_back(std::move(event));
}

void StepRecorder::AddTokensEvent(uint64_t example, trace::EventKind kind, std::string payload) {
  Slot event;
  event.kind = kind;
  event.event = std::move(payload);
  before_tokens_[example - shard_first_].push_back(std::move(event));
}

const BoundaryHandle* StepRecorder::DeclareBatch(std::string_view name, Phase phase, Operator op, bool is_output) {
  BatchHandles::value_type* it = BatchBoundary(name);
  if (it == nullptr) {
    auto h = session_->DeclareBoundary(name, TracePhase(phase),
                                       is_output ? trace::Direction::kOutput : trace::Direction::kInput,
                                       RecordedKind(phase, op));
    if (!h.ok()) {
      session_->DeferError(h.status());
      return nullptr;
    }
    it = &*batch_handles_.emplace(std::string(name), *h).first;
    batch_order_.push_back(it);
    batch_next_ = batch_order_.size();
  }
  return &it->second;
}

void StepRecorder::RecordBatch(const BoundaryHandle& handle, const float* data, std::span<const int64_t> dims,
                               uint64_t first_example, uint32_t example_count) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::kF32;
  const uint64_t elements = CopyShape(dims, t.dims, &t.ndim);
  t.bytes = elements * sizeof(float);
  // A control file's dump of this boundary is captured by the session.
  Status s = session_->Record(handle, t, {first_example, example_count});
  if (!s.ok()) session_->DeferError(s);
}

// An example's boundaries arrive in the order of the names (the model's own
// order), so comparing with the one expected next spares the hash lookup on
// nearly every call; any other order falls back to it.
int StepRecorder::ExampleBoundaryIndex(std::string_view name, size_t local) {
  uint32_t& next = next_boundary_[local];
  int index;
  if (next < names_.size() && names_[next] == name) {
    index = static_cast<int>(next);
  } else {
    auto it = example_index_.find(name);
    if (it == example_index_.end()) return -1;
    index = it->second;
  }
  next = static_cast<uint32_t>(index) + 1;
  return index;
}

// The same for the per-batch boundaries (AdamW's): each step reports them
// in the order the first step did, and a lookup in the hash map, whose
// nodes the optimizer's pass over the state has evicted, costs a cache miss.
StepRecorder::BatchHandles::value_type* StepRecorder::BatchBoundary(std::string_view name) {
  if (batch_next_ < batch_order_.size() && batch_order_[batch_next_]->first == name) {
    return batch_order_[batch_next_++];
  }
  auto it = batch_handles_.find(name);
  if (it == batch_handles_.end()) return nullptr;
  auto at = std::find(batch_order_.begin(), batch_order_.end(), &*it);
  batch_next_ = static_cast<size_t>(at - batch_order_.begin()) + 1;
  return &*it;
}

Status StepRecorder::RecordExamples(const uint8_t* tokens, size_t window) {
  Session& s = *session_;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ExampleRange one{shard_first_ + i, 1};
    TensorRef tok;
    tok.data = tokens + i * window;
    tok.bytes = window;
    tok.dtype = DType::kU8;
    tok.ndim = 1;
    tok.dims[0] = static_cast<int64_t>(window);
    for (const Slot& event : before_tokens_[i]) DGRR_RETURN_IF_ERROR(s.RecordEvent(event.kind, event.event));
    DGRR_RETURN_IF_ERROR(s.Record(tokens_handle_, tok, one));
    for (Slot& slot : slots_[i]) {
      if (slot.boundary < 0) {
        DGRR_RETURN_IF_ERROR(s.RecordEvent(slot.kind, slot.event));
        continue;
      }
      TensorRef meta;
      // The bytes a worker kept for a dump: exactly those it fingerprinted.
      if (slot.captured) meta.data = slot.bytes_captured.data();
      meta.bytes = slot.bytes;
      meta.dtype = DType::kF32;
      meta.ndim = slot.ndim;
      std::copy(slot.dims, slot.dims + slot.ndim, meta.dims);
      const BoundaryHandle& handle = example_handles_[static_cast<size_t>(slot.boundary)];
      DGRR_RETURN_IF_ERROR(s.RecordFingerprint(handle, meta, slot.fp, one));
    }
  }
  return Status::OK();
}

Status StepRecorder::RecordCollective(const float* grad, uint64_t first, uint32_t count) {
  for (size_t i = 0; i < allreduce_handles_.size(); ++i) {
    DGRR_RETURN_IF_ERROR(RecordCollectiveTensor(i, grad, first, count));
  }
  return Status::OK();
}

Status StepRecorder::RecordCollectiveTensor(size_t i, const float* grad, uint64_t first, uint32_t count) {
  const NamedTensor& tensor = layout_->tensors()[i];
  TensorRef g;
  g.data = grad + tensor.offset;
  g.bytes = tensor.size * sizeof(float);
  g.dtype = DType::kF32;
  g.ndim = static_cast<int>(tensor.shape.size());
  std::copy(tensor.shape.begin(), tensor.shape.end(), g.dims);
  DGRR_RETURN_IF_ERROR(session_->deferred_error());
  return session_->Record(allreduce_handles_[i], g, {first, count});
}

}  // namespace dgrr::model
