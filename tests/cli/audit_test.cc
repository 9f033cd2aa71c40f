// `dgrr train --audit-every K` as a user runs it: a rank whose backward pass
// is silently wrong stops the run with exit 4 and one line naming step, rank,
// example and boundary; without the audit the same run finishes (exit 0):
// the per-step parameter check cannot see a corruption the all-reduce has
// already spread to every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "runtime/run_directory.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

class AuditCliTest : public test_support::TempDirTest, protected CapturedCommands {
 protected:
  std::vector<std::string> Train(const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--out", Path(name), "--steps", "4", "--ranks", "2", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

constexpr const char* kBackwardFlip = "bitflip:step=2,rank=1,at=block1.mlp.proj.dinp";

TEST_F(AuditCliTest, BackwardFlipStopsTheAuditedRunWithExitFourAndOneLine) {
  ASSERT_EQ(RunCommand(Train("audited", {"--audit-every", "2", "--inject", kBackwardFlip})), 4) << err_;
  EXPECT_TRUE(out_.empty()) << out_;
  ASSERT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  EXPECT_EQ(err_.rfind("dgrr train: silent data corruption found by the audit at step 2: rank 1 computed "
                       "example 20 differently from rank 0's recomputation, first at block1.mlp.proj.dinp (xxh3 ",
                       0),
            0u)
      << err_;
}

TEST_F(AuditCliTest, WithoutTheAuditTheParameterCheckLetsTheSameFlipThrough) {
  EXPECT_EQ(RunCommand(Train("unaudited", {"--inject", kBackwardFlip})), 0) << err_;
  EXPECT_NE(out_.find("trained steps 0..3"), std::string::npos) << out_;
}

TEST_F(AuditCliTest, CleanAuditedRunSucceedsAndRecordsTheSetting) {
  ASSERT_EQ(RunCommand(Train("clean", {"--audit-every", "1", "--mode", "sdc"})), 0) << err_;
  auto text = ReadFileToString(ConfigPathFor(Path("clean")));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text).at("audit_every"), 1);
  // --resume with a different interval is a different command line.
  EXPECT_EQ(RunCommand(Train("clean", {"--audit-every", "3", "--mode", "sdc", "--resume"})), 1) << err_;
  EXPECT_NE(err_.find("--audit-every 3 (the run has 1)"), std::string::npos) << err_;
}

TEST_F(AuditCliTest, NegativeIntervalIsAUsageError) {
  EXPECT_EQ(RunCommand(Train("neg", {"--audit-every", "-1"})), 1) << err_;
  EXPECT_NE(err_.find("--audit-every must be in [0, "), std::string::npos) << err_;
}

}  // namespace
}  // namespace dgrr::cli
