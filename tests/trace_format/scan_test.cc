// The reader's fast scans (NextBoundaryRun, NextBoundary, NextRecords) against
// Next(), the general path: the same boundaries with the same fields and
// indices, and, for every kind of bad record anywhere in a trace long enough
// to span several refills of the reader's buffer, the same error text, the
// same TraceError and the same end-of-trace state.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/coding.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::trace {
namespace {

constexpr uint64_t kBoundaries = 6000;  // ~750 KiB: several buffer refills

class ScanTest : public test_support::TempDirTest {
 protected:
  // Boundaries with a NAME, STEP or EVENT record every so often, the shapes
  // varying, so runs are cut at many places.
  std::string WriteTrace(const std::string& name, uint64_t boundaries = kBoundaries) {
    const std::string path = Path(name);
    TraceHeader header;
    header.world_size = 4;
    auto writer = TraceWriter::Create(path, header, {.overwrite = true});
    EXPECT_TRUE(writer.ok());
    std::vector<uint32_t> ids;
    for (uint64_t i = 0; i < boundaries; ++i) {
      if (i % 997 == 0) {
        ids.push_back(*(*writer)->InternName("layer" + std::to_string(ids.size()) + ".out"));
      }
      if (i % 300 == 0) {
        StepRecord step;
        step.step = i / 300;
        EXPECT_TRUE((*writer)->AppendStep(step).ok());
      }
      if (i % 1234 == 5) {
        EventRecord event;
        event.step = i / 300;
        event.payload = "note " + std::to_string(i);
        EXPECT_TRUE((*writer)->AppendEvent(event).ok());
      }
      BoundaryRecord b;
      b.step = i / 300;
      b.seq = 10 + 2 * i;
      b.name_id = ids[i % ids.size()];
      b.phase = static_cast<Phase>(i % 5);
      b.rank = static_cast<uint32_t>(i % 4);
      b.ndim = static_cast<uint8_t>(i % 7);
      for (size_t d = 0; d < b.ndim && d < kInlineDims; ++d) b.dims[d] = 1 + (i + d) % 9;
      b.xor64 = i * 0x9e3779b97f4a7c15ULL;
      b.xxh3 = ~b.xor64;
      b.first_example = i;
      b.example_count = 1;
      EXPECT_TRUE((*writer)->AppendBoundary(b).ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
    return path;
  }

  // Edits record `index` of the trace in place and seals it again, so that
  // the edit itself (not the CRC) is what the reader finds.
  static void EditRecord(const std::string& path, uint64_t index,
                         const std::function<void(uint8_t*)>& edit, bool reseal = true) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    uint8_t bytes[kRecordSize];
    file.seekg(static_cast<std::streamoff>(RecordOffset(index)));
    file.read(reinterpret_cast<char*>(bytes), kRecordSize);
    edit(bytes);
    if (reseal) SealRecord(bytes);
    file.seekp(static_cast<std::streamoff>(RecordOffset(index)));
    file.write(reinterpret_cast<const char*>(bytes), kRecordSize);
  }

  // The index of the `n`th BOUNDARY record of the file.
  static uint64_t NthBoundary(const std::string& path, uint64_t n) {
    auto reader = TraceReader::Open(path);
    Record record;
    bool done = false;
    uint64_t seen = 0;
    while ((*reader)->Next(&record, &done).ok() && !done) {
      if (std::holds_alternative<BoundaryRecord>(record.body) && seen++ == n) return record.index;
    }
    ADD_FAILURE() << "no boundary " << n;
    return 0;
  }
};

struct ScanOutcome {
  std::vector<std::pair<uint64_t, BoundaryRecord>> boundaries;
  std::string status;
  TraceError error;
  uint64_t records_read = 0;
  std::vector<std::string> names;
  std::string torn_tail_warning;
  uint64_t clean_prefix = 0;
};

BoundaryRecord FromView(const BoundaryView& v) {
  BoundaryRecord b;
  b.step = v.step();
  b.seq = v.seq();
  b.name_id = v.name_id();
  b.phase = v.phase();
  b.direction = v.direction();
  b.dtype = v.dtype();
  b.rank = v.rank();
  b.ndim = v.ndim();
  for (size_t i = 0; i < kInlineDims; ++i) b.dims[i] = v.dim(i);
  b.byte_count = v.byte_count();
  b.first_example = v.first_example();
  b.example_count = v.example_count();
  b.xor64 = v.xor64();
  b.xxh3 = v.xxh3();
  b.host_time_ns = v.host_time_ns();
  return b;
}

void Finish(TraceReader& reader, const Status& s, ScanOutcome* out) {
  out->status = s.ToString();
  out->error = reader.last_error();
  out->records_read = reader.records_read();
  out->names = reader.names();
  out->torn_tail_warning = reader.torn_tail_warning();
  out->clean_prefix = reader.clean_prefix_records();
}

enum class Scan { kNext, kNextBoundary, kRuns };

ScanOutcome ScanWith(const std::string& path, Scan how) {
  ScanOutcome out;
  auto opened = TraceReader::Open(path);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  TraceReader& reader = **opened;
  Status s;
  bool done = false;
  while (s.ok() && !done) {
    if (how == Scan::kNext) {
      Record record;
      s = reader.Next(&record, &done);
      if (s.ok() && !done) {
        if (const auto* b = std::get_if<BoundaryRecord>(&record.body)) {
          out.boundaries.push_back({record.index, *b});
        }
      }
    } else if (how == Scan::kNextBoundary) {
      BoundaryRecord b;
      uint64_t index = 0;
      s = reader.NextBoundary(&b, &index, &done);
      if (s.ok() && !done) out.boundaries.push_back({index, b});
    } else {
      BoundaryRun run;
      s = reader.NextBoundaryRun(37, &run, &done);  // an odd run length: runs end anywhere
      if (s.ok() && !done) {
        EXPECT_GT(run.count, 0u);
        EXPECT_LE(run.count, 37u);
        for (size_t i = 0; i < run.count; ++i) {
          out.boundaries.push_back(
              {run.first_index + i, FromView(BoundaryView(run.bytes + i * kRecordSize))});
        }
      }
    }
  }
  Finish(reader, s, &out);
  return out;
}

void ExpectSameOutcome(const std::string& path) {
  const ScanOutcome general = ScanWith(path, Scan::kNext);
  for (Scan how : {Scan::kNextBoundary, Scan::kRuns}) {
    SCOPED_TRACE(how == Scan::kRuns ? "NextBoundaryRun" : "NextBoundary");
    const ScanOutcome fast = ScanWith(path, how);
    EXPECT_EQ(fast.status, general.status);
    EXPECT_EQ(fast.error.in_header, general.error.in_header);
    EXPECT_EQ(fast.error.record_index, general.error.record_index);
    EXPECT_EQ(fast.error.offset, general.error.offset);
    EXPECT_EQ(fast.error.reason, general.error.reason);
    EXPECT_EQ(fast.records_read, general.records_read);
    EXPECT_EQ(fast.names, general.names);
    EXPECT_EQ(fast.torn_tail_warning, general.torn_tail_warning);
    EXPECT_EQ(fast.clean_prefix, general.clean_prefix);
    ASSERT_EQ(fast.boundaries.size(), general.boundaries.size());
    for (size_t i = 0; i < fast.boundaries.size(); ++i) {
      ASSERT_EQ(fast.boundaries[i].first, general.boundaries[i].first) << "boundary " << i;
      ASSERT_EQ(fast.boundaries[i].second, general.boundaries[i].second) << "boundary " << i;
    }
  }
}

TEST_F(ScanTest, CleanTraceGivesTheSameBoundariesAsNext) {
  const std::string path = WriteTrace("clean.trace");
  const ScanOutcome general = ScanWith(path, Scan::kNext);
  ASSERT_TRUE(general.status == "OK") << general.status;
  EXPECT_EQ(general.boundaries.size(), kBoundaries);
  ExpectSameOutcome(path);
}

// Each edit breaks one rule of a BOUNDARY record deep in the trace (after
// several refills), at a place where a run is under way.
TEST_F(ScanTest, EveryBrokenRuleFailsWithTheGeneralPathsMessage) {
  const std::string clean = WriteTrace("clean.trace");
  const std::string original = ReadBytes(clean);
  struct Case {
    const char* what;
    std::function<void(uint8_t*)> edit;
    bool reseal;
  };
  const std::vector<Case> cases = {
      {"crc", [](uint8_t* p) { p[40] ^= 1; }, false},
      {"phase", [](uint8_t* p) { p[1] = 9; }, true},
      {"direction", [](uint8_t* p) { p[2] = 2; }, true},
      {"dtype", [](uint8_t* p) { p[3] = 200; }, true},
      {"reserved", [](uint8_t* p) { p[30] = 1; }, true},
      {"unused shape slot", [](uint8_t* p) { p[28] = 1; EncodeFixed64(p + 76 + 8 * 3, 5); }, true},
      {"undefined name", [](uint8_t* p) { EncodeFixed32(p + 4, 4000); }, true},
      {"rank", [](uint8_t* p) { EncodeFixed32(p + 24, 4); }, true},
      {"sequence", [](uint8_t* p) { EncodeFixed64(p + 8, 3); }, true},
      {"type", [](uint8_t* p) { p[0] = 9; }, true},
  };
  for (uint64_t nth : {uint64_t{0}, uint64_t{1}, uint64_t{2047}, uint64_t{4321}, kBoundaries - 1}) {
    const uint64_t index = NthBoundary(clean, nth);
    for (const Case& c : cases) {
      if (nth == 0 && std::string(c.what) == "sequence") continue;  // the first may start anywhere
      SCOPED_TRACE(std::string(c.what) + " at record " + std::to_string(index));
      const std::string path = Path("bad.trace");
      {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(original.data(), static_cast<std::streamsize>(original.size()));
      }
      EditRecord(path, index, c.edit, c.reseal);
      const ScanOutcome general = ScanWith(path, Scan::kNext);
      EXPECT_NE(general.status, "OK");
      EXPECT_EQ(general.error.record_index, index);
      ExpectSameOutcome(path);
    }
  }
}

TEST_F(ScanTest, TornTailsEndTheScanAlike) {
  const std::string path = WriteTrace("torn.trace", 700);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write("\x02partial", 8);  // a short final record: a torn tail
  }
  ExpectSameOutcome(path);
  EXPECT_FALSE(ScanWith(path, Scan::kRuns).torn_tail_warning.empty());

  const std::string zeros = WriteTrace("zeros.trace", 700);
  {
    std::ofstream out(zeros, std::ios::binary | std::ios::app);
    const std::string zero_records(3 * kRecordSize, '\0');
    out.write(zero_records.data(), static_cast<std::streamsize>(zero_records.size()));
  }
  ExpectSameOutcome(zeros);
  EXPECT_FALSE(ScanWith(zeros, Scan::kRuns).torn_tail_warning.empty());
}

// VerifyTrace counts through runs: the same summary as counting records.
TEST_F(ScanTest, VerifyCountsEveryRecordKind) {
  const std::string path = WriteTrace("verify.trace");
  VerifySummary summary;
  ASSERT_TRUE(VerifyTrace(path, &summary).ok());
  uint64_t steps = 0, events = 0, boundaries = 0, last_step = 0;
  auto reader = TraceReader::Open(path);
  Record record;
  bool done = false;
  while ((*reader)->Next(&record, &done).ok() && !done) {
    if (const auto* b = std::get_if<BoundaryRecord>(&record.body)) {
      ++boundaries;
      last_step = std::max(last_step, b->step);
    }
    if (const auto* s = std::get_if<StepRecord>(&record.body)) {
      ++steps;
      last_step = std::max(last_step, s->step);
    }
    if (const auto* e = std::get_if<EventRecord>(&record.body)) {
      ++events;
      last_step = std::max(last_step, e->step);
    }
  }
  EXPECT_EQ(summary.boundaries, boundaries);
  EXPECT_EQ(summary.boundaries, kBoundaries);
  EXPECT_EQ(summary.steps, steps);
  EXPECT_EQ(summary.events, events);
  EXPECT_EQ(summary.last_step, last_step);
  EXPECT_EQ(summary.records, (*reader)->records_read());
}

}  // namespace
}  // namespace dgrr::trace
