// Checkpoint write speed against a plain sequential write of the same raw bytes
// with the same durability (temporary file, fsync, rename, fsync directory:
// WriteFileAtomically), both into the same directory in the same run.
// Target: WriteCheckpoint >= 0.5x the plain write's bytes per second.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "model/config.h"

namespace dgrr::checkpoint {
namespace {

// Parameters and AdamW moments shaped like the model presets: "tiny" has
// 117,504 f32 parameters (model/config.cc); 2M stands in for a larger model.
struct State {
  std::vector<float> params, m, v;
  uint64_t step = 40, cursor[2] = {1, 4096};
  StateRegistry registry;
  std::string raw;  // the same bytes, concatenated, for the plain write

  explicit State(size_t n) : params(n), m(n), v(n) {
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (size_t i = 0; i < n; ++i) {
      params[i] = normal(gen);
      m[i] = normal(gen) * 1e-3f;
      v[i] = std::abs(normal(gen)) * 1e-6f;
    }
    Register("params", params.data(), n * 4, DType::kF32, StateRole::kParameter);
    Register("adam.m", m.data(), n * 4, DType::kF32, StateRole::kOptimizer);
    Register("adam.v", v.data(), n * 4, DType::kF32, StateRole::kOptimizer);
    Register("opt.step", &step, 8, DType::kU64, StateRole::kCounter);
    Register("data.cursor", cursor, 16, DType::kU64, StateRole::kCursor);
  }
  void Register(const char* name, void* data, uint64_t bytes, DType dtype, StateRole role) {
    (void)registry.Register({name, data, bytes, dtype, {}, role, RestorePolicy::kCheckpoint, true});
    raw.append(static_cast<const char*>(data), bytes);
  }
};

std::string BenchDir() {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path().string() + "/dgrr_ckpt_bench_" +
                    std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

State& StateOf(int64_t params) {
  static State tiny(117504), large(2 << 20);
  return params == 117504 ? tiny : large;
}

void BM_PlainAtomicWrite(benchmark::State& st) {
  State& s = StateOf(st.range(0));
  const std::string path = BenchDir() + "/plain.bin";
  for (auto _ : st) {
    if (!WriteFileAtomically(path, s.raw).ok()) st.SkipWithError("plain write failed");
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * s.raw.size()));
}

void BM_WriteCheckpoint(benchmark::State& st) {
  State& s = StateOf(st.range(0));
  CheckpointWriteOptions options;
  options.zstd_level = static_cast<int>(st.range(1));
  options.threads = static_cast<int>(st.range(2));
  CheckpointMeta meta;
  meta.step = 40;
  const std::string path = BenchDir() + "/ckpt.h5";
  for (auto _ : st) {
    if (!WriteCheckpoint(path, meta, {{0, &s.registry, 0}}, options).ok()) {
      st.SkipWithError("checkpoint write failed");
    }
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * s.raw.size()));
  st.counters["file_over_raw"] = static_cast<double>(*FileSize(path)) / static_cast<double>(s.raw.size());
}

// The two writes alternate inside one loop so that the shared disk's fsync
// latency, which varies by the second on this machine, hits both alike.
// Reports the checkpoint's speed relative to the plain write (target >= 0.5).
void BM_CheckpointVsPlainInterleaved(benchmark::State& st) {
  State& s = StateOf(st.range(0));
  CheckpointWriteOptions options;
  options.zstd_level = static_cast<int>(st.range(1));
  CheckpointMeta meta;
  const std::string plain_path = BenchDir() + "/plain_i.bin";
  const std::string ckpt_path = BenchDir() + "/ckpt_i.h5";
  double plain_s = 0, ckpt_s = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!WriteFileAtomically(plain_path, s.raw).ok()) st.SkipWithError("plain write failed");
    const auto t1 = std::chrono::steady_clock::now();
    if (!WriteCheckpoint(ckpt_path, meta, {{0, &s.registry, 0}}, options).ok()) {
      st.SkipWithError("checkpoint write failed");
    }
    const auto t2 = std::chrono::steady_clock::now();
    plain_s += std::chrono::duration<double>(t1 - t0).count();
    ckpt_s += std::chrono::duration<double>(t2 - t1).count();
    st.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
  }
  const double mb = static_cast<double>(s.raw.size()) * st.iterations() / 1e6;
  st.counters["plain_MBps"] = mb / plain_s;
  st.counters["ckpt_MBps"] = mb / ckpt_s;
  st.counters["ckpt_over_plain"] = plain_s / ckpt_s;
}

// The reference trainer's layout (model/train_state.h): the tiny state's
// buffers registered one entry per parameter and moment tensor (85 datasets)
// against the same bytes as three flat entries, alternating in one loop.
// Reports what the per-tensor layout costs a checkpoint write.
void BM_PerTensorVsFlatInterleaved(benchmark::State& st) {
  State& s = StateOf(117504);
  const model::ParameterLayout layout(model::PresetByName("tiny")->model);
  if (layout.total_size() != s.params.size()) {
    st.SkipWithError("the tiny preset's parameter count changed");
    return;
  }
  StateRegistry per_tensor;
  const std::pair<const char*, float*> variables[] = {{"", s.params.data()}, {"adamw.m.", s.m.data()},
                                                      {"adamw.v.", s.v.data()}};
  for (const auto& [prefix, base] : variables) {
    for (const model::NamedTensor& t : layout.tensors()) {
      (void)per_tensor.Register({prefix + t.name, base + t.offset, t.size * 4, DType::kF32, t.shape,
                                 *prefix ? StateRole::kOptimizer : StateRole::kParameter,
                                 RestorePolicy::kCheckpoint, true});
    }
  }
  (void)per_tensor.Register({"opt.step", &s.step, 8, DType::kU64, {}, StateRole::kCounter,
                             RestorePolicy::kCheckpoint, true});
  CheckpointMeta meta;
  const std::string flat_path = BenchDir() + "/flat_i.h5", split_path = BenchDir() + "/split_i.h5";
  double flat_s = 0, split_s = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!WriteCheckpoint(flat_path, meta, {{0, &s.registry, 0}}).ok()) st.SkipWithError("flat write failed");
    const auto t1 = std::chrono::steady_clock::now();
    if (!WriteCheckpoint(split_path, meta, {{0, &per_tensor, 0}}).ok()) st.SkipWithError("split write failed");
    const auto t2 = std::chrono::steady_clock::now();
    flat_s += std::chrono::duration<double>(t1 - t0).count();
    split_s += std::chrono::duration<double>(t2 - t1).count();
    st.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
  }
  st.counters["flat_ms"] = 1e3 * flat_s / static_cast<double>(st.iterations());
  st.counters["per_tensor_ms"] = 1e3 * split_s / static_cast<double>(st.iterations());
  st.counters["per_tensor_over_flat"] = split_s / flat_s;
  st.counters["flat_bytes"] = static_cast<double>(*FileSize(flat_path));
  st.counters["per_tensor_bytes"] = static_cast<double>(*FileSize(split_path));
}

void BM_ReadCheckpoint(benchmark::State& st) {
  State& s = StateOf(st.range(0));
  CheckpointMeta meta;
  const std::string path = BenchDir() + "/read.h5";
  (void)WriteCheckpoint(path, meta, {{0, &s.registry, 0}});
  for (auto _ : st) {
    auto c = ReadCheckpoint(path);
    if (!c.ok()) st.SkipWithError("read failed");
    benchmark::DoNotOptimize(c);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * s.raw.size()));
}

BENCHMARK(BM_PlainAtomicWrite)->Arg(117504)->Arg(2 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
// Args: parameters, zstd level, compression threads (0 = all cores).
BENCHMARK(BM_WriteCheckpoint)
    ->ArgsProduct({{117504, 2 << 20}, {-5, -3, 1, 3}, {0}})
    ->Args({2 << 20, -3, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CheckpointVsPlainInterleaved)
    ->ArgsProduct({{117504, 2 << 20}, {-3, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_PerTensorVsFlatInterleaved)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_ReadCheckpoint)->Arg(117504)->Arg(2 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dgrr::checkpoint

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(dgrr::checkpoint::BenchDir());
  return 0;
}
