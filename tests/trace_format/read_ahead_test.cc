// The reader's read-ahead (a second thread reads the next 256 KiB pieces
// while the reader checks this one: on a file on disk every other piece, the
// reader reading those between, unless share_reads is off) changes nothing
// but the speed: every test reads the same bytes with read-ahead forced on
// (kAlways, reads shared and not) and off (kNever) and asserts the same
// records, errors, warnings and, where a file layer counts them, file calls.
// Traces of a few pieces are enough: kAlways ignores the size threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/file_system.h"
#include "tests/trace_format/sample_trace.h"
#include "trace_format/read_ahead.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::trace {
namespace {

using testing::SampleBoundary;
using testing::SampleHeader;
using ReadAhead = ReaderOptions::ReadAhead;

constexpr size_t kPieceRecords = (size_t{1} << 18) / kRecordSize;  // the reader's full buffer

// Appends `n` records of every kind to `w`: two names per 1000 records (one
// of them two NAME records long), STEP begin and end around every 100
// boundaries, an EVENT now and then, boundaries otherwise.
void AppendMixed(TraceWriter& w, uint64_t n, uint64_t* seq, uint64_t* step) {
  std::vector<uint32_t> ids;
  const uint64_t target = w.records_written() + n;
  while (w.records_written() < target) {
    if (ids.empty() || w.records_written() % 1000 < 2) {
      auto id = w.InternName("layer" + std::to_string(w.records_written()) +
                             (ids.size() % 2 ? std::string(120, 'x') : ".out"));
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(*id);
      continue;
    }
    if (*seq % 100 == 0) {
      ASSERT_TRUE(w.AppendStep({.step = *step, .kind = StepKind::kBegin}).ok());
    }
    ASSERT_TRUE(w.AppendBoundary(SampleBoundary(ids[*seq % ids.size()], *step, *seq)).ok());
    ++*seq;
    if (*seq % 700 == 0) {
      ASSERT_TRUE(w.AppendEvent({.step = *step, .kind = EventKind::kCheckpoint, .payload = "e"}).ok());
    }
    if (*seq % 100 == 0) {
      ASSERT_TRUE(w.AppendStep({.step = (*step)++, .kind = StepKind::kEnd}).ok());
    }
  }
}

// What a reader made of a trace: everything the tests compare.
struct Scan {
  std::vector<Record> records;
  std::string status = "OK";  // the first error, as text
  TraceError error;
  std::string warning;
  uint64_t torn_tail_bytes = 0;
  uint64_t clean_prefix = 0;
  std::vector<std::string> names;
  uint64_t pieces_read_ahead = 0;
};

void ExpectSameScan(const Scan& a, const Scan& b) {
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.error.in_header, b.error.in_header);
  EXPECT_EQ(a.error.record_index, b.error.record_index);
  EXPECT_EQ(a.error.offset, b.error.offset);
  EXPECT_EQ(a.error.reason, b.error.reason);
  EXPECT_EQ(a.warning, b.warning);
  EXPECT_EQ(a.torn_tail_bytes, b.torn_tail_bytes);
  EXPECT_EQ(a.clean_prefix, b.clean_prefix);
  EXPECT_EQ(a.names, b.names);
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    ASSERT_EQ(a.records[i].index, b.records[i].index) << i;
    ASSERT_TRUE(a.records[i].body == b.records[i].body) << "record " << i;
  }
}

// Drains `reader` through Next() (or, with `runs`, through NextRecords, the
// fast path of verify and compare) into *scan.
void Drain(TraceReader& reader, Scan* scan, bool runs = false) {
  for (;;) {
    Record record;
    BoundaryRun run;
    bool done = false;
    Status s = runs ? reader.NextRecords(128, &run, &record, &done) : reader.Next(&record, &done);
    if (!s.ok()) {
      scan->status = s.ToString();
      scan->error = reader.last_error();
      break;
    }
    if (done) break;
    if (runs && run.count > 0) {
      for (size_t i = 0; i < run.count; ++i) {
        Record r;
        r.index = run.first_index + i;
        ASSERT_TRUE(DecodeRecord(run.bytes + i * kRecordSize, &r.body).ok());
        scan->records.push_back(r);
      }
      continue;
    }
    scan->records.push_back(record);
  }
  scan->warning = reader.torn_tail_warning();
  scan->torn_tail_bytes = reader.torn_tail_bytes();
  scan->clean_prefix = reader.clean_prefix_records();
  scan->names = reader.names();
  scan->pieces_read_ahead = reader.pieces_read_ahead();
}

// Reads `n` records through Next() into *scan: every one must be there.
void ReadRecords(TraceReader& reader, size_t n, Scan* scan) {
  for (size_t i = 0; i < n; ++i) {
    Record record;
    bool done = false;
    ASSERT_TRUE(reader.Next(&record, &done).ok());
    ASSERT_FALSE(done);
    scan->records.push_back(record);
  }
}

class ReadAheadTest : public testing::TempDirTest {
 protected:
  // Two threads may read ahead, whatever the machine (the default follows
  // its hardware threads).
  void SetUp() override {
    TempDirTest::SetUp();
    saved_limit_ = ReadAheadThreadLimit();
    SetReadAheadThreadLimit(2);
  }
  void TearDown() override {
    SetReadAheadThreadLimit(saved_limit_);
    TempDirTest::TearDown();
  }
  int saved_limit_ = 0;

  // A trace of `records` mixed records at `path`.
  void WriteMixed(const std::string& path, uint64_t records) {
    auto writer = TraceWriter::Create(path, SampleHeader(), {.overwrite = true});
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    uint64_t seq = 0, step = 0;
    AppendMixed(**writer, records, &seq, &step);
    ASSERT_TRUE((*writer)->Close().ok());
  }

  static ReaderOptions Options(ReadAhead mode, bool share_reads) {
    ReaderOptions options{mode};
    options.share_reads = share_reads;
    return options;
  }

  Scan ScanOf(const std::string& path, ReadAhead mode, bool runs = false, bool share_reads = true) {
    Scan scan;
    auto reader = TraceReader::Open(path, &scan.error, Options(mode, share_reads));
    if (!reader.ok()) {
      scan.status = reader.status().ToString();
      return scan;
    }
    Drain(**reader, &scan, runs);
    return scan;
  }

  // Scans with and without read-ahead (reads shared and not), by Next and
  // by runs; all must agree. Returns the scan with read-ahead, reads shared
  // (by Next); *unshared, when given, gets the one with reads not shared.
  Scan ExpectSameBothWays(const std::string& path, Scan* unshared = nullptr) {
    const Scan never = ScanOf(path, ReadAhead::kNever);
    const Scan never_runs = ScanOf(path, ReadAhead::kNever, true);
    EXPECT_EQ(never.pieces_read_ahead, 0u);
    Scan result;
    for (bool share : {true, false}) {
      SCOPED_TRACE(share ? "reads shared" : "reads not shared");
      const Scan always = ScanOf(path, ReadAhead::kAlways, false, share);
      const Scan always_runs = ScanOf(path, ReadAhead::kAlways, true, share);
      {
        SCOPED_TRACE("Next, read-ahead on and off");
        ExpectSameScan(always, never);
      }
      {
        SCOPED_TRACE("runs, read-ahead on and off");
        ExpectSameScan(always_runs, never_runs);
      }
      {
        SCOPED_TRACE("runs against Next");
        ExpectSameScan(always_runs, never);
      }
      VerifySummary with, without;
      const Status s_with = VerifyTrace(path, &with, Options(ReadAhead::kAlways, share));
      const Status s_without = VerifyTrace(path, &without, ReaderOptions{ReadAhead::kNever});
      EXPECT_EQ(s_with.ToString(), s_without.ToString());
      EXPECT_EQ(with.records, without.records);
      EXPECT_EQ(with.boundaries, without.boundaries);
      EXPECT_EQ(with.steps, without.steps);
      EXPECT_EQ(with.events, without.events);
      EXPECT_EQ(with.last_step, without.last_step);
      EXPECT_EQ(with.warning, without.warning);
      EXPECT_EQ(with.error.reason, without.error.reason);
      EXPECT_EQ(with.error.offset, without.error.offset);
      if (share) result = always;
      if (!share && unshared != nullptr) *unshared = always;
    }
    return result;
  }

  void OverwriteRecord(const std::string& path, uint64_t index, const std::string& bytes) {
    std::string all = ReadBytes(path);
    all.replace(RecordOffset(index), bytes.size(), bytes);
    WriteBytes(path, all);
  }
};

TEST_F(ReadAheadTest, AWholeTraceReadsTheSameAndThePiecesComeFromTheThread) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 10 * kPieceRecords + 77);
  Scan unshared;
  const Scan shared = ExpectSameBothWays(path, &unshared);
  EXPECT_EQ(shared.status, "OK");
  EXPECT_GE(shared.records.size(), 10 * kPieceRecords + 77);
  // The buffer grows to its full size over the first pieces; after that the
  // pieces wholly inside the file are read ahead: every one of them by the
  // thread, or, sharing the reads, every other one, the first by the thread.
  EXPECT_GE(unshared.pieces_read_ahead, 7u);
  EXPECT_EQ(shared.pieces_read_ahead, (unshared.pieces_read_ahead + 1) / 2);
  EXPECT_EQ(ReadAheadThreadsRunning(), 0);  // every reader gone, every thread with it
}

// A file on disk whose reads at one offset fail (EIO) the first `times`
// times: a fault that does not depend on the order of the calls, which
// overlap when the reads are shared.
class FailingAtOffsetFile final : public RandomAccessFile {
 public:
  FailingAtOffsetFile(std::unique_ptr<RandomAccessFile> base, uint64_t offset, int times)
      : base_(std::move(base)), offset_(offset), left_(times) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      offsets_.push_back(offset);
    }
    if (offset == offset_ && left_.fetch_sub(1) > 0) {
      failed_elsewhere_ = std::this_thread::get_id() != owner_;
      return Status::FromErrno("read", path(), EIO);
    }
    return base_->Read(offset, n, dst);
  }
  // Whether the read that failed was made by a thread other than the one
  // that made this object (the reader's read-ahead thread).
  bool failed_elsewhere() const { return failed_elsewhere_; }
  // Every offset read at, in the order the calls came.
  std::vector<uint64_t> offsets() {
    std::lock_guard<std::mutex> lock(mutex_);
    return offsets_;
  }
  StatusOr<uint64_t> Size() override { return base_->Size(); }
  const std::string& path() const override { return base_->path(); }
  uint64_t size_at_open() const override { return base_->size_at_open(); }
  bool reads_may_overlap() const override { return base_->reads_may_overlap(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  const uint64_t offset_;
  std::atomic<int> left_;
  const std::thread::id owner_ = std::this_thread::get_id();
  std::atomic<bool> failed_elsewhere_{false};
  std::mutex mutex_;
  std::vector<uint64_t> offsets_;
};

// A read that fails, whichever thread made it, is reported when the reader
// reaches that piece, as the reader alone reports it; the next call reads
// it again and goes on. Every piece of the trace in turn, reads shared and
// not.
TEST_F(ReadAheadTest, AFailedReadOfEitherThreadIsReportedAtItsPieceAndReadAgain) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 8 * kPieceRecords + 5);
  const Scan expected = ScanOf(path, ReadAhead::kNever);
  ASSERT_EQ(expected.status, "OK");
  // The offsets the reader alone reads at (the header's, then its pieces).
  std::vector<uint64_t> offsets;
  {
    auto base = FileSystem::Default()->NewRandomAccessFile(path);
    ASSERT_TRUE(base.ok());
    ASSERT_TRUE((*base)->reads_may_overlap());  // a file on disk: the shared path
    auto file = std::make_unique<FailingAtOffsetFile>(std::move(*base), UINT64_MAX, 0);
    FailingAtOffsetFile* recorder = file.get();
    auto reader = TraceReader::Open(std::move(file), nullptr, ReaderOptions{ReadAhead::kNever});
    ASSERT_TRUE(reader.ok());
    Scan scan;
    Drain(**reader, &scan);
    offsets = recorder->offsets();
  }
  ASSERT_EQ(offsets.front(), 0u);  // the header's, read by Open: not a piece
  offsets.erase(offsets.begin());
  ASSERT_GE(offsets.size(), 9u);
  int failed_by_thread = 0, failed_by_reader = 0;  // reads shared
  for (uint64_t bad : offsets) {
    SCOPED_TRACE("reads at offset " + std::to_string(bad) + " fail once");
    std::string outcome[3];
    for (int way = 0; way < 3; ++way) {  // reads shared, not shared, no read-ahead
      const ReadAhead mode = way < 2 ? ReadAhead::kAlways : ReadAhead::kNever;
      auto file = FileSystem::Default()->NewRandomAccessFile(path);
      ASSERT_TRUE(file.ok());
      auto failing = std::make_unique<FailingAtOffsetFile>(std::move(*file), bad, 1);
      FailingAtOffsetFile* fault = failing.get();
      auto reader = TraceReader::Open(std::move(failing), nullptr, Options(mode, way == 0));
      ASSERT_TRUE(reader.ok());
      Scan scan;
      Drain(**reader, &scan);  // up to the failed read
      outcome[way] = scan.status + " after " + std::to_string(scan.records.size());
      EXPECT_NE(scan.status.find(std::strerror(EIO)), std::string::npos) << scan.status;
      Scan rest;
      Drain(**reader, &rest);  // read again: the rest of the trace
      scan.records.insert(scan.records.end(), rest.records.begin(), rest.records.end());
      rest.records = scan.records;
      rest.pieces_read_ahead = 0;
      Scan want = expected;
      want.pieces_read_ahead = 0;
      ExpectSameScan(rest, want);
      if (way == 0) ++(fault->failed_elsewhere() ? failed_by_thread : failed_by_reader);
    }
    EXPECT_EQ(outcome[0], outcome[2]);
    EXPECT_EQ(outcome[1], outcome[2]);
  }
  // Pieces of both: the growing buffer's and every other whole one are the
  // reader's, the rest the thread's.
  EXPECT_GE(failed_by_thread, 3);
  EXPECT_GE(failed_by_reader, 3);
}

TEST_F(ReadAheadTest, TornTailsAreTheSame) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 5 * kPieceRecords);
  const std::string good = ReadBytes(path);
  WriteBytes(path, good + std::string(50, '\x5a'));  // a partial record
  EXPECT_EQ(ExpectSameBothWays(path).torn_tail_bytes, 50u);
  // Zero records running past several pieces to the end: a zero-filled tail
  // that the read-ahead reads before the reader reaches it.
  WriteBytes(path, good + std::string(3 * kPieceRecords * kRecordSize + 10, '\0'));
  const Scan zeros = ExpectSameBothWays(path);
  EXPECT_EQ(zeros.torn_tail_bytes, 3 * kPieceRecords * kRecordSize + 10);
  EXPECT_NE(zeros.warning.find("zero-filled"), std::string::npos);
}

TEST_F(ReadAheadTest, CorruptionInAnyPieceIsTheSameError) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 7 * kPieceRecords + 5);
  const std::string good = ReadBytes(path);
  // The first record of a piece read ahead, one in the middle of another,
  // and one in the last piece (read by the reader itself).
  for (uint64_t index : {uint64_t{4 * kPieceRecords}, uint64_t{5 * kPieceRecords + 1000},
                         uint64_t{7 * kPieceRecords + 2}}) {
    SCOPED_TRACE("record " + std::to_string(index));
    std::string bad = good;
    bad[RecordOffset(index) + 20] ^= 0x10;
    WriteBytes(path, bad);
    const Scan scan = ExpectSameBothWays(path);
    EXPECT_NE(scan.status.find("record " + std::to_string(index) + " at offset"), std::string::npos)
        << scan.status;
  }
  // A hole of zeros inside the trace, data after it.
  std::string hole = good;
  hole.replace(RecordOffset(5 * kPieceRecords + 3), kRecordSize, std::string(kRecordSize, '\0'));
  WriteBytes(path, hole);
  EXPECT_NE(ExpectSameBothWays(path).status.find("a hole inside the trace"), std::string::npos);
}

// A trace still being written: what was appended after the open, past the
// size read ahead, is read as the file is when the reader gets there.
TEST_F(ReadAheadTest, ALiveTraceIsReadToItsCurrentEndEachTime) {
  for (ReadAhead mode : {ReadAhead::kAlways, ReadAhead::kNever}) {
    SCOPED_TRACE(mode == ReadAhead::kAlways ? "read-ahead" : "no read-ahead");
    const std::string path = Path("live.trace");
    auto writer = TraceWriter::Create(path, SampleHeader(), {.overwrite = true, .buffer_bytes = 64 * 1024});
    ASSERT_TRUE(writer.ok());
    uint64_t seq = 0, step = 0;
    AppendMixed(**writer, 4 * kPieceRecords + 9, &seq, &step);
    ASSERT_TRUE((*writer)->Flush().ok());
    auto reader = TraceReader::Open(path, nullptr, ReaderOptions{mode});
    ASSERT_TRUE(reader.ok());
    Scan scan;
    // Into the last piece the file holds whole (the buffer grows over its
    // first 3392 records, then pieces of 2048: [5440, 7488)); records
    // appended now are read in the same pass, without a stop at the old end.
    ASSERT_NO_FATAL_FAILURE(ReadRecords(**reader, 6000, &scan));
    AppendMixed(**writer, 2 * kPieceRecords, &seq, &step);
    ASSERT_TRUE((*writer)->Flush().ok());
    Drain(**reader, &scan);
    EXPECT_EQ(scan.status, "OK");
    EXPECT_EQ(scan.records.size(), (*writer)->records_written());
    AppendMixed(**writer, 3 * kPieceRecords + 1, &seq, &step);
    ASSERT_TRUE((*writer)->Flush().ok());
    Drain(**reader, &scan);
    EXPECT_EQ(scan.status, "OK");
    EXPECT_EQ(scan.records.size(), (*writer)->records_written());
    EXPECT_GE(scan.records.size(), 7 * kPieceRecords + 10);
    if (mode == ReadAhead::kAlways) {
      EXPECT_GT(scan.pieces_read_ahead, 0u);
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
}

// The file cut (as a rollback cuts it) while a reader is several pieces
// before the cut: the reader ends where the file now ends.
TEST_F(ReadAheadTest, AFileCutAheadOfTheReaderEndsWhereItWasCut) {
  const std::string path = Path("cut.trace");
  std::vector<Scan> scans;
  for (int way = 0; way < 3; ++way) {
    const ReadAhead mode = way < 2 ? ReadAhead::kAlways : ReadAhead::kNever;
    WriteMixed(path, 13 * kPieceRecords);
    auto reader = TraceReader::Open(path, nullptr, Options(mode, way == 0));
    ASSERT_TRUE(reader.ok());
    Scan scan;
    // In the reader's piece [5440, 7488) (the buffer grows over the first
    // 3392 records): at most 2 * kSharedReadAheadPieces pieces after it are
    // read ahead, up to record 7488 + 6 * 2048 = 19776.
    static_assert(2 * kSharedReadAheadPieces <= 6 && kReadAheadPieces <= 6);
    ASSERT_NO_FATAL_FAILURE(ReadRecords(**reader, 3 * kPieceRecords, &scan));
    ASSERT_TRUE(TruncateFile(path, RecordOffset(10 * kPieceRecords + 100) + 40).ok());
    Drain(**reader, &scan);
    EXPECT_EQ(scan.records.size(), 10 * kPieceRecords + 100);
    EXPECT_EQ(scan.torn_tail_bytes, 40u);
    scans.push_back(scan);
  }
  ExpectSameScan(scans[0], scans[2]);
  ExpectSameScan(scans[1], scans[2]);
}

// The file cut at the start of a piece while the thread holds pieces it read
// before the cut, then written again past the cut: once the reader has seen
// the end, no piece read before it is used, and what was written is read as
// it now is (here: a flipped bit in the piece after the cut), as by the reader
// alone. Where the cut falls on a piece the thread read, the reader reads
// that piece as it was (docs/trace-format.md §4) and does not see the cut.
TEST_F(ReadAheadTest, PiecesReadAheadOfACutTheReaderSawAreNotUsed) {
  const std::string path = Path("regrow.trace");
  WriteMixed(path, 13 * kPieceRecords);
  const std::string original = ReadBytes(path);
  int cuts_seen_shared = 0;
  // Whole pieces start at record 1344 + k * 2048 (the buffer grows over the
  // first 1344 records); the reader stops at record 3000, in the piece [1344, 3392).
  for (uint64_t cut : {uint64_t{3392}, uint64_t{5440}, uint64_t{7488}, uint64_t{9536}}) {
    // In the piece after the cut: one the thread read before the cut when
    // the cut falls on one of the reader's own.
    const uint64_t bad = cut + kPieceRecords + 300;
    std::string tail = original.substr(RecordOffset(cut));
    tail[RecordOffset(bad) - RecordOffset(cut) + 20] ^= 0x10;
    std::string outcome[3];
    for (int way = 0; way < 3; ++way) {
      SCOPED_TRACE("cut at record " + std::to_string(cut) + (way == 0 ? ", reads shared"
                                                              : way == 1 ? ", reads not shared"
                                                                         : ", no read-ahead"));
      WriteBytes(path, original);
      auto reader = TraceReader::Open(path, nullptr, Options(way < 2 ? ReadAhead::kAlways : ReadAhead::kNever,
                                                             way == 0));
      ASSERT_TRUE(reader.ok());
      Scan scan;
      ASSERT_NO_FATAL_FAILURE(ReadRecords(**reader, 3000, &scan));
      ASSERT_TRUE((*reader)->CountRecordsInFile().ok());  // waits for the reads issued
      ASSERT_TRUE(TruncateFile(path, RecordOffset(cut)).ok());
      Drain(**reader, &scan);
      ASSERT_EQ(scan.status, "OK");
      const bool saw_cut = scan.records.size() == cut;
      if (way == 2) {
        EXPECT_TRUE(saw_cut);
      }
      {
        std::ofstream append(path, std::ios::binary | std::ios::app);
        append << tail;
      }
      Drain(**reader, &scan);
      outcome[way] = scan.status;
      if (saw_cut) {
        EXPECT_NE(scan.status.find("record " + std::to_string(bad) + " at offset"), std::string::npos)
            << scan.status;
        cuts_seen_shared += way == 0;
      }
    }
    if (outcome[0].find("record " + std::to_string(bad)) != std::string::npos) {
      EXPECT_EQ(outcome[0], outcome[2]);
    }
  }
  // Every other whole piece is the reader's own: two of the four cuts.
  EXPECT_GE(cuts_seen_shared, 2);
}

// Records read at random (bisect) between the steps of a scan.
TEST_F(ReadAheadTest, RandomReadsDuringAScanAreTheSame) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 6 * kPieceRecords);
  std::vector<std::vector<Record>> seen;
  for (ReadAhead mode : {ReadAhead::kAlways, ReadAhead::kNever}) {
    auto reader = TraceReader::Open(path, nullptr, ReaderOptions{mode});
    ASSERT_TRUE(reader.ok());
    std::vector<Record> out;
    for (uint64_t i = 0;; ++i) {
      Record record;
      bool done = false;
      ASSERT_TRUE((*reader)->Next(&record, &done).ok());
      if (done) break;
      if (i % 3001 == 0) {
        Record at;
        ASSERT_TRUE((*reader)->ReadRecordAt((i * 7) % (6 * kPieceRecords), &at).ok());
        out.push_back(at);
        auto count = (*reader)->CountRecordsInFile();
        ASSERT_TRUE(count.ok());
        EXPECT_GE(*count, 6 * kPieceRecords);
      }
      out.push_back(record);
    }
    seen.push_back(std::move(out));
  }
  ASSERT_EQ(seen[0].size(), seen[1].size());
  for (size_t i = 0; i < seen[0].size(); ++i) {
    ASSERT_EQ(seen[0][i].index, seen[1][i].index);
    ASSERT_TRUE(seen[0][i].body == seen[1][i].body) << i;
  }
}

// Any read or open of the file failing, EIO.
FaultSpec FailCall(uint64_t nth) {
  FaultSpec spec;
  spec.any_op = true;
  spec.nth = nth;
  spec.error = EIO;
  return spec;
}

// The file layer sees the same calls in the same order, so a fault injected
// at any of them fails the same way with read-ahead and without.
TEST_F(ReadAheadTest, EveryInjectedFaultFailsTheSameWay) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 5 * kPieceRecords + 3);
  FaultInjectingFileSystem injector;
  ScopedFileSystemOverride use(&injector);
  std::vector<std::string> logs[2];
  int k = 0;
  for (ReadAhead mode : {ReadAhead::kAlways, ReadAhead::kNever}) {
    VerifySummary summary;
    injector.ResetCounts();
    ASSERT_TRUE(VerifyTrace(path, &summary, ReaderOptions{mode}).ok());
    logs[k++] = injector.log();
  }
  EXPECT_EQ(logs[0], logs[1]);
  EXPECT_GE(injector.calls(FileOp::kRead), 9u);
  const uint64_t calls = injector.calls();
  for (uint64_t nth = 1; nth <= calls; ++nth) {
    SCOPED_TRACE("call " + std::to_string(nth) + " of " + std::to_string(calls) + ": " + logs[1][nth - 1]);
    std::string outcome[2];
    k = 0;
    for (ReadAhead mode : {ReadAhead::kAlways, ReadAhead::kNever}) {
      injector.ResetCounts();
      injector.SetFault(FailCall(nth));
      VerifySummary summary;
      outcome[k++] = VerifyTrace(path, &summary, ReaderOptions{mode}).ToString();
      injector.ClearFault();
      EXPECT_EQ(injector.injected(), 1u);
    }
    EXPECT_EQ(outcome[0], outcome[1]);
    EXPECT_NE(outcome[0].find(std::strerror(EIO)), std::string::npos) << outcome[0];
  }
}

// What read-ahead does change: a reader that stops inside a piece (here at
// corruption) has already had the next kReadAheadPieces read, reads the
// reader alone would not have made, always the same ones. Their failure is
// never reported: the reader never gets there.
TEST_F(ReadAheadTest, AReaderThatStopsEarlyHasHadItsReadsAheadWhoseFailureNobodySees) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 9 * kPieceRecords);
  std::string bytes = ReadBytes(path);
  const uint64_t bad_index = 4 * kPieceRecords + 10;
  bytes[RecordOffset(bad_index) + 20] ^= 1;
  WriteBytes(path, bytes);
  FaultInjectingFileSystem injector;
  ScopedFileSystemOverride use(&injector);
  std::vector<std::string> logs[2];
  std::string outcome[2];
  int k = 0;
  for (ReadAhead mode : {ReadAhead::kAlways, ReadAhead::kNever}) {
    VerifySummary summary;
    injector.ResetCounts();
    outcome[k] = VerifyTrace(path, &summary, ReaderOptions{mode}).ToString();
    logs[k++] = injector.log();
  }
  EXPECT_EQ(outcome[0], outcome[1]);
  EXPECT_NE(outcome[0].find("record " + std::to_string(bad_index)), std::string::npos);
  ASSERT_EQ(logs[0].size(), logs[1].size() + kReadAheadPieces);
  EXPECT_EQ(std::vector<std::string>(logs[0].begin(), logs[0].end() - kReadAheadPieces), logs[1]);
  for (uint64_t nth = logs[1].size() + 1; nth <= logs[0].size(); ++nth) {
    injector.ResetCounts();
    injector.SetFault(FailCall(nth));
    VerifySummary summary;
    EXPECT_EQ(VerifyTrace(path, &summary, ReaderOptions{ReadAhead::kAlways}).ToString(), outcome[1]);
    EXPECT_EQ(injector.injected(), 1u);
  }
}

TEST_F(ReadAheadTest, ThreadsAreBoundedAcrossManyReadersOfOneProcess) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 6 * kPieceRecords);
  const Scan expected = ScanOf(path, ReadAhead::kNever);
  const int limit = ReadAheadThreadLimit();
  ASSERT_EQ(limit, 2);
  std::vector<std::unique_ptr<TraceReader>> readers;
  std::vector<Scan> scans(static_cast<size_t>(limit) + 3);
  for (size_t i = 0; i < scans.size(); ++i) {
    auto reader = TraceReader::Open(path, nullptr, ReaderOptions{ReadAhead::kAlways});
    ASSERT_TRUE(reader.ok());
    readers.push_back(std::move(*reader));
  }
  // In turn, a few hundred records each, as compare reads the ranks of a run.
  int most = 0;
  for (bool any = true; any;) {
    any = false;
    for (size_t i = 0; i < readers.size(); ++i) {
      for (int n = 0; n < 300; ++n) {
        Record record;
        bool done = false;
        ASSERT_TRUE(readers[i]->Next(&record, &done).ok());
        if (done) break;
        scans[i].records.push_back(record);
        any = true;
      }
      most = std::max(most, ReadAheadThreadsRunning());
      ASSERT_LE(ReadAheadThreadsRunning(), limit);
    }
  }
  EXPECT_EQ(most, limit);  // every slot was used, none more
  int read_ahead = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    Drain(*readers[i], &scans[i]);
    read_ahead += scans[i].pieces_read_ahead > 0;
    SCOPED_TRACE("reader " + std::to_string(i));
    ExpectSameScan(scans[i], expected);
  }
  EXPECT_GE(read_ahead, limit);
  readers.clear();
  EXPECT_EQ(ReadAheadThreadsRunning(), 0);
  // With none allowed, nobody reads ahead.
  SetReadAheadThreadLimit(0);
  EXPECT_EQ(ScanOf(path, ReadAhead::kAlways).pieces_read_ahead, 0u);
}

// A caller's own reading thread (compare's second side) holds a slot of
// the same limit: read-ahead threads come on top only within it.
TEST_F(ReadAheadTest, ACallersReadingThreadsCountAgainstTheLimit) {
  const std::string path = Path("t.trace");
  WriteMixed(path, 6 * kPieceRecords);
  ASSERT_EQ(ReadAheadThreadLimit(), 2);
  {
    ReadingThreadSlot one;
    EXPECT_TRUE(one.held());
    EXPECT_EQ(ReadAheadThreadsRunning(), 1);
    EXPECT_GT(ScanOf(path, ReadAhead::kAlways).pieces_read_ahead, 0u);  // the second slot
    ReadingThreadSlot two;
    EXPECT_TRUE(two.held());
    EXPECT_EQ(ScanOf(path, ReadAhead::kAlways).pieces_read_ahead, 0u);  // none left
    ReadingThreadSlot three;
    EXPECT_FALSE(three.held());
    EXPECT_EQ(ReadAheadThreadsRunning(), 2);
  }
  EXPECT_EQ(ReadAheadThreadsRunning(), 0);
}

TEST_F(ReadAheadTest, SmallTracesAndFilesInMemoryAreNotReadAhead) {
  const std::string small = Path("small.trace");
  WriteMixed(small, 6 * kPieceRecords);  // 1.5 MiB: under kReadAheadMinBytes
  ASSERT_LT(FileSize(small).value(), kReadAheadMinBytes);
  EXPECT_EQ(ScanOf(small, ReadAhead::kAuto).pieces_read_ahead, 0u);
  // In memory: nothing to gain, whatever the size or the option.
  auto reader = TraceReader::Open(NewMemoryFile("mem.trace", ReadBytes(small)), nullptr,
                                  ReaderOptions{ReadAhead::kAlways});
  ASSERT_TRUE(reader.ok());
  Scan in_memory;
  Drain(**reader, &in_memory);
  EXPECT_EQ(in_memory.pieces_read_ahead, 0u);
  EXPECT_EQ(in_memory.records.size(), ScanOf(small, ReadAhead::kNever).records.size());

  const std::string large = Path("large.trace");
  WriteMixed(large, kReadAheadMinBytes / kRecordSize + kPieceRecords);
  const Scan automatic = ScanOf(large, ReadAhead::kAuto);
  EXPECT_GT(automatic.pieces_read_ahead, 0u);
  ExpectSameScan(automatic, ScanOf(large, ReadAhead::kNever));
}

}  // namespace
}  // namespace dgrr::trace
