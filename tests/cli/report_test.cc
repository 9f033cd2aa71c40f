// dgrr report: two runs recorded with `dgrr train` (one with a planted
// bitflip), the HTML page written, then opened in headless Chromium to check
// what the page's script RENDERS (the DOM after it ran), and a screenshot kept
// under the build folder (DGRR_BINARY_DIR/test-artifacts/) for a person to
// look at. Also: identical runs, the size bounds, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "base/file.h"
#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFlipped = "block0.mlp.fc.out";
constexpr int kFlipStep = 2;

// The Debian package's binary; tests fail (not skip) without it.
std::string ChromiumBinary() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(candidate)) return candidate;
  }
  return "";
}

struct ChromiumResult {
  int rc = -1;
  std::string out;
};

// Runs headless Chromium on `html` with `mode` ("--dump-dom" or
// "--screenshot=PATH"); `timeout` bounds a hung browser, it is no timing check.
ChromiumResult RunChromium(const std::string& html, const std::string& mode, const std::string& profile) {
  ChromiumResult r;
  const std::string command = "timeout 300 " + ChromiumBinary() +
                              " --headless --no-sandbox --disable-gpu --hide-scrollbars"
                              " --window-size=1280,6000 --user-data-dir='" + profile + "' " + mode +
                              " 'file://" + html + "' 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The JSON the page embeds (script#dgrr-report-data).
json EmbeddedData(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"dgrr-report-data\">";
  const size_t begin = html.find(open);
  if (begin == std::string::npos) return nullptr;
  const size_t end = html.find("</script>", begin);
  return json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

class ReportTest : public test_support::TempDirTest {
 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(ChromiumBinary().empty())
        << "chromium is not installed: the report test opens the page in headless Chromium "
           "(Debian package 'chromium'; scripts/install-deps.sh installs it)";
  }
  void Train(const std::string& out, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train", "--model", "tiny", "--out", out, "--steps", "5",
                                     "--ranks", "2", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandOutput r = RunCaptured(args);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  void TrainPair() {
    Train(Path("clean"));
    // Bit 22 (not the default 20): under numerics version 2 a flip of bit 20
    // there is absorbed before the step's loss, which the page's loss notes
    // need to differ at the flipped step.
    Train(Path("flipped"),
          {"--inject", "bitflip:step=" + std::to_string(kFlipStep) + ",rank=1,at=" + kFlipped + ",bit=22"});
  }
  static std::string Artifacts() {
    const std::string dir = std::string(DGRR_BINARY_DIR) + "/test-artifacts";
    fs::create_directories(dir);
    return dir;
  }
};

TEST_F(ReportTest, DivergentRunsRenderInChromiumWithTheDivergenceMarked) {
  TrainPair();
  const std::string html = Path("report.html");
  const CommandOutput r = RunCaptured({"report", Path("clean"), Path("flipped"), "-o", html});
  ASSERT_EQ(r.rc, kExitDivergence) << r.err;
  EXPECT_NE(r.out.find("divergence at step 2: block0.mlp.fc.out"), std::string::npos) << r.out;
  // Atomic write: the page and nothing beside it.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"clean", "flipped", "report.html"}));

  auto page = ReadFileToString(html);
  ASSERT_TRUE(page.ok());
  // Self-contained: nothing is fetched (the SVG namespace is a name, not a fetch).
  EXPECT_EQ(Count(*page, "src="), 0u);
  EXPECT_EQ(Count(*page, "href="), 0u);
  EXPECT_EQ(Count(*page, "http"), Count(*page, "http://www.w3.org/2000/svg"));
  // Config differences come before the loss curves and the divergence.
  EXPECT_LT(page->find("id=\"differences\""), page->find("id=\"loss\""));
  EXPECT_LT(page->find("id=\"loss\""), page->find("id=\"divergence\""));
  EXPECT_NE(page->find("bitflip:step=2"), std::string::npos);
  const json data = EmbeddedData(*page);
  ASSERT_TRUE(data.is_object());
  EXPECT_EQ(data["schema"], "dgrr.report/1");
  EXPECT_EQ(data["divergence"]["step"], kFlipStep);
  EXPECT_EQ(data["divergence"]["rank"], 1);
  EXPECT_EQ(data["divergence"]["boundary"], kFlipped);
  EXPECT_EQ(data["certified"]["steps"], kFlipStep);  // steps 0 and 1
  EXPECT_EQ(data["loss"]["a"].size(), 5u);
  EXPECT_EQ(data["map"]["columns"].size(), 5u);

  const std::string profile = Path("chromium-profile");
  const ChromiumResult dom = RunChromium(html, "--dump-dom", profile);
  ASSERT_EQ(dom.rc, 0) << "headless chromium failed";
  // What the script built: the page is marked rendered, both curves and the
  // divergence line are drawn, the map has differing cells, the first
  // divergent cell is outlined and its row is labelled with the boundary.
  EXPECT_NE(dom.out.find("data-rendered=\"yes\""), std::string::npos) << dom.out.substr(0, 2000);
  EXPECT_NE(dom.out.find("id=\"loss-svg\""), std::string::npos);
  EXPECT_EQ(Count(dom.out, "class=\"loss-a\""), 1u);
  EXPECT_EQ(Count(dom.out, "class=\"loss-b\""), 1u);
  EXPECT_NE(dom.out.find(">first divergent step 2<"), std::string::npos);
  EXPECT_NE(dom.out.find("id=\"loss-certified\""), std::string::npos);
  EXPECT_NE(dom.out.find("id=\"map-divergence\""), std::string::npos);
  EXPECT_GT(Count(dom.out, "class=\"cell differs\""), 10u);
  EXPECT_GT(Count(dom.out, "class=\"cell equal\""), 10u);
  EXPECT_NE(dom.out.find("class=\"row-label divergent\" fill=\"#c00\">block0.mlp.fc.out  r1<"),
            std::string::npos);
  // Text nodes the script wrote (its own source is in the DOM too, so each
  // check includes the element around the text).
  EXPECT_TRUE(std::regex_search(dom.out, std::regex("id=\"map-summary\">[0-9]+ rows x 5 columns; [1-9][0-9]* "
                                                    "cells with differing fingerprints\\.<")));
  EXPECT_NE(dom.out.find("id=\"loss-notes\">first step whose recorded loss differs: 2;"), std::string::npos);
  EXPECT_EQ(dom.out.find("The charts need JavaScript"), std::string::npos);

  const std::string shot = Artifacts() + "/report_divergent.png";
  fs::remove(shot);
  ASSERT_EQ(RunChromium(html, "--screenshot=" + shot, profile).rc, 0);
  auto png = ReadFileToString(shot);
  ASSERT_TRUE(png.ok()) << shot;
  EXPECT_EQ(png->substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(png->size(), 20000u);  // a page with charts, not a blank one
  fs::copy_file(html, Artifacts() + "/report_divergent.html", fs::copy_options::overwrite_existing);
}

TEST_F(ReportTest, IdenticalRunsSaySo) {
  Train(Path("clean"));
  Train(Path("again"));
  const std::string html = Path("same.html");
  const CommandOutput r = RunCaptured({"report", Path("clean"), Path("again"), "-o", html, "-q"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "");
  const ChromiumResult dom = RunChromium(html, "--dump-dom", Path("chromium-profile"));
  ASSERT_EQ(dom.rc, 0);
  EXPECT_NE(dom.out.find("The runs are identical"), std::string::npos);
  EXPECT_NE(dom.out.find("id=\"config-differences\">identical<"), std::string::npos);
  EXPECT_NE(dom.out.find("data-rendered=\"yes\""), std::string::npos);
  EXPECT_EQ(dom.out.find("id=\"map-divergence\""), std::string::npos);
  EXPECT_EQ(dom.out.find(">first divergent step"), std::string::npos);
  EXPECT_EQ(Count(dom.out, "class=\"cell differs\""), 0u);
  EXPECT_GT(Count(dom.out, "class=\"cell equal\""), 0u);
  EXPECT_NE(dom.out.find("id=\"loss-difference\">The two loss curves are equal at every step shown.<"),
            std::string::npos);
  const std::string shot = Artifacts() + "/report_identical.png";
  EXPECT_EQ(RunChromium(html, "--screenshot=" + shot, Path("chromium-profile")).rc, 0);
}

TEST_F(ReportTest, MapIsBoundedAndThePageSaysSo) {
  TrainPair();
  const std::string html = Path("small.html");
  ASSERT_EQ(RunCaptured({"report", Path("clean"), Path("flipped"), "-o", html, "--max-steps", "2",
                         "--max-rows", "7", "-q"})
                .rc,
            kExitDivergence);
  auto page = ReadFileToString(html);
  ASSERT_TRUE(page.ok());
  const json data = EmbeddedData(*page);
  EXPECT_EQ(data["map"]["steps_per_column"], 3);  // 5 steps in 2 columns
  EXPECT_EQ(data["map"]["columns"].size(), 2u);
  EXPECT_LE(data["map"]["rows"].size(), 7u);
  EXPECT_GT(data["map"]["rows_total"].get<uint64_t>(), 7u);
  EXPECT_NE(page->find("id=\"limit-steps\">The map aggregates 3 consecutive steps per column (5 steps)"),
            std::string::npos);
  EXPECT_NE(page->find("id=\"limit-rows\">The map merges"), std::string::npos);
  // The divergent step's column (steps 0-2) is the first.
  EXPECT_EQ(data["map"]["divergent_column"], 0);
}

// --json: the verdict a script reads, the same facts the page shows, and
// nothing else on stdout (-q does not silence it).
TEST_F(ReportTest, JsonSummaryGivesTheVerdictDivergenceAndPrefix) {
  TrainPair();
  const std::string html = Path("summary.html");
  CommandOutput r = RunCaptured({"report", Path("clean"), Path("flipped"), "-o", html, "--json", "-q"});
  ASSERT_EQ(r.rc, kExitDivergence) << r.err;
  const json summary = json::parse(r.out);
  EXPECT_EQ(summary["schema"], "dgrr.report-summary/1");
  EXPECT_EQ(summary["report"], html);
  EXPECT_EQ(summary["verdict"], "divergence");
  EXPECT_EQ(summary["divergence"]["step"], kFlipStep);
  EXPECT_EQ(summary["divergence"]["rank"], 1);
  EXPECT_EQ(summary["divergence"]["boundary"], kFlipped);
  EXPECT_EQ(summary["config_differences"], 1) << "the --inject fault is in config.json";
  EXPECT_EQ(summary["environment_differences"], 0);
  EXPECT_LT(summary["certified"]["pairs"].get<uint64_t>(), summary["certified"]["pairs_total"].get<uint64_t>());
  auto page = ReadFileToString(html);
  ASSERT_TRUE(page.ok());
  const json data = EmbeddedData(*page);
  EXPECT_EQ(summary["divergence"], data["divergence"]);
  EXPECT_EQ(summary["certified"], data["certified"]);

  r = RunCaptured({"report", Path("clean"), Path("clean"), "-o", Path("same.html"), "--json"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  const json same = json::parse(r.out);
  EXPECT_EQ(same["verdict"], "no_divergence");
  EXPECT_TRUE(same["divergence"].is_null());
  EXPECT_EQ(same["certified"]["pairs"], same["certified"]["pairs_total"]);

  r = RunCaptured({"report", Path("clean"), Path("missing"), "-o", Path("r.html"), "--json"});
  EXPECT_EQ(r.rc, kExitIO);
  EXPECT_EQ(r.out, "") << "errors go to stderr only";
}

TEST_F(ReportTest, ExitCodesAsCompare) {
  Train(Path("clean"));
  EXPECT_EQ(RunCaptured({"report", "--help"}).rc, kExitOk);
  EXPECT_NE(RunCaptured({"report", "--help"}).out.find("self-contained HTML"), std::string::npos);
  const CommandOutput no_output = RunCaptured({"report", Path("clean"), Path("clean")});
  EXPECT_EQ(no_output.rc, kExitUsage);
  EXPECT_NE(no_output.err.find("dgrr report: missing -o FILE"), std::string::npos) << no_output.err;
  EXPECT_EQ(RunCaptured({"report", Path("clean"), Path("missing"), "-o", Path("r.html")}).rc, kExitIO);
  WriteBytes(Path("bad.trace"), std::string(300, 'x'));
  EXPECT_EQ(RunCaptured({"report", Path("clean"), Path("bad.trace"), "-o", Path("r.html")}).rc,
            kExitInvalidData);
  const CommandOutput unwritable =
      RunCaptured({"report", Path("clean"), Path("clean"), "-o", Path("no/such/dir/r.html")});
  EXPECT_EQ(unwritable.rc, kExitIO);
  EXPECT_NE(unwritable.err.find("dgrr report: "), std::string::npos);
  EXPECT_FALSE(fs::exists(Path("r.html")));
}

}  // namespace
}  // namespace dgrr::cli
