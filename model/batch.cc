#include "model/batch.h"

#include <algorithm>
#include <string>

#include "model/config.h"
#include "model/parallel.h"
#include "model/tree_reduce.h"

namespace dgrr::model {

BatchGradients::BatchGradients(const GptConfig& config, int num_threads, size_t max_examples)
    : config_(config),
      layout_(config),
      num_threads_(std::max(1, num_threads)),
      num_params_(layout_.total_size()) {
  for (int w = 0; w < num_threads_; ++w) {
    engines_.push_back(std::make_unique<ExampleEngine<float>>(config));
  }
  storage_.resize(max_examples * num_params_);
  for (size_t i = 0; i < max_examples; ++i) pointers_.push_back(storage_.data() + i * num_params_);
  losses_.resize(max_examples);
}

Status BatchGradients::ComputeExamples(const float* params, const uint8_t* examples,
                                       size_t count, uint64_t first_example,
                                       const ExampleHooks& hooks) {
  if (count == 0 || count > pointers_.size()) {
    return Status::InvalidArgument("batch of " + std::to_string(count) +
                                   " examples; this BatchGradients holds 1 to " +
                                   std::to_string(pointers_.size()));
  }
  if ((config_.attn_dropout > 0 || config_.resid_dropout > 0) && hooks.masks == nullptr) {
    return Status::InvalidArgument("dropout is on but no DropoutMaskSource was given");
  }
  count_ = count;
  const size_t window = static_cast<size_t>(config_.seq_len) + 1;
  ParallelFor(count_, num_threads_, [&](size_t i, int worker) {
    ExampleEngine<float>& engine = *engines_[worker];
    const uint8_t* tokens = examples + i * window;
    losses_[i] = engine.Forward(params, tokens, first_example + i, hooks);
    engine.Backward(params, tokens, first_example + i, pointers_[i], hooks);
  });
  return Status::OK();
}

StatusOr<float> BatchGradients::ComputeMeanGradient(const float* params, const uint8_t* examples,
                                                    size_t count, uint64_t first_example,
                                                    const ExampleHooks& hooks, float* grad_out) {
  DGRR_RETURN_IF_ERROR(ComputeExamples(params, examples, count, first_example, hooks));
  TreeReduceInPlace(gradients(), num_params_, num_threads_);
  const float divisor = static_cast<float>(count_);
  const float* sum = pointers_[0];
  for (size_t k = 0; k < num_params_; ++k) grad_out[k] = sum[k] / divisor;
  if (hooks.observer != nullptr) {
    ObserveParameterGradients(layout_, grad_out, hooks.observer, first_example,
                              static_cast<uint32_t>(count_));
  }
  return TreeSum(losses()) / divisor;
}

void ObserveParameterGradients(const ParameterLayout& layout, const float* grad,
                               BoundaryObserver* observer, uint64_t first_example,
                               uint32_t example_count) {
  if (observer == nullptr) return;
  for (const NamedTensor& t : layout.tensors()) {
    observer->OnBoundary(GradientName(t.name), Phase::kBackward, /*is_output=*/true,
                         grad + t.offset, t.shape, first_example, example_count);
  }
}

}  // namespace dgrr::model
