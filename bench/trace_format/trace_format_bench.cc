// Trace writer and reader throughput, each next to its baseline measured in
// the same run: appending a record vs memcpy of 128 bytes into a buffer;
// reading and validating vs read(2) of the same file from the page cache
// (BM_Interleaved_VerifyVsRead: both timed in every round, median of the
// paired ratios first). The kernels the CPU got (block CRC, boundary scan)
// are printed above the results.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trace_format/boundary_scan.h"
#include "trace_format/crc32c.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::trace {
namespace {

// Swallows bytes: measures the writer without the kernel.
class NullFile : public WritableFile {
 public:
  Status Append(const void*, size_t) override { return Status::OK(); }
  Status Flush() override { return Status::OK(); }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  const std::string& path() const override { return path_; }

 private:
  std::string path_ = "null";
};

std::string BenchPath(const char* name) {
  return (std::filesystem::temp_directory_path() /
          ("dgrr-bench-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

BoundaryRecord Boundary(uint64_t seq) {
  BoundaryRecord b;
  b.step = seq >> 10;
  b.seq = seq;
  b.name_id = 0;
  b.ndim = 2;
  b.dims = {1024, 4096, 0, 0, 0, 0};
  b.byte_count = 1024 * 4096 * 4;
  b.example_count = 8;
  b.xor64 = seq * 0x9e3779b97f4a7c15ull;
  b.xxh3 = ~b.xor64;
  b.host_time_ns = 1700000000000000000ull + seq;
  return b;
}

// Baseline: what copying a record's bytes into a buffer costs.
void BM_Baseline_MemcpyRecordIntoBuffer(benchmark::State& state) {
  std::vector<uint8_t> buffer(1 << 20);
  uint8_t record[kRecordSize];
  std::memset(record, 0x5a, sizeof record);
  size_t used = 0;
  for (auto _ : state) {
    if (used == buffer.size()) used = 0;
    record[8] = static_cast<uint8_t>(used);
    std::memcpy(buffer.data() + used, record, kRecordSize);
    benchmark::DoNotOptimize(buffer.data() + used);
    used += kRecordSize;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Baseline_MemcpyRecordIntoBuffer);

// The training thread's cost per AppendBoundary, with the I/O thread sealing
// CRCs and handing buffers to `sink` (range 0: a null file; 1: /dev/null).
void BM_AppendBoundary(benchmark::State& state) {
  const std::string path = BenchPath("append.trace");
  TraceWriterOptions options;
  options.overwrite = true;
  const bool dev_null = state.range(0) == 1;
  options.open_file = [dev_null](const std::string&) -> StatusOr<std::unique_ptr<WritableFile>> {
    if (dev_null) return OpenWritableFile("/dev/null", false);
    return std::unique_ptr<WritableFile>(new NullFile);
  };
  auto writer = TraceWriter::Create(path, TraceHeader{}, options);
  if (!writer.ok()) {
    state.SkipWithError(writer.status().ToString().c_str());
    return;
  }
  (void)(*writer)->InternName("block0.attn.qkv.out");
  uint64_t seq = 0;
  for (auto _ : state) {
    Status s = (*writer)->AppendBoundary(Boundary(seq++));
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  (void)(*writer)->Close();
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(dev_null ? "sink=/dev/null" : "sink=null");
}
BENCHMARK(BM_AppendBoundary)->Arg(0)->Arg(1)->UseRealTime();

// One recorded step on the training thread: `records` boundaries (572: what
// `tiny` records a step in mode full; 320: trusted), then, with range(1) == 1,
// the Flush that Session::EndStep makes (write(2) of the step's records to a
// real file in the page cache, no fsync). Against range(1) == 0, where the
// records wait in the 1 MiB buffer for the I/O thread: the difference is what
// handing every step to the kernel costs a step (issue 26, item 4). Process
// CPU time covers the I/O thread as well.
void BM_RecordStep(benchmark::State& state) {
  const std::string path = BenchPath("step.trace");
  auto writer = TraceWriter::Create(path, TraceHeader{}, {.overwrite = true});
  if (!writer.ok()) {
    state.SkipWithError(writer.status().ToString().c_str());
    return;
  }
  (void)(*writer)->InternName("block0.attn.qkv.out");
  const int64_t records = state.range(0);
  const bool flush = state.range(1) == 1;
  uint64_t seq = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < records; ++i) {
      Status s = (*writer)->AppendBoundary(Boundary(seq++));
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    }
    if (flush) {
      Status s = (*writer)->Flush();
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    }
  }
  (void)(*writer)->Close();
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * records);
  state.SetLabel(flush ? "flush at each step's end" : "buffered (before issue 26)");
}
BENCHMARK(BM_RecordStep)
    ->ArgsProduct({{320, 572}, {0, 1}})
    ->Iterations(2000)  // 146 MB of trace at most per run
    ->Repetitions(5)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

constexpr uint64_t kReadRecords = 1 << 18;  // 32 MiB of records

const std::string& ReadFixture() {
  static const std::string path = [] {
    std::string p = BenchPath("read.trace");
    auto writer = TraceWriter::Create(p, TraceHeader{}, {.overwrite = true});
    (void)(*writer)->InternName("block0.attn.qkv.out");
    for (uint64_t seq = 0; seq + 1 < kReadRecords; ++seq) (void)(*writer)->AppendBoundary(Boundary(seq));
    (void)(*writer)->Close();
    std::atexit([] { std::filesystem::remove(BenchPath("read.trace")); });
    return p;
  }();
  return path;
}

// Baseline: read(2) of the whole file from the page cache, 1 MiB at a time.
void BM_Baseline_ReadFile(benchmark::State& state) {
  const std::string& path = ReadFixture();
  std::vector<uint8_t> buffer(1 << 20);
  for (auto _ : state) {
    int fd = ::open(path.c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) benchmark::DoNotOptimize(buffer.data());
    ::close(fd);
  }
  state.SetItemsProcessed(state.iterations() * kReadRecords);
  state.SetBytesProcessed(state.iterations() * RecordOffset(kReadRecords));
}
BENCHMARK(BM_Baseline_ReadFile)->Unit(benchmark::kMillisecond);

// Open, then read, CRC-check, decode and order-check every record.
void BM_ReadAndValidate(benchmark::State& state) {
  const std::string& path = ReadFixture();
  for (auto _ : state) {
    auto reader = TraceReader::Open(path);
    Record record;
    bool done = false;
    uint64_t n = 0;
    for (;;) {
      Status s = (*reader)->Next(&record, &done);
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
      if (done || !s.ok()) break;
      ++n;
    }
    if (n != kReadRecords) state.SkipWithError("wrong record count");
  }
  state.SetItemsProcessed(state.iterations() * kReadRecords);
  state.SetBytesProcessed(state.iterations() * RecordOffset(kReadRecords));
}
BENCHMARK(BM_ReadAndValidate)->Unit(benchmark::kMillisecond);

// CRC32C of one record's 124 covered bytes, both implementations.
void BM_Crc32cRecord(benchmark::State& state) {
  uint8_t bytes[kRecordCrcOffset];
  std::memset(bytes, 0x33, sizeof bytes);
  const bool hardware = state.range(0) == 1;
  for (auto _ : state) {
    bytes[0]++;
    uint32_t crc = hardware ? crc32c::ExtendHardware(0, bytes, sizeof bytes)
                            : crc32c::ExtendPortable(0, bytes, sizeof bytes);
    benchmark::DoNotOptimize(crc);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(hardware ? (crc32c::HardwareAvailable() ? "sse4.2" : "sse4.2 missing: table")
                          : "table");
}
BENCHMARK(BM_Crc32cRecord)->Arg(0)->Arg(1);

// The reader's batch CRC: every record of a 256 KiB buffer (the reader's
// largest) at once, through each block kernel (the argument: 0 table, 1 four
// interleaved crc32 chains, 2 VPCLMULQDQ folding on 256-bit vectors, 3 the
// same on 512-bit; the reader and the writer use the best the CPU has).
void BM_Crc32cBlocks(benchmark::State& state) {
  constexpr size_t kRecords = (256 << 10) / kRecordSize;
  const auto kernel = static_cast<crc32c::BlockKernel>(state.range(0));
  if (!crc32c::BlockKernelAvailable(kernel)) {
    state.SkipWithError("this CPU lacks the kernel");
    return;
  }
  std::vector<uint8_t> bytes(kRecords * kRecordSize, 0x33);
  std::vector<uint32_t> crcs(kRecords);
  for (auto _ : state) {
    bytes[0]++;
    crc32c::ValueOfBlocksWith(kernel, bytes.data(), kRecordSize, kRecordCrcOffset, kRecords, crcs.data());
    benchmark::DoNotOptimize(crcs.data());
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(state.iterations() * kRecords * kRecordCrcOffset);
  state.SetLabel(kernel == crc32c::SelectedBlockKernel() ? "selected" : "");
}
BENCHMARK(BM_Crc32cBlocks)->DenseRange(0, 3);

// The reader's scan through NextBoundaryRun (what compare and verify use):
// runs of validated boundaries read in place, against Next() above.
void BM_ReadAndValidateRuns(benchmark::State& state) {
  const std::string& path = ReadFixture();
  for (auto _ : state) {
    auto reader = TraceReader::Open(path);
    bool done = false;
    uint64_t n = 0, xor_all = 0;
    for (;;) {
      BoundaryRun run;
      Status s = (*reader)->NextBoundaryRun(1024, &run, &done);
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
      if (done || !s.ok()) break;
      for (size_t i = 0; i < run.count; ++i) xor_all ^= BoundaryView(run.bytes + i * kRecordSize).xor64();
      n += run.count;
    }
    benchmark::DoNotOptimize(xor_all);
    if (n + 1 != kReadRecords) state.SkipWithError("wrong boundary count");
  }
  state.SetItemsProcessed(state.iterations() * kReadRecords);
  state.SetBytesProcessed(state.iterations() * RecordOffset(kReadRecords));
}
BENCHMARK(BM_ReadAndValidateRuns)->Unit(benchmark::kMillisecond);

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// read(2) of the fixture and VerifyTrace of it, alternately first, thread CPU
// time: ratio = read time / verify time, the median over rounds (range in
// the label).
void BM_Interleaved_VerifyVsRead(benchmark::State& state) {
  const std::string& path = ReadFixture();
  std::vector<uint8_t> buffer(1 << 20);
  auto read_file = [&] {
    int fd = ::open(path.c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) benchmark::DoNotOptimize(buffer.data());
    ::close(fd);
  };
  std::vector<double> ratios;
  double read_total = 0, verify_total = 0;
  for (auto _ : state) {
    double read_seconds = 0, verify_seconds = 0;
    for (int k = 0; k < 2; ++k) {
      const bool read_now = (k + ratios.size()) % 2 == 0;
      const double t0 = ThreadSeconds();
      if (read_now) {
        read_file();
      } else {
        VerifySummary summary;
        if (!VerifyTrace(path, &summary).ok()) {
          state.SkipWithError("verify failed");
          return;
        }
        benchmark::DoNotOptimize(summary.boundaries);
      }
      (read_now ? read_seconds : verify_seconds) = ThreadSeconds() - t0;
    }
    ratios.push_back(read_seconds / verify_seconds);
    read_total += read_seconds;
    verify_total += verify_seconds;
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  state.counters["ratio_verify_cpu"] = sorted[sorted.size() / 2];
  state.counters["read_GBps"] = static_cast<double>(ratios.size() * RecordOffset(kReadRecords)) / read_total / 1e9;
  state.counters["verify_GBps"] = static_cast<double>(ratios.size() * RecordOffset(kReadRecords)) / verify_total / 1e9;
  char label[64];
  std::snprintf(label, sizeof label, "range %.3f-%.3f", sorted.front(), sorted.back());
  state.SetLabel(label);
}
BENCHMARK(BM_Interleaved_VerifyVsRead)->Iterations(21)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dgrr::trace

int main(int argc, char** argv) {
  using namespace dgrr;
  benchmark::AddCustomContext(
      "isa", std::string("block CRC ") + crc32c::BlockKernelName(crc32c::SelectedBlockKernel()) +
                 ", boundary scan " + trace::ScanKernelName(trace::SelectedScanKernel()));
  benchmark::AddCustomContext("baseline", "read(2) of the same file (ratio = read time / verify time)");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
