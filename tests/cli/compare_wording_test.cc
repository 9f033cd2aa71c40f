// dgrr compare's wording for config and environment differences: a setting
// documented never to change results (the thread count) is listed, marked as
// such, and never called "a likely explanation".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

class CompareWordingTest : public test_support::TempDirTest {
 protected:
  CommandOutput Train(const std::string& out, const std::string& threads) {
    return RunCaptured({"train", "--model", "tiny", "--steps", "2", "--threads", threads, "--out",
                        out, "--quiet"});
  }
  // The line of `text` that starts with `prefix` (empty when none does).
  static std::string LineStartingWith(const std::string& text, const std::string& prefix) {
    size_t at = text.rfind("\n" + prefix, std::string::npos);
    if (text.rfind(prefix, 0) == 0) at = 0;
    else if (at == std::string::npos) return "";
    else ++at;
    return text.substr(at, text.find('\n', at) - at);
  }
};

// Two real runs that differ only in --threads: identical results (exit 0),
// and the thread count is reported as a setting that never changes them.
TEST_F(CompareWordingTest, ThreadCountIsNeverALikelyExplanation) {
  const std::string one = Path("t1"), two = Path("t2");
  CommandOutput r = Train(one, "1");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = Train(two, "2");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = RunCaptured({"compare", one, two});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("a likely explanation"), std::string::npos) << r.out;
  EXPECT_EQ(LineStartingWith(r.out, "config: "),
            "config: 1 difference (in settings that never change results)")
      << r.out;
  EXPECT_EQ(LineStartingWith(r.out, "  threads: "), "  threads: 1 | 2  (never changes results)")
      << r.out;
  EXPECT_EQ(LineStartingWith(r.out, "environment: "),
            "environment: 1 difference (in settings that never change results)")
      << r.out;
  EXPECT_EQ(LineStartingWith(r.out, "  controls.dgrr.threads.value: "),
            "  controls.dgrr.threads.value: \"1\" | \"2\"  (never changes results)")
      << r.out;
}

// A difference that can change results beside one that cannot: only the
// former counts as the likely explanation.
TEST_F(CompareWordingTest, MixedDifferencesCountOnlyTheOnesThatCanChangeResults) {
  const std::string one = Path("t1"), two = Path("t2");
  ASSERT_EQ(Train(one, "1").rc, 0);
  CommandOutput r = RunCaptured({"train", "--model", "tiny", "--steps", "2", "--threads", "2",
                                 "--lr", "0.002", "--out", two, "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = RunCaptured({"compare", one, two});
  EXPECT_EQ(r.rc, kExitDivergence) << r.out << r.err;
  EXPECT_EQ(LineStartingWith(r.out, "config: "),
            "config: 3 differences (2 a likely explanation; 1 in settings that never change "
            "results)")
      << r.out;
  // --lr sets the peak and, scaled, the minimum learning rate.
  const std::string lr = LineStartingWith(r.out, "  optimizer.lr: ");
  ASSERT_FALSE(lr.empty()) << r.out;
  EXPECT_EQ(lr.find("never changes results"), std::string::npos) << lr;
}

}  // namespace
}  // namespace dgrr::cli
