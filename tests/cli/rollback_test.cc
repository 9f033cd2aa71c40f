// dgrr rollback, in-process: the summary line and JSON, train --resume after
// it ending where the uninterrupted run ended, and the exit code of each
// refusal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/run_lock.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "model/rollback.h"
#include "model/trainer.h"
#include "trace_format/reader.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

class RollbackCommandTest : public ::dgrr::test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    run_ = Path("run");
    auto [out, err] = Run({"train", "--out", run_, "--steps", "8", "--ckpt-every", "3", "--layers", "1", "--quiet"});
    ASSERT_EQ(rc_, 0) << err;
    full_params_ = ParamsXxh3(out);
    ASSERT_FALSE(full_params_.empty()) << out;
  }
  // Runs a dgrr command line with stdout and stderr captured; sets rc_.
  std::pair<std::string, std::string> Run(const std::vector<std::string>& args) {
    CommandOutput r = RunCaptured(args);
    rc_ = r.rc;
    return {std::move(r.out), std::move(r.err)};
  }
  // "... params xxh3 0123456789abcdef, ..." from train's last line.
  static std::string ParamsXxh3(const std::string& out) {
    const size_t at = out.find("params xxh3 ");
    return at == std::string::npos ? "" : out.substr(at + 12, 16);
  }
  std::string run_;
  std::string full_params_;
  int rc_ = -1;
};

TEST_F(RollbackCommandTest, RollsBackSaysWhatItDidAndResumeEndsWhereTheRunEnded) {
  auto [out, err] = Run({"rollback", run_, "--step", "4"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_NE(out.find("rolled back " + run_ + " to step 4 (it had reached step 7)"), std::string::npos) << out;
  EXPECT_NE(out.find("re-executed steps 3..4 from the checkpoint of step 2"), std::string::npos) << out;
  EXPECT_NE(out.find("cut traces at records"), std::string::npos) << out;
  EXPECT_NE(out.find("removed checkpoints 5 (and their 1 rank shard file(s))"), std::string::npos) << out;
  EXPECT_EQ(out.find("temporary"), std::string::npos) << out;
  EXPECT_NE(err.find("re-executed step 4, verified against the traces (rolling back to step 4)"), std::string::npos) << "progress on stderr: " << err;
  auto steps = checkpoint::ListCheckpointSteps(run_);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<uint64_t>{2, 4}));

  std::tie(out, err) = Run({"train", "--out", run_, "--resume", "--quiet"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_EQ(ParamsXxh3(out), full_params_);
  // And the resumed run replays clean against its own traces.
  std::tie(out, err) = Run({"replay", run_, "--from", "3"});
  EXPECT_EQ(rc_, 0) << err;
}

TEST_F(RollbackCommandTest, JsonAndQuiet) {
  auto [out, err] = Run({"rollback", run_, "--step", "2", "--json", "--quiet"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_TRUE(err.empty()) << err;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("schema"), "dgrr.rollback/1");
  EXPECT_EQ(j.at("step"), 2);
  EXPECT_EQ(j.at("previous_last_step"), 7);
  EXPECT_EQ(j.at("reexecuted"), false) << "step 2 is checkpointed";
  EXPECT_EQ(j.at("from_checkpoint"), 2);
  EXPECT_TRUE(j.at("first_reexecuted_step").is_null());
  EXPECT_EQ(j.at("checkpoint_written"), false);
  ASSERT_EQ(j.at("ranks").size(), 1u);
  EXPECT_EQ(j.at("ranks")[0].at("already_cut"), false);
  EXPECT_GT(j.at("ranks")[0].at("cut_at").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("removed_checkpoints"), nlohmann::json::array({5}));
  // The removed checkpoint's shard is its own, not a leftover temporary.
  EXPECT_EQ(j.at("removed_checkpoint_shards"), 1);
  EXPECT_EQ(j.at("removed_temporaries"), 0);
  std::tie(out, err) = Run({"train", "--out", run_, "--resume", "--quiet"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_EQ(ParamsXxh3(out), full_params_);
}

TEST_F(RollbackCommandTest, RefusalsHaveTheirExitCodes) {
  auto [out, err] = Run({"rollback", run_, "--step", "8"});
  EXPECT_EQ(rc_, kExitUsage);
  EXPECT_NE(err.find("beyond the run's last recorded step 7"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  std::tie(out, err) = Run({"rollback", run_, "--step=-1"});
  EXPECT_EQ(rc_, kExitUsage) << err;
  std::tie(out, err) = Run({"rollback", run_});
  EXPECT_EQ(rc_, kExitUsage) << "--step is required";
  std::tie(out, err) = Run({"rollback", Path("nothing"), "--step", "1"});
  EXPECT_EQ(rc_, kExitIO);
  EXPECT_NE(err.find("not a dgrr run"), std::string::npos) << err;

  const std::string ckpt = checkpoint::CheckpointPath(run_, 2);
  auto bytes = ReadFileToString(ckpt);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() - 100] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(ckpt, *bytes).ok());
  std::tie(out, err) = Run({"rollback", run_, "--step", "3"});
  EXPECT_EQ(rc_, kExitInvalidData);
  EXPECT_NE(err.find("--fallback"), std::string::npos) << err;
  std::tie(out, err) = Run({"rollback", run_, "--step", "3", "--fallback"});
  EXPECT_EQ(rc_, 0) << err;
  EXPECT_NE(err.find("warning: skipped"), std::string::npos) << err;
  EXPECT_NE(out.find("re-executed steps 0..3 from the start"), std::string::npos) << out;

  std::tie(out, err) = Run({"rollback", "--help"});
  EXPECT_EQ(rc_, 0);
  EXPECT_NE(out.find("dgrr rollback RUN_DIR --step S"), std::string::npos) << out;
  EXPECT_NE(out.find("--resume"), std::string::npos) << out;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    auto bytes = ReadFileToString(e.path().string());
    files[e.path().string()] = bytes.ok() ? *bytes : "<unreadable>";
  }
  return files;
}

TEST_F(RollbackCommandTest, ASecondWriterIsRefusedHavingWrittenNothing) {
  const std::string pid = std::to_string(::getpid());
  {
    // This process holds the run as a live `dgrr train` would.
    auto held = RunLock::Acquire(run_);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    const auto before = Snapshot(run_);
    for (const std::vector<std::string>& writer :
         {std::vector<std::string>{"train", "--out", run_, "--resume"},
          std::vector<std::string>{"train", "--out", run_, "--steps", "2", "--force"},
          std::vector<std::string>{"rollback", run_, "--step", "4"}}) {
      auto [out, err] = Run(writer);
      EXPECT_EQ(rc_, kExitIO) << writer[0] << ": " << err;
      EXPECT_EQ(err, "dgrr " + writer[0] + ": " + run_ + " is in use by another dgrr writer (pid " +
                         pid + "); wait for it to finish\n");
      EXPECT_TRUE(out.empty()) << out;
      EXPECT_TRUE(Snapshot(run_) == before) << writer[0] << " changed the run";
    }
    // Readers take no lock.
    Run({"replay", run_, "--from", "6"});
    EXPECT_EQ(rc_, 0);
  }
  // Released: the next writer goes ahead.
  auto [out, err] = Run({"rollback", run_, "--step", "4"});
  EXPECT_EQ(rc_, 0) << err;
}

TEST_F(RollbackCommandTest, ResumeFinishesAnInterruptedRollback) {
  // A rollback to step 4 stopped after cutting the traces, before removing the
  // later checkpoints (5): the state that made resume fail with "cannot keep".
  model::RollbackOptions o;
  o.run_dir = run_;
  o.step = 4;
  o.interrupt = [](model::RollbackStage stage, int64_t) {
    return stage == model::RollbackStage::kTraceCut ? Status::Internal("killed") : Status::OK();
  };
  ASSERT_FALSE(model::Rollback(o).ok());
  ASSERT_TRUE(fs::exists(checkpoint::CheckpointPath(run_, 5)));
  ASSERT_TRUE(fs::exists(run_ + "/rollback-pending.json"));
  auto [out, err] = Run({"train", "--out", run_, "--resume", "--quiet"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_EQ(ParamsXxh3(out), full_params_);
  EXPECT_FALSE(fs::exists(run_ + "/rollback-pending.json"));
}

TEST_F(RollbackCommandTest, FallbackSkipsACheckpointTheTracesNoLongerReach) {
  // Rank 0's trace cut back to the end of step 4: the checkpoint of step 5
  // points past it, that of step 2 does not.
  auto ckpt = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(run_, 5));
  ASSERT_TRUE(ckpt.ok());
  auto two = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(run_, 2));
  ASSERT_TRUE(two.ok());
  ASSERT_TRUE(trace::TruncateTraceAt(run_ + "/rank0.trace", ckpt->ranks[0].trace_position - 3).ok());
  auto [out, err] = Run({"train", "--out", run_, "--resume", "--quiet"});
  EXPECT_EQ(rc_, kExitInvalidData) << err;
  EXPECT_NE(err.find("step-00000005.h5"), std::string::npos) << err;
  EXPECT_NE(err.find("--fallback"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  std::tie(out, err) = Run({"train", "--out", run_, "--resume", "--fallback", "--quiet"});
  ASSERT_EQ(rc_, 0) << err;
  EXPECT_EQ(ParamsXxh3(out), full_params_);
}

}  // namespace
}  // namespace dgrr::cli
