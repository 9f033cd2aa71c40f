// Writer and reader, one test per failure mode (after LevelDB's log_test):
// corrupt bytes, wrong order, torn tails, live reading, injected I/O errors.
#include <gtest/gtest.h>

#include <cstring>

#include "base/coding.h"
#include "base/file.h"
#include "tests/trace_format/sample_trace.h"
#include "trace_format/crc32c.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::trace {
namespace {

using testing::kLongName;
using testing::kSampleRecords;
using testing::kShortName;
using testing::SampleBoundary;
using testing::SampleHeader;
using testing::WriteSampleTrace;

class TraceTest : public testing::TempDirTest {
 protected:
  // The trace as raw bytes built record by record, for orders a writer refuses.
  struct RawTrace {
    std::string bytes;
    RawTrace() {
      uint8_t header[kHeaderSize];
      EncodeHeader(SampleHeader(), header);
      bytes.assign(reinterpret_cast<char*>(header), kHeaderSize);
    }
    template <typename EncodeFn>
    RawTrace& Add(EncodeFn encode) {
      uint8_t record[kRecordSize];
      encode(record);
      SealRecord(record);
      bytes.append(reinterpret_cast<char*>(record), kRecordSize);
      return *this;
    }
    RawTrace& Name(uint32_t id, const std::string& name) {
      return Add([&](uint8_t* r) {
        EncodeNameChunk({.name_id = id, .total_length = static_cast<uint16_t>(name.size()),
                         .chunk_offset = 0, .bytes = name}, r);
      });
    }
    RawTrace& Boundary(uint32_t name_id, uint64_t seq) {
      return Add([&](uint8_t* r) { EncodeBoundary(SampleBoundary(name_id, 0, seq), r); });
    }
  };

  Status Verify(const std::string& path, VerifySummary* summary) { return VerifyTrace(path, summary); }

  void FlipByte(const std::string& path, uint64_t offset, uint8_t mask) {
    std::string bytes = ReadBytes(path);
    bytes[offset] = static_cast<char>(bytes[offset] ^ mask);
    WriteBytes(path, bytes);
  }
};

TEST_F(TraceTest, RoundTrip) {
  const std::string path = Path("rank1.trace");
  WriteSampleTrace(path);
  ASSERT_EQ(*FileSize(path), RecordOffset(kSampleRecords));
  auto trace = ReadWholeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->header, SampleHeader());
  ASSERT_EQ(trace->names, (std::vector<std::string>{kShortName, kLongName}));
  ASSERT_EQ(trace->records.size(), kSampleRecords);
  for (uint64_t i = 0; i < kSampleRecords; ++i) EXPECT_EQ(trace->records[i].index, i);
  EXPECT_EQ(std::get<NameChunk>(trace->records[2].body).chunk_offset, kNameChunkCapacity);
  EXPECT_EQ(std::get<BoundaryRecord>(trace->records[5].body), SampleBoundary(1, 0, 1));
  const auto& end = std::get<StepRecord>(trace->records[7].body);
  EXPECT_EQ(end.kind, StepKind::kEnd);
  EXPECT_EQ(BitsToFloat(static_cast<uint32_t>(end.loss_bits)), 2.5f);
  EXPECT_EQ(std::get<EventRecord>(trace->records[8].body).payload, "ckpt/step-0");
  EXPECT_TRUE(trace->warning.empty());

  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok());
  EXPECT_EQ(summary.records, kSampleRecords);
  EXPECT_EQ(summary.boundaries, 4u);
  EXPECT_EQ(summary.steps, 4u);
  EXPECT_EQ(summary.events, 1u);
  EXPECT_EQ(summary.names, 2u);
  EXPECT_EQ(summary.last_step, 1u);
}

TEST_F(TraceTest, ReadRecordAtSeeks) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Record record;
  ASSERT_TRUE((*reader)->ReadRecordAt(10, &record).ok());
  EXPECT_EQ(record.index, 10u);
  EXPECT_EQ(std::get<BoundaryRecord>(record.body).seq, 3u);
  EXPECT_TRUE((*reader)->ReadRecordAt(kSampleRecords, &record).IsNotFound());
  EXPECT_EQ(*(*reader)->CountRecordsInFile(), kSampleRecords);
  FlipByte(path, RecordOffset(9) + 20, 1);
  EXPECT_NE((*reader)->ReadRecordAt(9, &record).message().find("record 9 at offset 1280"),
            std::string::npos);
}

TEST_F(TraceTest, BadCrcMidFileIsCorruption) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  FlipByte(path, RecordOffset(5) + 44, 0x80);
  VerifySummary summary;
  Status s = Verify(path, &summary);
  ASSERT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), path + ": record 5 at offset 768: CRC mismatch");
  EXPECT_FALSE(summary.error.in_header);
  EXPECT_EQ(summary.error.record_index, 5u);
  EXPECT_EQ(summary.error.offset, 768u);
}

TEST_F(TraceTest, BadCrcInTheLastWholeRecordIsCorruptionNotATornTail) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  FlipByte(path, RecordOffset(kSampleRecords - 1) + 127, 0x01);
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).IsCorruption());
  EXPECT_EQ(summary.error.record_index, kSampleRecords - 1);
}

TEST_F(TraceTest, UnknownRecordTypeIsCorruption) {
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "a").Boundary(0, 0).Add([](uint8_t* r) {
    std::memset(r, 0, kRecordSize);
    r[0] = 77;
  }).Boundary(0, 1);
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  Status s = Verify(path, &summary);
  EXPECT_EQ(s.message(), path + ": record 2 at offset 384: unknown record type 77");
}

TEST_F(TraceTest, SequenceGoingBackwardsIsCorruption) {
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "a").Boundary(0, 5).Boundary(0, 6).Boundary(0, 4);
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  Status s = Verify(path, &summary);
  EXPECT_EQ(s.message(), path + ": record 3 at offset 512: sequence number 4 does not follow 6");
  RawTrace repeat;
  repeat.Name(0, "a").Boundary(0, 5).Boundary(0, 5);
  WriteBytes(path, repeat.bytes);
  EXPECT_EQ(Verify(path, &summary).IsCorruption(), true);
  EXPECT_EQ(summary.error.record_index, 2u);
}

TEST_F(TraceTest, SequenceNumbersMayStartAnywhereAndHaveGaps) {
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "a").Boundary(0, 1000).Boundary(0, 1007).Boundary(0, ~uint64_t{0});
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok()) << summary.error.reason;
  EXPECT_EQ(summary.boundaries, 3u);
}

TEST_F(TraceTest, BoundaryRankNotBelowTheWorldSizeIsCorruption) {
  const std::string path = Path("t.trace");
  RawTrace raw;  // SampleHeader: rank 1 of 2
  BoundaryRecord other = SampleBoundary(0, 0, 1);
  other.rank = 0;  // another rank's tensor: allowed, below the world size
  BoundaryRecord beyond = SampleBoundary(0, 0, 2);
  beyond.rank = 2;
  raw.Name(0, "a").Add([&](uint8_t* r) { EncodeBoundary(other, r); }).Add([&](uint8_t* r) {
    EncodeBoundary(beyond, r);
  });
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  EXPECT_EQ(Verify(path, &summary).message(),
            path + ": record 2 at offset 384: rank 2 is not below the world size 2");
  // The writer refuses to write it.
  auto writer = TraceWriter::Create(Path("w.trace"), SampleHeader());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->InternName("a").ok());
  EXPECT_TRUE((*writer)->AppendBoundary(beyond).IsInvalidArgument());
}

TEST_F(TraceTest, StepsMayDecrease) {
  // A resumed run restarts at its checkpoint's step; a program may number
  // steps as it likes: the reader does not order steps.
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "a")
      .Add([](uint8_t* r) { EncodeBoundary(SampleBoundary(0, 7, 0), r); })
      .Add([](uint8_t* r) { EncodeEvent({.step = 7, .kind = EventKind::kResumed}, r); })
      .Add([](uint8_t* r) { EncodeBoundary(SampleBoundary(0, 3, 1), r); });
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok()) << summary.error.reason;
  EXPECT_EQ(summary.last_step, 7u);  // the highest, not the last
}

TEST_F(TraceTest, OneNameUnderTwoIdsIsCorruption) {
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "fc1.out").Name(1, "fc2.out").Name(2, "fc1.out").Boundary(2, 0);
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  EXPECT_EQ(Verify(path, &summary).message(),
            path + ": record 2 at offset 384: name id 2 repeats the name of id 0 (a name is defined once)");
}

TEST_F(TraceTest, NameMayBeDefinedLongBeforeItsFirstUse) {
  // The writer emits NAME records when a name is interned (declared), which
  // can be long before the first BOUNDARY that uses it; unused names too.
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "early").Name(1, "never.used").Name(2, "now");
  for (uint64_t seq = 0; seq < 300; ++seq) raw.Boundary(2, seq);
  raw.Boundary(0, 300);
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok()) << summary.error.reason;
  EXPECT_EQ(summary.names, 3u);
  EXPECT_EQ(summary.boundaries, 301u);
}

TEST_F(TraceTest, StepFieldsAreCheckedByReaderAndWriter) {
  const std::string path = Path("t.trace");
  VerifySummary summary;
  auto verify_one = [&](const StepRecord& step) {
    RawTrace raw;
    raw.Add([&](uint8_t* r) { EncodeStep(step, r); });
    WriteBytes(path, raw.bytes);
    return Verify(path, &summary);
  };
  // An f16 loss sits in the low 16 bits; an f32 in the low 32.
  EXPECT_TRUE(verify_one({.step = 1, .kind = StepKind::kEnd, .loss_dtype = DType::kF16,
                          .loss_bits = 0x3e00}).ok());
  EXPECT_TRUE(verify_one({.step = 1, .kind = StepKind::kEnd, .loss_dtype = DType::kBF16,
                          .loss_bits = 0x3fc0}).ok());
  EXPECT_EQ(verify_one({.step = 1, .kind = StepKind::kEnd, .loss_dtype = DType::kF16,
                        .loss_bits = 0x3e000000})
                .message(),
            path + ": record 0 at offset 128: loss_bits has nonzero bits above its 2-byte f16 value "
                   "(it sits in the low bytes)");
  EXPECT_EQ(verify_one({.step = 1, .kind = StepKind::kEnd, .loss_bits = 1}).message(),
            path + ": record 0 at offset 128: nonzero loss_bits without a loss dtype");
  const StepRecord begin_with_loss{.step = 1, .kind = StepKind::kBegin, .loss_dtype = DType::kF32,
                                   .loss_bits = 0x3fc00000};
  EXPECT_EQ(verify_one(begin_with_loss).message(),
            path + ": record 0 at offset 128: STEP begin with a nonzero loss or parameter field "
                   "(only an end carries them)");
  EXPECT_TRUE(verify_one({.step = 1, .kind = StepKind::kBegin, .params_xxh3 = 5}).IsCorruption());
  // The writer refuses what the reader would reject.
  auto writer = TraceWriter::Create(Path("w.trace"), SampleHeader());
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE((*writer)->AppendStep(begin_with_loss).IsInvalidArgument());
  EXPECT_TRUE((*writer)
                  ->AppendStep({.step = 1, .kind = StepKind::kEnd, .loss_dtype = DType::kF32,
                                .loss_bits = 0x13fc00000})
                  .IsInvalidArgument());
}

TEST_F(TraceTest, UndefinedNameIdIsCorruption) {
  const std::string path = Path("t.trace");
  RawTrace raw;
  raw.Name(0, "a").Boundary(0, 0).Boundary(1, 1);
  WriteBytes(path, raw.bytes);
  VerifySummary summary;
  EXPECT_EQ(Verify(path, &summary).message(),
            path + ": record 2 at offset 384: undefined name id 1 (1 names defined)");
}

TEST_F(TraceTest, NameRecordsOutOfOrderAreCorruption) {
  const std::string path = Path("t.trace");
  VerifySummary summary;
  RawTrace skipped;
  skipped.Name(1, "b");
  WriteBytes(path, skipped.bytes);
  EXPECT_NE(Verify(path, &summary).message().find("name id 1 defined out of order"),
            std::string::npos);

  // A long name whose second chunk never comes before a boundary.
  RawTrace interrupted;
  interrupted.Add([](uint8_t* r) {
    EncodeNameChunk({.name_id = 0, .total_length = 200, .chunk_offset = 0,
                     .bytes = std::string(kNameChunkCapacity, 'x')}, r);
  }).Boundary(0, 0);
  WriteBytes(path, interrupted.bytes);
  EXPECT_NE(Verify(path, &summary).message().find("record 1 at offset 256: name id 0 is incomplete"),
            std::string::npos);
}

TEST_F(TraceTest, BadMagicAndFutureVersionNameTheHeader) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  FlipByte(path, 2, 0x20);
  VerifySummary summary;
  Status s = Verify(path, &summary);
  EXPECT_EQ(s.message(), path + ": header at offset 0: bad magic (not a dgrr trace)");
  EXPECT_TRUE(summary.error.in_header);

  WriteSampleTrace(path);
  std::string bytes = ReadBytes(path);
  auto* p = reinterpret_cast<uint8_t*>(bytes.data());
  EncodeFixed32(p + 8, 7);
  EncodeFixed32(p + 124, crc32c::Mask(crc32c::Value(p, 124)));
  WriteBytes(path, bytes);
  s = Verify(path, &summary);
  EXPECT_EQ(s.message(), path +
                             ": header at offset 8: unsupported format version 7 (this reader "
                             "knows version 1)");
}

TEST_F(TraceTest, TruncatedHeaderAndMissingFile) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  ASSERT_TRUE(TruncateFile(path, 60).ok());
  VerifySummary summary;
  Status s = Verify(path, &summary);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("header at offset 60: truncated header (60 of 128 bytes)"),
            std::string::npos);
  EXPECT_TRUE(Verify(Path("missing.trace"), &summary).IsNotFound());
}

TEST_F(TraceTest, TornTailIsACleanEndWithAWarning) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  WriteBytes(path, ReadBytes(path) + std::string(50, '\x5a'));
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok());
  EXPECT_EQ(summary.records, kSampleRecords);
  EXPECT_EQ(summary.torn_tail_bytes, 50u);
  EXPECT_EQ(summary.warning, path + ": torn tail at offset 1664: 50 bytes ignored (partial record "
                                    "at end of file)");
}

TEST_F(TraceTest, ZeroFilledTailIsTornButZerosMidFileAreCorruption) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  const std::string good = ReadBytes(path);
  WriteBytes(path, good + std::string(2 * kRecordSize + 10, '\0'));
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok());
  EXPECT_EQ(summary.records, kSampleRecords);
  EXPECT_EQ(summary.torn_tail_bytes, 2 * kRecordSize + 10);
  EXPECT_NE(summary.warning.find("zero-filled"), std::string::npos);

  // A zero record followed by a real one: the zeros are not a tail.
  WriteBytes(path, good + std::string(kRecordSize, '\0') + good.substr(RecordOffset(11)));
  EXPECT_EQ(Verify(path, &summary).message(),
            path + ": record 12 at offset 1664: all zeros, but record 13 at offset 1792 after it "
                   "holds data (a hole inside the trace, not a torn tail)");
}

// docs/trace-format.md §4: zero records followed by a short nonzero tail are
// one torn write (nothing whole follows the hole), not a CRC mismatch.
TEST_F(TraceTest, ZeroRecordsThenAShortNonzeroTailAreATornTail) {
  const std::string path = Path("t.trace");
  WriteSampleTrace(path);
  const std::string good = ReadBytes(path);
  WriteBytes(path, good + std::string(2 * kRecordSize, '\0') + std::string(50, '\x11'));
  VerifySummary summary;
  ASSERT_TRUE(Verify(path, &summary).ok()) << summary.error.reason;
  EXPECT_EQ(summary.records, kSampleRecords);
  EXPECT_EQ(summary.torn_tail_bytes, 2 * kRecordSize + 50);
  EXPECT_EQ(summary.torn_tail_offset, RecordOffset(kSampleRecords));
  EXPECT_NE(summary.warning.find("zero-filled"), std::string::npos);
  // One nonzero byte at the very end of a whole record is inside the trace.
  std::string hole = good + std::string(2 * kRecordSize, '\0');
  hole[hole.size() - 1] = 1;
  WriteBytes(path, hole);
  EXPECT_EQ(Verify(path, &summary).message(),
            path + ": record 12 at offset 1664: all zeros, but record 13 at offset 1792 after it "
                   "holds data (a hole inside the trace, not a torn tail)");
}

TEST_F(TraceTest, ReaderOfALiveTraceReadsEveryCompleteRecord) {
  const std::string path = Path("live.trace");
  auto writer = TraceWriter::Create(path, SampleHeader(), {.buffer_bytes = 4 * kRecordSize});
  ASSERT_TRUE(writer.ok());
  TraceWriter& w = **writer;
  uint32_t id = *w.InternName("live.out");
  for (uint64_t seq = 0; seq < 10; ++seq) ASSERT_TRUE(w.AppendBoundary(SampleBoundary(id, 0, seq)).ok());
  ASSERT_TRUE(w.Flush().ok());

  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Record record;
  bool done = false;
  uint64_t read = 0;
  auto drain = [&] {
    for (;;) {
      ASSERT_TRUE((*reader)->Next(&record, &done).ok());
      if (done) break;
      ++read;
    }
  };
  drain();
  EXPECT_EQ(read, 11u);
  // Half a record lands (as if mid-write): still a clean end, nothing lost.
  for (uint64_t seq = 10; seq < 25; ++seq) ASSERT_TRUE(w.AppendBoundary(SampleBoundary(id, 1, seq)).ok());
  ASSERT_TRUE(w.Flush().ok());
  drain();
  EXPECT_EQ(read, 26u);
  EXPECT_EQ((*reader)->torn_tail_bytes(), 0u);
  ASSERT_TRUE(w.Close().ok());
  EXPECT_EQ(std::get<BoundaryRecord>(record.body).seq, 24u);
}

TEST_F(TraceTest, ReaderPicksUpARecordThatWasHalfWritten) {
  const std::string path = Path("half.trace");
  WriteSampleTrace(path);
  const std::string full = ReadBytes(path);
  WriteBytes(path, full.substr(0, RecordOffset(10) + 40));
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Record record;
  bool done = false;
  uint64_t read = 0;
  for (;;) {
    ASSERT_TRUE((*reader)->Next(&record, &done).ok());
    if (done) break;
    ++read;
  }
  EXPECT_EQ(read, 10u);
  EXPECT_EQ((*reader)->torn_tail_bytes(), 40u);
  WriteBytes(path, full);  // the writer finishes
  for (;;) {
    ASSERT_TRUE((*reader)->Next(&record, &done).ok());
    if (done) break;
    ++read;
  }
  EXPECT_EQ(read, kSampleRecords);
  EXPECT_EQ((*reader)->torn_tail_bytes(), 0u);
}

// A WritableFile that fails on the n-th Append or on Sync.
class FaultyFile : public WritableFile {
 public:
  FaultyFile(std::unique_ptr<WritableFile> inner, int appends_before_failure, bool fail_sync)
      : inner_(std::move(inner)), appends_left_(appends_before_failure), fail_sync_(fail_sync) {}
  Status Append(const void* data, size_t n) override {
    if (appends_left_-- <= 0) {
      // Part of the data reaches the file, as with a full disk.
      (void)inner_->Append(data, n / 2 + 10);
      return Status::IOError(path() + ": write: No space left on device (injected)");
    }
    return inner_->Append(data, n);
  }
  Status Flush() override { return inner_->Flush(); }
  Status Sync() override {
    return fail_sync_ ? Status::IOError(path() + ": fsync: injected") : inner_->Sync();
  }
  Status Close() override { return inner_->Close(); }
  const std::string& path() const override { return inner_->path(); }

 private:
  std::unique_ptr<WritableFile> inner_;
  int appends_left_;
  bool fail_sync_;
};

TraceWriterOptions FaultyOptions(int appends_before_failure, bool fail_sync) {
  TraceWriterOptions options;
  options.buffer_bytes = 2 * kRecordSize;
  options.open_file = [=](const std::string& path) -> StatusOr<std::unique_ptr<WritableFile>> {
    DGRR_ASSIGN_OR_RETURN(auto inner, OpenWritableFile(path, false));
    return std::unique_ptr<WritableFile>(
        new FaultyFile(std::move(inner), appends_before_failure, fail_sync));
  };
  return options;
}

TEST_F(TraceTest, WriterIoErrorIsStickyAndLeavesOnlyATornTail) {
  const std::string path = Path("faulty.trace");
  auto writer = TraceWriter::Create(path, SampleHeader(), FaultyOptions(2, false));
  ASSERT_TRUE(writer.ok());
  TraceWriter& w = **writer;
  uint32_t id = *w.InternName("x");
  Status first_error;
  uint64_t seq = 0;
  for (; seq < 100 && first_error.ok(); ++seq) first_error = w.AppendBoundary(SampleBoundary(id, 0, seq));
  if (first_error.ok()) first_error = w.Flush();
  ASSERT_TRUE(first_error.IsIOError()) << first_error.ToString();
  EXPECT_NE(first_error.message().find("injected"), std::string::npos);
  // Sticky: every later call answers the same error.
  EXPECT_EQ(w.AppendBoundary(SampleBoundary(id, 0, 1000)).message(), first_error.message());
  EXPECT_EQ(w.AppendStep({}).message(), first_error.message());
  EXPECT_EQ(w.Flush().message(), first_error.message());
  EXPECT_EQ(w.Close().message(), first_error.message());
  // Two whole buffers (4 records) reached the file, then 138 bytes of the
  // third: one more record and a torn tail; nothing was written after the gap.
  VerifySummary summary;
  ASSERT_TRUE(VerifyTrace(path, &summary).ok()) << summary.warning;
  EXPECT_EQ(summary.records, 5u);
  EXPECT_EQ(summary.torn_tail_bytes, 10u);
}

TEST_F(TraceTest, WriterSyncErrorIsReported) {
  const std::string path = Path("faulty.trace");
  auto writer = TraceWriter::Create(path, SampleHeader(), FaultyOptions(1000, true));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AppendStep({}).ok());
  EXPECT_TRUE((*writer)->Sync().IsIOError());
  EXPECT_TRUE((*writer)->AppendStep({}).IsIOError());
}

TEST_F(TraceTest, ManyBufferHandOversKeepOrder) {
  const std::string path = Path("many.trace");
  auto writer = TraceWriter::Create(path, SampleHeader(), {.buffer_bytes = 3 * kRecordSize});
  ASSERT_TRUE(writer.ok());
  TraceWriter& w = **writer;
  uint32_t id = *w.InternName("n");
  for (uint64_t seq = 0; seq < 1000; ++seq) {
    ASSERT_TRUE(w.AppendBoundary(SampleBoundary(id, seq / 10, seq)).ok());
  }
  ASSERT_TRUE(w.Sync().ok());
  ASSERT_TRUE(w.Close().ok());
  auto trace = ReadWholeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->records.size(), 1001u);
  for (uint64_t seq = 0; seq < 1000; ++seq) {
    ASSERT_EQ(std::get<BoundaryRecord>(trace->records[seq + 1].body), SampleBoundary(id, seq / 10, seq));
  }
}

// A Flush at every step's end (Session::EndStep) writes the partial buffer
// on the caller's thread, between full buffers the I/O thread writes: after
// each Flush the file holds every record appended so far, whole, and the
// bytes are those of a trace written without a Flush.
TEST_F(TraceTest, FlushesBetweenHandOversLeaveEveryRecordOnDiskAndTheSameBytes) {
  auto write = [&](const std::string& path, bool flush_each_step) {
    auto writer = TraceWriter::Create(path, SampleHeader(), {.buffer_bytes = 5 * kRecordSize});
    ASSERT_TRUE(writer.ok());
    TraceWriter& w = **writer;
    const uint32_t id = *w.InternName("n");
    uint64_t seq = 0;
    for (uint64_t step = 0; step < 40; ++step) {
      ASSERT_TRUE(w.AppendStep({.step = step, .kind = StepKind::kBegin}).ok());
      for (uint64_t k = 0; k < step % 7; ++k, ++seq) ASSERT_TRUE(w.AppendBoundary(SampleBoundary(id, step, seq)).ok());
      ASSERT_TRUE(w.AppendStep({.step = step, .kind = StepKind::kEnd}).ok());
      if (!flush_each_step) continue;
      ASSERT_TRUE(w.Flush().ok());
      ASSERT_EQ(ReadBytes(path).size(), RecordOffset(w.records_written())) << "step " << step;
      VerifySummary summary;
      ASSERT_TRUE(VerifyTrace(path, &summary).ok());
      EXPECT_TRUE(summary.warning.empty()) << summary.warning;
      EXPECT_EQ(summary.last_step, step);
    }
    ASSERT_TRUE(w.Close().ok());
  };
  write(Path("flushed.trace"), true);
  write(Path("buffered.trace"), false);
  EXPECT_EQ(ReadBytes(Path("flushed.trace")), ReadBytes(Path("buffered.trace")));
}

TEST_F(TraceTest, WriterRefusesBadInput) {
  const std::string path = Path("w.trace");
  auto writer = TraceWriter::Create(path, SampleHeader());
  ASSERT_TRUE(writer.ok());
  TraceWriter& w = **writer;
  EXPECT_TRUE(TraceWriter::Create(path, SampleHeader()).status().code() ==
              StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.InternName("").status().IsInvalidArgument());
  EXPECT_TRUE(w.InternName(std::string(kMaxNameLength + 1, 'a')).status().IsInvalidArgument());
  EXPECT_TRUE(w.InternName(std::string("a\0b", 3)).status().IsInvalidArgument());
  auto longest = w.InternName(std::string(kMaxNameLength, 'a'));
  ASSERT_TRUE(longest.ok());
  EXPECT_EQ(w.records_written(), 38u);  // ceil(4096 / 108) NAME records
  EXPECT_EQ(*w.InternName(std::string(kMaxNameLength, 'a')), *longest);  // interned once
  EXPECT_EQ(w.records_written(), 38u);
  EXPECT_TRUE(w.AppendBoundary(SampleBoundary(5, 0, 0)).IsInvalidArgument());
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(0, 0, 10)).ok());
  EXPECT_EQ(w.next_seq(), 11u);
  EXPECT_TRUE(w.AppendBoundary(SampleBoundary(0, 0, 10)).IsInvalidArgument());
  EXPECT_TRUE(w.AppendEvent({.kind = EventKind::kUser, .payload = std::string(101, 'p')})
                  .IsInvalidArgument());
  ASSERT_TRUE(w.Close().ok());
  EXPECT_FALSE(w.AppendStep({}).ok());
  auto trace = ReadWholeTrace(path);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->names.at(0), std::string(kMaxNameLength, 'a'));
  EXPECT_EQ(trace->records.size(), 39u);
}

TEST_F(TraceTest, OpenForAppendCutsATornTailAndContinues) {
  const std::string path = Path("resume.trace");
  WriteSampleTrace(path);
  WriteBytes(path, ReadBytes(path) + std::string(77, '\x11'));
  auto writer = TraceWriter::OpenForAppend(path);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  TraceWriter& w = **writer;
  EXPECT_EQ(w.records_written(), kSampleRecords);
  EXPECT_EQ(w.next_seq(), 4u);
  EXPECT_EQ(w.header(), SampleHeader());
  EXPECT_EQ(*w.InternName(kLongName), 1u);
  EXPECT_EQ(w.records_written(), kSampleRecords);  // no new NAME records
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(1, 2, 4)).ok());
  ASSERT_TRUE(w.Close().ok());
  VerifySummary summary;
  ASSERT_TRUE(VerifyTrace(path, &summary).ok()) << summary.warning;
  EXPECT_EQ(summary.records, kSampleRecords + 1);
  EXPECT_TRUE(summary.warning.empty());
}

TEST_F(TraceTest, OpenForAppendCutsANameLeftHalfWritten) {
  const std::string path = Path("resume.trace");
  WriteSampleTrace(path);
  // Keep only the first of the long name's two NAME records.
  ASSERT_TRUE(TruncateTraceAt(path, 2).ok());
  VerifySummary summary;
  ASSERT_TRUE(VerifyTrace(path, &summary).ok());
  EXPECT_EQ(summary.records, 2u);
  EXPECT_EQ(summary.names, 1u);
  EXPECT_NE(summary.warning.find("ends inside a NAME sequence"), std::string::npos);

  auto writer = TraceWriter::OpenForAppend(path);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->records_written(), 1u);
  EXPECT_EQ(*(*writer)->InternName(kLongName), 1u);
  ASSERT_TRUE((*writer)->AppendBoundary(SampleBoundary(1, 0, 0)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto trace = ReadWholeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->names.at(1), kLongName);
  EXPECT_EQ(trace->records.size(), 4u);
}

TEST_F(TraceTest, OpenForAppendRefusesCorruption) {
  const std::string path = Path("bad.trace");
  WriteSampleTrace(path);
  FlipByte(path, RecordOffset(3) + 9, 2);
  EXPECT_TRUE(TraceWriter::OpenForAppend(path).status().IsCorruption());
}

TEST_F(TraceTest, TruncateTraceAtKeepsWholeRecords) {
  const std::string path = Path("cut.trace");
  WriteSampleTrace(path);
  ASSERT_TRUE(TruncateTraceAt(path, 7).ok());
  EXPECT_EQ(*FileSize(path), RecordOffset(7));
  EXPECT_TRUE(TruncateTraceAt(path, 8).IsInvalidArgument());
  ASSERT_TRUE(TruncateTraceAt(path, 0).ok());
  auto trace = ReadWholeTrace(path);
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(trace->records.empty());
}

}  // namespace
}  // namespace dgrr::trace
