// File-level lockstep benchmark of `dgrr compare` (replay/compare.h): two
// identical traces of kRecords boundary records, written once with the trace
// writer, compared from the page cache by CompareRuns (reader: CRC + decode;
// items; LockstepComparer). Baselines from the same run: VerifyTrace of both
// files (the reader alone: the I/O-speed floor of any consumer of the format)
// and plain read(2) of both files into a buffer (the page-cache floor).
// Compare's CPU column is the whole process's (B is read on a second
// thread); the others run on one thread.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "replay/compare.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

// DGRR_COMPARE_BENCH_RECORDS overrides the size (default 10 M per trace),
// DGRR_COMPARE_BENCH_CHUNK the lockstep chunk (CompareOptions::chunk_items).
uint64_t RecordCount() {
  const char* env = std::getenv("DGRR_COMPARE_BENCH_RECORDS");
  return env ? std::strtoull(env, nullptr, 10) : 10'000'000;
}

constexpr int kBoundariesPerStep = 512;

void WriteTrace(const std::string& path, uint64_t records) {
  trace::TraceHeader header;
  header.seed = 1;
  auto writer = trace::TraceWriter::Create(path, header, {.overwrite = true});
  if (!writer.ok()) std::abort();
  std::vector<uint32_t> ids;
  for (int k = 0; k < kBoundariesPerStep; ++k) {
    auto id = (*writer)->InternName("block" + std::to_string(k / 8) + ".op" + std::to_string(k % 8));
    if (!id.ok()) std::abort();
    ids.push_back(*id);
  }
  trace::BoundaryRecord r;
  r.ndim = 2;
  r.dims[0] = 64;
  r.dims[1] = 256;
  r.example_count = 32;
  for (uint64_t i = 0; (*writer)->records_written() < records; ++i) {
    r.step = i / kBoundariesPerStep;
    r.seq = i;
    r.name_id = ids[i % kBoundariesPerStep];
    r.first_example = r.step * 32;
    r.xor64 = i * 0x9e3779b97f4a7c15ULL;
    r.xxh3 = ~r.xor64;
    if (!(*writer)->AppendBoundary(r).ok()) std::abort();
  }
  if (!(*writer)->Close().ok()) std::abort();
}

struct Fixture {
  std::string dir, a, b;
  uint64_t records;
  Fixture() {
    records = RecordCount();
    dir = (std::filesystem::temp_directory_path() /
           ("dgrr-compare-bench-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    a = dir + "/a.trace";
    b = dir + "/b.trace";
    WriteTrace(a, records);
    WriteTrace(b, records);
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
};

const Fixture& Traces() {
  static const Fixture fixture;
  return fixture;
}

void BM_CompareLockstepFiles(benchmark::State& state) {
  const Fixture& f = Traces();
  for (auto _ : state) {
    CompareOptions options;
    if (const char* chunk = std::getenv("DGRR_COMPARE_BENCH_CHUNK")) {
      options.chunk_items = std::strtoull(chunk, nullptr, 10);
    }
    auto result = CompareRuns(f.a, f.b, options);
    if (!result.ok() || result->diverged() || !result->lockstep ||
        result->certify.pairs + kBoundariesPerStep < f.records) {
      state.SkipWithError("compare did not certify the identical traces");
      return;
    }
    benchmark::DoNotOptimize(result->certify.certified_pairs);
  }
  state.counters["records_per_s"] =
      benchmark::Counter(static_cast<double>(2 * f.records) * state.iterations(),
                         benchmark::Counter::kIsRate);
}

void BM_VerifyBothBaseline(benchmark::State& state) {
  const Fixture& f = Traces();
  for (auto _ : state) {
    for (const std::string* path : {&f.a, &f.b}) {
      trace::VerifySummary summary;
      if (!trace::VerifyTrace(*path, &summary).ok()) {
        state.SkipWithError("verify failed");
        return;
      }
      benchmark::DoNotOptimize(summary.boundaries);
    }
  }
  state.counters["records_per_s"] =
      benchmark::Counter(static_cast<double>(2 * f.records) * state.iterations(),
                         benchmark::Counter::kIsRate);
}

void BM_ReadBothBaseline(benchmark::State& state) {
  const Fixture& f = Traces();
  constexpr size_t kBuffer = 1 << 20;
  std::unique_ptr<char[]> buffer(new char[kBuffer]);
  for (auto _ : state) {
    uint64_t total = 0;
    for (const std::string* path : {&f.a, &f.b}) {
      int fd = ::open(path->c_str(), O_RDONLY);
      ssize_t n;
      while ((n = ::read(fd, buffer.get(), kBuffer)) > 0) total += static_cast<uint64_t>(n);
      ::close(fd);
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["records_per_s"] =
      benchmark::Counter(static_cast<double>(2 * f.records) * state.iterations(),
                         benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReadBothBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_VerifyBothBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();
// Process CPU time: compare reads trace B on a second thread.
BENCHMARK(BM_CompareLockstepFiles)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
}  // namespace dgrr::replay

BENCHMARK_MAIN();
