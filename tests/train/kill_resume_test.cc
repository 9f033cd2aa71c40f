// SIGKILL `dgrr train`, `train --resume`, `rollback` and `replay` at named
// points of their progress (the DGRR_TEST_KILL_AT hook, base/kill_point.h),
// each followed by the command a user would run next. Nothing here depends on
// timing: every kill happens at a stage and step, so every round is known to
// be interrupted (the child must end by SIGKILL), and the assertions are
// about correctness only: every checkpoint on disk reads back valid after
// every kill, and the run ends with the BOUNDARY and STEP records (times
// aside) and parameters of the uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint_file.h"
#include "runtime/run_directory.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

// Runs dgrr with `args`, killing itself at `kill_at` when that is not empty.
// Returns the exit code, or -signal.
int RunDgrr(const std::vector<std::string>& args, const std::string& kill_at = "") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(DGRR_BIN));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (kill_at.empty()) {
      ::unsetenv("DGRR_TEST_KILL_AT");
    } else {
      ::setenv("DGRR_TEST_KILL_AT", kill_at.c_str(), 1);
    }
    if (!::freopen("/dev/null", "w", stdout) || !::freopen("/dev/null", "w", stderr)) ::_exit(126);
    ::execv(DGRR_BIN, argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

constexpr int kSteps = 8;

std::vector<std::string> Fresh(const std::string& dir) {
  return {"train", "--out", dir, "--steps", std::to_string(kSteps), "--ranks", "2",
          "--ckpt-every", "2", "--quiet", "--force"};
}
std::vector<std::string> Resume(const std::string& dir) {
  return {"train", "--out", dir, "--resume", "--quiet"};
}
std::vector<std::string> RollBack(const std::string& dir, int step) {
  return {"rollback", dir, "--step", std::to_string(step), "--quiet"};
}

// Every rank's BOUNDARY and STEP records, host times zeroed: what must equal
// the uninterrupted run's (EVENT records say where the run was interrupted).
std::vector<std::vector<trace::Record>> TimelessRecords(const std::string& dir) {
  std::vector<std::vector<trace::Record>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto t = trace::ReadWholeTrace(TracePathFor(dir, r));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    ranks.emplace_back();
    if (!t.ok()) continue;
    for (trace::Record rec : t->records) {
      if (auto* b = std::get_if<trace::BoundaryRecord>(&rec.body)) {
        b->host_time_ns = 0;
      } else if (auto* s = std::get_if<trace::StepRecord>(&rec.body)) {
        s->host_time_ns = 0;
      } else {
        continue;
      }
      rec.index = 0;  // EVENTs in between shift the indices
      ranks.back().push_back(rec);
    }
  }
  return ranks;
}

// Only BOUNDARY and STEP bodies are compared (EventRecord has no ==).
bool SameBody(const trace::RecordBody& a, const trace::RecordBody& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<trace::BoundaryRecord>(&a)) return *x == std::get<trace::BoundaryRecord>(b);
  if (const auto* x = std::get_if<trace::StepRecord>(&a)) return *x == std::get<trace::StepRecord>(b);
  return false;
}

bool SameRecords(const std::vector<std::vector<trace::Record>>& a,
                 const std::vector<std::vector<trace::Record>>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = std::to_string(a.size()) + " ranks against " + std::to_string(b.size());
    return false;
  }
  for (size_t r = 0; r < a.size(); ++r) {
    if (a[r].size() != b[r].size()) {
      *why = "rank " + std::to_string(r) + ": " + std::to_string(a[r].size()) + " vs " +
             std::to_string(b[r].size()) + " records";
      return false;
    }
    for (size_t i = 0; i < a[r].size(); ++i) {
      if (!SameBody(a[r][i].body, b[r][i].body)) {
        *why = "rank " + std::to_string(r) + ": record " + std::to_string(i) + " differs";
        return false;
      }
    }
  }
  return true;
}

// Every checkpoint on disk must read back valid, whatever was killed where.
void ExpectEveryCheckpointValid(const std::string& dir, const std::string& when) {
  auto steps = checkpoint::ListCheckpointSteps(dir);
  if (!steps.ok()) return;  // no ckpt/ yet
  for (uint64_t step : *steps) {
    auto c = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(dir, step));
    EXPECT_TRUE(c.ok()) << when << ": " << c.status().ToString();
  }
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    files[fs::relative(e.path(), dir).string()] = bytes.str();
  }
  return files;
}

class KillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dgrr_kill_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    clean_ = (root_ / "clean").string();
    run_ = (root_ / "killed").string();
    // A killed replay or rollback leaves its scratch directory behind: keep
    // those inside this test's root, not in the machine's /tmp.
    const char* tmpdir = ::getenv("TMPDIR");
    saved_tmpdir_ = tmpdir ? std::optional<std::string>(tmpdir) : std::nullopt;
    fs::create_directories(root_ / "tmp");
    ::setenv("TMPDIR", (root_ / "tmp").c_str(), 1);
  }
  void TearDown() override {
    if (saved_tmpdir_) {
      ::setenv("TMPDIR", saved_tmpdir_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
    fs::remove_all(root_);
  }
  std::optional<std::string> saved_tmpdir_;

  // One interrupted round: the command must die at exactly `kill_at`.
  void Kill(const std::vector<std::string>& args, const std::string& kill_at) {
    const std::string what = args[0] + (args.size() > 3 && args[3] == "--resume" ? " --resume" : "") +
                             " killed at " + kill_at;
    ASSERT_EQ(RunDgrr(args, kill_at), -SIGKILL) << what << ": the kill did not land";
    ExpectEveryCheckpointValid(run_, "after " + what);
  }

  fs::path root_;
  std::string clean_, run_;
};

TEST_F(KillTest, KillsAtEveryStageEndWithTheUninterruptedRun) {
  ASSERT_EQ(RunDgrr(Fresh(clean_)), 0);
  const auto expected = TimelessRecords(clean_);
  ASSERT_FALSE(expected[0].empty());

  // train and train --resume, at each stage (checkpoints after steps 1, 3, 5, 7).
  Kill(Fresh(run_), "step:0:1");        // before any checkpoint: resume starts over
  Kill(Resume(run_), "ckpt-temp:1");    // the temporary written, not renamed
  Kill(Resume(run_), "ckpt-commit:1");  // the first checkpoint in place
  Kill(Resume(run_), "resume-cut:0");   // rank 0's trace cut back, rank 1's not yet
  Kill(Resume(run_), "step:2:0");
  Kill(Resume(run_), "ckpt-temp:3");
  Kill(Resume(run_), "ckpt-shard:3:1");  // rank 1's shard durable, no manifest: step 3 absent
  Kill(Resume(run_), "ckpt-commit:3");
  Kill(Resume(run_), "step:6:1");
  Kill(Resume(run_), "ckpt-commit:7");  // the last checkpoint: the run is complete
  std::string why;
  EXPECT_TRUE(SameRecords(TimelessRecords(run_), expected, &why)) << why;

  // rollback of the complete run, at each durable stage; then what the user
  // runs next: the same rollback again, or train --resume, which finishes it.
  Kill(RollBack(run_, 4), "rollback-begun:4");  // marker written, step-4.h5 not yet
  Kill(RollBack(run_, 4), "rollback-ckpt:4");   // step-4.h5 written, traces whole
  Kill(RollBack(run_, 4), "rollback-cut:1");    // rank 0 done, rank 1 cut without its EVENT
  Kill(Resume(run_), "step:5:0");               // resume finished the rollback, then trained
  ASSERT_EQ(RunDgrr(Resume(run_)), 0);
  EXPECT_TRUE(SameRecords(TimelessRecords(run_), expected, &why)) << why;

  Kill(RollBack(run_, 2), "rollback-event:0");   // rank 0 cut with its EVENT, rank 1 whole
  Kill(Resume(run_), "rollback-remove:3");       // killed inside resume's finishing of it
  Kill(RollBack(run_, 2), "rollback-remove:5");  // the same rollback again, killed in stage 4
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointPath(run_, 4)));
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointPath(run_, 7)));
  ASSERT_EQ(RunDgrr(Resume(run_)), 0);  // finishes the rollback, trains steps 3..7
  EXPECT_FALSE(fs::exists(run_ + "/rollback-pending.json"));
  EXPECT_TRUE(SameRecords(TimelessRecords(run_), expected, &why)) << why;

  // replay writes only into a scratch directory: killed, the run is untouched
  // and a second replay succeeds. The kill lands in the dgrr train the replay
  // re-executes, and the replay reports that it did not complete (exit 5).
  const auto before = Snapshot(run_);
  EXPECT_EQ(RunDgrr({"replay", run_}, "step:3:0"), kExitReplayIntegrity);
  EXPECT_EQ(RunDgrr({"replay", run_, "--from", "4"}, "step:6:1"), kExitReplayIntegrity);
  EXPECT_TRUE(Snapshot(run_) == before) << "a killed replay changed the run";
  EXPECT_EQ(RunDgrr({"replay", run_}), 0);

  EXPECT_TRUE(SameRecords(TimelessRecords(run_), expected, &why)) << why;
  for (int r = 0; r < 2; ++r) {
    trace::VerifySummary summary;
    EXPECT_TRUE(trace::VerifyTrace(TracePathFor(run_, r), &summary).ok());
    EXPECT_EQ(summary.last_step, static_cast<uint64_t>(kSteps - 1));
  }
}

// The STEP end records of one trace, in order; `whole` false when the trace
// did not read cleanly (a torn tail or corruption).
std::vector<uint64_t> StepEnds(const std::string& path, bool* whole) {
  trace::VerifySummary summary;
  *whole = trace::VerifyTrace(path, &summary).ok() && summary.warning.empty();
  std::vector<uint64_t> ends;
  auto t = trace::ReadWholeTrace(path);
  if (!t.ok()) return ends;
  for (const trace::Record& rec : t->records) {
    if (const auto* s = std::get_if<trace::StepRecord>(&rec.body); s && s->kind == trace::StepKind::kEnd) {
      ends.push_back(s->step);
    }
  }
  return ends;
}

// Issue 26, item 4: the records of every completed step reach the kernel at
// the step's end, so SIGKILL right after step N's end leaves the killing
// rank's trace whole through step N (and every other rank's through N - 1,
// the last step all ranks had ended: step N's all-reduce waited for them),
// never behind the metrics log. Before, the records sat in the writer's
// 1 MiB buffer (about ten steps of tiny), and a kill lost all of them.
TEST_F(KillTest, AKilledRunsTraceHoldsEveryStepItEnded) {
  ASSERT_EQ(RunDgrr(Fresh(clean_)), 0);
  const auto expected = TimelessRecords(clean_);
  for (const auto& [step, rank] : {std::pair{0, 0}, std::pair{5, 1}, std::pair{6, 0}}) {
    SCOPED_TRACE("killed at step " + std::to_string(step) + " on rank " + std::to_string(rank));
    fs::remove_all(run_);
    ASSERT_EQ(RunDgrr({"train", "--out", run_, "--steps", std::to_string(kSteps), "--ranks", "2", "--quiet"},
                      "step:" + std::to_string(step) + ":" + std::to_string(rank)),
              -SIGKILL);
    const auto killed = TimelessRecords(run_);
    for (int r = 0; r < 2; ++r) {
      bool whole = false;
      const std::vector<uint64_t> ends = StepEnds(TracePathFor(run_, r), &whole);
      EXPECT_TRUE(whole) << "rank " << r << "'s trace ends in a torn tail or is damaged";
      const int through = r == rank ? step : step - 1;
      ASSERT_GE(static_cast<int>(ends.size()), through + 1) << "rank " << r << " lost ended steps";
      for (int k = 0; k <= through; ++k) EXPECT_EQ(ends[static_cast<size_t>(k)], static_cast<uint64_t>(k));
      // What is there is the uninterrupted run's, record for record.
      ASSERT_LE(killed[r].size(), expected[r].size());
      for (size_t i = 0; i < killed[r].size(); ++i) {
        ASSERT_TRUE(SameBody(killed[r][i].body, expected[r][i].body)) << "rank " << r << " record " << i;
      }
    }
    // The metrics log (rank 0's line follows its EndStep) is never ahead.
    std::ifstream metrics(run_ + "/metrics.jsonl");
    int lines = 0;
    for (std::string line; std::getline(metrics, line);) ++lines;
    bool whole = false;
    EXPECT_GE(StepEnds(TracePathFor(run_, 0), &whole).size(), static_cast<size_t>(lines));
  }
}

}  // namespace
}  // namespace dgrr
