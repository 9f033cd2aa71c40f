// A batch of examples on one rank: per-example forward/backward on a static
// pool of worker threads, then the canonical tree (runtime/tree_reduce.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/gpt.h"

namespace dgrr::model {

class BatchGradients {
 public:
  // Buffers for up to `max_examples` per call and one engine per thread.
  BatchGradients(const GptConfig& config, int num_threads, size_t max_examples);
  BatchGradients(const BatchGradients&) = delete;
  BatchGradients& operator=(const BatchGradients&) = delete;

  // Runs examples[i] (count windows of seq_len + 1 bytes, back to back) as
  // global example first_example + i, each into its own gradient buffer.
  // InvalidArgument if count is 0 or above max_examples, or if the config has
  // dropout and hooks.masks is null.
  Status ComputeExamples(const float* params, const uint8_t* examples, size_t count,
                       uint64_t first_example, const ExampleHooks& hooks);

  // Per-example results of the last ComputeExamples.
  std::span<float* const> gradients() const { return {pointers_.data(), count_}; }
  std::span<const float> losses() const { return {losses_.data(), count_}; }

  // Single-rank step: ComputeExamples, tree-reduce gradients and losses, then
  // divide both by count (a division, not a multiply by 1/count: one
  // rounding). Writes the mean gradient to grad_out and returns the mean loss.
  // If hooks.observer is set, reports every parameter gradient (per batch).
  StatusOr<float> ComputeMeanGradient(const float* params, const uint8_t* examples, size_t count,
                            uint64_t first_example, const ExampleHooks& hooks, float* grad_out);

  int num_threads() const { return num_threads_; }
  size_t num_parameters() const { return num_params_; }

 private:
  GptConfig config_;
  ParameterLayout layout_;
  int num_threads_;
  size_t num_params_;
  size_t count_ = 0;
  std::vector<std::unique_ptr<ExampleEngine<float>>> engines_;  // one per worker
  std::vector<float> storage_;                                  // max_examples x num_params
  std::vector<float*> pointers_;
  std::vector<float> losses_;
};

// Reports each parameter's gradient as a per-batch backward boundary named
// GradientName(param) ("block0.mlp.fc.dw", "dwte", ...), in layout order.
void ObserveParameterGradients(const ParameterLayout& layout, const float* grad,
                               BoundaryObserver* observer, uint64_t first_example,
                               uint32_t example_count);

}  // namespace dgrr::model
