// dgrr replay, in-process: a faithful run verifies; a resumed run that forgot
// to restore a state variable is caught at the first boundary that needs it.
#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/command.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

class ReplayCommandTest : public ::dgrr::test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    run_ = Path("run");
    Quiet([&] {
      ASSERT_EQ(RunDgrr({"train", "--out", run_, "--steps", "12", "--ranks", "2", "--ckpt-every", "4",
                         "--quiet"}),
                0);
    });
  }
  // Runs f with stdout and stderr captured; returns them.
  std::pair<std::string, std::string> Quiet(const std::function<void()>& f) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    f();
    std::string out = testing::internal::GetCapturedStdout();
    return {out, testing::internal::GetCapturedStderr()};
  }
  std::string run_;
};

TEST_F(ReplayCommandTest, AFaithfulRunVerifiesFromTheStartOrACheckpoint) {
  int rc = -1;
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--json"}); });
  ASSERT_EQ(rc, 0) << err;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("schema"), "dgrr.replay/1");
  EXPECT_EQ(j.at("result"), "verified");
  EXPECT_TRUE(j.at("from_checkpoint").is_null());
  EXPECT_EQ(j.at("steps_verified"), 24) << "12 step ends on each of 2 ranks";
  EXPECT_GT(j.at("boundaries_verified").get<uint64_t>(), 2000u);

  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "9", "--json"}); });
  ASSERT_EQ(rc, 0) << err;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("from_checkpoint"), 7) << "the newest checkpoint before step 9";
  EXPECT_EQ(j.at("first_step"), 8);
  EXPECT_EQ(j.at("steps_verified"), 8);
}

TEST_F(ReplayCommandTest, AForgottenRestoreIsCaughtAtTheFirstBoundaryThatNeedsIt) {
  // Resume from the checkpoint of step 3, forgetting AdamW's second moment.
  for (const auto& e : fs::directory_iterator(run_ + "/ckpt")) {
    if (e.path().filename() != "step-00000003.h5") fs::remove(e.path());
  }
  int rc = -1;
  Quiet([&] { rc = RunDgrr({"train", "--out", run_, "--resume", "--inject", "skip-restore:adamw.v", "--quiet"}); });
  ASSERT_EQ(rc, 0);
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "4"}); });
  EXPECT_EQ(rc, kExitReplayIntegrity);
  EXPECT_NE(err.find("at step 4, rank 0, wte"), std::string::npos) << err;
  EXPECT_NE(err.find("recorded xor64"), std::string::npos) << err;
}

TEST_F(ReplayCommandTest, BadInput) {
  int rc = -1;
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "5", "--to", "3"}); });
  EXPECT_EQ(rc, kExitUsage);
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", (dir_ / "nothing").string()}); });
  EXPECT_EQ(rc, kExitIO);
  EXPECT_NE(err.find("not a dgrr run"), std::string::npos);
  // A damaged recorded trace is invalid data, named.
  auto bytes = ReadFileToString(run_ + "/rank1.trace");
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(run_ + "/rank1.trace", *bytes).ok());
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_}); });
  EXPECT_EQ(rc, kExitInvalidData) << err;
  EXPECT_NE(err.find("rank1.trace"), std::string::npos) << err;
}

}  // namespace
}  // namespace dgrr::cli
