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

}  // namespace
}  // namespace dgrr::cli
