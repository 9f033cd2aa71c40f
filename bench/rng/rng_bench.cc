// Bulk u32 generation against a plain memory-write pass of the same bytes,
// measured in the same run. Target: >= 1 G values/s on one core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "rng/distributions.h"
#include "rng/philox_fill.h"
#include "rng/rng_streams.h"

namespace dgrr::rng {
namespace {

// 64 Ki values = 256 KiB: large enough to amortise the call, small enough to
// stay in L2 so the figure is the generator's, not DRAM's.
constexpr size_t kValues = 1 << 16;

void BM_MemoryWriteBaseline(benchmark::State& state) {
  std::vector<uint32_t> out(kValues);
  uint32_t value = 0;
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), value++);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kValues);
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(uint32_t));
}
BENCHMARK(BM_MemoryWriteBaseline);

void BM_StreamFill(benchmark::State& state) {
  PhiloxStream stream = RngStreams(1).Stream(Purpose::kDropout, {1, 2, 3, 4});
  std::vector<uint32_t> out(kValues);
  for (auto _ : state) {
    stream.Fill(out.data(), out.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(FillKernelName(BestFillKernel()));
  state.SetItemsProcessed(state.iterations() * kValues);
  state.SetBytesProcessed(state.iterations() * kValues * sizeof(uint32_t));
}
BENCHMARK(BM_StreamFill);

void BM_FillKernel(benchmark::State& state) {
  const FillKernel kernel = static_cast<FillKernel>(state.range(0));
  if (!FillKernelSupported(kernel)) {
    state.SkipWithError("kernel not supported on this CPU");
    return;
  }
  std::vector<uint32_t> out(kValues);
  uint64_t block = 0;
  for (auto _ : state) {
    PhiloxFillBlocksWith(kernel, 0x1234, 0x5678, block, kValues / 4, out.data());
    block += kValues / 4;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(FillKernelName(kernel));
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_FillKernel)
    ->Arg(static_cast<int>(FillKernel::kScalar))
    ->Arg(static_cast<int>(FillKernel::kSse2))
    ->Arg(static_cast<int>(FillKernel::kAvx2))
    ->Arg(static_cast<int>(FillKernel::kAvx512));

void BM_NextU32(benchmark::State& state) {
  PhiloxStream stream(1, 2);
  for (auto _ : state) benchmark::DoNotOptimize(stream.NextU32());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NextU32);

void BM_BernoulliMask(benchmark::State& state) {
  PhiloxStream stream(1, 2);
  std::vector<uint8_t> mask(kValues);
  const uint64_t threshold = *BernoulliThreshold(0.9);
  for (auto _ : state) {
    FillBernoulliMask(stream, mask.data(), mask.size(), threshold);
    benchmark::DoNotOptimize(mask.data());
  }
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_BernoulliMask);

void BM_UniformFloat(benchmark::State& state) {
  PhiloxStream stream(1, 2);
  std::vector<float> out(kValues);
  for (auto _ : state) {
    FillUniformFloat(stream, out.data(), out.size());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_UniformFloat);

void BM_NormalFloat(benchmark::State& state) {
  PhiloxStream stream(1, 2);
  std::vector<float> out(kValues);
  for (auto _ : state) {
    FillNormalFloat(stream, out.data(), out.size());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_NormalFloat);

void BM_EpochPermutation(benchmark::State& state) {
  const RngStreams rng(1);
  uint64_t epoch = 0;
  for (auto _ : state) benchmark::DoNotOptimize(rng.EpochPermutation(epoch++, kValues));
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_EpochPermutation);

void BM_DeriveStream(benchmark::State& state) {
  const RngStreams rng(1);
  uint64_t example = 0;
  for (auto _ : state) benchmark::DoNotOptimize(rng.Stream(Purpose::kDropout, {1, example++, 3, 4}));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DeriveStream);

}  // namespace
}  // namespace dgrr::rng
