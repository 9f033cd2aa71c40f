// Benchmarks of the two speed targets, each beside a baseline from
// the same run:
//   - lockstep: identical 10 M-record sequences certified at >= 20 M
//     records/s (baseline: memcmp of the same bytes, the memory-speed floor);
//   - tolerant: two 1 M-boundary sequences with 5% local reordering and 2%
//     inserted boundaries aligned in <= 2 s, planted divergence found exactly
//     (baseline: std::sort of 1 M 64-bit keys, the cost of one sort pass);
//   - hard pairs: the same with keys repeating at several distances
//     (replay/synthetic.h), the planted divergence named exactly.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "replay/certify.h"
#include "replay/mapper.h"
#include "replay/synthetic.h"

namespace dgrr::replay {
namespace {

constexpr uint64_t kChunk = 1'000'000;
constexpr int kChunksPerStream = 10;  // 10 M records per stream

const SyntheticPair& IdenticalChunk() {
  static const SyntheticPair pair = [] {
    SyntheticOptions options;
    options.length = kChunk;
    options.boundaries_per_step = 512;
    return MakeSyntheticPair(options);
  }();
  return pair;
}

const SyntheticPair& ReorderedPair() {
  static const SyntheticPair pair = [] {
    SyntheticOptions options;
    options.length = 1'000'000;
    options.boundaries_per_step = 512;
    options.reorder_fraction = 0.05;
    options.insert_fraction = 0.02;
    options.divergence_at = 654321;
    options.seed = 11;
    return MakeSyntheticPair(options);
  }();
  return pair;
}

// 10 M records streamed through LockstepComparer in 1 M-record chunks.
void BM_LockstepStream10M(benchmark::State& state) {
  const SyntheticPair& chunk = IdenticalChunk();
  for (auto _ : state) {
    LockstepComparer comparer(true, CertifyOptions{});
    for (int c = 0; c < kChunksPerStream; ++c) {
      if (!comparer.Feed(chunk.a, chunk.b)) state.SkipWithError("chunks do not line up");
    }
    const CertifyReport report = comparer.Finish();
    if (report.certified_pairs != kChunk * kChunksPerStream) state.SkipWithError("not all certified");
    benchmark::DoNotOptimize(report.certified_pairs);
  }
  state.SetItemsProcessed(state.iterations() * kChunk * kChunksPerStream);
}
BENCHMARK(BM_LockstepStream10M)->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: memcmp over the same 10 M records' bytes.
void BM_MemcmpBaseline10M(benchmark::State& state) {
  const SyntheticPair& chunk = IdenticalChunk();
  const size_t bytes = chunk.a.size() * sizeof(BoundaryItem);
  for (auto _ : state) {
    for (int c = 0; c < kChunksPerStream; ++c) {
      const void* a = chunk.a.data();
      const void* b = chunk.b.data();
      benchmark::DoNotOptimize(a);  // hide the arguments so each memcmp really runs
      benchmark::DoNotOptimize(b);
      int result = std::memcmp(a, b, bytes);
      benchmark::DoNotOptimize(result);
    }
  }
  state.SetItemsProcessed(state.iterations() * kChunk * kChunksPerStream);
}
BENCHMARK(BM_MemcmpBaseline10M)->Unit(benchmark::kMillisecond)->UseRealTime();

// The tolerant mapper on 1 M boundaries, then certification; checks that the
// planted divergence is found exactly.
void BM_AlignTolerant1M(benchmark::State& state) {
  const SyntheticPair& pair = ReorderedPair();
  for (auto _ : state) {
    const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
    const CertifyReport report = Certify(pair.a, pair.b, alignment, CertifyOptions{});
    if (!report.first_divergence || report.first_divergence->index_a != 654321 ||
        report.first_divergence->index_b != *pair.divergence_b) {
      state.SkipWithError("planted divergence not found exactly");
    }
    const Coverage coverage = CoverageOf(alignment);
    state.counters["moved"] = static_cast<double>(alignment.stats.moved_pairs);
    state.counters["anchors"] = static_cast<double>(alignment.stats.anchors);
    state.counters["unmatched_b"] = static_cast<double>(alignment.unmatched_b.size());
    state.counters["uncompared"] = static_cast<double>(coverage.uncompared());
  }
  state.SetItemsProcessed(state.iterations() * pair.a.size());
}
BENCHMARK(BM_AlignTolerant1M)->Unit(benchmark::kMillisecond)->Iterations(5)->UseRealTime();

// Hard pairs (replay/synthetic.h): keys repeating every 54, 193 and 400
// positions, 5% swaps of up to the reach (64), 2% insertions, 0.2%
// deletions, a planted divergence at a repeated key; Align + Certify. The
// divergence must be named exactly (else the benchmark errors).
const SyntheticPair& HardPair() {
  static const SyntheticPair pair = [] {
    SyntheticOptions options;
    options.length = 1'000'000;
    options.boundaries_per_step = 1000;
    options.repeat_distances = {54, 193, 400};
    options.reorder_fraction = 0.05;
    options.reorder_distance = 60;
    options.disjoint_swaps = true;
    options.insert_fraction = 0.02;
    options.delete_fraction = 0.002;
    options.divergence_at = 654399;  // 399 % 400 == 399: the key repeating every 400
    options.seed = 11;
    return MakeSyntheticPair(options);
  }();
  return pair;
}

void BM_AlignHardPairs1M(benchmark::State& state) {
  const SyntheticPair& pair = HardPair();
  for (auto _ : state) {
    const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
    const CertifyReport report = Certify(pair.a, pair.b, alignment, CertifyOptions{});
    if (!report.first_divergence || report.first_divergence->index_a != 654399 ||
        report.first_divergence->index_b != *pair.divergence_b) {
      state.SkipWithError("planted divergence not named exactly");
    }
    const Coverage coverage = CoverageOf(alignment);
    state.counters["repeat_key"] = static_cast<double>(alignment.stats.repeat_key_pairs);
    state.counters["fingerprint"] = static_cast<double>(alignment.stats.fingerprint_pairs);
    state.counters["ambiguous"] = static_cast<double>(coverage.ambiguous);
    state.counters["outside_reach"] = static_cast<double>(coverage.outside_reach);
  }
  state.SetItemsProcessed(state.iterations() * pair.a.size());
}
BENCHMARK(BM_AlignHardPairs1M)->Unit(benchmark::kMillisecond)->Iterations(5)->UseRealTime();

// Baseline: one std::sort of 1 M 64-bit keys (the mapper sorts twice).
void BM_SortBaseline1M(benchmark::State& state) {
  const SyntheticPair& pair = ReorderedPair();
  std::vector<uint64_t> keys(pair.a.size());
  for (auto _ : state) {
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = KeyDigest(pair.a[i].key, true);
    std::sort(keys.begin(), keys.end());
    benchmark::DoNotOptimize(keys.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
}
BENCHMARK(BM_SortBaseline1M)->Unit(benchmark::kMillisecond)->Iterations(5)->UseRealTime();

}  // namespace
}  // namespace dgrr::replay

BENCHMARK_MAIN();
