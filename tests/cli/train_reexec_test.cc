// dgrr train as one client of the re-execution contract (docs/launch-record.md,
// "Runs of dgrr train"): its runs keep a launch record naming the real dgrr
// binary, a run without one (an older dgrr's) is re-executed from its
// config.json, and a re-execution reports what the trainer reported: its own
// SDC check (exit 4) and a request it refuses (exit 1) keep their codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/command.h"
#include "runtime/control_file.h"
#include "runtime/launch_record.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

class TrainReexecTest : public test_support::TempDirTest, protected CapturedCommands {
 protected:
  void Train(const std::string& run, const std::vector<std::string>& extra = {}, int expect = 0) {
    std::vector<std::string> args = {"train", "--out", run, "--steps", "6", "--ranks", "2", "--ckpt-every", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_EQ(RunCommand(args), expect) << err_;
  }
};

TEST_F(TrainReexecTest, ARunKeepsALaunchRecordOfTheDgrrBinaryAndItsConfig) {
  const std::string run = Path("run");
  Train(run, {"--quiet", "--json", "--threads", "2"});
  auto launch = ReadLaunchRecord(run);
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  // The dgrr binary, not this test executable that ran the command in-process.
  const std::string dgrr = fs::canonical(std::getenv("DGRR_EXECUTABLE")).string();
  EXPECT_EQ(launch->executable, dgrr);
  EXPECT_NE(launch->executable, fs::canonical("/proc/self/exe").string());
  auto digest = FileContentDigest(dgrr);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(launch->executable_xxh3, *digest);
  // The settings are config.json's; nothing about this invocation (-q, --json).
  EXPECT_EQ(launch->argv, (std::vector<std::string>{dgrr, "train", "--out", run, "--resume"}));
  EXPECT_EQ(MpiLauncherVariable(*launch), nullptr);

  // A resume keeps the record; a forced new run writes its own.
  const std::string before = *ReadFileToString(run + "/launch.json");
  ASSERT_EQ(RunCommand({"train", "--out", run, "--resume", "--quiet"}), 0) << err_;
  EXPECT_EQ(*ReadFileToString(run + "/launch.json"), before);
  ASSERT_EQ(RunCommand({"replay", run, "--from", "3", "-q"}), 0) << err_;
}

TEST_F(TrainReexecTest, ARunWithoutALaunchRecordIsReexecutedFromItsConfig) {
  // What a dgrr train older than the launch record left.
  const std::string run = Path("old");
  Train(run, {"--quiet"});
  fs::remove(run + "/launch.json");
  ASSERT_EQ(RunCommand({"replay", run, "--json"}), 0) << err_;
  const auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("result"), "verified");
  EXPECT_EQ(j.at("steps_verified"), 12) << "6 step ends on each of 2 ranks";
  ASSERT_EQ(RunCommand({"rollback", run, "--step", "2", "--quiet"}), 0) << err_;
  EXPECT_FALSE(fs::exists(run + "/launch.json")) << "a re-execution never writes into the recorded run";
  ASSERT_EQ(RunCommand({"bisect", "--good", run, "--bad", run, "--quiet"}), 0) << err_;
}

// A run of numerics version 1 (recorded before config.json had "numerics":
// separate multiplies and adds) cannot be continued or re-executed bit for
// bit by this dgrr (version 2, fused multiply-add): --resume, replay and
// rollback refuse it with exit 3 and one line naming both versions.
TEST_F(TrainReexecTest, ARunOfAnotherNumericsVersionIsRefusedWithExitThree) {
  const std::string run = Path("v1");
  Train(run, {"--quiet"});
  const std::string config = run + "/config.json";
  auto text = ReadFileToString(config);
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  ASSERT_EQ(j.at("numerics"), 2);
  j.erase("numerics");
  ASSERT_TRUE(WriteFileAtomically(config, j.dump(2)).ok());
  const std::vector<std::vector<std::string>> commands = {
      {"train", "--out", run, "--resume", "--quiet"}, {"replay", run}, {"rollback", run, "--step", "2"}};
  for (const auto& args : commands) {
    EXPECT_EQ(RunCommand(args), 3) << args[0] << ": " << err_;
    EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << args[0] << ": " << err_;
    EXPECT_NE(err_.find("recorded with numerics version 1 (separate multiply and add); this dgrr computes "
                        "numerics version 2 (fused multiply-add)"),
              std::string::npos)
        << args[0] << ": " << err_;
  }
}

TEST_F(TrainReexecTest, AMovedRunIsReexecutedWhereItIsNow) {
  // launch.json names the run's old place; its settings are read where it is.
  Train(Path("before"), {"--quiet"});
  fs::rename(Path("before"), Path("after"));
  ASSERT_EQ(RunCommand({"replay", Path("after"), "--from", "3", "--json"}), 0) << err_;
  EXPECT_EQ(nlohmann::json::parse(out_).at("result"), "verified");
  ASSERT_EQ(RunCommand({"rollback", Path("after"), "--step", "4", "--quiet"}), 0) << err_;
  EXPECT_FALSE(fs::exists(Path("before")));
}

TEST_F(TrainReexecTest, TheTrainersOwnSdcCheckAndARefusedDumpKeepTheirExitCodes) {
  // A flipped parameter on rank 1 stops the run at the SDC check after step 2
  // (exit 4); the re-execution stops there the same way: exit 4, not 5.
  const std::string run = Path("sdc");
  Train(run, {"--quiet", "--inject", "bitflip:step=2,rank=1,at=wte"}, kExitDivergence);
  EXPECT_EQ(RunCommand({"replay", run}), kExitDivergence) << err_;
  EXPECT_NE(err_.find("silent data corruption"), std::string::npos) << err_;
  EXPECT_NE(err_.find("rank 1"), std::string::npos) << err_;

  // The trainer refuses a dump of a boundary it does not have: a usage error.
  const std::string clean = Path("clean");
  Train(clean, {"--quiet"});
  EXPECT_EQ(RunCommand({"replay", clean, "--dump", "nonesuch@1", "--dump-dir", Path("d")}), kExitUsage) << err_;
  EXPECT_NE(err_.find("the model has no boundary 'nonesuch'"), std::string::npos) << err_;
}

TEST(ControlResultStatus, RoundTripsAndAnUnknownWordIsRefusedNamingTheKey) {
  const std::string path = (fs::temp_directory_path() / ("dgrr-result-" + std::to_string(::getpid()) + ".json")).string();
  ControlResult r;
  r.rank = 1;
  r.outcome = ControlOutcome::kFailed;
  r.message = "Divergence: ranks differ";
  r.failure_code = StatusCode::kDivergence;
  ASSERT_TRUE(WriteControlResult(path, r).ok());
  auto back = ReadControlResult(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->failure_code, StatusCode::kDivergence);
  auto j = nlohmann::json::parse(*ReadFileToString(path));
  EXPECT_EQ(j.at("status"), "divergence");
  j["status"] = "bogus";
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  back = ReadControlResult(path);
  ASSERT_FALSE(back.ok());
  EXPECT_TRUE(back.status().IsCorruption());
  EXPECT_NE(back.status().message().find("'status'"), std::string::npos) << back.status().ToString();
  fs::remove(path);
}

}  // namespace
}  // namespace dgrr::cli
