// The HTML report's data and page from synthetic traces: hostile boundary
// names stay text (no markup, no early end of the data block, valid UTF-8),
// the map places the divergence in its row and column, aggregation is
// exact, and a result without sequences is refused; the page carries the
// script and style sheet of replay/report_assets/ byte for byte.
#include "replay/report.h"

#include <gtest/gtest.h>

#include <string>

#include "base/file.h"
#include "replay/report_assets.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

using nlohmann::json;

constexpr const char* kHostile = "x</script><img src=y onerror=alert(1)>\xff\xfe";

class ReportDataTest : public test_support::TempDirTest {
 protected:
  // `steps` steps of 4 boundaries: "a", kHostile, "c", "d"; the boundary at
  // (flip_step, flip_k) gets another xxh3, and so does every later one when
  // `spread`.
  static void Write(const std::string& path, int steps, int flip_step = -1, int flip_k = -1,
                    bool spread = false) {
    trace::TraceHeader header;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok());
    const std::string names[] = {"a", kHostile, "c", "d"};
    uint64_t seq = 0;
    bool flipped = false;
    for (int s = 0; s < steps; ++s) {
      for (int k = 0; k < 4; ++k) {
        auto id = (*writer)->InternName(names[k]);
        ASSERT_TRUE(id.ok());
        trace::BoundaryRecord r;
        r.step = s;
        r.seq = seq++;
        r.name_id = *id;
        r.ndim = 1;
        r.dims[0] = 8;
        r.example_count = 1;
        r.first_example = s;
        r.xor64 = 100 + seq;
        if (s == flip_step && k == flip_k) flipped = true;
        const bool differs = (s == flip_step && k == flip_k) || (spread && flipped);
        r.xxh3 = 200 + seq + (differs ? 1 : 0);
        ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
      }
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  StatusOr<CompareResult> Compare(const std::string& a, const std::string& b) {
    CompareOptions options;
    options.keep_sequences = true;
    return CompareRuns(a, b, options);
  }
};

TEST_F(ReportDataTest, HostileNamesStayTextAndTheDataBlockParses) {
  Write(Path("a.trace"), 3);
  Write(Path("b.trace"), 3, /*flip_step=*/1, /*flip_k=*/1);
  auto r = Compare(Path("a.trace"), Path("b.trace"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto html = ReportHtml(*r);
  ASSERT_TRUE(html.ok());
  // The name never appears raw: no injected element, no early </script>.
  EXPECT_EQ(html->find("<img"), std::string::npos);
  EXPECT_EQ(html->find("x</script>"), std::string::npos);
  EXPECT_NE(html->find("x&lt;/script&gt;&lt;img src=y onerror=alert(1)&gt;\xef\xbf\xbd\xef\xbf\xbd"),
            std::string::npos);
  // Exactly the two script blocks end.
  size_t ends = 0;
  for (size_t at = html->find("</script>"); at != std::string::npos; at = html->find("</script>", at + 1)) ++ends;
  EXPECT_EQ(ends, 2u);
  const std::string open = "id=\"dgrr-report-data\">";
  const size_t begin = html->find(open) + open.size();
  const json data = json::parse(html->substr(begin, html->find("</script>", begin) - begin));
  EXPECT_EQ(data["divergence"]["boundary"], "x</script><img src=y onerror=alert(1)>\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(data["divergence"]["step"], 1);
}

TEST_F(ReportDataTest, MapPlacesTheDivergenceAndCountsCells) {
  Write(Path("a.trace"), 4);
  Write(Path("b.trace"), 4, /*flip_step=*/2, /*flip_k=*/2, /*spread=*/true);
  auto r = Compare(Path("a.trace"), Path("b.trace"));
  ASSERT_TRUE(r.ok());
  auto data = ReportData(*r);
  ASSERT_TRUE(data.ok());
  const auto& map = (*data)["map"];
  ASSERT_EQ(map["rows"].size(), 4u);
  EXPECT_EQ(map["rows"][2]["name"], "c");
  EXPECT_EQ(map["divergent_row"], 2);
  EXPECT_EQ(map["divergent_column"], 2);
  // Row "d" at step 2 differs (after the flip), row "a" at step 2 does not.
  EXPECT_EQ(map["rows"][3]["cells"][2].dump(), "[2,1,1,0]");
  EXPECT_EQ(map["rows"][0]["cells"][2].dump(), "[2,1,0,0]");
  EXPECT_EQ(map["columns"][2]["differing"], 2);  // c and d
  EXPECT_EQ(map["columns"][3]["differing"], 4);
  EXPECT_EQ((*data)["certified"]["steps"], 2);
  EXPECT_EQ((*data)["certified"]["last_step"], 1);
}

TEST_F(ReportDataTest, AggregationKeepsEveryCount) {
  Write(Path("a.trace"), 10);
  Write(Path("b.trace"), 10, 7, 3);
  auto r = Compare(Path("a.trace"), Path("b.trace"));
  ASSERT_TRUE(r.ok());
  ReportOptions options;
  options.max_map_columns = 3;  // 10 steps: 4 per column, 3 columns
  options.max_map_rows = 2;     // 4 rows: 2 per group
  auto data = ReportData(*r, options);
  ASSERT_TRUE(data.ok());
  const auto& map = (*data)["map"];
  EXPECT_EQ(map["steps_per_column"], 4);
  EXPECT_EQ(map["columns"].size(), 3u);
  EXPECT_EQ(map["columns"][2]["first_step"], 8);
  EXPECT_EQ(map["columns"][2]["last_step"], 9);
  ASSERT_EQ(map["rows"].size(), 2u);
  EXPECT_EQ(map["rows"][1]["name"], "c");
  EXPECT_EQ(map["rows"][1]["last_name"], "d");
  uint64_t compared = 0, differing = 0;
  for (const auto& row : map["rows"]) {
    for (const auto& cell : row["cells"]) {
      compared += cell[1].get<uint64_t>();
      differing += cell[2].get<uint64_t>();
    }
  }
  EXPECT_EQ(compared, 40u);
  EXPECT_EQ(differing, 1u);
  EXPECT_EQ(map["divergent_row"], 1);
  EXPECT_EQ(map["divergent_column"], 1);  // step 7 in steps 4..7
  auto html = ReportHtml(*r, options);
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("The map aggregates 4 consecutive steps per column (10 steps)"), std::string::npos);
  EXPECT_NE(html->find("The map merges 2 consecutive rows into one (4 boundary rows)"), std::string::npos);
}

TEST_F(ReportDataTest, RefusesAResultWithoutSequencesAndWritesAtomically) {
  Write(Path("a.trace"), 2);
  auto streamed = CompareRuns(Path("a.trace"), Path("a.trace"), {});
  ASSERT_TRUE(streamed.ok());
  EXPECT_FALSE(ReportData(*streamed).ok());
  auto r = Compare(Path("a.trace"), Path("a.trace"));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(WriteReport(Path("r.html"), *r).ok());
  auto page = ReadFileToString(Path("r.html"));
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->find("The runs are identical: all 8 pairs"), std::string::npos);
  EXPECT_EQ(page->rfind("</html>\n"), page->size() - 8);
}

// The embedded assets are the files in the tree, and the page holds each
// whole, right after its opening tag and a newline.
TEST_F(ReportDataTest, EmbedsTheAssetFilesByteForByte) {
  const std::string dir = std::string(DGRR_SOURCE_DIR) + "/replay/report_assets/";
  auto script = ReadFileToString(dir + "report.js");
  auto style = ReadFileToString(dir + "report.css");
  ASSERT_TRUE(script.ok() && style.ok());
  EXPECT_EQ(ReportScript(), *script);
  EXPECT_EQ(ReportStyle(), *style);
  ASSERT_FALSE(script->empty());
  ASSERT_FALSE(style->empty());

  Write(Path("a.trace"), 2);
  auto r = Compare(Path("a.trace"), Path("a.trace"));
  ASSERT_TRUE(r.ok());
  auto html = ReportHtml(*r);
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("<style>\n" + *style + "</style>"), std::string::npos);
  EXPECT_NE(html->find("<script>\n" + *script + "</script>"), std::string::npos);
}

}  // namespace
}  // namespace dgrr::replay
