// -q/--quiet on verify, replay and compare: nothing on stdout (the exit code
// says), errors still one line on stderr, --json still its object.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

class QuietTest : public test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    run_ = Path("run");
    const CommandOutput r = RunCaptured({"train", "--out", run_, "--steps", "3", "--ranks", "2", "--quiet"});
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  std::string run_;
};

TEST_F(QuietTest, VerifyQuietPrintsNothingForValidTracesAndStillReportsErrors) {
  CommandOutput r = RunCaptured({"verify", run_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  r = RunCaptured({"verify", "-q", run_});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");

  const std::string garbage = Path("garbage.trace");
  std::ofstream(garbage) << "not a trace";
  r = RunCaptured({"verify", "--quiet", run_, garbage});
  EXPECT_EQ(r.rc, kExitInvalidData);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("garbage.trace"), std::string::npos) << r.err;

  r = RunCaptured({"verify", "-q", "--json", run_});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("schema"), "dgrr.verify/1");
}

TEST_F(QuietTest, ReplayQuietPrintsNothingOnSuccessAndStillReportsErrors) {
  CommandOutput r = RunCaptured({"replay", run_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("replayed steps 0..2"), std::string::npos) << r.out;
  r = RunCaptured({"replay", "-q", run_});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");

  r = RunCaptured({"replay", "--quiet", run_, "--to", "99"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("dgrr replay: "), std::string::npos) << r.err;

  r = RunCaptured({"replay", "-q", "--json", run_});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("schema"), "dgrr.replay/1");
}

TEST_F(QuietTest, CompareQuietPrintsNothingAndTheExitCodeSays) {
  CommandOutput r = RunCaptured({"compare", run_, run_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  r = RunCaptured({"compare", "-q", run_, run_});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");

  const std::string flipped = Path("flipped");
  ASSERT_EQ(RunCaptured({"train", "--out", flipped, "--steps", "3", "--ranks", "2", "--quiet", "--inject",
                         "bitflip:step=1,rank=1,at=loss"})
                .rc,
            0);
  r = RunCaptured({"compare", "--quiet", run_, flipped});
  EXPECT_EQ(r.rc, kExitDivergence);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("configs differ"), std::string::npos) << "warnings still on stderr: " << r.err;

  r = RunCaptured({"compare", "-q", run_, Path("missing")});
  EXPECT_EQ(r.rc, kExitIO);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("dgrr compare: "), std::string::npos) << r.err;

  r = RunCaptured({"compare", "-q", "--json", run_, flipped});
  EXPECT_EQ(r.rc, kExitDivergence);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("verdict"), "divergence");
}

}  // namespace
}  // namespace dgrr::cli
