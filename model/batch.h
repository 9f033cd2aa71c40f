// A batch of examples on one rank: per-example forward/backward on a static
// pool of worker threads, then the canonical tree (runtime/tree_reduce.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/device_engine.h"
#include "model/gpt.h"
#include "model/grid.h"
#include "runtime/canonical_reduce.h"
#include "runtime/tree_reduce.h"

namespace dgrr::model {

// The most rows (examples x seq_len) a CPU engine stacks into one block:
// fewer, and the products' rows are too few for a register tile; more, and
// a block's activations fall out of cache between one product and the next
// (BatchGradients' constructor says what was measured).
inline constexpr size_t kCpuBlockRows = 128;

class BatchGradients {
 public:
  // Buffers for up to `max_examples` per call and one engine per thread.
  // `device` chooses the engine: kCpu the CPU layers (ExampleEngine), kCudaSim
  // and kCuda the device kernels (DeviceEngine) on the grid emulator, one per
  // thread, or on the GPU (one worker: the device runs the block's
  // examples). Where the device's launcher cannot be made (cuda without a
  // GPU), ComputeExamples returns why; device_status() says it up front.
  // `gemm` chooses the device launchers' products (model/grid.h).
  BatchGradients(const GptConfig& config, int num_threads, size_t max_examples,
                 Device device = Device::kCpu, GemmBackend gemm = GemmBackend::kExact);
  BatchGradients(const BatchGradients&) = delete;
  BatchGradients& operator=(const BatchGradients&) = delete;

  // Runs examples[i] (count windows of seq_len + 1 bytes, back to back) as
  // global example first_example + i, each into its own gradient buffer.
  // InvalidArgument if count is 0 or above max_examples, or if the config has
  // dropout and hooks.masks is null.
  //
  // `pairs_at`, when given, is the position of examples[0] in the batch's
  // canonical tree (the tree over [0, B) of runtime/tree_reduce.h) and lets
  // the CPU engines sum the tree's first level as they go: two examples at
  // positions 2j and 2j + 1 that one block computes leave only their sum,
  // left + right bit for bit, in the first one's buffer (model/gpt.h,
  // BackwardBlockSummingPairs), so half the per-example gradients are never
  // stored. ReduceNode then takes those pairs as summed, and gradients()
  // is not to be called after a call with pairs_at (it aborts, whether or
  // not a block held a whole pair): for callers that read node sums only.
  Status ComputeExamples(const float* params, const uint8_t* examples, size_t count,
                       uint64_t first_example, const ExampleHooks& hooks,
                       std::optional<uint64_t> pairs_at = std::nullopt);

  // Per-example results of the last ComputeExamples, in host memory (on a
  // GPU the gradients are copied back at the first call after a compute).
  std::span<float* const> gradients();
  // How many pairs the last ComputeExamples summed (0 without pairs_at, on
  // a device, or where no block held a whole pair).
  size_t summed_pairs() const;
  // The same buffers without copying anything back: for CanonicalAllReduce
  // with node_reducer(), which reads only the node sums it asks for.
  std::span<float* const> gradient_buffers() const { return {pointers_.data(), count_}; }
  std::span<const float> losses() const { return {losses_.data(), count_}; }

  // Single-rank step: ComputeExamples (summing pairs: the tree is over these
  // examples, position 0 first), tree-reduce gradients and losses, then
  // divide both by count (a division, not a multiply by 1/count: one
  // rounding). Writes the mean gradient to grad_out and returns the mean loss.
  // If hooks.observer is set, reports every parameter gradient (per batch).
  StatusOr<float> ComputeMeanGradient(const float* params, const uint8_t* examples, size_t count,
                            uint64_t first_example, const ExampleHooks& hooks, float* grad_out);

  // Where the device engines ran the batch: the canonical tree sum of the
  // per-example gradients [begin, begin + count) of the last ComputeExamples
  // by the launcher's tree-sum kernel (kernels::TreeSumKernel, bitwise
  // TreeReduceInPlace), only the sum brought back to the host, into buffer
  // `begin`, which is returned (the other buffers of the node are clobbered,
  // as TreeReduceInPlace leaves them). On the CPU: TreeReduceInPlace. For
  // CanonicalAllReduce's reduce_node. Where pairs were summed, [begin,
  // begin + count) must not split one (InvalidArgument).
  // `block_done`, when given, is called for each block of the sum as it is
  // done (runtime/tree_reduce.h), on the device path once for all of it.
  StatusOr<const float*> ReduceNode(size_t begin, size_t count,
                                    const TreeBlockDone& block_done = nullptr);
  NodeReducer node_reducer() {
    return [this](size_t begin, size_t count) { return ReduceNode(begin, count); };
  }

  int num_threads() const { return num_threads_; }
  Device device() const { return device_; }
  const Status& device_status() const { return device_status_; }
  size_t num_parameters() const { return num_params_; }

 private:
  GptConfig config_;
  ParameterLayout layout_;
  int num_threads_;
  size_t num_params_;
  size_t count_ = 0;
  std::vector<std::unique_ptr<ExampleEngine<float>>> engines_;  // one per worker (cpu)
  Device device_ = Device::kCpu;
  Status device_status_;
  std::vector<std::unique_ptr<Launcher>> launchers_;             // one per worker (devices)
  std::vector<std::unique_ptr<DeviceEngine>> device_engines_;
  DeviceArray<float> device_params_, device_grads_;  // a launcher without host memory
  std::vector<float> storage_;                                  // max_examples x num_params
  std::vector<float*> pointers_;
  std::vector<float> losses_;
  // pair_summed_[i] != 0: buffer i holds examples i and i + 1 summed (the
  // last ComputeExamples with pairs_at), buffer i + 1 is scratch.
  std::vector<uint8_t> pair_summed_;
  bool pairs_requested_ = false;  // the last ComputeExamples had pairs_at
  // The per-example gradients are on a device that does not share host
  // memory and have not been copied back since the last compute.
  bool host_stale_ = false;
};

// Reports each parameter's gradient as a per-batch backward boundary named
// GradientName(param) ("block0.mlp.fc.dw", "dwte", ...), in layout order.
void ObserveParameterGradients(const ParameterLayout& layout, const float* grad,
                               BoundaryObserver* observer, uint64_t first_example,
                               uint32_t example_count);

}  // namespace dgrr::model
