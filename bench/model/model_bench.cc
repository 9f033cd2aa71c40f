// Matmul throughput at the reference GPT's shapes, next to the plain triple
// loop measured in the same run, plus whole training-step times per preset.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/batch.h"
#include "model/corpus.h"
#include "model/gpt.h"
#include "model/matmul.h"

namespace dgrr::model {
namespace {

// (M, K, N) of the matmuls one example runs: forward qkv, fc, mlp proj, LM
// head for tiny (T=16, C=64) and small (T=64, C=128), and small's dW product.
const std::vector<std::vector<int64_t>> kShapes = {
    {16, 64, 192}, {16, 64, 256}, {16, 256, 64},                    // tiny
    {64, 128, 384}, {64, 128, 512}, {64, 512, 128}, {64, 128, 256},  // small
    {128, 64, 512},                                                 // small dW = inp^T . dout
};

// The transposed forms `small` runs on a CPU: the weight gradients
// dW[in,out] = inp^T . dout per example (GemmTransA, K = T = 64; dwte with
// M = V = 256) and the input gradients dinp[rows,in] = dout . W^T of a block
// (GemmTransB, 128 rows: two examples, kCpuBlockRows; the LM head's logits
// too).
const std::vector<std::vector<int64_t>> kTransAShapes = {
    {128, 64, 384}, {128, 64, 128}, {128, 64, 512}, {512, 64, 128}, {256, 64, 128}};
const std::vector<std::vector<int64_t>> kTransBShapes = {
    {128, 384, 128}, {128, 128, 128}, {128, 512, 128}, {128, 128, 512}, {128, 128, 256}};

template <void (*Kernel)(float*, const float*, const float*, int, int, int, bool)>
void BM_Matmul(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), K = static_cast<int>(state.range(1)),
            N = static_cast<int>(state.range(2));
  std::vector<float> a(static_cast<size_t>(M) * K, 0.5f), b(static_cast<size_t>(K) * N, 0.25f),
      c(static_cast<size_t>(M) * N);
  for (auto _ : state) {
    Kernel(c.data(), a.data(), b.data(), M, K, N, false);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * K * N, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void Dispatched(float* c, const float* a, const float* b, int M, int K, int N, bool acc) {
  Gemm(c, a, b, M, K, N, acc);
}
void Reference(float* c, const float* a, const float* b, int M, int K, int N, bool acc) {
  MatmulReference(c, a, b, M, K, N, acc);
}

BENCHMARK(BM_Matmul<Dispatched>)->Name("Gemm/dispatched")->Apply([](auto* b) {
  for (const auto& s : kShapes) b->Args(s);
});
void DispatchedTransA(float* c, const float* a, const float* b, int M, int K, int N, bool acc) {
  GemmTransA(c, a, b, M, K, N, acc);
}
void DispatchedTransB(float* c, const float* a, const float* b, int M, int K, int N, bool acc) {
  GemmTransB(c, a, b, M, K, N, acc);
}
BENCHMARK(BM_Matmul<DispatchedTransA>)->Name("Gemm/trans_a")->Apply([](auto* b) {
  for (const auto& s : kTransAShapes) b->Args(s);
});
BENCHMARK(BM_Matmul<DispatchedTransB>)->Name("Gemm/trans_b")->Apply([](auto* b) {
  for (const auto& s : kTransBShapes) b->Args(s);
});
BENCHMARK(BM_Matmul<GemmFloatBaseline>)->Name("Gemm/sse2")->Apply([](auto* b) {
  for (const auto& s : kShapes) b->Args(s);
});
BENCHMARK(BM_Matmul<Reference>)->Name("Gemm/triple_loop")->Apply([](auto* b) {
  for (const auto& s : kShapes) b->Args(s);
});

// One optimizer step of a preset's default batch: forward + backward of every
// example, canonical tree, clipping, AdamW.
void BM_TrainStep(benchmark::State& state, const char* preset_name) {
  const Preset preset = *PresetByName(preset_name);
  const int threads = static_cast<int>(state.range(0));
  auto model = Gpt::Create(preset.model);
  model->Initialize(SplitMixNormalFill(1));
  auto data = Dataset::Arithmetic(2, preset.model.seq_len);
  const size_t B = preset.train.batch_size, window = data->window();
  std::vector<uint8_t> examples(B * window);
  for (size_t j = 0; j < B; ++j) std::copy(data->Example(j), data->Example(j) + window, examples.begin() + j * window);
  BatchGradients batch(preset.model, threads, B);
  AdamW adam(model->layout(), AdamWOptions{.weight_decay = preset.train.weight_decay});
  std::vector<float> grad(model->num_parameters());
  SplitMixDropoutMasks masks(3);  // the presets train with dropout
  ExampleHooks hooks;
  hooks.masks = &masks;
  // One untimed step first, as torch_gpt.py warms up: the buffers' first
  // touch (page faults, about 2 ms a step amortised over a short run) is
  // set-up, not throughput.
  (void)batch.ComputeMeanGradient(model->parameters(), examples.data(), B, 0, hooks, grad.data());
  adam.Step(model->parameters(), grad.data(), 1e-4f);
  for (auto _ : state) {
    if (!batch.ComputeMeanGradient(model->parameters(), examples.data(), B, 0, hooks, grad.data()).ok()) {
      state.SkipWithError("batch rejected");
      break;
    }
    ClipGradientsByGlobalNorm(grad.data(), grad.size(), preset.train.grad_clip);
    adam.Step(model->parameters(), grad.data(), 1e-4f);
  }
  state.counters["examples/s"] = benchmark::Counter(static_cast<double>(B), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(B * preset.model.seq_len),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
// CPU time is the whole process's (all worker threads), the figure to trust
// on a loaded machine; wall time beside it.
BENCHMARK_CAPTURE(BM_TrainStep, tiny, "tiny")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, small, "small")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

}  // namespace
}  // namespace dgrr::model

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The products' and layers' vector build (DGRR_MAX_ISA caps it,
  // docs/environment.md), and what the ratios are taken against.
  benchmark::AddCustomContext("isa", std::string("model products and layers ") +
                                         dgrr::model::GemmIsaName(dgrr::model::BestGemmIsa()));
  benchmark::AddCustomContext("baseline", "Gemm/triple_loop (same k order); BM_TrainStep: torch, "
                                          "bench/model/compare_torch.sh");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
