// `dgrr train` as ranks in separate processes under Open MPI's mpirun, against
// the same runs with ranks as threads of one process (`--ranks N`): the same
// records bit for bit on every rank and the same parameters; a bitflip on one
// rank named at its step and rank; a killed rank process brings the job down
// and the resumed job ends with the uninterrupted run's records; ranks given
// different settings are refused on every rank, without a hang. Nothing waits
// on time: the ctest timeout is the only guard against a hang.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "checkpoint/checkpoint_file.h"
#include "runtime/launch_record.h"
#include "runtime/run_directory.h"
#include "tests/support/exec_args.h"
#include "tests/support/temp_dir_test.h"
#include "tests/support/timeless_records.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = 0;  // exit code, or -signal
  std::string output;
};

// Runs `program args` with stdout and stderr in one file; `kill_at` sets the
// kill point hook (base/kill_point.h) for every process of the job.
Outcome RunProgram(const std::string& program, const std::vector<std::string>& args, const fs::path& log,
            const std::string& kill_at = "") {
  test_support::ExecArgs argv(program, args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (kill_at.empty()) {
      ::unsetenv("DGRR_TEST_KILL_AT");
    } else {
      ::setenv("DGRR_TEST_KILL_AT", kill_at.c_str(), 1);
    }
    // CI runs as root; Open MPI refuses root unless told both of these.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    ::execvp(program.c_str(), argv.argv());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Outcome out;
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  out.output = text.str();
  return out;
}

std::vector<std::string> Mpirun(int processes, const std::vector<std::string>& dgrr_args) {
  std::vector<std::string> args = {"--oversubscribe", "-np", std::to_string(processes), DGRR_BIN};
  args.insert(args.end(), dgrr_args.begin(), dgrr_args.end());
  return args;
}

std::vector<std::string> Train(const fs::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"train", "--out", dir.string(), "--model", "tiny", "--steps", "6",
                                   "--ckpt-every", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A rank's BOUNDARY and STEP records, host times zeroed: what two runs that
// compute the same things record alike (EVENT records say how a run went, and
// have no ==).
struct Recorded {
  std::vector<trace::BoundaryRecord> boundaries;
  std::vector<trace::StepRecord> steps;
  bool operator==(const Recorded&) const = default;
};
Recorded RecordsOf(const fs::path& run, int rank) {
  Recorded out;
  for (const trace::Record& r : test_support::TimelessRecords(TracePathFor(run.string(), rank))) {
    if (const auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) out.boundaries.push_back(*b);
    if (const auto* s = std::get_if<trace::StepRecord>(&r.body)) out.steps.push_back(*s);
  }
  return out;
}

// "params xxh3 0x..." from train's summary line.
std::string ParamsDigest(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("params xxh3 (0x[0-9a-f]+)")) ? m[1].str() : "";
}

class MpiTrainTest : public test_support::TempDirTest {
 protected:
  Outcome Dgrr(const std::vector<std::string>& args, const std::string& log) {
    return RunProgram(DGRR_BIN, args, dir_ / log);
  }
  Outcome Mpi(int processes, const std::vector<std::string>& args, const std::string& log,
              const std::string& kill_at = "") {
    return RunProgram(MPIRUN, Mpirun(processes, args), dir_ / log, kill_at);
  }
};

TEST_F(MpiTrainTest, ProcessesRecordTheBitsOfThreadsForOneTwoAndFourRanks) {
  std::string digest_of_one;
  for (int n : {1, 2, 4}) {
    const fs::path procs = dir_ / ("mpi" + std::to_string(n)), threads = dir_ / ("threads" + std::to_string(n));
    const Outcome m = Mpi(n, Train(procs), "mpi.log");
    ASSERT_EQ(m.code, 0) << m.output;
    const Outcome t = Dgrr(Train(threads, {"--ranks", std::to_string(n)}), "threads.log");
    ASSERT_EQ(t.code, 0) << t.output;
    for (int r = 0; r < n; ++r) {
      const Recorded a = RecordsOf(procs, r), b = RecordsOf(threads, r);
      ASSERT_EQ(a.steps.size(), 12u) << n << " processes, rank " << r;  // a begin and an end per step
      EXPECT_TRUE(a == b) << n << " processes vs threads, rank " << r;
    }
    EXPECT_FALSE(fs::exists(TracePathFor(procs.string(), n))) << "one trace per rank, no more";
    ASSERT_FALSE(ParamsDigest(m.output).empty()) << m.output;
    EXPECT_EQ(ParamsDigest(m.output), ParamsDigest(t.output));
    if (n == 1) digest_of_one = ParamsDigest(m.output);
    EXPECT_EQ(ParamsDigest(m.output), digest_of_one) << n << " processes";
    // The same files, written once, whoever wrote them.
    for (const char* shared : {"config.json", "metrics.jsonl", "ckpt/step-00000005.h5"}) {
      EXPECT_TRUE(fs::exists(procs / shared)) << shared;
    }
  }
}

TEST_F(MpiTrainTest, ABitflipOnOneRankProcessIsNamedAtItsStepAndRank) {
  const fs::path clean = dir_ / "clean", flipped = dir_ / "flipped";
  ASSERT_EQ(Mpi(2, Train(clean), "clean.log").code, 0);
  const Outcome f =
      Mpi(2, Train(flipped, {"--inject", "bitflip:step=3,rank=1,at=block0.mlp.fc.out"}), "flipped.log");
  ASSERT_EQ(f.code, 0) << f.output;
  const Outcome c = Dgrr({"compare", clean.string(), flipped.string()}, "compare.log");
  EXPECT_EQ(c.code, 4) << c.output;
  EXPECT_NE(c.output.find("block0.mlp.fc.out"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("step 3"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("rank 1"), std::string::npos) << c.output;
}

// The audit over MPI: a clean audited job records the bits of the unaudited
// in-process run; a flip in rank 1's backward pass is named by rank 0's audit
// (exit 4), though every rank's parameters agree.
TEST_F(MpiTrainTest, TheAuditNamesARankProcessWhoseBackwardIsWrong) {
  const fs::path clean = dir_ / "clean", threads = dir_ / "threads", flipped = dir_ / "flipped";
  ASSERT_EQ(Mpi(2, Train(clean, {"--audit-every", "3"}), "clean.log").code, 0);
  ASSERT_EQ(Dgrr(Train(threads, {"--ranks", "2"}), "threads.log").code, 0);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(RecordsOf(clean, r) == RecordsOf(threads, r)) << "rank " << r;
  const Outcome f = Mpi(
      2, Train(flipped, {"--audit-every", "3", "--inject", "bitflip:step=3,rank=1,at=block0.mlp.fc.dinp"}),
      "flipped.log");
  EXPECT_EQ(f.code, 4) << f.output;
  EXPECT_NE(f.output.find("silent data corruption found by the audit at step 3: rank 1 computed example 28 "
                          "differently from rank 0's recomputation, first at block0.mlp.fc.dinp"),
            std::string::npos)
      << f.output;
}

// A moment flipped in one rank process's optimizer state as step 2 stores it
// is first read by step 3's update (AdamW's fused loop has already used the
// step's own moment): the per-step parameter check, over MPI, names step 3
// and rank 1, and every process stops. (Step 2 writes no checkpoint, whose
// replicated-state check would name the moment first; step 3's comes after the
// parameter check.)
TEST_F(MpiTrainTest, AnOptimizerStateFlipOnOneRankProcessIsNamedByTheParameterCheck) {
  const fs::path run = dir_ / "flipped";
  const Outcome o =
      Mpi(2, Train(run, {"--mode", "sdc", "--inject", "bitflip:step=2,rank=1,at=adamw.m.wte"}), "flip.log");
  EXPECT_NE(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("silent data corruption suspected after step 3"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("rank 1 holds"), std::string::npos) << o.output;
}

TEST_F(MpiTrainTest, AKilledRankEndsTheJobAndTheResumedJobEndsAsTheUninterruptedOne) {
  const fs::path whole = dir_ / "whole", killed = dir_ / "killed";
  ASSERT_EQ(Mpi(2, Train(whole), "whole.log").code, 0);
  // Rank 1's process dies by SIGKILL after recording step 2; mpirun ends rank 0.
  const Outcome k = Mpi(2, Train(killed), "killed.log", "step:2:1");
  EXPECT_NE(k.code, 0) << k.output;
  for (const auto& entry : fs::directory_iterator(killed / "ckpt")) {
    EXPECT_EQ(entry.path().extension(), ".h5") << "a half-written file was left: " << entry.path();
  }
  const Outcome r = Mpi(2, {"train", "--out", killed.string(), "--resume", "-q"}, "resume.log");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const Recorded a = RecordsOf(whole, rank), b = RecordsOf(killed, rank);
    ASSERT_EQ(a.steps.size(), 12u);  // a begin and an end per step
    EXPECT_TRUE(a == b) << "rank " << rank;
  }
}

// A rank process killed after its shard of step 3 is durable and before rank
// 0 commits the manifest: step 3 does not exist (its shard is garbage), the
// resume starts from step 1 and ends as the uninterrupted run.
TEST_F(MpiTrainTest, AShardWithoutItsManifestIsIgnoredAndTheResumedJobEndsAsTheUninterruptedOne) {
  const fs::path whole = dir_ / "whole", killed = dir_ / "killed";
  ASSERT_EQ(Mpi(2, Train(whole), "whole.log").code, 0);
  const Outcome k = Mpi(2, Train(killed), "killed.log", "ckpt-shard:3:1");
  EXPECT_NE(k.code, 0) << k.output;
  EXPECT_TRUE(fs::exists(killed / "ckpt" / "step-00000003.rank-1.h5")) << "the kill did not land after the shard";
  EXPECT_FALSE(fs::exists(killed / "ckpt" / "step-00000003.h5")) << "a manifest was committed";
  auto steps = checkpoint::ListCheckpointSteps(killed.string());
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, std::vector<uint64_t>{1});
  const Outcome r = Mpi(2, {"train", "--out", killed.string(), "--resume", "-q"}, "resume.log");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(RecordsOf(whole, rank) == RecordsOf(killed, rank)) << rank;
  for (uint64_t step : {1u, 3u, 5u}) {
    auto a = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(whole.string(), step));
    auto b = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(killed.string(), step));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ(a->state_digest, b->state_digest) << step;
  }
}

// The commands that start from checkpoints give on a run of two rank
// processes what they give on the same run with two rank threads.
TEST_F(MpiTrainTest, ReplayRollbackAndPlanOfAProcessRunEqualThoseOfAThreadRun) {
  const fs::path threads = dir_ / "threads", processes = dir_ / "processes";
  ASSERT_EQ(Dgrr(Train(threads, {"--ranks", "2"}), "threads.log").code, 0);
  ASSERT_EQ(Mpi(2, Train(processes), "processes.log").code, 0);
  // The job is re-launched as threads of one process: its launch record names
  // no MPI launcher (docs/launch-record.md, "Runs of dgrr train").
  auto launch = ReadLaunchRecord(processes.string());
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(MpiLauncherVariable(*launch), nullptr);
  for (uint64_t step : {1u, 3u, 5u}) {
    auto a = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(threads.string(), step));
    auto b = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(processes.string(), step));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ(a->state_digest, b->state_digest) << step;
    EXPECT_EQ(a->ranks[1].trace_position, b->ranks[1].trace_position) << step;
  }
  auto same_output = [&](const std::vector<std::string>& tail, const std::string& name) {
    std::vector<std::string> a = {tail[0], threads.string()}, b = {tail[0], processes.string()};
    a.insert(a.end(), tail.begin() + 1, tail.end());
    b.insert(b.end(), tail.begin() + 1, tail.end());
    const Outcome x = Dgrr(a, name + "-threads.log"), y = Dgrr(b, name + "-processes.log");
    EXPECT_EQ(x.code, 0) << x.output;
    EXPECT_EQ(y.code, 0) << y.output;
    const std::regex dirs(threads.string() + "|" + processes.string());
    // The block said before a program starts (docs/launch-record.md, Security)
    // shows each recording's environment, which mpirun's differs in: not compared.
    const std::regex preview("dgrr [a-z]+: (starting the recorded program of |  )[^\n]*\n");
    auto compared = [&](const std::string& output) {
      return std::regex_replace(std::regex_replace(output, preview, ""), dirs, "RUN");
    };
    EXPECT_EQ(compared(x.output), compared(y.output)) << name;
  };
  same_output({"replay", "--from", "4", "--to", "5"}, "replay");  // from the checkpoint of step 3
  same_output({"plan", "--json"}, "plan");
  same_output({"rollback", "--step", "2", "--quiet"}, "rollback");
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(RecordsOf(threads, rank) == RecordsOf(processes, rank)) << rank;
  auto a = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(threads.string(), 2));
  auto b = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(processes.string(), 2));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_EQ(a->state_digest, b->state_digest);
  EXPECT_FALSE(fs::exists(processes / "ckpt" / "step-00000003.h5"));
  EXPECT_FALSE(fs::exists(processes / "ckpt" / "step-00000003.rank-1.h5")) << "a later checkpoint's shard was left";
}

TEST_F(MpiTrainTest, RanksGivenDifferentSettingsAreRefusedOnEveryRank) {
  // Two programs in one job (mpirun's MPMD form), differing in --lr.
  const fs::path run = dir_ / "run";
  std::vector<std::string> args = {"--oversubscribe", "-np", "1", DGRR_BIN};
  for (const auto& a : Train(run, {"--lr", "0.01"})) args.push_back(a);
  args.insert(args.end(), {":", "-np", "1", DGRR_BIN});
  for (const auto& a : Train(run, {"--lr", "0.02"})) args.push_back(a);
  const Outcome o = RunProgram(MPIRUN, args, dir_ / "mismatch.log");
  EXPECT_NE(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("rank(s) 1 of 2"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(run / "config.json")) << "nothing of a refused run is written";
}

}  // namespace
}  // namespace dgrr
