// Benchmarks of the two speed targets, each beside a baseline from
// the same run:
//   - lockstep: identical 10 M-record sequences certified at >= 20 M
//     records/s (baseline: memcmp of the same bytes, the memory-speed floor);
//   - tolerant: two 1 M-boundary sequences with 5% local reordering and 2%
//     inserted boundaries aligned in <= 2 s, planted divergence found exactly
//     (baseline: std::sort of 1 M 64-bit keys, the cost of one sort pass);
//   - hard pairs: the same with keys repeating at several distances
//     (replay/synthetic.h), the planted divergence named exactly;
//   - one key repeated 50,000 times, half its occurrences without a
//     counterpart: the cost of saying why stays linear.
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

// One key repeated N times (every 4th boundary of one long step, as a
// key that recurs on every step of a long run would), B keeping only the
// first half of its occurrences: N / 2 occurrences of A stay unpaired with
// no candidate in reach, and the reason given for each must not cost a scan
// of all of B's occurrences (WhyUnpaired). Every one must be said to have no
// counterpart (else the benchmark errors).
struct RepeatedKeyPair {
  std::vector<BoundaryItem> a, b;
  uint64_t dropped = 0;
};
RepeatedKeyPair LongRepeatedKey(uint64_t occurrences) {
  SyntheticOptions options;
  options.length = 4 * occurrences;
  options.boundaries_per_step = static_cast<uint32_t>(options.length);
  options.repeated_key_every = 4;
  RepeatedKeyPair p;
  for (uint64_t i = 0; i < options.length; ++i) p.a.push_back(SyntheticBoundary(options, i));
  // The generator varies phase and dtype along the step: one key everywhere.
  const BoundaryKey repeated = p.a[3].key;
  for (BoundaryItem& item : p.a) {
    if (item.key.name_hash == repeated.name_hash) item.key = repeated;
  }
  for (uint64_t i = 0; i < options.length; ++i) {
    if (i >= options.length / 2 && p.a[i].key.name_hash == repeated.name_hash) {
      ++p.dropped;
      continue;
    }
    p.b.push_back(p.a[i]);
  }
  return p;
}

void BM_AlignLongRepeatedKey(benchmark::State& state) {
  const RepeatedKeyPair pair = LongRepeatedKey(static_cast<uint64_t>(state.range(0)));
  for (auto _ : state) {
    const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
    const Coverage coverage = CoverageOf(alignment);
    if (coverage.no_counterpart != pair.dropped || coverage.uncompared() != pair.dropped) {
      state.SkipWithError("the dropped occurrences are not exactly the uncompared ones");
    }
    state.counters["unpaired"] = static_cast<double>(coverage.uncompared());
  }
  state.SetItemsProcessed(state.iterations() * pair.a.size());
}
BENCHMARK(BM_AlignLongRepeatedKey)
    ->Arg(50'000)
    ->Arg(200'000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

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
