// The lockstep pass reads trace B on a second thread, a chunk ahead: its
// errors, its end and its early stop must look exactly as if B were read on
// the caller's thread. Many small chunks, so the reading thread runs ahead.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/coding.h"
#include "replay/compare.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/read_ahead.h"
#include "trace_format/reader.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

class CompareStreamTest : public ::dgrr::test_support::TempDirTest {
 protected:
  // `boundaries` boundaries over 8 names; fingerprint `flip_at` (if any) differs.
  static void Write(const std::string& path, uint64_t boundaries, uint64_t flip_at = ~0ull) {
    trace::TraceHeader header;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok());
    for (int k = 0; k < 8; ++k) ASSERT_TRUE((*writer)->InternName("op" + std::to_string(k)).ok());
    for (uint64_t i = 0; i < boundaries; ++i) {
      trace::BoundaryRecord r;
      r.step = i / 64;
      r.seq = i;
      r.name_id = static_cast<uint32_t>(i % 8);
      r.ndim = 1;
      r.dims[0] = 16;
      r.example_count = 2;
      r.first_example = r.step * 2;
      r.xor64 = i * 0x9e3779b97f4a7c15ULL ^ (i == flip_at ? 1 : 0);
      r.xxh3 = i;
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }

  // Breaks boundary record `index`'s phase (resealed, so only the phase is wrong).
  static void BreakRecord(const std::string& path, uint64_t index) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    uint8_t bytes[trace::kRecordSize];
    file.seekg(static_cast<std::streamoff>(trace::RecordOffset(index)));
    file.read(reinterpret_cast<char*>(bytes), trace::kRecordSize);
    bytes[1] = 9;
    trace::SealRecord(bytes);
    file.seekp(static_cast<std::streamoff>(trace::RecordOffset(index)));
    file.write(reinterpret_cast<const char*>(bytes), trace::kRecordSize);
  }

  static std::string VerifyMessage(const std::string& path) {
    trace::VerifySummary summary;
    return trace::VerifyTrace(path, &summary).ToString();
  }
};

TEST_F(CompareStreamTest, CorruptionLateInEitherSideIsThatSidesError) {
  const std::string a = Path("a.trace"), b = Path("b.trace"), bad = Path("bad.trace");
  Write(a, 5000);
  Write(b, 5000);
  Write(bad, 5000);
  BreakRecord(bad, 8 + 4321);  // 8 NAME records first
  CompareOptions options;
  options.chunk_items = 7;
  for (bool bad_is_b : {true, false}) {
    SCOPED_TRACE(bad_is_b ? "B corrupt" : "A corrupt");
    auto result = bad_is_b ? CompareRuns(a, bad, options) : CompareRuns(bad, b, options);
    ASSERT_FALSE(result.ok());
    EXPECT_TRUE(result.status().IsCorruption());
    EXPECT_EQ(result.status().ToString(), VerifyMessage(bad));
  }
  // Both corrupt: A's error, as when both are read on one thread.
  auto both = CompareRuns(bad, bad, options);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().ToString(), VerifyMessage(bad));
}

TEST_F(CompareStreamTest, StreamedResultEqualsInMemoryForEndsAndDivergences) {
  const std::string a = Path("a.trace");
  Write(a, 3001);
  struct Case {
    const char* what;
    uint64_t b_length;
    uint64_t flip_at;
  };
  for (const Case& c : {Case{"identical", 3001, ~0ull}, Case{"divergent", 3001, 2500},
                        Case{"B shorter", 2990, ~0ull}, Case{"B longer", 3050, 17}}) {
    SCOPED_TRACE(c.what);
    const std::string b = Path(std::string("b-") + std::to_string(c.b_length) + "-" + std::to_string(c.flip_at) + ".trace");
    Write(b, c.b_length, c.flip_at);
    CompareOptions streamed;
    streamed.chunk_items = 7;
    CompareOptions in_memory;
    in_memory.keep_sequences = true;
    auto s = CompareRuns(a, b, streamed);
    auto m = CompareRuns(a, b, in_memory);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(CompareJson(*s).dump(), CompareJson(*m).dump());
    EXPECT_EQ(s->diverged(), c.flip_at != ~0ull);
    EXPECT_EQ(s->b.boundaries, c.b_length);
  }
}

// Traces over kReadAheadMinBytes, compared with the readers reading ahead
// (a limit that leaves both readers a thread beside compare's own) and with
// no read-ahead at all: the same report, the same error.
TEST_F(CompareStreamTest, ReadAheadThreadsChangeNothing) {
  const uint64_t n = trace::kReadAheadMinBytes / trace::kRecordSize + 5000;
  const std::string a = Path("a.trace"), b = Path("b.trace"), flipped = Path("flipped.trace"),
                    bad = Path("bad.trace");
  Write(a, n);
  Write(b, n);
  Write(flipped, n, n - 3000);
  Write(bad, n);
  BreakRecord(bad, 8 + n - 2000);
  const int saved_limit = trace::ReadAheadThreadLimit();
  CompareOptions options;
  options.chunk_items = 1000;
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{a, flipped}, std::pair{flipped, a},
                              std::pair{a, bad}, std::pair{bad, b}}) {
    SCOPED_TRACE(x + " against " + y);
    std::string outcome[2];
    for (int limit : {0, 4}) {
      trace::SetReadAheadThreadLimit(limit);
      auto result = CompareRuns(x, y, options);
      outcome[limit != 0] = result.ok() ? CompareJson(*result).dump() : result.status().ToString();
    }
    EXPECT_EQ(outcome[0], outcome[1]);
  }
  trace::SetReadAheadThreadLimit(saved_limit);
  EXPECT_EQ(trace::ReadAheadThreadsRunning(), 0);
}

}  // namespace
}  // namespace dgrr::replay
