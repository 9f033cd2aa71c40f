#include <gtest/gtest.h>

#include "cli/command.h"

namespace dgrr::cli {
namespace {

TEST(Dispatch, HelpAndVersionSucceed) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunDgrr({"--help"}), 0);
  std::string help = testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("Exit codes"), std::string::npos);
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunDgrr({"--version"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("dgrr 0."), std::string::npos);
}

TEST(Dispatch, UnknownCommandIsUsageError) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"frobnicate"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("unknown command 'frobnicate'"),
            std::string::npos);
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunDgrr({}), 1);
  testing::internal::GetCapturedStdout();
}

TEST(Dispatch, HelpCommandShowsThatCommandsHelp) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunDgrr({"help", "compare"}), 0);
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_EQ(help.rfind("usage: dgrr compare", 0), 0u) << help;
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"help", "frobnicate"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("unknown command 'frobnicate'"), std::string::npos);
}

// A missing positional argument is named by what it is, not as an option
// ("--b") the user never typed.
TEST(Dispatch, AMissingPositionalArgumentIsNamedAsTheUserKnowsIt) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"compare", "runs/a"}), 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("dgrr compare: missing run B: a trace file or a run directory"), std::string::npos) << err;
  EXPECT_EQ(err.find("'--b'"), std::string::npos) << err;
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"replay"}), 1);
  const std::string replay = testing::internal::GetCapturedStderr();
  EXPECT_EQ(replay, "dgrr replay: missing run directory (see 'dgrr replay --help')\n");
  // A required option the user names with dashes keeps boost's wording.
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"rollback", "runs/a"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--step"), std::string::npos);
}

}  // namespace
}  // namespace dgrr::cli
