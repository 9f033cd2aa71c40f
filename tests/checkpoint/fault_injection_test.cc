// Fault injection at every file-layer call reached by writing a trace, a
// checkpoint, a tensor dump and a JSON file atomically (issue 10, item 5).
//
// Each write runs once with a counting FaultInjectingFileSystem to learn how
// many calls it makes; then it runs again once per call and fault kind
// (ENOSPC and EIO at every call, which covers every fsync, rename, open,
// read and directory call; a short write at every append and write-at), so
// a new call site is covered without naming it. After each failed run:
//  - the Status is an I/O error whose message is one line naming the path of
//    the failed call and the errno text;
//  - the destination is the old file, absent, or new and fully valid;
//  - no temporary file is left in the directory.
// libhdf5's own writes cannot go through the layer; the RLIMIT_FSIZE tests
// make the kernel fail them and check the same one-line message.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/file_system.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

struct Fault {
  FaultSpec spec;
  std::string Describe() const {
    return std::string(spec.any_op ? "any" : FileOpName(spec.op)) + (spec.short_write ? "+short" : "") +
           " call " + std::to_string(spec.nth) + " fails with " + strerrorname(spec.error);
  }
  static const char* strerrorname(int e) { return e == ENOSPC ? "ENOSPC" : e == EIO ? "EIO" : "errno"; }
};

// Every fault to try on an operation whose calls `counted` has just seen.
std::vector<Fault> FaultsAfterCounting(const FaultInjectingFileSystem& counted) {
  std::vector<Fault> faults;
  for (uint64_t i = 1; i <= counted.calls(); ++i) {
    for (int err : {ENOSPC, EIO}) {
      Fault f;
      f.spec.any_op = true;
      f.spec.nth = i;
      f.spec.error = err;
      faults.push_back(f);
    }
  }
  for (FileOp op : {FileOp::kAppend, FileOp::kWriteAt}) {
    for (uint64_t i = 1; i <= counted.calls(op); ++i) {
      Fault f;
      f.spec.any_op = false;
      f.spec.op = op;
      f.spec.nth = i;
      f.spec.error = ENOSPC;
      f.spec.short_write = true;
      faults.push_back(f);
    }
  }
  return faults;
}

class FaultInjectionTest : public test_support::TempDirTest {
 protected:
  // Runs `prepare` then `write` once without a fault, then `prepare`, `write`
  // and `check_after` once per fault. Returns the number of faults tried.
  size_t ForEveryFault(const std::function<void()>& prepare, const std::function<Status()>& write,
                       const std::function<void(const Fault&)>& check_after) {
    FaultInjectingFileSystem injector;
    ScopedFileSystemOverride use(&injector);
    prepare();
    injector.ResetCounts();
    Status clean = write();
    EXPECT_TRUE(clean.ok()) << clean.ToString();
    EXPECT_GT(injector.calls(), 0u);
    const std::vector<Fault> faults = FaultsAfterCounting(injector);
    for (const Fault& fault : faults) {
      SCOPED_TRACE(fault.Describe());
      injector.ClearFault();
      prepare();
      injector.ResetCounts();
      injector.SetFault(fault.spec);
      Status s = write();
      injector.ClearFault();
      EXPECT_EQ(injector.injected(), 1u) << "the call counted before was not made again";
      if (injector.injected() != 1) break;
      const std::string failed_path = injector.injected_path();
      SCOPED_TRACE(std::string("failed call: ") + FileOpName(injector.injected_op()) + " " + failed_path);
      EXPECT_FALSE(s.ok()) << "the failure was swallowed";
      EXPECT_TRUE(s.IsIOError()) << s.ToString();
      EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find(failed_path), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find(std::strerror(fault.spec.error)), std::string::npos) << s.ToString();
      EXPECT_EQ(Temporaries(), std::vector<std::string>{}) << "a temporary was left behind";
      check_after(fault);
      if (::testing::Test::HasFailure()) break;  // one fault's story is enough to debug
    }
    return faults.size();
  }

  std::vector<std::string> Temporaries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (IsTemporaryName(e.path().filename().string())) out.push_back(e.path().string());
    }
    return out;
  }
};

TEST_F(FaultInjectionTest, JsonWrittenAtomically) {
  const std::string path = Path("config.json");
  const std::string old_text = "{\"steps\": 1}\n", new_text = "{\"steps\": 2}\n";
  size_t tried = ForEveryFault(
      [&] { ASSERT_TRUE(WriteFileAtomically(path, old_text).ok()); },
      [&] { return WriteFileAtomically(path, new_text); },
      [&](const Fault&) {
        const std::string now = ReadBytes(path);
        EXPECT_TRUE(now == old_text || now == new_text) << "half-written: " << now;
      });
  EXPECT_GE(tried, 10u);  // open, append, close, fsync, rename, dir fsync; each twice, plus a short write
}

// A trace of `n` boundaries on one name.
Status WriteTrace(const std::string& path, int n) {
  trace::TraceHeader header;
  header.seed = 7;
  trace::TraceWriterOptions options;
  options.overwrite = true;
  options.buffer_bytes = 8 * trace::kRecordSize;  // several appends
  DGRR_ASSIGN_OR_RETURN(auto writer, trace::TraceWriter::Create(path, header, options));
  Status first;
  auto keep = [&](Status s) {
    if (first.ok()) first = std::move(s);
  };
  StatusOr<uint32_t> id = writer->InternName("block0.out");
  if (!id.ok()) keep(id.status());
  for (int i = 0; i < n && id.ok(); ++i) {
    trace::BoundaryRecord b;
    b.step = static_cast<uint64_t>(i / 4);
    b.seq = static_cast<uint64_t>(i);
    b.name_id = *id;
    b.dtype = DType::kF32;
    b.xxh3 = 1000 + static_cast<uint64_t>(i);
    keep(writer->AppendBoundary(b));
  }
  keep(writer->Sync());
  keep(writer->Close());
  return first;
}

TEST_F(FaultInjectionTest, TraceWrite) {
  const std::string path = Path("rank0.trace");
  constexpr int kBoundaries = 30;
  size_t tried = ForEveryFault(
      [&] { fs::remove(path); },
      [&] { return WriteTrace(path, kBoundaries); },
      [&](const Fault&) {
        if (!fs::exists(path)) return;  // the header never landed: no trace at all
        // What is there is a valid trace whose records are a prefix of the
        // intended ones (a torn tail is a clean end), and a writer can go on.
        auto whole = trace::ReadWholeTrace(path);
        ASSERT_TRUE(whole.ok()) << whole.status().ToString();
        EXPECT_EQ(whole->header.seed, 7u);
        ASSERT_LE(whole->records.size(), static_cast<size_t>(kBoundaries + 1));
        for (size_t i = 1; i < whole->records.size(); ++i) {
          const auto* b = std::get_if<trace::BoundaryRecord>(&whole->records[i].body);
          ASSERT_NE(b, nullptr);
          EXPECT_EQ(b->seq, i - 1);
          EXPECT_EQ(b->xxh3, 1000 + (i - 1));
        }
        auto again = trace::TraceWriter::OpenForAppend(path);
        ASSERT_TRUE(again.ok()) << again.status().ToString();
        EXPECT_TRUE((*again)->Close().ok());
      });
  EXPECT_GE(tried, 20u);
}

// Going on with a trace after a cut (resume): the reads, the size check, the
// truncation of a torn tail and the appends.
TEST_F(FaultInjectionTest, TraceReopenAndAppend) {
  const std::string path = Path("rank0.trace");
  constexpr int kFirst = 12;
  size_t tried = ForEveryFault(
      [&] {
        fs::remove(path);
        ASSERT_TRUE(WriteTrace(path, kFirst).ok());
        const std::string torn = ReadBytes(path) + std::string(17, '\x5a');  // a partial record
        WriteBytes(path, torn);
      },
      [&]() -> Status {
        trace::TraceWriterOptions options;
        options.buffer_bytes = 4 * trace::kRecordSize;
        DGRR_ASSIGN_OR_RETURN(auto writer, trace::TraceWriter::OpenForAppend(path, options));
        Status first;
        for (int i = 0; i < 10 && first.ok(); ++i) {
          trace::BoundaryRecord b;
          b.seq = writer->next_seq();
          b.step = 3;
          b.name_id = 0;
          b.dtype = DType::kF32;
          b.xxh3 = 1000 + b.seq;
          first = writer->AppendBoundary(b);
        }
        Status closed = writer->Close();
        return first.ok() ? closed : first;
      },
      [&](const Fault&) {
        auto whole = trace::ReadWholeTrace(path);
        ASSERT_TRUE(whole.ok()) << whole.status().ToString();
        ASSERT_GE(whole->records.size(), static_cast<size_t>(kFirst + 1)) << "records were lost";
        for (size_t i = 1; i < whole->records.size(); ++i) {
          const auto* b = std::get_if<trace::BoundaryRecord>(&whole->records[i].body);
          ASSERT_NE(b, nullptr);
          EXPECT_EQ(b->seq, i - 1);
          EXPECT_EQ(b->xxh3, 1000 + (i - 1));
        }
      });
  EXPECT_GE(tried, 20u);
}

// The trace reader reads bytes from memory exactly as from disk, and a cut
// copy ends at its last whole record (the fuzz targets' entry point).
TEST_F(FaultInjectionTest, TraceReaderReadsFromMemory) {
  const std::string path = Path("rank0.trace");
  ASSERT_TRUE(WriteTrace(path, 10).ok());
  const std::string bytes = ReadBytes(path);
  auto from_disk = trace::ReadWholeTrace(path);
  ASSERT_TRUE(from_disk.ok());
  auto reader = trace::TraceReader::Open(NewMemoryFile("mem.trace", bytes));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->header(), from_disk->header);
  size_t n = 0;
  for (;;) {
    trace::Record record;
    bool done = false;
    ASSERT_TRUE((*reader)->Next(&record, &done).ok());
    if (done) break;
    ASSERT_LT(n, from_disk->records.size());
    EXPECT_EQ(record.body, from_disk->records[n].body);
    ++n;
  }
  EXPECT_EQ(n, from_disk->records.size());
  EXPECT_EQ(*(*reader)->CountRecordsInFile(), n);

  auto cut = trace::TraceReader::Open(NewMemoryFile("cut.trace", bytes.substr(0, bytes.size() - 5)));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*(*cut)->CountRecordsInFile(), n - 1);
  auto header_only = trace::TraceReader::Open(NewMemoryFile("h.trace", bytes.substr(0, 10)));
  ASSERT_FALSE(header_only.ok());
  EXPECT_TRUE(header_only.status().IsCorruption());
  EXPECT_NE(header_only.status().message().find("h.trace: header"), std::string::npos);
}

// A small two-entry checkpoint state (random bytes compress poorly, so the
// file has a real body).
struct SmallState {
  std::vector<float> params = std::vector<float>(20000);
  uint64_t step = 0;
  StateRegistry registry;
  explicit SmallState(uint64_t s) : step(s) {
    std::mt19937 gen(static_cast<uint32_t>(s));
    for (float& p : params) p = static_cast<float>(gen()) * 1e-9f;
    EXPECT_TRUE(registry.Register({"params", params.data(), params.size() * 4, DType::kF32, {},
                                   StateRole::kParameter, RestorePolicy::kCheckpoint, true}).ok());
    EXPECT_TRUE(registry.Register({"opt.step", &step, 8, DType::kU64, {}, StateRole::kCounter,
                                   RestorePolicy::kCheckpoint, true}).ok());
  }
};

Status WriteSmallCheckpoint(const std::string& path, const SmallState& state) {
  checkpoint::CheckpointMeta meta;
  meta.step = state.step;
  meta.run_id_hex = "00112233445566778899aabbccddeeff";
  meta.world_size = 1;
  meta.plan_json = "[]";
  checkpoint::CheckpointWriteOptions options;
  options.threads = 1;
  return checkpoint::WriteCheckpoint(path, meta, {{0, &state.registry, 12}}, options);
}

TEST_F(FaultInjectionTest, CheckpointWrite) {
  const std::string run = Path("run");
  const std::string path = checkpoint::CheckpointPath(run, 8);
  SmallState old_state(4), new_state(8);
  std::string old_bytes;
  size_t tried = ForEveryFault(
      [&] {
        fs::remove_all(run);
        ASSERT_TRUE(WriteSmallCheckpoint(path, old_state).ok());
        old_bytes = ReadBytes(path);
      },
      [&] { return WriteSmallCheckpoint(path, new_state); },
      [&](const Fault&) {
        if (ReadBytes(path) == old_bytes) return;
        auto loaded = checkpoint::ReadCheckpoint(path);
        ASSERT_TRUE(loaded.ok()) << "a checkpoint a later command would trust is damaged: "
                                 << loaded.status().ToString();
        EXPECT_EQ(loaded->meta.step, 8u);
      });
  EXPECT_GE(tried, 12u);
}

checkpoint::TensorDump SmallDump(uint64_t step) {
  checkpoint::TensorDump d;
  d.run_dir = "runs/a";
  d.boundary = "block0.mlp.fc.out";
  d.step = step;
  d.rank = 0;
  checkpoint::DumpedTensor t;
  t.name = checkpoint::TensorDatasetName(0, 2);
  t.dtype = DType::kF32;
  t.shape = {2, 3000};
  t.example_first = 0;
  t.example_count = 2;
  t.phase = "forward";
  t.data.resize(2 * 3000 * 4);
  std::mt19937 gen(static_cast<uint32_t>(step));
  for (uint8_t& b : t.data) b = static_cast<uint8_t>(gen());
  t.recorded = FingerprintBytes(t.data.data(), t.data.size());
  d.tensors.push_back(std::move(t));
  return d;
}

TEST_F(FaultInjectionTest, TensorDumpWrite) {
  const std::string path = Path("dumps/block0.h5");
  std::string old_bytes;
  size_t tried = ForEveryFault(
      [&] {
        fs::remove_all(Path("dumps"));
        ASSERT_TRUE(checkpoint::WriteTensorDump(path, SmallDump(1)).ok());
        old_bytes = ReadBytes(path);
      },
      [&] { return checkpoint::WriteTensorDump(path, SmallDump(2)); },
      [&](const Fault&) {
        if (ReadBytes(path) == old_bytes) return;
        auto loaded = checkpoint::ReadTensorDump(path);
        ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
        EXPECT_EQ(loaded->step, 2u);
      });
  EXPECT_GE(tried, 12u);
}

// libhdf5 writes the temporary itself; a file-size limit makes the kernel
// refuse its writes (EFBIG) the way a full disk would (ENOSPC).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  struct rlimit saved_;
  sighandler_t old_handler_;
};

void ExpectOneLineNamingFileAndCause(const Status& s, const std::string& path) {
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::strerror(EFBIG)), std::string::npos) << s.ToString();
}

TEST_F(FaultInjectionTest, CheckpointFailingInsideLibhdf5) {
  const std::string run = Path("run");
  const std::string path = checkpoint::CheckpointPath(run, 8);
  SmallState state(8);
  Status s;
  {
    FileSizeLimit limit(16 * 1024);  // the body is ~80 KB
    s = WriteSmallCheckpoint(path, state);
  }
  ExpectOneLineNamingFileAndCause(s, path);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(Temporaries(), std::vector<std::string>{});
  EXPECT_TRUE(WriteSmallCheckpoint(path, state).ok()) << "the limit is gone, so the write works";
}

TEST_F(FaultInjectionTest, TensorDumpFailingInsideLibhdf5) {
  const std::string path = Path("dumps/block0.h5");
  Status s;
  {
    FileSizeLimit limit(8 * 1024);  // the tensor is 24 KB
    s = checkpoint::WriteTensorDump(path, SmallDump(2));
  }
  ExpectOneLineNamingFileAndCause(s, path);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(Temporaries(), std::vector<std::string>{});
}

}  // namespace
}  // namespace dgrr
