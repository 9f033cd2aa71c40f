#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"

namespace dgrr::cli {
namespace {

TEST(PlanCommand, ShowsWhatCheckpointsSaveAndWhatResumeRegenerates) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("dgrr_plan_test_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  ASSERT_EQ(RunDgrr({"train", "--out", dir, "--steps", "4", "--ckpt-every", "2", "--quiet"}), 0);
  ASSERT_EQ(RunDgrr({"plan", dir, "--json"}), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  testing::internal::GetCapturedStderr();
  const auto json = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(json.at("schema"), "dgrr.plan/1");
  std::map<std::string, std::string> action;
  for (const auto& v : json.at("checkpoints").at(0).at("variables")) {
    action[v.at("name").get<std::string>()] = v.at("action").get<std::string>();
  }
  EXPECT_EQ(action["params"], "saved");
  EXPECT_EQ(action["adamw.m"], "saved");
  EXPECT_EQ(action["cursor"], "fast_forward");
  EXPECT_EQ(action["grads"], "dropped");
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunDgrr({"plan", dir + "/nope"}), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not a dgrr run"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dgrr::cli
