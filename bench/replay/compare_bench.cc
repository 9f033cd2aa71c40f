// File-level lockstep benchmark of `dgrr compare` (replay/compare.h): two
// identical traces of kRecords boundary records, written once with the trace
// writer, compared from the page cache by CompareRuns (reader: CRC + decode;
// items; LockstepComparer). Baselines from the same run: VerifyTrace of both
// files (the reader alone: the I/O-speed floor of any consumer of the format)
// and plain read(2) of both files into a buffer (the page-cache floor).
// Compare's CPU column is the whole process's (B is read on a second
// thread); the others run on one thread.
//
// BM_InterleavedRounds is the figure to quote: every round times read(2) of
// both files, VerifyTrace of both and CompareRuns once each, in a rotating
// order, and reports the median over rounds of each paired ratio (baseline
// time / candidate time, so 1.0 is read(2)'s speed), by CPU time (read(2)
// and pread: the thread's; verify and compare: the process's, so that the
// reader's read-ahead thread counts, and compare's second thread) and by
// wall time, with the range in the label. The same rounds time the floor of
// a reader that copies (pread of the reader's pieces, alone and with the
// block CRC: ratio_pread_cpu, ratio_pread_crc_cpu), and VerifyTrace and
// CompareRuns with the reader's read-ahead off (ratio_*_serial_*: what they
// were before it), and VerifyTrace with the thread reading every piece
// instead of sharing the reads with the reader (ratio_verify_unshared_*:
// read-ahead as it was before reads were shared). The instruction set (the
// block CRC and scan kernels the reader picked) is printed above the results.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "replay/compare.h"
#include "trace_format/boundary_scan.h"
#include "trace_format/crc32c.h"
#include "trace_format/read_ahead.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

// DGRR_COMPARE_BENCH_RECORDS overrides the size (default 10 M per trace),
// DGRR_COMPARE_BENCH_CHUNK the lockstep chunk (CompareOptions::chunk_items),
// DGRR_COMPARE_BENCH_READ_AHEAD the readers' read-ahead thread limit
// (trace_format/read_ahead.h; default: the library's).
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

// Compares the two traces of the fixture (DGRR_COMPARE_BENCH_CHUNK: items per
// chunk); false unless compare certified them in lockstep.
bool CompareBoth(const Fixture& f) {
  CompareOptions options;
  if (const char* chunk = std::getenv("DGRR_COMPARE_BENCH_CHUNK")) {
    options.chunk_items = std::strtoull(chunk, nullptr, 10);
  }
  auto result = CompareRuns(f.a, f.b, options);
  if (!result.ok() || result->diverged() || !result->lockstep ||
      result->certify.pairs + kBoundariesPerStep < f.records) {
    return false;
  }
  benchmark::DoNotOptimize(result->certify.certified_pairs);
  return true;
}

void BM_CompareLockstepFiles(benchmark::State& state) {
  const Fixture& f = Traces();
  for (auto _ : state) {
    if (!CompareBoth(f)) {
      state.SkipWithError("compare did not certify the identical traces");
      return;
    }
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

// read(2) of both files into a 1 MiB buffer: the page-cache floor.
uint64_t ReadBoth(const Fixture& f, char* buffer, size_t size) {
  uint64_t total = 0;
  for (const std::string* path : {&f.a, &f.b}) {
    int fd = ::open(path->c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buffer, size)) > 0) total += static_cast<uint64_t>(n);
    ::close(fd);
  }
  return total;
}

// The floor of any reader of the format that does not map the file: pread
// of both files in the reader's 256 KiB pieces (the copy VerifyTrace pays),
// and, with `checksum`, the block CRC of every record of each piece as well
// (the copy and the CRC, with none of the field checks).
constexpr size_t kReaderPiece = 1 << 18;  // trace_format/reader.cc's kMaxReadBufferBytes
static_assert(kReaderPiece % trace::kRecordSize == 0);

uint64_t PreadBoth(const Fixture& f, uint8_t* buffer, uint32_t* crcs, bool checksum) {
  uint64_t total = 0;
  for (const std::string* path : {&f.a, &f.b}) {
    const int fd = ::open(path->c_str(), O_RDONLY);
    off_t offset = static_cast<off_t>(trace::kHeaderSize);
    ssize_t n;
    while ((n = ::pread(fd, buffer, kReaderPiece, offset)) > 0) {
      offset += n;
      const size_t records = static_cast<size_t>(n) / trace::kRecordSize;
      if (checksum) {
        crc32c::ValueOfBlocks(buffer, trace::kRecordSize, trace::kRecordCrcOffset, records, crcs);
        total += crcs[records / 2];
      } else {
        total += buffer[static_cast<size_t>(n) - 1];
      }
    }
    ::close(fd);
  }
  return total;
}

bool VerifyBoth(const Fixture& f, trace::ReaderOptions::ReadAhead read_ahead, bool share_reads = true) {
  for (const std::string* path : {&f.a, &f.b}) {
    trace::VerifySummary summary;
    trace::ReaderOptions options{read_ahead};
    options.share_reads = share_reads;
    if (!trace::VerifyTrace(*path, &summary, options).ok()) return false;
    benchmark::DoNotOptimize(summary.boundaries);
  }
  return true;
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

double Seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Clocks {
  double wall, thread, process;
  static Clocks Now() {
    return {Seconds(CLOCK_MONOTONIC), Seconds(CLOCK_THREAD_CPUTIME_ID), Seconds(CLOCK_PROCESS_CPUTIME_ID)};
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// DGRR_COMPARE_BENCH_ROUNDS rounds (default 7). Beside VerifyTrace and the
// compare, each round also times PreadBoth without and with the CRC: what a
// reader that copies the bytes out of the page cache cannot go below.
void BM_InterleavedRounds(benchmark::State& state) {
  const Fixture& f = Traces();
  constexpr size_t kBuffer = 1 << 20;
  std::unique_ptr<char[]> buffer(new char[kBuffer]);
  std::unique_ptr<uint8_t[]> piece(new uint8_t[kReaderPiece]);
  std::unique_ptr<uint32_t[]> crcs(new uint32_t[kReaderPiece / trace::kRecordSize]);
  ReadBoth(f, buffer.get(), kBuffer);  // warm the page cache
  // read(2), verify, compare, pread, pread + CRC, verify serial, compare
  // serial, verify with the thread reading every piece (reads not shared)
  constexpr int kCandidates = 8;
  const int read_ahead_threads = trace::ReadAheadThreadLimit();
  std::vector<double> cpu[kCandidates], wall[kCandidates];
  int round = 0;
  for (auto _ : state) {
    double t[kCandidates][2] = {};  // {cpu, wall}
    for (int k = 0; k < kCandidates; ++k) {
      const int which = (k + round) % kCandidates;
      const Clocks t0 = Clocks::Now();
      bool ok = true;
      if (which == 0) benchmark::DoNotOptimize(ReadBoth(f, buffer.get(), kBuffer));
      if (which == 1) ok = VerifyBoth(f, trace::ReaderOptions::ReadAhead::kAuto);
      if (which == 2) ok = CompareBoth(f);
      if (which == 3) benchmark::DoNotOptimize(PreadBoth(f, piece.get(), crcs.get(), false));
      if (which == 4) benchmark::DoNotOptimize(PreadBoth(f, piece.get(), crcs.get(), true));
      if (which == 5) ok = VerifyBoth(f, trace::ReaderOptions::ReadAhead::kNever);
      if (which == 6) {
        trace::SetReadAheadThreadLimit(0);
        ok = CompareBoth(f);
        trace::SetReadAheadThreadLimit(read_ahead_threads);
      }
      if (which == 7) ok = VerifyBoth(f, trace::ReaderOptions::ReadAhead::kAuto, false);
      const Clocks t1 = Clocks::Now();
      if (!ok) {
        state.SkipWithError(which == 2 || which == 6 ? "compare did not certify the identical traces"
                                                     : "verify failed");
        return;
      }
      const bool threads = which == 1 || which == 2 || which >= 5;
      t[which][0] = threads ? t1.process - t0.process : t1.thread - t0.thread;
      t[which][1] = t1.wall - t0.wall;
    }
    ++round;
    for (int which = 1; which < kCandidates; ++which) {
      cpu[which].push_back(t[0][0] / t[which][0]);
      wall[which].push_back(t[0][1] / t[which][1]);
    }
  }
  state.counters["ratio_compare_cpu"] = Median(cpu[2]);
  state.counters["ratio_compare_wall"] = Median(wall[2]);
  state.counters["ratio_verify_cpu"] = Median(cpu[1]);
  state.counters["ratio_verify_wall"] = Median(wall[1]);
  state.counters["ratio_pread_cpu"] = Median(cpu[3]);
  state.counters["ratio_pread_crc_cpu"] = Median(cpu[4]);
  state.counters["ratio_verify_serial_cpu"] = Median(cpu[5]);
  state.counters["ratio_verify_serial_wall"] = Median(wall[5]);
  state.counters["ratio_compare_serial_cpu"] = Median(cpu[6]);
  state.counters["ratio_compare_serial_wall"] = Median(wall[6]);
  state.counters["ratio_verify_unshared_cpu"] = Median(cpu[7]);
  state.counters["ratio_verify_unshared_wall"] = Median(wall[7]);
  auto range = [](const std::vector<double>& v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f-%.3f", *std::min_element(v.begin(), v.end()),
                  *std::max_element(v.begin(), v.end()));
    return std::string(text);
  };
  state.SetLabel("ranges: compare cpu " + range(cpu[2]) + " wall " + range(wall[2]) + ", verify cpu " +
                 range(cpu[1]) + " wall " + range(wall[1]) + ", verify serial cpu " + range(cpu[5]) +
                 " wall " + range(wall[5]) + ", verify unshared wall " + range(wall[7]) +
                 ", compare serial cpu " + range(cpu[6]) + " wall " + range(wall[6]) + ", pread cpu " + range(cpu[3]) +
                 ", pread+crc cpu " + range(cpu[4]));
}

int Rounds() {
  const char* env = std::getenv("DGRR_COMPARE_BENCH_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 7;
}

BENCHMARK(BM_InterleavedRounds)->Iterations(Rounds())->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadBothBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_VerifyBothBaseline)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
// Process CPU time: compare reads trace B on a second thread.
BENCHMARK(BM_CompareLockstepFiles)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
}  // namespace dgrr::replay

int main(int argc, char** argv) {
  using namespace dgrr;
  if (const char* limit = std::getenv("DGRR_COMPARE_BENCH_READ_AHEAD")) {
    trace::SetReadAheadThreadLimit(std::atoi(limit));
  }
  benchmark::AddCustomContext(
      "isa", std::string("block CRC ") + crc32c::BlockKernelName(crc32c::SelectedBlockKernel()) +
                 ", boundary scan " + trace::ScanKernelName(trace::SelectedScanKernel()));
  benchmark::AddCustomContext("baseline", "read(2) of both traces (ratio = read time / candidate time)");
  benchmark::AddCustomContext("read_ahead_threads", std::to_string(trace::ReadAheadThreadLimit()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
