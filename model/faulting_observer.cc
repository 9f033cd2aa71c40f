#include "model/faulting_observer.h"

#include <string>
#include <vector>

#include "trace_format/record.h"

namespace dgrr::model {

FaultingObserver::FaultingObserver(StepRecorder& recorder, const TensorFaultInjector& fault,
                                   const ParameterLayout& layout, RankTensors tensors)
    : recorder_(recorder), fault_(fault), layout_(layout), tensors_(tensors) {
  for (size_t i = 0; i < recorder_.shard(); ++i) {
    const uint64_t example = recorder_.shard_first() + i;
    if (const std::string* fired = fault_.TokensFiredAt(example)) {
      recorder_.AddTokensEvent(example, trace::EventKind::kFaultInjected, *fired);
    }
  }
}

void FaultingObserver::OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output,
                                  const float* data, std::span<const int64_t> dims, uint64_t first_example,
                                  uint32_t example_count) {
  if (example_count == 1 && phase != Phase::kOptimizer) {
    if (!fault_.IsExampleTarget(name, first_example)) {
      return recorder_.OnBoundary(name, phase, op, is_output, data, dims, first_example, example_count);
    }
    recorder_.AddExampleEvent(first_example, trace::EventKind::kFaultInjected, fault_.FiredText(data));
    // The operator's output is what got corrupted: the record shows the
    // flipped tensor, and the injector flips the real one for the next ops.
    uint64_t elements = 1;
    for (int64_t d : dims) elements *= static_cast<uint64_t>(d);
    std::vector<float> flipped(data, data + elements);
    fault_.Corrupt(flipped.data(), elements);
    return recorder_.OnBoundary(name, phase, op, is_output, flipped.data(), dims, first_example, example_count);
  }
  // Per batch: declared first (at first sight), then corrupted, then recorded.
  const BoundaryHandle* handle = recorder_.DeclareBatch(name, phase, op, is_output);
  if (handle == nullptr) return;
  FlipBatchTensor(name, data);
  recorder_.RecordBatch(*handle, data, dims, first_example, example_count);
}

Status FaultingObserver::RecordCollective(const float* grad, uint64_t first, uint32_t count) {
  const auto& tensors = layout_.tensors();
  for (size_t i = 0; i < recorder_.collective_count(); ++i) {
    FlipBatchTensor(recorder_.collective_name(i), grad + tensors[i].offset);
    DGRR_RETURN_IF_ERROR(recorder_.RecordCollectiveTensor(i, grad, first, count));
  }
  return Status::OK();
}

void FaultingObserver::FlipBatchTensor(std::string_view name, const float* seen) {
  const FlipTarget* target = fault_.BatchTarget(name);
  if (target == nullptr) return;
  const NamedTensor& tensor = layout_.tensors()[target->tensor];
  float* base = nullptr;
  switch (target->site) {
    case FlipSite::kCollective:
    case FlipSite::kGradient: base = tensors_.grad; break;
    case FlipSite::kParameter: base = tensors_.params; break;
    case FlipSite::kMomentM: base = tensors_.moment_m; break;
    case FlipSite::kMomentV: base = tensors_.moment_v; break;
    case FlipSite::kTokens:
    case FlipSite::kExample: return;
  }
  float* data = base + tensor.offset;
  Session& session = recorder_.session();
  if (data != seen) {
    // The recorder would fingerprint a different buffer than the one flipped.
    return session.DeferError(Status::Internal("bitflip at " + std::string(name) +
                                               ": the boundary does not show this rank's own tensor"));
  }
  const std::string fired = fault_.FiredText(data);
  fault_.Corrupt(data, tensor.size);
  Status e = session.RecordEvent(trace::EventKind::kFaultInjected, fired);
  if (!e.ok()) session.DeferError(e);
}

}  // namespace dgrr::model
