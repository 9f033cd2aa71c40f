#include "model/batch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/config.h"
#include "base/parallel.h"
#include "runtime/tree_reduce.h"

namespace dgrr::model {

BatchGradients::BatchGradients(const GptConfig& config, int num_threads, size_t max_examples,
                               Device device, GemmBackend gemm)
    : config_(config),
      layout_(config),
      num_threads_(std::max(1, num_threads)),
      num_params_(layout_.total_size()),
      device_(device) {
  // The GPU runs a worker's whole block; one worker feeds it.
  if (device_ == Device::kCuda) num_threads_ = 1;
  // Worker w runs the examples [w*n/T, (w+1)*n/T), so an engine would need
  // room for ceil(max_examples / threads) of them to run its share as one
  // block. On a CPU it takes them in blocks of at most kCpuBlockRows rows
  // instead: the blocks' activations then stay in cache between one
  // product and the next (measured, bench/README.md: `small` on one thread
  // 1.23x faster with AVX2 and 1.28x with AVX-512 in blocks of 2 examples
  // than in one block of 16; tiny unchanged). Stacking never changes a bit
  // (model/matmul.h), so the block size is free to choose.
  const size_t threads = static_cast<size_t>(num_threads_);
  const size_t per_worker = std::max<size_t>(1, (max_examples + threads - 1) / threads);
  const size_t seq_len = static_cast<size_t>(std::max(1, config.seq_len));
  const size_t cpu_block = std::min(per_worker, std::max<size_t>(1, kCpuBlockRows / seq_len));
  for (int w = 0; w < num_threads_; ++w) {
    if (device_ == Device::kCpu) {
      engines_.push_back(std::make_unique<ExampleEngine<float>>(config, cpu_block));
      continue;
    }
    StatusOr<std::unique_ptr<Launcher>> launcher = MakeLauncher(device_, gemm);
    if (!launcher.ok()) {
      device_status_ = launcher.status();
      break;
    }
    launchers_.push_back(std::move(*launcher));
    device_engines_.push_back(std::make_unique<DeviceEngine>(config, launchers_.back().get(), per_worker));
  }
  storage_.resize(max_examples * num_params_);
  for (size_t i = 0; i < max_examples; ++i) pointers_.push_back(storage_.data() + i * num_params_);
  losses_.resize(max_examples);
  if (device_status_.ok() && !launchers_.empty() && !launchers_[0]->host_memory()) {
    device_params_ = DeviceArray<float>(launchers_[0].get(), num_params_);
    device_grads_ = DeviceArray<float>(launchers_[0].get(), max_examples * num_params_);
  }
}

Status BatchGradients::ComputeExamples(const float* params, const uint8_t* examples,
                                       size_t count, uint64_t first_example,
                                       const ExampleHooks& hooks, std::optional<uint64_t> pairs_at) {
  if (count == 0 || count > pointers_.size()) {
    return Status::InvalidArgument("batch of " + std::to_string(count) +
                                   " examples; this BatchGradients holds 1 to " +
                                   std::to_string(pointers_.size()));
  }
  if ((config_.attn_dropout > 0 || config_.resid_dropout > 0) && hooks.masks == nullptr) {
    return Status::InvalidArgument("dropout is on but no DropoutMaskSource was given");
  }
  count_ = count;
  pair_summed_.assign(count, 0);
  pairs_requested_ = pairs_at.has_value();
  const size_t window = static_cast<size_t>(config_.seq_len) + 1;
  // The same static partition ParallelFor gives indices, taken a block at a
  // time: each worker stacks a block's examples (up to kCpuBlockRows rows on
  // the CPU) into one set of matrix multiplies.
  const int workers = static_cast<int>(std::min<size_t>(count_, static_cast<size_t>(num_threads_)));
  if (device_ != Device::kCpu) {
    DGRR_RETURN_IF_ERROR(device_status_);
    // The device engines: the same static partition. On the emulator the
    // kernels read and write this object's host buffers; on a GPU the
    // parameters go up once and the per-example gradients come back.
    const bool host = launchers_[0]->host_memory();
    const float* dparams = params;
    float* dgrads = storage_.data();
    if (!host) {
      launchers_[0]->CopyToDevice(device_params_.data(), params, num_params_ * sizeof(float));
      dparams = device_params_.data();
      dgrads = device_grads_.data();
    }
    ParallelFor(static_cast<size_t>(workers), workers, [&](size_t w, int) {
      DeviceEngine& engine = *device_engines_[w];
      const IndexRange range = StaticPartition(count_, workers, static_cast<int>(w));
      for (size_t i = range.begin; i < range.end; i += engine.max_examples()) {
        const size_t n = std::min(engine.max_examples(), range.end - i);
        const uint8_t* tokens = examples + i * window;
        engine.ForwardBlock(dparams, tokens, n, first_example + i, hooks, losses_.data() + i);
        engine.BackwardBlock(dparams, tokens, n, first_example + i, dgrads + i * num_params_,
                             num_params_, hooks);
      }
    });
    // The gradients stay on the device: the canonical reduction sums them
    // there (ReduceNode); gradients() copies them back if anybody reads them.
    host_stale_ = !host;
    return Status::OK();
  }
  ParallelFor(static_cast<size_t>(workers), workers, [&](size_t w, int) {
    ExampleEngine<float>& engine = *engines_[w];
    const IndexRange range = StaticPartition(count_, workers, static_cast<int>(w));
    for (size_t i = range.begin, n = 0; i < range.end; i += n) {
      n = std::min(engine.max_examples(), range.end - i);
      // Summing pairs from an odd tree position: one example alone first,
      // so that the blocks after it start at even positions (only a worker's
      // first block can: the next rule keeps the others even).
      if (pairs_at.has_value() && (*pairs_at + i) % 2 == 1) n = 1;
      // An even block where more follow, so the next one starts even too.
      if (pairs_at.has_value() && n % 2 == 1 && n > 1 && i + n < range.end) --n;
      const uint8_t* tokens = examples + i * window;
      engine.ForwardBlock(params, tokens, n, first_example + i, hooks, losses_.data() + i);
      // A block whose first example sits at an even tree position holds
      // whole pairs (2j, 2j + 1): every one of them is a node of the tree.
      if (pairs_at.has_value() && (*pairs_at + i) % 2 == 0) {
        engine.BackwardBlockSummingPairs(params, tokens, n, first_example + i, pointers_.data() + i, hooks);
        for (size_t j = 0; j + 1 < n; j += 2) pair_summed_[i + j] = 1;
      } else {
        engine.BackwardBlock(params, tokens, n, first_example + i, pointers_.data() + i, hooks);
      }
    }
  });
  return Status::OK();
}

size_t BatchGradients::summed_pairs() const {
  return static_cast<size_t>(std::count(pair_summed_.begin(), pair_summed_.end(), uint8_t{1}));
}

std::span<float* const> BatchGradients::gradients() {
  if (pairs_requested_) {
    // A programming error: the caller asked for pair sums (pairs_at), whether
    // or not any block held a whole pair this time.
    std::fprintf(stderr, "dgrr::model: per-example gradients asked for after ComputeExamples summed them in pairs\n");
    std::abort();
  }
  if (host_stale_) {
    launchers_[0]->CopyToHost(storage_.data(), device_grads_.data(),
                              count_ * num_params_ * sizeof(float));
    host_stale_ = false;
  }
  return {pointers_.data(), count_};
}

StatusOr<const float*> BatchGradients::ReduceNode(size_t begin, size_t count,
                                                  const TreeBlockDone& block_done) {
  if (count == 0 || begin > count_ || count > count_ - begin) {
    return Status::InvalidArgument("tree sum of examples [" + std::to_string(begin) + ", " +
                                   std::to_string(begin + count) + ") of a batch of " + std::to_string(count_));
  }
  if (device_ == Device::kCpu || (!host_stale_ && !launchers_[0]->host_memory())) {
    // On the host: the CPU's batch, or a device batch already copied back
    // (so the buffers are current: no gradients(), which refuses after a
    // call that asked for pairs).
    if (begin > 0 && pair_summed_[begin - 1] != 0) {
      return Status::InvalidArgument("tree sum of examples [" + std::to_string(begin) + ", " +
                                     std::to_string(begin + count) + ") starts inside the summed pair [" +
                                     std::to_string(begin - 1) + ", " + std::to_string(begin + 1) + ")");
    }
    const std::span<float* const> buffers = gradient_buffers().subspan(begin, count);
    const std::span<const uint8_t> flags = std::span<const uint8_t>(pair_summed_).subspan(begin, count);
    DGRR_RETURN_IF_ERROR(TreeReduceInPlace(buffers, num_params_, num_threads_, flags, block_done));
    return static_cast<const float*>(buffers[0]);
  }
  Launcher& launcher = *launchers_[0];
  float* base = (launcher.host_memory() ? storage_.data() : device_grads_.data()) + begin * num_params_;
  launcher.Launch(kernels::TreeSumKernel{base, num_params_, count, num_params_});
  if (!launcher.host_memory()) launcher.CopyToHost(pointers_[begin], base, num_params_ * sizeof(float));
  if (block_done) block_done(0, num_params_);
  return static_cast<const float*>(pointers_[begin]);
}

StatusOr<float> BatchGradients::ComputeMeanGradient(const float* params, const uint8_t* examples,
                                                    size_t count, uint64_t first_example,
                                                    const ExampleHooks& hooks, float* grad_out) {
  DGRR_RETURN_IF_ERROR(ComputeExamples(params, examples, count, first_example, hooks, /*pairs_at=*/0));
  // The division as each block of the sum is done (ReduceNode's block_done),
  // while the block is in cache.
  const float divisor = static_cast<float>(count_);
  const float* const root = pointers_[0];
  const TreeBlockDone divide = [&](size_t e0, size_t e1) {
    for (size_t k = e0; k < e1; ++k) grad_out[k] = root[k] / divisor;
  };
  DGRR_RETURN_IF_ERROR(ReduceNode(0, count_, divide).status());
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
    observer->OnBoundary(GradientName(t.name), Phase::kBackward, Operator::kOther, /*is_output=*/true,
                         grad + t.offset, t.shape, first_example, example_count);
  }
}

}  // namespace dgrr::model
