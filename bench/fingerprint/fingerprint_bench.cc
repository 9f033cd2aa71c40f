// Fingerprint throughput against a plain read of the same memory, measured in
// the same run. Rates are per CPU second (Google Benchmark's default), which
// keeps time lost to other processes on a shared machine out of the figures.
// Targets (256 MiB): xor64 >= 0.9x the read pass, fused xor64+xxh3 >= 0.7x.
// Results go to bench/README.md. The comparison with torch.sum on the same
// tensor is compare_torch.sh (ctypes, one process).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "fingerprint/fingerprint.h"
#include "fingerprint/fingerprint_simd.h"

#include "bench/fingerprint/read_pass.h"

namespace {

// One buffer per size, filled (so every page is really backed) once.
const std::vector<uint8_t>& Buffer(size_t n) {
  static std::vector<std::vector<uint8_t>> buffers;
  for (const auto& b : buffers) {
    if (b.size() == n) return b;
  }
  std::vector<uint8_t> b(n);
  std::mt19937_64 rng(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&b[i], &v, 8);
  }
  buffers.push_back(std::move(b));
  return buffers.back();
}

using dgrr::bench::ReadPass;

void BM_ReadPass(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ReadPass(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Xor64(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(dgrr::Xor64(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Xxh3(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(dgrr::Xxh3(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// Two separate passes over memory: what the fused pass saves.
void BM_Xor64ThenXxh3(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(dgrr::Xor64(buf.data(), buf.size()));
    benchmark::DoNotOptimize(dgrr::Xxh3(buf.data(), buf.size()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Fused(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(dgrr::FingerprintBytes(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// The single pass at any size (FingerprintBytes takes it from 4 KiB), to
// place that threshold against BM_Xor64ThenXxh3.
void BM_SinglePass(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(dgrr::fingerprint_internal::FingerprintLong(
        buf.data(), buf.size(), dgrr::fingerprint_internal::BestStripeConsumer()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// The libxxhash route (XOR a chunk, then hash it from cache with libxxhash),
// the alternative the single pass replaced.
void BM_FusedLibxxhash(benchmark::State& state) {
  const auto& buf = Buffer(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(dgrr::fingerprint_internal::FingerprintBytesChunked(
        buf.data(), buf.size(), dgrr::fingerprint_internal::kFusedChunkBytes));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// That route on 256 MiB with the chunk size as the argument.
void BM_FusedChunk(benchmark::State& state) {
  const auto& buf = Buffer(size_t{256} << 20);
  const auto chunk = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        dgrr::fingerprint_internal::FingerprintBytesChunked(buf.data(), buf.size(), chunk));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
}

// The target ratios measured with the baseline interleaved: every iteration
// times one read pass and one candidate pass over the same 256 MiB (thread CPU
// time), so both see the same machine load. Counters (printed in name order,
// so the ratio first): ratio = read time / candidate time, then read_GBps
// and tested_GBps, the candidate's.
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename Candidate>
void InterleavedAgainstRead(benchmark::State& state, Candidate candidate) {
  const auto& buf = Buffer(size_t{256} << 20);
  double read_seconds = 0, candidate_seconds = 0;
  for (auto _ : state) {
    double t0 = ThreadSeconds();
    benchmark::DoNotOptimize(ReadPass(buf.data(), buf.size()));
    double t1 = ThreadSeconds();
    benchmark::DoNotOptimize(candidate(buf.data(), buf.size()));
    double t2 = ThreadSeconds();
    read_seconds += t1 - t0;
    candidate_seconds += t2 - t1;
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(buf.size());
  state.counters["read_GBps"] = bytes / read_seconds / 1e9;
  state.counters["tested_GBps"] = bytes / candidate_seconds / 1e9;
  state.counters["ratio"] = read_seconds / candidate_seconds;
}

void BM_Interleaved_Xor64(benchmark::State& state) {
  InterleavedAgainstRead(state, [](const uint8_t* p, size_t n) { return dgrr::Xor64(p, n); });
}
void BM_Interleaved_Fused(benchmark::State& state) {
  InterleavedAgainstRead(state,
                         [](const uint8_t* p, size_t n) { return dgrr::FingerprintBytes(p, n); });
}
// The consumer FingerprintBytes used before the AVX-512 one (and still uses
// on CPUs with AVX2 only).
void BM_Interleaved_FusedAvx2(benchmark::State& state) {
  if (std::string(dgrr::fingerprint_internal::BestStripeConsumerName()) != "avx2" &&
      std::string(dgrr::fingerprint_internal::BestStripeConsumerName()) != "avx512") {
    state.SkipWithError("this CPU lacks AVX2");
    return;
  }
  InterleavedAgainstRead(state, [](const uint8_t* p, size_t n) {
    return dgrr::fingerprint_internal::FingerprintLong(
        p, n, dgrr::fingerprint_internal::ConsumeStripesAvx2);
  });
}
void BM_Interleaved_FusedSse2(benchmark::State& state) {
  InterleavedAgainstRead(state, [](const uint8_t* p, size_t n) {
    return dgrr::fingerprint_internal::FingerprintLong(
        p, n, dgrr::fingerprint_internal::ConsumeStripesSse2);
  });
}
// Fingerprinter fed in 1 MiB + 3 byte updates (odd, so lanes and stripes do
// not line up with the updates).
void BM_Interleaved_Streaming(benchmark::State& state) {
  InterleavedAgainstRead(state, [](const uint8_t* p, size_t n) {
    dgrr::Fingerprinter f;
    constexpr size_t kPiece = (1 << 20) + 3;
    for (size_t offset = 0; offset < n; offset += kPiece)
      f.Update(p + offset, std::min(kPiece, n - offset));
    return f.Digest();
  });
}
void BM_Interleaved_FusedLibxxhash(benchmark::State& state) {
  InterleavedAgainstRead(state, [](const uint8_t* p, size_t n) {
    return dgrr::fingerprint_internal::FingerprintBytesChunked(
        p, n, dgrr::fingerprint_internal::kFusedChunkBytes);
  });
}

constexpr int64_t k4K = 4 << 10, k1M = 1 << 20, k256M = int64_t{256} << 20;
#define DGRR_SIZES ->Arg(k4K)->Arg(k1M)->Arg(k256M)
BENCHMARK(BM_ReadPass) DGRR_SIZES;
BENCHMARK(BM_Xor64) DGRR_SIZES;
BENCHMARK(BM_Xxh3) DGRR_SIZES;
BENCHMARK(BM_Xor64ThenXxh3) DGRR_SIZES->Arg(512)->Arg(1 << 10)->Arg(2 << 10)->Arg(8 << 10)
    ->Arg(16 << 10)->Arg(64 << 10)->Arg(256 << 10);
BENCHMARK(BM_Fused) DGRR_SIZES->Arg(16 << 10)->Arg(64 << 10)->Arg(256 << 10);
BENCHMARK(BM_FusedLibxxhash) DGRR_SIZES;
BENCHMARK(BM_SinglePass)->Arg(512)->Arg(1 << 10)->Arg(2 << 10)->Arg(4 << 10)->Arg(8 << 10);
BENCHMARK(BM_Interleaved_Xor64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_Fused)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_FusedAvx2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_FusedSse2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_Streaming)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_FusedLibxxhash)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FusedChunk)->RangeMultiplier(2)->Range(4 << 10, 1 << 20);

}  // namespace

// What ran comes first (printed in the context above the results): the
// stripe consumer FingerprintBytes picked and the form of the read pass that
// every ratio is taken against.
int main(int argc, char** argv) {
  benchmark::AddCustomContext("isa", std::string("fingerprint consumer ") +
                                         dgrr::fingerprint_internal::BestStripeConsumerName() +
                                         ", read pass " + dgrr::bench::ReadPassIsa());
  benchmark::AddCustomContext("baseline", "read pass (ratio = read time / candidate time, CPU time)");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
