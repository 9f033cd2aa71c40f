// SIGKILL `dgrr train` at 20 pseudo-random moments, each followed by
// --resume. Asserts only what must hold whatever the timing: no checkpoint
// file on disk is ever half-written, and the run finally ends with the
// parameters of an uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint_file.h"
#include "runtime/session.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

pid_t Spawn(const std::vector<std::string>& args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(DGRR_BIN));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::freopen("/dev/null", "w", stdout);
    ::freopen("/dev/null", "w", stderr);
    ::execv(DGRR_BIN, argv.data());
    ::_exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::vector<std::string> TrainArgs(const std::string& dir, bool resume) {
  if (resume) return {"train", "--out", dir, "--resume", "--quiet"};
  return {"train", "--out", dir, "--steps", "40", "--ranks", "2", "--ckpt-every", "4",
          "--quiet", "--force"};
}

// The parameter fingerprint of the last STEP end record of rank 0.
std::pair<uint64_t, uint64_t> FinalParams(const std::string& dir) {
  auto t = trace::ReadWholeTrace(TracePathFor(dir, 0));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  std::pair<uint64_t, uint64_t> fp{0, 0};
  if (!t.ok()) return fp;
  for (const auto& r : t->records) {
    if (auto* s = std::get_if<trace::StepRecord>(&r.body); s && s->kind == trace::StepKind::kEnd) {
      fp = {s->params_xor64, s->params_xxh3};
    }
  }
  return fp;
}

TEST(KillAndResume, TwentyKillsEndWithTheUninterruptedParameters) {
  const fs::path root = fs::temp_directory_path() / ("dgrr_kill_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string clean = (root / "clean").string(), killed = (root / "killed").string();
  ASSERT_EQ(Wait(Spawn(TrainArgs(clean, false))), 0);
  const auto expected = FinalParams(clean);

  uint64_t lcg = 20261122;  // fixed seed: the same moments every run
  int kills_landed = 0;
  for (int i = 0; i < 20; ++i) {
    // Until the run has a config, there is nothing to resume: start it afresh.
    const bool resume = fs::exists(killed + "/config.json");
    const pid_t pid = Spawn(TrainArgs(killed, resume));
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + (lcg >> 33) % 400));
    ::kill(pid, SIGKILL);  // succeeds on a finished but unreaped child too
    const int rc = Wait(pid);
    ASSERT_TRUE(rc == -SIGKILL || rc == 0) << "kill " << i << ": dgrr exited with " << rc;
    if (rc == -SIGKILL) ++kills_landed;  // the signal, not the exit, ended the run
    // Whatever the moment, every checkpoint on disk is complete and valid.
    auto steps = checkpoint::ListCheckpointSteps(killed);
    if (steps.ok()) {
      for (uint64_t step : *steps) {
        auto c = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(killed, step));
        EXPECT_TRUE(c.ok()) << "after kill " << i << ": " << c.status().ToString();
      }
    }
  }
  EXPECT_GT(kills_landed, 10) << "most kills must land while the run is training";
  // Finish the run.
  int rc = Wait(Spawn(TrainArgs(killed, fs::exists(killed + "/config.json"))));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(FinalParams(killed), expected);
  trace::VerifySummary summary;
  EXPECT_TRUE(trace::VerifyTrace(TracePathFor(killed, 1), &summary).ok());
  EXPECT_EQ(summary.last_step, 39u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace dgrr
