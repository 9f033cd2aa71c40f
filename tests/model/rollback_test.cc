// Rollback end to end, in-process: roll a finished run back to a step (a
// checkpointed one, one between checkpoints, one before the first), resume it,
// and get the uninterrupted run's traces and parameters bit for bit; roll back
// twice; finish a rollback that was interrupted at each durable point; leave
// the run untouched when the re-execution does not reproduce it.
#include "model/rollback.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "model/trainer.h"
#include "runtime/session.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"

namespace dgrr::model {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 8;
constexpr int64_t kCkptEvery = 3;  // checkpoints of steps 2 and 5

class RollbackTest : public ::dgrr::test_support::TempDirTest {
 protected:
  std::string Dir(const std::string& name) const { return (dir_ / name).string(); }

  TrainOptions Options(const std::string& name, int ranks) const {
    TrainOptions o;
    o.out_dir = Dir(name);
    o.steps = kSteps;
    o.seed = 5;
    o.ranks = ranks;
    o.ckpt_every = kCkptEvery;
    o.layers = 1;  // small and fast: rollback does not care about depth
    return o;
  }
  static TrainResult Train(const TrainOptions& o) {
    auto t = Trainer::Create(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    TrainResult r;
    if (t.ok()) {
      Status s = (*t)->Run(nullptr, &r);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return r;
  }
  static TrainResult Resume(const std::string& run_dir, int64_t expected_first_step) {
    TrainOptions o;
    o.out_dir = run_dir;
    o.resume = true;
    auto t = Trainer::Create(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    TrainResult r;
    if (!t.ok()) return r;
    Status s = (*t)->Run(nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ((*t)->first_step(), expected_first_step);
    return r;
  }
  StatusOr<RollbackResult> RollBack(const std::string& run_dir, int64_t step,
                                    std::function<Status(RollbackStage, int64_t)> interrupt = {}) {
    RollbackOptions o;
    o.run_dir = run_dir;
    o.step = step;
    o.scratch_parent = Dir("scratch");
    o.interrupt = std::move(interrupt);
    return Rollback(o);
  }
  // A copy of the finished run `from` (traces, config, checkpoints).
  std::string Copy(const std::string& from, const std::string& to) {
    fs::copy(Dir(from), Dir(to), fs::copy_options::recursive);
    return Dir(to);
  }
};

std::vector<trace::Record> Records(const std::string& run_dir, int rank) {
  auto t = trace::ReadWholeTrace(TracePathFor(run_dir, rank));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? t->records : std::vector<trace::Record>{};
}

// BOUNDARY and STEP records with their times zeroed: the computation. EVENTs
// (checkpoint, resume, rollback) legitimately differ between the two runs.
std::vector<trace::RecordBody> Computation(const std::string& run_dir, int rank) {
  std::vector<trace::RecordBody> out;
  for (auto& r : Records(run_dir, rank)) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
      b->host_time_ns = 0;
      out.push_back(r.body);
    } else if (auto* s = std::get_if<trace::StepRecord>(&r.body)) {
      s->host_time_ns = 0;
      out.push_back(r.body);
    }
  }
  return out;
}

std::vector<uint64_t> CheckpointSteps(const std::string& run_dir) {
  auto steps = checkpoint::ListCheckpointSteps(run_dir);
  EXPECT_TRUE(steps.ok());
  return steps.ok() ? *steps : std::vector<uint64_t>{};
}

// The run in `b` computed exactly what the run in `a` did, on every rank.
void ExpectSameComputation(const std::string& a, const std::string& b, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    const auto x = Computation(a, r), y = Computation(b, r);
    ASSERT_EQ(x.size(), y.size()) << b << " rank " << r;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(x[i] == y[i]) << b << " rank " << r << " record " << i;
  }
}

// The kRolledBack EVENTs of a rank's trace, each with the step of the STEP
// end record right before it (-1 when none is).
std::vector<std::pair<int64_t, std::string>> RollbackEvents(const std::string& run_dir, int rank) {
  std::vector<std::pair<int64_t, std::string>> out;
  int64_t previous_step_end = -1;
  bool previous_is_step_end = false;
  for (const auto& r : Records(run_dir, rank)) {
    if (const auto* e = std::get_if<trace::EventRecord>(&r.body);
        e && e->kind == trace::EventKind::kRolledBack) {
      out.emplace_back(previous_is_step_end ? previous_step_end : -1, e->payload);
    }
    const auto* s = std::get_if<trace::StepRecord>(&r.body);
    previous_is_step_end = s && s->kind == trace::StepKind::kEnd;
    if (previous_is_step_end) previous_step_end = static_cast<int64_t>(s->step);
  }
  return out;
}

class RollbackRanksTest : public RollbackTest, public ::testing::WithParamInterface<int> {};

TEST_P(RollbackRanksTest, ResumeAfterRollbackEqualsTheUninterruptedRun) {
  const int ranks = GetParam();
  const TrainResult full = Train(Options("full", ranks));
  // (a) a checkpointed step, (b) between checkpoints, (c) before the first.
  for (int64_t step : {5, 4, 1}) {
    SCOPED_TRACE("rollback to step " + std::to_string(step));
    const std::string run = Copy("full", std::to_string(step) + ".rolled");
    auto rolled = RollBack(run, step);
    ASSERT_TRUE(rolled.ok()) << rolled.status().ToString();
    EXPECT_EQ(rolled->previous_last_step, kSteps - 1);
    EXPECT_EQ(rolled->reexecuted, step % kCkptEvery != kCkptEvery - 1);
    if (step == 5) {
      EXPECT_FALSE(rolled->checkpoint_written) << "the run's own checkpoint of step 5 already fits";
    }
    if (step == 4) {
      EXPECT_EQ(rolled->from_checkpoint, std::optional<uint64_t>(2));
      EXPECT_EQ(rolled->first_reexecuted_step, 3);
      EXPECT_EQ(rolled->steps_verified, static_cast<uint64_t>(2 * ranks));
    }
    if (step == 1) {
      EXPECT_FALSE(rolled->from_checkpoint.has_value());
      EXPECT_EQ(rolled->first_reexecuted_step, 0);
      EXPECT_GT(rolled->boundaries_verified, 0u);
    }
    ASSERT_EQ(rolled->ranks.size(), static_cast<size_t>(ranks));
    // Later checkpoints are gone; the one at S holds the state after S.
    std::vector<uint64_t> expected_ckpts;
    for (uint64_t c = kCkptEvery - 1; c < static_cast<uint64_t>(step); c += kCkptEvery) expected_ckpts.push_back(c);
    expected_ckpts.push_back(static_cast<uint64_t>(step));
    EXPECT_EQ(CheckpointSteps(run), expected_ckpts);
    auto ckpt = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(run, static_cast<uint64_t>(step)));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    for (int r = 0; r < ranks; ++r) {
      // Every trace ends with step S's end and the EVENT, which resume keeps.
      const auto records = Records(run, r);
      ASSERT_EQ(records.size(), rolled->ranks[r].cut_at + 1);
      EXPECT_EQ(ckpt->ranks[r].trace_position, records.size());
      const auto* end = std::get_if<trace::StepRecord>(&records[records.size() - 2].body);
      ASSERT_NE(end, nullptr);
      EXPECT_EQ(end->step, static_cast<uint64_t>(step));
      EXPECT_EQ(end->kind, trace::StepKind::kEnd);
    }
    const TrainResult resumed = Resume(run, step + 1);
    EXPECT_EQ(resumed.params, full.params);
    ExpectSameComputation(Dir("full"), run, ranks);
    for (int r = 0; r < ranks; ++r) {
      const auto events = RollbackEvents(run, r);
      ASSERT_EQ(events.size(), 1u) << "rank " << r;
      EXPECT_EQ(events[0].first, step) << "right after step S's end";
      EXPECT_EQ(events[0].second, "to step " + std::to_string(step) + ", from step 7");
    }
    EXPECT_FALSE(fs::exists(Dir("scratch")) && !fs::is_empty(Dir("scratch")))
        << "the scratch run is removed";
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RollbackRanksTest, ::testing::Values(1, 2));

TEST_F(RollbackTest, RollingBackAgainToAnEarlierStepWorks) {
  const TrainResult full = Train(Options("full", 2));
  const std::string run = Copy("full", "twice");
  ASSERT_TRUE(RollBack(run, 6).ok());
  Resume(run, 7);
  auto again = RollBack(run, 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->previous_last_step, kSteps - 1);
  EXPECT_TRUE(again->reexecuted);
  EXPECT_EQ(again->removed_checkpoints, (std::vector<uint64_t>{2, 5, 6}));
  // Rolling back to where the run already stands changes nothing.
  auto idle = RollBack(run, 1);
  ASSERT_TRUE(idle.ok()) << idle.status().ToString();
  EXPECT_FALSE(idle->reexecuted);
  EXPECT_FALSE(idle->checkpoint_written);
  EXPECT_TRUE(idle->ranks[0].already_cut && idle->ranks[1].already_cut);
  EXPECT_TRUE(idle->removed_checkpoints.empty());
  const TrainResult resumed = Resume(run, 2);
  EXPECT_EQ(resumed.params, full.params);
  ExpectSameComputation(Dir("full"), run, 2);
  for (int r = 0; r < 2; ++r) {
    const auto events = RollbackEvents(run, r);
    ASSERT_EQ(events.size(), 1u) << "the first rollback's EVENT was cut with step 6";
    EXPECT_EQ(events[0].first, 1);
  }
}

// Stops the rollback at each of its durable points in turn (what a kill
// there leaves), then runs it again, which must finish the job.
TEST_F(RollbackTest, ARollbackInterruptedAtAnyStageIsFinishedByRunningItAgain) {
  const TrainResult full = Train(Options("full", 2));
  struct Stop {
    RollbackStage stage;
    int64_t index;
    const char* name;
  };
  const Stop stops[] = {{RollbackStage::kCheckpointWritten, 0, "checkpoint written"},
                        {RollbackStage::kTraceCut, 0, "rank 0 cut, rank 1 not"},
                        {RollbackStage::kTraceCut, 1, "both ranks cut"},
                        {RollbackStage::kCheckpointRemoved, 5, "the later checkpoint removed"}};
  int n = 0;
  for (const Stop& stop : stops) {
    SCOPED_TRACE(stop.name);
    const std::string run = Copy("full", "stop" + std::to_string(n++));
    auto killed = RollBack(run, 4, [&](RollbackStage stage, int64_t index) {
      return stage == stop.stage && index == stop.index ? Status::IOError("killed") : Status::OK();
    });
    ASSERT_FALSE(killed.ok());
    EXPECT_EQ(killed.status().message(), "killed");
    auto finished = RollBack(run, 4);
    ASSERT_TRUE(finished.ok()) << finished.status().ToString();
    EXPECT_FALSE(finished->reexecuted) << "the checkpoint of step 4 was already written";
    EXPECT_FALSE(finished->checkpoint_written);
    EXPECT_EQ(finished->ranks[0].already_cut, stop.stage != RollbackStage::kCheckpointWritten);
    EXPECT_EQ(CheckpointSteps(run), (std::vector<uint64_t>{2, 4}));
    Resume(run, 5);
    ExpectSameComputation(Dir("full"), run, 2);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(RollbackEvents(run, r).size(), 1u) << "rank " << r;
  }

  // Killed between cutting a trace and appending its EVENT: the trace ends at
  // step 4's end with no EVENT.
  const std::string run = Copy("full", "torn");
  ASSERT_FALSE(RollBack(run, 4, [](RollbackStage stage, int64_t) {
                 return stage == RollbackStage::kCheckpointWritten ? Status::IOError("killed") : Status::OK();
               }).ok());
  auto ckpt = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(run, 4));
  ASSERT_TRUE(ckpt.ok());
  ASSERT_TRUE(trace::TruncateTraceAt(TracePathFor(run, 1), ckpt->ranks[1].trace_position - 1).ok());
  auto finished = RollBack(run, 4);
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_FALSE(finished->ranks[1].already_cut);
  const TrainResult resumed = Resume(run, 5);
  EXPECT_EQ(resumed.params, full.params);
  ExpectSameComputation(Dir("full"), run, 2);
}

TEST_F(RollbackTest, AFaultAfterTheStepIsPartOfTheConfigAndReExecutesFine) {
  TrainOptions o = Options("full", 2);
  o.faults.push_back(*ParseFaultSpec("bitflip:step=6,rank=1,at=block0.mlp.gelu.out"));
  const TrainResult full = Train(o);
  const std::string run = Copy("full", "flip");
  auto rolled = RollBack(run, 4);
  ASSERT_TRUE(rolled.ok()) << rolled.status().ToString();
  EXPECT_TRUE(rolled->reexecuted);
  const TrainResult resumed = Resume(run, 5);
  EXPECT_EQ(resumed.params, full.params) << "the bitflip fires again at step 6 on resume";
  ExpectSameComputation(Dir("full"), run, 2);
}

// Bytes of every file of a run directory, by relative path.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    auto bytes = ReadFileToString(e.path().string());
    out[fs::relative(e.path(), dir).string()] = bytes.ok() ? *bytes : "<unreadable>";
  }
  return out;
}

TEST_F(RollbackTest, AReExecutionThatDoesNotReproduceTheTracesLeavesTheRunUntouched) {
  Train(Options("full", 2));
  TrainOptions o = Options("flipped", 2);
  o.faults.push_back(*ParseFaultSpec("bitflip:step=3,rank=1,at=block0.mlp.gelu.out"));
  Train(o);
  // The recorded trace of rank 1 says step 3 computed something the run's
  // config does not reproduce.
  const std::string run = Copy("full", "tampered");
  fs::copy_file(TracePathFor(Dir("flipped"), 1), TracePathFor(run, 1), fs::copy_options::overwrite_existing);
  const auto before = Snapshot(run);
  auto rolled = RollBack(run, 4);
  ASSERT_FALSE(rolled.ok());
  EXPECT_EQ(rolled.status().code(), StatusCode::kIntegrityFailure) << rolled.status().ToString();
  EXPECT_EQ(ExitCodeFor(rolled.status()), kExitReplayIntegrity);
  EXPECT_NE(rolled.status().message().find("step 3, rank 1"), std::string::npos) << rolled.status().ToString();
  EXPECT_TRUE(Snapshot(run) == before) << "nothing in the run directory changed";
}

TEST_F(RollbackTest, BadInputsAreRefused) {
  Train(Options("full", 1));
  const std::string run = Copy("full", "bad");
  const auto before = Snapshot(run);
  auto code = [&](const std::string& dir, int64_t step) { return RollBack(dir, step).status().code(); };
  EXPECT_EQ(code(run, -1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run, kSteps), StatusCode::kInvalidArgument) << "beyond the last recorded step";
  EXPECT_EQ(code(Dir("nothing"), 1), StatusCode::kNotFound) << "not a dgrr run";
  EXPECT_TRUE(Snapshot(run) == before);

  // A corrupt checkpoint at or before the step: refused, or skipped with fallback.
  const std::string ckpt2 = checkpoint::CheckpointPath(run, 2);
  auto bytes = ReadFileToString(ckpt2);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 0x20;
  ASSERT_TRUE(WriteFileAtomically(ckpt2, *bytes).ok());
  auto refused = RollBack(run, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsCorruption()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("step-00000002.h5"), std::string::npos);
  RollbackOptions fallback;
  fallback.run_dir = run;
  fallback.step = 4;
  fallback.fallback = true;
  auto rolled = Rollback(fallback);
  ASSERT_TRUE(rolled.ok()) << rolled.status().ToString();
  EXPECT_FALSE(rolled->from_checkpoint.has_value()) << "re-executed from the start";
  EXPECT_EQ(rolled->skipped_checkpoints.size(), 1u);

  // A run recorded in mode off has no step ends to cut at.
  TrainOptions off = Options("off", 1);
  off.mode = RecordMode::kOff;
  Train(off);
  EXPECT_EQ(code(Dir("off"), 1), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dgrr::model
