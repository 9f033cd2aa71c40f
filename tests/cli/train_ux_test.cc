// What a user running `dgrr train` from a shell or a job scheduler relies on:
// re-running the same command with --resume continues the run, conflicts are
// named at once, metrics.jsonl follows resume and rollback, --json outputs
// parse, inspect filters, and Ctrl-C stops at a step boundary with a
// checkpoint and a documented exit code.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "tests/cli/run_captured.h"
#include "tests/cli/run_process.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> Train(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"train", "--out", out, "--steps", "6", "--ckpt-every", "4",
                                   "--ranks", "2", "--batch", "4", "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The real binary, for what needs a process of its own: a kill, a signal
// (at the named point `kill_at`, base/kill_point.h).
ProcessResult RunProcess(const std::vector<std::string>& args, const std::string& kill_at,
                         const std::string& signal_name, const std::string& err_file) {
  ProcessOptions options;
  options.env["DGRR_TEST_KILL_AT"] = kill_at;
  if (!signal_name.empty()) options.env["DGRR_TEST_KILL_SIGNAL"] = signal_name;
  return RunDgrrProcess(args, options, err_file);
}

// metrics.jsonl without the fields that depend on the clock.
std::vector<std::string> MetricsWithoutTimes(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    EXPECT_EQ(j.at("schema"), "dgrr.metrics/1");
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "wall_s"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing from " << line;
    }
    j.erase("tokens_per_s");
    j.erase("wall_s");
    lines.push_back(j.dump());
  }
  return lines;
}

std::vector<int64_t> MetricsSteps(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(json::parse(line).at("step").get<int64_t>());
  return steps;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

size_t Lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

class TrainUxTest : public test_support::TempDirTest, public CapturedCommands {
 protected:
  // Trains `run` uninterrupted with --json; returns the parameters' xxh3.
  std::string CleanRun(const std::string& run) {
    EXPECT_EQ(RunCommand(Train(run, {"--json"})), 0) << err_;
    return json::parse(out_).at("params_xxh3").get<std::string>();
  }
  std::string ResumeSame(const std::string& run) {
    EXPECT_EQ(RunCommand(Train(run, {"--resume", "--json"})), 0) << err_;
    if (out_.empty()) return "";
    return json::parse(out_).at("params_xxh3").get<std::string>();
  }
};

TEST_F(TrainUxTest, SameCommandResumeAfterKillContinuesBitwise) {
  const std::string run = Path("run"), clean = Path("clean");
  const ProcessResult killed = RunProcess(Train(run), "step:4", "", Path("err"));
  ASSERT_FALSE(killed.exited) << killed.err;
  // The kill came after step 4's records, before its metrics line.
  EXPECT_EQ(MetricsSteps(run), Iota(4));
  const std::string resumed = ResumeSame(run);
  EXPECT_EQ(resumed, CleanRun(clean));
  EXPECT_EQ(RunCommand({"compare", run, clean}), 0) << out_ << err_;
  EXPECT_EQ(MetricsSteps(run), Iota(6));
  EXPECT_EQ(MetricsWithoutTimes(run), MetricsWithoutTimes(clean));
}

TEST_F(TrainUxTest, ConflictingSettingsAreAllNamedInOneLine) {
  const std::string run = Path("run");
  ASSERT_EQ(RunCommand(Train(run)), 0) << err_;
  EXPECT_EQ(RunCommand({"train", "--out", run, "--steps", "9", "--seed", "4", "--ckpt-every", "3",
                        "--ranks", "2", "--batch", "4", "--resume"}),
            1);
  EXPECT_EQ(Lines(err_), 1u) << err_;
  for (const char* named : {"--steps 9 (the run has 6)", "--seed 4 (the run has 1)",
                            "--ckpt-every 3 (the run has 4)", "learning rate"}) {
    EXPECT_NE(err_.find(named), std::string::npos) << named << " not in: " << err_;
  }
  EXPECT_EQ(err_.find("--ranks"), std::string::npos) << err_;  // agrees with the run
}

// Under mpirun the world size is the job's: a different --ranks is a usage
// error on every rank, said before anything is written.
TEST_F(TrainUxTest, RanksOtherThanTheMpiWorldSizeAreRefused) {
  const std::string run = Path("run");
  for (const char* rank : {"0", "1"}) {
    ProcessOptions options;
    options.env["OMPI_COMM_WORLD_SIZE"] = "2";
    options.env["OMPI_COMM_WORLD_RANK"] = rank;
    const ProcessResult r = RunDgrrProcess(
        {"train", "--out", run, "--steps", "2", "--ranks", "3", "--batch", "6", "--quiet"}, options, Path("err"));
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("--ranks 3 differs from the 2 processes mpirun started"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(run)) << "rank " << rank;
  }
}

TEST_F(TrainUxTest, ResumeWithNoRunYetStartsIt) {
  const std::string missing = Path("missing"), stale = Path("stale"), clean = Path("clean");
  const std::string expected = CleanRun(clean);
  EXPECT_EQ(ResumeSame(missing), expected);
  // What a run killed before its config.json leaves: a temporary.
  fs::create_directories(stale);
  std::ofstream(stale + "/config.json.tmp.12345.0") << "{\"sch";
  EXPECT_EQ(ResumeSame(stale), expected);
  EXPECT_FALSE(fs::exists(stale + "/config.json.tmp.12345.0"));
  // Plain train (no --force) is not blocked by those leftovers either.
  const std::string plain = Path("plain");
  fs::create_directories(plain);
  std::ofstream(plain + "/rank0.trace.tmp.999.3") << "x";
  EXPECT_EQ(RunCommand(Train(plain, {"--json"})), 0) << err_;
  EXPECT_EQ(MetricsSteps(plain), Iota(6));
}

TEST_F(TrainUxTest, ResumeDoesNotTouchADirectoryOfOtherFiles) {
  const std::string dir = Path("mine");
  fs::create_directories(dir);
  std::ofstream(dir + "/notes.txt") << "keep";
  EXPECT_EQ(RunCommand(Train(dir, {"--resume"})), 1);
  EXPECT_NE(err_.find("notes.txt"), std::string::npos) << err_;
  EXPECT_EQ(Lines(err_), 1u) << err_;
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
}

TEST_F(TrainUxTest, RefusalComesBeforeTheBanner) {
  const std::string run = Path("run");
  ASSERT_EQ(RunCommand(Train(run)), 0) << err_;
  std::vector<std::string> args = Train(run);
  args.pop_back();  // not --quiet: the banner would show
  EXPECT_EQ(RunCommand(args), 1);
  EXPECT_EQ(Lines(err_), 1u) << err_;
  EXPECT_NE(err_.find("not empty"), std::string::npos) << err_;
}

TEST_F(TrainUxTest, MetricsAreCutByRollbackAndResumeRewritesThemEqually) {
  const std::string run = Path("run"), clean = Path("clean");
  CleanRun(clean);
  ASSERT_EQ(RunCommand(Train(run)), 0) << err_;
  ASSERT_EQ(RunCommand({"rollback", run, "--step", "2", "--quiet"}), 0) << err_;
  EXPECT_EQ(MetricsSteps(run), Iota(3));
  ResumeSame(run);
  EXPECT_EQ(MetricsSteps(run), Iota(6));
  EXPECT_EQ(MetricsWithoutTimes(run), MetricsWithoutTimes(clean));
}

TEST_F(TrainUxTest, TornMetricsLineIsDroppedOnResume) {
  const std::string run = Path("run"), clean = Path("clean");
  CleanRun(clean);
  const ProcessResult killed = RunProcess(Train(run), "step:5", "", Path("err"));
  ASSERT_FALSE(killed.exited) << killed.err;
  std::ofstream(run + "/metrics.jsonl", std::ios::app) << "{\"schema\":\"dgrr.metrics/1\",\"step\":5,\"lo";
  ResumeSame(run);
  EXPECT_EQ(MetricsWithoutTimes(run), MetricsWithoutTimes(clean));
}

TEST_F(TrainUxTest, TrainAndVerifyJsonFollowTheirSchemas) {
  const std::string run = Path("run");
  ASSERT_EQ(RunCommand(Train(run, {"--json"})), 0) << err_;
  const json train = json::parse(out_);
  EXPECT_EQ(train.at("schema"), "dgrr.train/1");
  EXPECT_EQ(train.at("status"), "complete");
  EXPECT_EQ(train.at("steps"), 6);
  EXPECT_EQ(train.at("first_step"), 0);
  EXPECT_EQ(train.at("last_step"), 5);
  EXPECT_EQ(train.at("trace_bytes").size(), 2u);
  EXPECT_EQ(train.at("metrics"), run + "/metrics.jsonl");
  EXPECT_TRUE(train.at("final_loss").is_number());

  EXPECT_EQ(RunCommand({"verify", run + "/rank0.trace", Path("absent.trace"), "--json"}), 2);
  const json verify = json::parse(out_);
  EXPECT_EQ(verify.at("schema"), "dgrr.verify/1");
  EXPECT_EQ(verify.at("ok"), false);
  ASSERT_EQ(verify.at("traces").size(), 2u);
  const json& good = verify.at("traces")[0];
  EXPECT_EQ(good.at("ok"), true);
  EXPECT_EQ(good.at("last_step"), 5);
  EXPECT_EQ(good.at("steps"), 12);  // a begin and an end per step
  EXPECT_EQ(good.at("torn_tail_bytes"), 0);
  const json& bad = verify.at("traces")[1];
  EXPECT_EQ(bad.at("ok"), false);
  EXPECT_EQ(bad.at("exit_code"), 2);
  EXPECT_TRUE(bad.at("error").is_string());
}

TEST_F(TrainUxTest, InspectFiltersByTypeAndStepRange) {
  const std::string run = Path("run");
  ASSERT_EQ(RunCommand(Train(run)), 0) << err_;
  ASSERT_EQ(RunCommand({"inspect", run + "/rank0.trace", "--type", "step", "--from", "2", "--to", "3", "--json"}), 0)
      << err_;
  const json steps = json::parse(out_);
  ASSERT_EQ(steps.at("records").size(), 4u);  // begin and end of steps 2 and 3
  for (const json& r : steps.at("records")) {
    EXPECT_EQ(r.at("type"), "step");
    EXPECT_GE(r.at("step").get<int>(), 2);
    EXPECT_LE(r.at("step").get<int>(), 3);
  }
  ASSERT_EQ(RunCommand({"inspect", run + "/rank0.trace", "--type", "event", "--json"}), 0) << err_;
  const json events = json::parse(out_);
  ASSERT_FALSE(events.at("records").empty());
  for (const json& r : events.at("records")) EXPECT_EQ(r.at("type"), "event");
  EXPECT_EQ(RunCommand({"inspect", run + "/rank0.trace", "--type", "bogus"}), 1);
  EXPECT_EQ(RunCommand({"inspect", run + "/rank0.trace", "--from", "4", "--to", "2"}), 1);
}

TEST_F(TrainUxTest, SigintStopsAtTheStepBoundaryWithACheckpoint) {
  const std::string run = Path("run"), clean = Path("clean");
  // Raised by rank 0 itself after its step 2 (rank 1 raising it could come
  // after rank 0 has read the stop request for that step: then it stops one
  // step later, as a real Ctrl-C arriving then would).
  const ProcessResult stopped = RunProcess(Train(run), "step:2:0", "INT", Path("err"));
  ASSERT_TRUE(stopped.exited) << "ended on signal " << -stopped.rc;
  EXPECT_EQ(stopped.rc, 130) << stopped.err;
  EXPECT_NE(stopped.err.find("stopped after step 2 of 6"), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("--resume"), std::string::npos) << stopped.err;
  EXPECT_TRUE(fs::exists(run + "/ckpt/step-00000002.h5"));
  EXPECT_EQ(MetricsSteps(run), Iota(3));
  EXPECT_EQ(ResumeSame(run), CleanRun(clean));
  EXPECT_EQ(MetricsWithoutTimes(run), MetricsWithoutTimes(clean));
}

TEST_F(TrainUxTest, SigtermWithoutCheckpointsSaysTheResumeStartsOver) {
  const std::string run = Path("run");
  std::vector<std::string> args = {"train", "--out", run, "--steps", "6", "--quiet"};
  const ProcessResult stopped = RunProcess(args, "step:1", "TERM", Path("err"));
  ASSERT_TRUE(stopped.exited) << "ended on signal " << -stopped.rc;
  EXPECT_EQ(stopped.rc, 143) << stopped.err;
  EXPECT_NE(stopped.err.find("starts it over"), std::string::npos) << stopped.err;
  EXPECT_FALSE(fs::exists(run + "/ckpt"));
  args.push_back("--resume");
  EXPECT_EQ(RunCommand(args), 0) << err_;
  EXPECT_EQ(MetricsSteps(run), Iota(6));
}

}  // namespace
}  // namespace dgrr::cli
