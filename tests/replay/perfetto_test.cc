// The Perfetto (Chrome trace-event) view of a comparison: processes, threads,
// slices (differing ones marked apart from equal ones), flows between aligned
// pairs, the marked divergence, the time axis labelled as logical order, the
// pair cap and what the file says when it cuts.
#include "replay/perfetto.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "base/file.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

using nlohmann::json;

class PerfettoTest : public ::dgrr::test_support::TempDirTest {
 protected:

  // `n` boundaries "op<k % 7>" of rank `rank`, 10 per step; the boundary at
  // `flip` (if any) gets a different xor64, and `insert_at` an extra boundary.
  static void Write(const std::string& path, uint32_t rank, int n, int flip = -1,
                    int insert_at = -1) {
    trace::TraceHeader header;
    header.rank = rank;
    header.world_size = 2;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok());
    uint64_t seq = 0;
    auto append = [&](const std::string& name, int k, uint64_t xor64) {
      auto id = (*writer)->InternName(name);
      ASSERT_TRUE(id.ok());
      trace::BoundaryRecord r;
      r.step = k / 10;
      r.seq = seq++;
      r.name_id = *id;
      r.rank = rank;
      r.first_example = k;  // unique keys: every boundary is an anchor
      r.example_count = 1;
      r.xor64 = xor64;
      r.xxh3 = 77 + k;
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
    };
    for (int k = 0; k < n; ++k) {
      if (k == insert_at) append("extra", 100000 + k, 5);
      append("op" + std::to_string(k % 7), k, k == flip ? 1u : 1000u + k);
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }

};

TEST_F(PerfettoTest, ProcessesThreadsSlicesFlowsAndTheMarkedDivergence) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  Write(a, 1, 40);
  Write(b, 1, 40, /*flip=*/25, /*insert_at=*/5);
  CompareOptions options;
  options.keep_sequences = true;
  auto r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->diverged());
  const std::string out = Path("view.json");
  ASSERT_TRUE(WritePerfetto(out, *r).ok());
  auto text = ReadFileToString(out);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text);  // throws (fails the test) when not JSON
  ASSERT_TRUE(doc["traceEvents"].is_array());

  std::map<int, std::string> process_names;
  std::set<std::pair<int, int>> threads;
  std::map<int, int> slices_by_pid;
  std::map<uint64_t, std::pair<int, int>> flow_ends;  // id -> (starts, finishes)
  std::vector<json> instants;
  std::map<std::string, int> slices_by_category;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") {
      threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["tid"].get<int>()));
    }
    if (ph == "X") {
      ++slices_by_pid[e["pid"]];
      EXPECT_EQ(e["dur"], 1);
      EXPECT_EQ(e["tid"], 1);
      EXPECT_EQ(e["args"]["position"], e["ts"]);
      const std::string status = e["args"]["status"];
      ++slices_by_category[e["cat"]];
      // A differing slice stands apart by category, name and colour.
      if (status == "differs") {
        EXPECT_EQ(e["cat"], "boundary.differs");
        EXPECT_EQ(e["name"], "DIFF " + e["args"]["boundary"].get<std::string>());
        EXPECT_EQ(e["cname"], "terrible");
      } else if (status == "equal") {
        EXPECT_EQ(e["cat"], "boundary.equal");
        EXPECT_EQ(e["name"], e["args"]["boundary"]);
        EXPECT_EQ(e["cname"], "good");
      } else {
        EXPECT_EQ(e["cat"], "boundary.unpaired");
        EXPECT_EQ(e["name"], "UNPAIRED " + e["args"]["boundary"].get<std::string>());
      }
    }
    if (ph == "s") ++flow_ends[e["id"]].first;
    if (ph == "f") {
      ++flow_ends[e["id"]].second;
      EXPECT_EQ(e["pid"], 2);
    }
    if (ph == "i") instants.push_back(e);
  }
  // The viewer draws ts as microseconds: the names and the metadata say it is order.
  EXPECT_EQ(process_names[1], "A: " + a + " (time axis = boundary order, not time)");
  EXPECT_EQ(process_names[2], "B: " + b + " (time axis = boundary order, not time)");
  EXPECT_NE(doc["otherData"]["time_axis"].get<std::string>().find("not microseconds"), std::string::npos);
  EXPECT_EQ(doc["otherData"]["schema"], "dgrr.compare.perfetto/2");
  EXPECT_EQ(doc["otherData"]["truncated"], false);
  // 40 pairs of which only the flipped one differs; the inserted one unpaired.
  EXPECT_EQ(slices_by_category["boundary.differs"], 2);
  EXPECT_EQ(slices_by_category["boundary.equal"], 78);
  EXPECT_EQ(slices_by_category["boundary.unpaired"], 1);
  EXPECT_EQ(threads, (std::set<std::pair<int, int>>{{1, 1}, {2, 1}}));
  EXPECT_EQ(slices_by_pid[1], 40);
  EXPECT_EQ(slices_by_pid[2], 41);
  EXPECT_EQ(flow_ends.size(), 40u);
  for (const auto& [id, ends] : flow_ends) EXPECT_EQ(ends, std::make_pair(1, 1)) << "flow " << id;

  ASSERT_EQ(instants.size(), 2u);
  const json& mark = instants[0];
  EXPECT_EQ(mark["ts"], 25);
  EXPECT_EQ(instants[1]["ts"], 26);  // B has the inserted boundary before it
  EXPECT_EQ(mark["args"]["boundary"], "op4");
  EXPECT_EQ(mark["args"]["step"], 2);
  EXPECT_EQ(mark["args"]["rank_a"], 1);
  EXPECT_EQ(mark["args"]["xor64_b"], "0x0000000000000001");
  EXPECT_EQ(doc["otherData"]["first_divergence"]["boundary"], "op4");
}

TEST_F(PerfettoTest, PairCapCentresTheWindowOnTheDivergence) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  Write(a, 0, 300);
  Write(b, 0, 300, /*flip=*/200);
  CompareOptions options;
  options.keep_sequences = true;
  auto r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok());
  PerfettoOptions view;
  view.max_pairs = 50;
  auto doc = PerfettoJson(*r, view);
  ASSERT_TRUE(doc.ok());
  uint64_t flows = 0, min_ts = UINT64_MAX, max_ts = 0;
  for (const auto& e : (*doc)["traceEvents"]) {
    if (e["ph"] == "s") ++flows;
    if (e["ph"] == "X") {
      min_ts = std::min<uint64_t>(min_ts, e["ts"]);
      max_ts = std::max<uint64_t>(max_ts, e["ts"]);
    }
  }
  EXPECT_EQ(flows, 50u);
  EXPECT_EQ(min_ts, 175u);
  EXPECT_EQ(max_ts, 224u);
  EXPECT_EQ((*doc)["otherData"]["pairs_shown"], 50);
  EXPECT_EQ((*doc)["otherData"]["pairs_total"], 300);
  EXPECT_EQ((*doc)["otherData"]["max_pairs"], 50);
  EXPECT_EQ((*doc)["otherData"]["truncated"], true);
  const PerfettoWindow window = PerfettoWindowOf(*r, view);
  EXPECT_EQ(window.first, 175u);
  EXPECT_EQ(window.last, 225u);
  EXPECT_TRUE(window.cut());
}

TEST_F(PerfettoTest, ZeroCapDrawsEveryPair) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  Write(a, 0, 300);
  Write(b, 0, 300, /*flip=*/200);
  CompareOptions options;
  options.keep_sequences = true;
  auto r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok());
  PerfettoOptions view;
  view.max_pairs = 0;
  auto doc = PerfettoJson(*r, view);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ((*doc)["otherData"]["pairs_shown"], 300);
  EXPECT_EQ((*doc)["otherData"]["truncated"], false);
  EXPECT_FALSE(PerfettoWindowOf(*r, view).cut());
  // The default cap does not cut 300 pairs either.
  EXPECT_FALSE(PerfettoWindowOf(*r).cut());
}

TEST_F(PerfettoTest, RefusesAResultWithoutSequences) {
  const std::string a = Path("a.trace");
  Write(a, 0, 10);
  auto r = CompareRuns(a, a, {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(PerfettoJson(*r).ok());
}

}  // namespace
}  // namespace dgrr::replay
