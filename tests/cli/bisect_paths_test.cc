// dgrr bisect's report names only files that exist when it is printed: the
// replays it compares live in a scratch directory removed before the report
// (unless --keep), so each path into them is shown as a "(deleted ...)"
// label, in the text and in the JSON; with --keep every path opens.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/status.h"
#include "cli/command.h"
#include "cli/deleted_paths.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

bool IsDeletedLabel(const std::string& s) { return s.rfind("(deleted ", 0) == 0 || s.rfind("(deleted_", 0) == 0; }

// Every string of `j` under a key that holds a file or directory path.
void CollectPaths(const ordered_json& j, const std::string& key, std::vector<std::string>* paths) {
  static const std::set<std::string> kPathKeys = {"trace", "traces", "path", "good_dir", "bad_dir"};
  if (j.is_string() && kPathKeys.count(key)) paths->push_back(j.get<std::string>());
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) CollectPaths(it.value(), it.key(), paths);
  } else if (j.is_array()) {
    for (const auto& e : j) CollectPaths(e, key, paths);
  }
}

// The words of `text` that name a trace file or a directory of a replay.
// A deleted label's spaces are joined first, so it stays one word.
std::vector<std::string> PathWords(std::string text) {
  for (const std::string label : {"(deleted good replay)", "(deleted bad replay)"}) {
    std::string joined = label;
    std::replace(joined.begin(), joined.end(), ' ', '_');
    for (size_t at = text.find(label); at != std::string::npos; at = text.find(label, at)) {
      text.replace(at, label.size(), joined);
    }
  }
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    if (!w.empty() && w.back() == ',') w.pop_back();
    if (w.rfind("A=", 0) == 0 || w.rfind("B=", 0) == 0) w = w.substr(2);
    if (w.find(".trace") != std::string::npos || w.find('/') != std::string::npos) words.push_back(w);
  }
  return words;
}

class BisectPathsTest : public test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    good_ = Train("good", "");
    bad_ = Train("bad", "reduce-order:step=5");
  }
  std::string Train(const std::string& name, const std::string& fault) {
    std::vector<std::string> args = {"train", "--out", Path(name), "--steps", "8", "--ranks", "2",
                                     "--mode", "sdc", "--ckpt-every", "4", "--quiet"};
    if (!fault.empty()) args.insert(args.end(), {"--inject", fault});
    const CommandOutput r = RunCaptured(args);
    EXPECT_EQ(r.rc, 0) << r.err;
    return Path(name);
  }
  std::string good_, bad_;
};

TEST_F(BisectPathsTest, WithoutKeepNoPathPointsIntoTheDeletedReplays) {
  const CommandOutput json = RunCaptured({"bisect", "--good", good_, "--bad", bad_, "--json", "-q"});
  ASSERT_EQ(json.rc, kExitDivergence) << json.err;
  const ordered_json j = ordered_json::parse(json.out);
  EXPECT_EQ(j.at("replay").at("deleted"), true);
  std::vector<std::string> paths;
  CollectPaths(j, "", &paths);
  ASSERT_GE(paths.size(), 6u);  // both runs' paths and traces, the divergence's traces
  size_t labelled = 0;
  for (const std::string& p : paths) {
    if (IsDeletedLabel(p)) {
      ++labelled;
    } else {
      EXPECT_TRUE(fs::exists(p)) << p;
    }
  }
  EXPECT_GE(labelled, 6u);
  EXPECT_EQ(j.at("divergence").at("a").at("trace"), "(deleted good replay)/rank0.trace");

  const CommandOutput text = RunCaptured({"bisect", "--good", good_, "--bad", bad_, "-q"});
  ASSERT_EQ(text.rc, kExitDivergence) << text.err;
  const std::vector<std::string> words = PathWords(text.out);
  ASSERT_GE(words.size(), 4u) << text.out;
  for (const std::string& w : words) {
    EXPECT_TRUE(IsDeletedLabel(w) || fs::exists(w)) << w << " in\n" << text.out;
  }
  EXPECT_NE(text.out.find("rerun with --keep DIR to keep them"), std::string::npos);
}

TEST_F(BisectPathsTest, WithKeepEveryPathOpens) {
  const std::string keep = Path("kept");
  const CommandOutput json =
      RunCaptured({"bisect", "--good", good_, "--bad", bad_, "--json", "-q", "--keep", keep});
  ASSERT_EQ(json.rc, kExitDivergence) << json.err;
  const ordered_json j = ordered_json::parse(json.out);
  EXPECT_EQ(j.at("replay").at("deleted"), false);
  std::vector<std::string> paths;
  CollectPaths(j, "", &paths);
  ASSERT_GE(paths.size(), 6u);
  for (const std::string& p : paths) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_EQ(j.at("divergence").at("a").at("trace"), keep + "/good/rank0.trace");
}

TEST(RelabelDirectory, ReplacesTheDirectoryAndPathsUnderItOnly) {
  EXPECT_EQ(RelabelDirectory("A=/t/x/good (2 ranks) of /t/x/good/rank0.trace", "/t/x/good", "(gone)"),
            "A=(gone) (2 ranks) of (gone)/rank0.trace");
  EXPECT_EQ(RelabelDirectory("/t/x/goodies/rank0.trace", "/t/x/good", "(gone)"), "/t/x/goodies/rank0.trace");
  ordered_json j = {{"path", "/t/x/good"}, {"traces", {"/t/x/good/rank0.trace", "/t/x/goodies"}}, {"n", 3}};
  EXPECT_EQ(RelabelDirectory(j, "/t/x/good", "(gone)"), 2u);
  EXPECT_EQ(j.at("path"), "(gone)");
  EXPECT_EQ(j.at("traces").at(0), "(gone)/rank0.trace");
  EXPECT_EQ(j.at("traces").at(1), "/t/x/goodies");
  EXPECT_EQ(j.at("n"), 3);
}

}  // namespace
}  // namespace dgrr::cli
