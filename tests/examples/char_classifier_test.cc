// examples/char_classifier run as its users run it: as a separate process,
// stopped by SIGKILL or SIGTERM at a named step (the DGRR_TEST_KILL_AT hook,
// base/kill_point.h, never the clock), then started again with the same
// command. "Equal" below means bitwise: every BOUNDARY and STEP record with
// its host time zeroed (EVENT records say when checkpoints and resumes
// happened, which legitimately differs), and every registered state entry
// of the final checkpoint.
//
// The tests named Cli* drive `dgrr replay|rollback|bisect|plan` on this
// program through its launch.json (replay/reexecute.h).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "tests/support/timeless_records.h"
#include "trace_format/reader.h"
#include "tests/support/exec_args.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using dgrr::trace::Record;

struct Result {
  bool exited = false;  // false: ended on a signal
  int rc = -1;          // exit code, or -signal
  std::string out, err;
};

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `binary args...` in a process of its own with `env` added.
Result RunBinary(const std::string& binary, const std::vector<std::string>& args,
           const std::map<std::string, std::string>& env = {}) {
  static int counter = 0;
  const fs::path base = fs::temp_directory_path() /
                        ("dgrr_cc_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string out_path = base.string() + ".out", err_path = base.string() + ".err";
  dgrr::test_support::ExecArgs argv(binary, args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0) ::_exit(100);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execv(binary.c_str(), argv.argv());
    ::_exit(101);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Result r;
  r.exited = WIFEXITED(status);
  r.rc = r.exited ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return r;
}

// The example with the settings every test shares unless it adds its own.
Result Train(const fs::path& dir, std::vector<std::string> extra = {},
             const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> args = {"--out", dir.string(), "--steps", "12", "--ckpt-every", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunBinary(CHAR_CLASSIFIER_BIN, args, env);
}
std::map<std::string, std::string> KillAt(int step, const std::string& signal = "") {
  std::map<std::string, std::string> env = {{"DGRR_TEST_KILL_AT", "step:" + std::to_string(step)}};
  if (!signal.empty()) env["DGRR_TEST_KILL_SIGNAL"] = signal;
  return env;
}

// stdout as JSON; a failure (not an exception) when it is not.
json ParseOut(const Result& r) {
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) ADD_FAILURE() << "not JSON on stdout: " << r.out << " (stderr: " << r.err << ")";
  return j.is_discarded() ? json::object() : j;
}

Result Dgrr(const std::vector<std::string>& args) {
  return RunBinary(std::string(DGRR_BINARY_DIR) + "/cli/dgrr", args);
}

class CharClassifier : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dgrr_char_classifier_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// BOUNDARY and STEP records with host times zeroed, in trace order.
std::vector<Record> Results(const fs::path& run) {
  std::vector<Record> kept;
  for (Record& r : dgrr::test_support::TimelessRecords((run / "rank0.trace").string())) {
    if (std::holds_alternative<dgrr::trace::BoundaryRecord>(r.body) ||
        std::holds_alternative<dgrr::trace::StepRecord>(r.body)) {
      kept.push_back(std::move(r));
    }
  }
  return kept;
}

std::vector<dgrr::trace::EventRecord> Events(const fs::path& run) {
  std::vector<dgrr::trace::EventRecord> events;
  for (const Record& r : dgrr::test_support::TimelessRecords((run / "rank0.trace").string())) {
    if (auto* e = std::get_if<dgrr::trace::EventRecord>(&r.body)) events.push_back(*e);
  }
  return events;
}

std::vector<uint64_t> CheckpointSteps(const fs::path& run) {
  auto steps = dgrr::checkpoint::ListCheckpointSteps(run.string());
  EXPECT_TRUE(steps.ok()) << steps.status().ToString();
  return steps.ok() ? *steps : std::vector<uint64_t>{};
}

// The registered state saved by the checkpoint of `step`, by name.
std::map<std::string, std::vector<uint8_t>> SavedState(const fs::path& run, uint64_t step) {
  std::map<std::string, std::vector<uint8_t>> state;
  auto ckpt = dgrr::checkpoint::ReadCheckpoint(dgrr::checkpoint::CheckpointPath(run.string(), step));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return state;
  for (const auto& e : ckpt->replicated) state[e.name] = e.data;
  for (const auto& e : ckpt->ranks.at(0).entries) state[e.name] = e.data;
  return state;
}

// Index of the first record where the runs differ; size of the shorter when
// one is a prefix of the other; SIZE_MAX when equal.
size_t FirstDifference(const std::vector<Record>& a, const std::vector<Record>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!(a[i].body == b[i].body)) return i;
  }
  return a.size() == b.size() ? SIZE_MAX : std::min(a.size(), b.size());
}

void ExpectSameResults(const fs::path& a, const fs::path& b) {
  const auto ra = Results(a), rb = Results(b);
  ASSERT_GT(ra.size(), 12u * 16u * 4u) << "every example's boundaries are recorded";
  EXPECT_EQ(FirstDifference(ra, rb), SIZE_MAX) << a << " and " << b << " (of " << ra.size() << ", "
                                               << rb.size() << " records)";
  const auto sa = SavedState(a, 11), sb = SavedState(b, 11);
  EXPECT_EQ(sa.size(), 5u) << "params, adam.m, adam.v, adam.t, data.cursor";
  EXPECT_TRUE(sa == sb) << "final checkpoints of " << a << " and " << b;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> Snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = ReadAll(e.path());
  }
  return files;
}

TEST_F(CharClassifier, TrainsAndRecordsWhatItTakesToRunAgain) {
  const Result r = Train(dir_ / "run");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* f : {"rank0.trace", "launch.json", "config.json", "rank0.env.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / "run" / f)) << f;
  }
  const json config = json::parse(ReadAll(dir_ / "run" / "config.json"));
  EXPECT_EQ(config.at("program"), "char_classifier");
  EXPECT_EQ(config.at("seed"), 1);
  EXPECT_FALSE(config.contains("threads")) << "the thread count never changes results";
  const json env = json::parse(ReadAll(dir_ / "run" / "rank0.env.json"));
  EXPECT_EQ(env.at("program").at("name"), "char_classifier");
  EXPECT_FALSE(env.at("program").at("compiler").get<std::string>().empty());
  EXPECT_TRUE(env.at("program").contains("cxx_flags"));
  const json launch = json::parse(ReadAll(dir_ / "run" / "launch.json"));
  EXPECT_EQ(launch.at("argv").at(2), (dir_ / "run").string());
  EXPECT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{2, 5, 8, 11}));
  // It learns: the mean loss of the last step is below the first's.
  std::vector<float> losses;
  for (const Record& rec : Results(dir_ / "run")) {
    const auto* s = std::get_if<dgrr::trace::StepRecord>(&rec.body);
    if (s && s->kind == dgrr::trace::StepKind::kEnd) {
      float f;
      std::memcpy(&f, &s->loss_bits, 4);
      losses.push_back(f);
    }
  }
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front());
}

TEST_F(CharClassifier, ResultsDoNotDependOnTheThreadCount) {
  ASSERT_EQ(Train(dir_ / "t1", {"--threads", "1"}).rc, 0);
  ASSERT_EQ(Train(dir_ / "t3", {"--threads", "3"}).rc, 0);
  ExpectSameResults(dir_ / "t1", dir_ / "t3");
}

TEST_F(CharClassifier, ADifferentSeedChangesTheResults) {
  // Otherwise every equality in this file could hold vacuously.
  ASSERT_EQ(Train(dir_ / "a").rc, 0);
  ASSERT_EQ(Train(dir_ / "b", {"--seed", "2"}).rc, 0);
  EXPECT_EQ(FirstDifference(Results(dir_ / "a"), Results(dir_ / "b")), 1u) << "the first boundary, after step 0 begins";
  EXPECT_FALSE(SavedState(dir_ / "a", 11) == SavedState(dir_ / "b", 11));
}

TEST_F(CharClassifier, SigkillThenTheSameCommandResumesBitwise) {
  ASSERT_EQ(Train(dir_ / "whole", {"--threads", "2"}).rc, 0);
  const Result killed = Train(dir_ / "run", {"--threads", "2"}, KillAt(7));
  ASSERT_FALSE(killed.exited);
  ASSERT_EQ(killed.rc, -SIGKILL);
  ASSERT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{2, 5})) << "killed after step 7";
  const Result resumed = Train(dir_ / "run", {"--threads", "2"});
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_EQ(resumed.out.find("step 0 "), std::string::npos) << "it did not start over: " << resumed.out;
  const auto events = Events(dir_ / "run");
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const auto& e) {
    return e.kind == dgrr::trace::EventKind::kResumed && e.payload == "from the checkpoint of step 5";
  }));
  ExpectSameResults(dir_ / "whole", dir_ / "run");
}

TEST_F(CharClassifier, SigtermCheckpointsStopsWith143AndTheRerunFinishesBitwise) {
  ASSERT_EQ(Train(dir_ / "whole", {"--ckpt-every", "5"}).rc, 0);
  const Result stopped = Train(dir_ / "run", {"--ckpt-every", "5"}, KillAt(7, "TERM"));
  ASSERT_TRUE(stopped.exited) << "the handler turned SIGTERM into a stop";
  EXPECT_EQ(stopped.rc, 143) << stopped.err;
  // The schedule says 4 and 9; 7 is the stop's own checkpoint.
  EXPECT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{4, 7}));
  const Result rerun = Train(dir_ / "run", {"--ckpt-every", "5"});
  ASSERT_EQ(rerun.rc, 0) << rerun.err;
  EXPECT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{4, 7, 9, 11}));
  ExpectSameResults(dir_ / "whole", dir_ / "run");
}

TEST_F(CharClassifier, RerunningAFinishedRunChangesNoResult) {
  ASSERT_EQ(Train(dir_ / "run").rc, 0);
  const auto records = Results(dir_ / "run");
  const auto before = Snapshot(dir_ / "run");
  const Result again = Train(dir_ / "run");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.out, "") << "no step ran again";
  EXPECT_EQ(FirstDifference(records, Results(dir_ / "run")), SIZE_MAX);
  const auto after = Snapshot(dir_ / "run");
  ASSERT_EQ(before.size(), after.size()) << "no file added or removed";
  for (const auto& [name, bytes] : before) {
    if (name.rfind("ckpt/", 0) == 0) {
      EXPECT_TRUE(after.at(name) == bytes) << name << " rewritten";
    }
  }
}

TEST_F(CharClassifier, AForgottenRestoreMakesTheResumedRunDiffer) {
  // The plant works: without adam.m registered, the resume after step 5
  // starts the first moment from zero, and adam.m at step 6 is the first
  // record that differs from the uninterrupted run.
  const std::vector<std::string> forget = {"--forget-restore", "adam.m"};
  ASSERT_EQ(Train(dir_ / "whole", forget).rc, 0);
  ASSERT_EQ(Train(dir_ / "run", forget, KillAt(7)).rc, -SIGKILL);
  ASSERT_EQ(Train(dir_ / "run", forget).rc, 0);
  const auto a = Results(dir_ / "whole"), b = Results(dir_ / "run");
  const size_t at = FirstDifference(a, b);
  ASSERT_LT(at, a.size());
  const auto* boundary = std::get_if<dgrr::trace::BoundaryRecord>(&b[at].body);
  ASSERT_NE(boundary, nullptr);
  EXPECT_EQ(boundary->step, 6u);
  auto trace = dgrr::trace::ReadWholeTrace((dir_ / "run" / "rank0.trace").string());
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->names.at(boundary->name_id), "adam.m");
}

TEST_F(CharClassifier, AConfigChangeIsRefusedNamingTheCheckpointAndLeavesTheRunAlone) {
  ASSERT_EQ(Train(dir_ / "run", {}, KillAt(7)).rc, -SIGKILL);
  const auto before = Snapshot(dir_ / "run");
  const std::string ckpt = (dir_ / "run" / "ckpt" / "step-00000005.h5").string();
  for (const auto& [change, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--seed", "2"}, "seed 1 -> 2"}, {{"--lr", "0.05"}, "lr 0.03 -> 0.05"}}) {
    const Result r = Train(dir_ / "run", change);
    EXPECT_EQ(r.rc, 2) << "a session error is exit 2 (examples/README.md)";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(ckpt), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_TRUE(Snapshot(dir_ / "run") == before) << "the refused run wrote to the directory";
  }
  EXPECT_EQ(Train(dir_ / "run").rc, 0) << "the recorded settings still resume it";
}

TEST_F(CharClassifier, BadArgumentsAreUsageErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--steps", "3"},
           {"--out", (dir_ / "x").string(), "--threads", "0"},
           {"--out", (dir_ / "x").string(), "--flip-bit", "3:no.such.boundary"},
           {"--out", (dir_ / "x").string(), "--flip-bit", "3"},
           {"--out", (dir_ / "x").string(), "--forget-restore", "nothing"},
           {"--out", (dir_ / "x").string(), "--mode", "loud"},
           {"--out", (dir_ / "x").string(), "--steps"}}) {
    const Result r = RunBinary(CHAR_CLASSIFIER_BIN, args);
    EXPECT_EQ(r.rc, 1) << args.back();
    EXPECT_NE(r.err, "");
  }
  EXPECT_FALSE(fs::exists(dir_ / "x")) << "a usage error writes nothing";
}

// --- The dgrr commands on this program (replay/reexecute.h) ---

TEST_F(CharClassifier, CliReplayOverARangeVerifies) {
  ASSERT_EQ(Train(dir_ / "run").rc, 0);
  const Result r = Dgrr({"replay", (dir_ / "run").string(), "--from", "4", "--to", "9", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = ParseOut(r);
  EXPECT_EQ(j.at("result"), "verified");
  EXPECT_EQ(j.at("from_checkpoint"), 2) << "the newest checkpoint before step 4";
  EXPECT_EQ(j.at("first_step"), 3);
  EXPECT_EQ(j.at("last_step"), 9);
  EXPECT_EQ(j.at("steps_verified"), 7);
  EXPECT_EQ(j.at("boundaries_verified"), 7 * (16 * 4 + 4));
}

TEST_F(CharClassifier, CliReplayOfAForgottenRestoreNamesTheFirstBoundaryThatDependsOnIt) {
  const std::vector<std::string> forget = {"--forget-restore", "adam.m"};
  ASSERT_EQ(Train(dir_ / "run", forget, KillAt(7)).rc, -SIGKILL);
  ASSERT_EQ(Train(dir_ / "run", forget).rc, 0);
  // From the start: steps 0..5 are the uninterrupted computation and match;
  // step 6 was recorded with adam.m restarted from zero.
  Result r = Dgrr({"replay", (dir_ / "run").string(), "--json"});
  ASSERT_EQ(r.rc, 5) << r.err;
  json j = ParseOut(r);
  EXPECT_EQ(j.at("result"), "diverged");
  const std::string message = j.at("message");
  EXPECT_NE(message.find("step 6, rank 0, boundary adam.m"), std::string::npos) << message;
  // From the checkpoint of step 2: adam.m is in no checkpoint either, so the
  // replay's first moment is zero at once and differs at its first step.
  r = Dgrr({"replay", (dir_ / "run").string(), "--from", "3", "--json"});
  ASSERT_EQ(r.rc, 5) << r.err;
  j = ParseOut(r);
  EXPECT_EQ(j.at("from_checkpoint"), 2);
  EXPECT_NE(j.at("message").get<std::string>().find("step 3, rank 0, boundary adam.m"), std::string::npos)
      << j.dump();
}

TEST_F(CharClassifier, CliRollbackThenTheSameCommandIsBitwiseEqual) {
  ASSERT_EQ(Train(dir_ / "whole").rc, 0);
  ASSERT_EQ(Train(dir_ / "run").rc, 0);
  const Result rb = Dgrr({"rollback", (dir_ / "run").string(), "--step", "5", "--quiet"});
  ASSERT_EQ(rb.rc, 0) << rb.err;
  EXPECT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{2, 5}));
  const auto cut = Results(dir_ / "run");
  ASSERT_FALSE(cut.empty());
  EXPECT_EQ(std::get<dgrr::trace::StepRecord>(cut.back().body).step, 5u);
  ASSERT_EQ(Train(dir_ / "run").rc, 0);
  ExpectSameResults(dir_ / "whole", dir_ / "run");
}

// Bisect on cheaply recorded runs (trusted mode: no matmul outputs) with a
// checkpoint every 2 steps; the replays record everything, over the interval.
void ExpectBisectNames(const fs::path& dir, const std::vector<std::string>& plant, const std::string& name) {
  const std::vector<std::string> cheap = {"--mode", "trusted", "--ckpt-every", "2"};
  ASSERT_EQ(Train(dir / "good", cheap).rc, 0);
  std::vector<std::string> bad = cheap;
  bad.insert(bad.end(), plant.begin(), plant.end());
  ASSERT_EQ(Train(dir / "bad", bad).rc, 0);
  const Result r = Dgrr({"bisect", "--good", (dir / "good").string(), "--bad", (dir / "bad").string(), "--json",
                         "--quiet"});
  ASSERT_EQ(r.rc, 4) << r.err;
  const json j = ParseOut(r);
  EXPECT_EQ(j.at("verdict"), "divergence");
  EXPECT_EQ(j.at("evidence").at("first_differing_step"), 5);
  for (const char* side : {"a", "b"}) {
    EXPECT_EQ(j.at("divergence").at(side).at("name"), name) << side;
    EXPECT_EQ(j.at("divergence").at(side).at("step"), 5) << side;
  }
  const json& replay = j.at("replay");
  EXPECT_EQ(replay.at("from_checkpoint"), 3) << "the last common checkpoint before step 5";
  EXPECT_LT(replay.at("steps_replayed").get<int>(), 12) << "only the interval is replayed";
}

TEST_F(CharClassifier, CliBisectNamesAFlippedBit) {
  ExpectBisectNames(dir_, {"--flip-bit", "5:fc1.out"}, "fc1.out");
}

TEST_F(CharClassifier, CliBisectNamesAReductionOrderChange) {
  ExpectBisectNames(dir_, {"--reverse-reduction-from", "5"}, "grads.reduced");
}

TEST_F(CharClassifier, CliPlanPrintsTheRegisteredState) {
  ASSERT_EQ(Train(dir_ / "run").rc, 0);
  const Result r = Dgrr({"plan", (dir_ / "run").string(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // No program IR: what was registered is saved (docs/json/plan.md).
  const json j = ParseOut(r);
  EXPECT_EQ(j.at("schema"), "dgrr.saved-state/1");
  EXPECT_EQ(j.at("checkpoint_step"), 11);
  std::map<std::string, std::string> role;
  for (const json& e : j.at("entries")) role[e.at("name")] = e.at("role");
  const std::map<std::string, std::string> want = {{"params", "parameter"}, {"adam.m", "optimizer"},
                                                   {"adam.v", "optimizer"}, {"adam.t", "counter"},
                                                   {"data.cursor", "cursor"}};
  EXPECT_EQ(role, want);
  const Result text = Dgrr({"plan", (dir_ / "run").string()});
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("adam.m"), std::string::npos) << text.out;
}

#ifdef MPIRUN
// The same program under mpirun, one rank per process (examples/README.md).

Result Mpirun(int processes, const fs::path& dir, std::vector<std::string> extra = {},
              std::map<std::string, std::string> env = {}) {
  std::vector<std::string> args = {"--oversubscribe", "-np", std::to_string(processes), CHAR_CLASSIFIER_BIN,
                                   "--out", dir.string(), "--steps", "12", "--ckpt-every", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  // CI runs as root; Open MPI refuses root unless told both of these.
  env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
  env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  return RunBinary(MPIRUN, args, env);
}

// What a run computed, whichever rank computed it: every per-example
// boundary's fingerprints keyed by (example, name id), and
// rank 0's STEP records and whole-batch boundaries (every rank records those).
struct Computed {
  std::map<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> per_example;
  std::vector<Record> batch;
  bool operator==(const Computed& o) const {
    return per_example == o.per_example && FirstDifference(batch, o.batch) == SIZE_MAX;
  }
};
Computed WhatItComputed(const fs::path& run, int ranks) {
  Computed c;
  for (int r = 0; r < ranks; ++r) {
    const auto records =
        dgrr::test_support::TimelessRecords((run / ("rank" + std::to_string(r) + ".trace")).string());
    EXPECT_FALSE(records.empty()) << run << " rank " << r;
    for (const Record& rec : records) {
      if (const auto* b = std::get_if<dgrr::trace::BoundaryRecord>(&rec.body)) {
        if (b->example_count == 1) {
          c.per_example[{b->first_example, b->name_id}].push_back({b->xor64, b->xxh3});
        } else if (r == 0) {
          Record batch = rec;  // its sequence number counts this rank's records only
          std::get<dgrr::trace::BoundaryRecord>(batch.body).seq = 0;
          c.batch.push_back(batch);
        }
      } else if (r == 0 && std::holds_alternative<dgrr::trace::StepRecord>(rec.body)) {
        c.batch.push_back(rec);
      }
    }
  }
  return c;
}

TEST_F(CharClassifier, UnderMpirunProcessesComputeTheBitsOfOneProcess) {
  ASSERT_EQ(Train(dir_ / "one").rc, 0);
  const Computed one = WhatItComputed(dir_ / "one", 1);
  ASSERT_EQ(one.per_example.size(), 12u * 16u * 4u) << "12 steps, 16 examples, 4 boundaries each";
  for (int processes : {2, 4}) {
    const fs::path run = dir_ / ("np" + std::to_string(processes));
    const Result r = Mpirun(processes, run, {"--threads", "2"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(WhatItComputed(run, processes) == one) << processes << " processes";
    EXPECT_TRUE(SavedState(run, 11) == SavedState(dir_ / "one", 11)) << processes << " processes";
    EXPECT_FALSE(fs::exists(run / ("rank" + std::to_string(processes) + ".trace")));
  }
}

TEST_F(CharClassifier, UnderMpirunAKilledRankProcessAndTheSameCommandResumeBitwise) {
  ASSERT_EQ(Mpirun(2, dir_ / "whole").rc, 0);
  // Rank 1's process dies after step 7; mpirun takes rank 0 down with it.
  const Result killed = Mpirun(2, dir_ / "run", {}, {{"DGRR_TEST_KILL_AT", "step:7:1"}});
  ASSERT_NE(killed.rc, 0);
  ASSERT_EQ(CheckpointSteps(dir_ / "run"), (std::vector<uint64_t>{2, 5}));
  const Result resumed = Mpirun(2, dir_ / "run");
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(WhatItComputed(dir_ / "whole", 2) == WhatItComputed(dir_ / "run", 2));
  EXPECT_TRUE(SavedState(dir_ / "whole", 11) == SavedState(dir_ / "run", 11));
  const Result compared = Dgrr({"compare", (dir_ / "whole").string(), (dir_ / "run").string()});
  EXPECT_EQ(compared.rc, 0) << compared.out << compared.err;
  // Re-execution starts the job again under mpirun (never one process
  // standing in for two): the resumed run's records are reproduced.
  const Result replayed = Dgrr({"replay", (dir_ / "run").string(), "--from", "9"});
  EXPECT_EQ(replayed.rc, 0) << replayed.out << replayed.err;
}

TEST_F(CharClassifier, UnderMpirunReplayAndRollbackStartTheJobAgain) {
  ASSERT_EQ(Mpirun(2, dir_ / "whole").rc, 0);
  const std::string run = (dir_ / "run").string();
  ASSERT_EQ(Mpirun(2, dir_ / "run").rc, 0);
  // From the checkpoint of step 2: steps 3..11 on both rank processes.
  const Result replayed = Dgrr({"replay", run, "--from", "4", "--json"});
  ASSERT_EQ(replayed.rc, 0) << replayed.out << replayed.err;
  const json j = ParseOut(replayed);
  EXPECT_EQ(j.value("result", ""), "verified");
  EXPECT_EQ(j.value("steps_verified", 0), 18);
  // Steps 6..7 re-executed as a 2-process job from the checkpoint of step 5,
  // then the same mpirun command ends where the uninterrupted job ended.
  const Result rolled = Dgrr({"rollback", run, "--step", "7", "--quiet"});
  ASSERT_EQ(rolled.rc, 0) << rolled.out << rolled.err;
  EXPECT_NE(rolled.out.find("re-executed steps 6..7 from the checkpoint of step 5"), std::string::npos) << rolled.out;
  ASSERT_EQ(Mpirun(2, dir_ / "run").rc, 0);
  EXPECT_TRUE(WhatItComputed(dir_ / "whole", 2) == WhatItComputed(dir_ / "run", 2));
  EXPECT_TRUE(SavedState(dir_ / "whole", 11) == SavedState(dir_ / "run", 11));
}
#endif  // MPIRUN

}  // namespace
