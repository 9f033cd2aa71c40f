// Checkpoint, resume, stop and the control file in the Session, with an
// in-memory CheckpointStore: the session's side of the contract, without the
// HDF5 format (tested in tests/checkpoint) or a re-launched process (tests
// in tests/replay and tests/examples).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <thread>
#include <variant>

#include "base/file.h"
#include "runtime/control_file.h"
#include "runtime/control_file_json.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/launch_record.h"
#include "runtime/launch_record_json.h"
#include "runtime/run_directory.h"
#include "runtime/session.h"
#include "tests/support/temp_dir_test.h"
#include "tests/support/timeless_records.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

using trace::Direction;
using trace::Phase;

// Checkpoints kept in memory by path; what a store must do, nothing more.
class MemoryStore final : public CheckpointStore {
 public:
  struct Saved {
    std::string path;
    uint64_t step = 0, config_digest = 0;
    int world_size = 1;
    std::vector<uint64_t> positions;
    std::vector<std::map<std::string, std::vector<uint8_t>>> state;  // by rank
  };
  class Loaded final : public LoadedCheckpoint {
   public:
    explicit Loaded(Saved s) : s_(std::move(s)) {}
    const std::string& path() const override { return s_.path; }
    uint64_t step() const override { return s_.step; }
    uint64_t config_digest() const override { return s_.config_digest; }
    int world_size() const override { return s_.world_size; }
    uint64_t trace_position(int rank) const override { return s_.positions[rank]; }
    Status Restore(int rank, StateRegistry& into) const override {
      for (const StateEntry& e : into.entries()) {
        if (e.restore != RestorePolicy::kCheckpoint) continue;
        auto it = s_.state[rank].find(e.name);
        if (it == s_.state[rank].end()) return Status::FailedPrecondition("no " + e.name);
        std::memcpy(e.data, it->second.data(), it->second.size());
      }
      return Status::OK();
    }

   private:
    Saved s_;
  };

  // Shards wait in `pending` until rank 0 commits them, as on disk.
  StatusOr<CheckpointShard> WriteShard(const CheckpointRequest& r) override {
    std::lock_guard<std::mutex> lock(mu);
    Saved& s = pending[PathOf(r)];
    s.path = PathOf(r);
    s.step = r.step;
    s.config_digest = r.config_digest;
    s.world_size = r.world_size;
    s.positions.resize(r.world_size);
    s.state.resize(r.world_size);
    s.positions[r.rank.rank] = r.rank.trace_position;
    for (const StateEntry& e : r.rank.state->entries()) {
      const auto* p = static_cast<const uint8_t*>(e.data);
      s.state[r.rank.rank][e.name].assign(p, p + e.bytes);
    }
    return CheckpointShard{r.rank.rank, 0, 0, r.rank.trace_position, 0};
  }
  Status Commit(const CheckpointRequest& r, const std::vector<CheckpointShard>& shards) override {
    std::lock_guard<std::mutex> lock(mu);
    if (shards.size() != static_cast<size_t>(r.world_size)) return Status::Internal("shards missing");
    Saved s = pending[PathOf(r)];
    for (const CheckpointShard& shard : shards) {
      if (s.positions[shard.rank] != shard.trace_position) return Status::Internal("wrong shard record");
    }
    pending.erase(PathOf(r));
    saved[s.path] = s;
    newest[r.run_dir] = s.path;
    return Status::OK();
  }
  static std::string PathOf(const CheckpointRequest& r) { return r.run_dir + "/ckpt/" + std::to_string(r.step); }
  StatusOr<std::unique_ptr<LoadedCheckpoint>> Load(const std::string& path) override {
    auto it = saved.find(path);
    if (it == saved.end()) return Status::NotFound(path);
    return std::unique_ptr<LoadedCheckpoint>(new Loaded(it->second));
  }
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewest(const std::string& run_dir, bool, uint64_t max_step) override {
    const Saved* best = nullptr;
    for (const auto& [path, saved_one] : saved) {
      if (path.rfind(run_dir + "/ckpt/", 0) != 0 || saved_one.step > max_step) continue;
      if (best == nullptr || saved_one.step > best->step) best = &saved_one;
    }
    if (best == nullptr) return Status::NotFound("no checkpoint in " + run_dir);
    return Load(best->path);
  }
  Status RemoveTemporaries(const std::string&) override { return Status::OK(); }
  Status WriteTensorDump(const std::string& path, const std::string&, const std::string& boundary,
                         uint64_t step, int rank, const std::vector<CapturedTensor>& tensors) override {
    dumps.push_back({path, boundary, step, rank, tensors});
    return Status::OK();
  }

  struct Dump {
    std::string path, boundary;
    uint64_t step;
    int rank;
    std::vector<CapturedTensor> tensors;
  };
  std::mutex mu;
  std::map<std::string, Saved> pending;
  std::map<std::string, Saved> saved;
  std::map<std::string, std::string> newest;
  std::vector<Dump> dumps;
};

// Sets DGRR_CONTROL for one scope.
class ControlEnv {
 public:
  explicit ControlEnv(const std::string& path) { ::setenv(kControlEnvVar, path.c_str(), 1); }
  ~ControlEnv() { ::unsetenv(kControlEnvVar); }
};

class SessionContinueTest : public test_support::TempDirTest {
 protected:
  std::vector<std::vector<float>> RunTwoRanks(const std::string& dir, int64_t stop_after);
  // The same, each rank's outcome and start step returned, not expected OK.
  struct RankOutcome {
    Status status;
    uint64_t start = 0;
    std::vector<float> params;
  };
  std::vector<RankOutcome> TryTwoRanks(const std::string& dir, int64_t stop_after, bool fallback);
  SessionOptions Options(const std::string& run_dir, uint64_t steps = 6) {
    SessionOptions o;
    o.run_dir = run_dir;
    o.seed = 9;
    o.gpu = false;
    o.open_mode = OpenMode::kContinue;
    o.checkpoint_every = 2;
    o.total_steps = steps;
    o.checkpoints = &store_;
    o.config_json = R"({"lr":0.5})";
    return o;
  }

  // A loop as a program writes it: params and momentum; `forget` leaves the
  // momentum unregistered; `stop_after` requests a stop after that step.
  // Returns the final parameters.
  StatusOr<std::vector<float>> Train(const SessionOptions& o, bool forget = false,
                                     int64_t stop_after = -1, uint64_t* started_at = nullptr) {
    DGRR_ASSIGN_OR_RETURN(auto session, Session::Open(o));
    Session& s = *session;
    std::vector<float> w = {1, 2, 3, 4}, m(4, 0.0f);
    DGRR_RETURN_IF_ERROR(s.state().Register({"w", w.data(), 16, DType::kF32, {4}, StateRole::kParameter}));
    if (!forget) {
      DGRR_RETURN_IF_ERROR(s.state().Register({"m", m.data(), 16, DType::kF32, {4}, StateRole::kOptimizer}));
    }
    DGRR_ASSIGN_OR_RETURN(auto out, s.DeclareBoundary("fc.out", Phase::kForward, Direction::kOutput));
    DGRR_ASSIGN_OR_RETURN(uint64_t start, s.Resume());
    if (started_at) *started_at = start;
    for (uint64_t step = start; step < o.total_steps; ++step) {
      DGRR_RETURN_IF_ERROR(s.BeginStep(step));
      std::vector<float> y(4);
      for (int i = 0; i < 4; ++i) y[i] = w[i] * 0.5f + m[i] + static_cast<float>(step);
      DGRR_ASSIGN_OR_RETURN(TensorRef t, MakeTensorRef(y.data(), DType::kF32, {4}));
      DGRR_RETURN_IF_ERROR(s.Record(out, t, {step, 1}));
      for (int i = 0; i < 4; ++i) {
        m[i] = 0.9f * m[i] + y[i] * 0.01f;
        w[i] -= 0.1f * m[i];
      }
      // A signal arriving during the step.
      if (static_cast<int64_t>(step) == stop_after) s.RequestStop();
      DGRR_RETURN_IF_ERROR(s.EndStep(step, y[0]));
      if (s.ShouldCheckpoint(step)) DGRR_RETURN_IF_ERROR(s.Checkpoint(step));
      if (s.ShouldStop(step)) break;
    }
    DGRR_RETURN_IF_ERROR(s.Close());
    return w;
  }

  // What the BOUNDARY and STEP records computed (EVENT records and times
  // differ between a resumed run and an uninterrupted one by design).
  static std::vector<std::string> Computation(const std::string& trace) {
    std::vector<std::string> out;
    for (const auto& r : test_support::TimelessRecords(trace)) {
      if (const auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
        out.push_back("B " + std::to_string(b->step) + " " + std::to_string(b->first_example) + " " +
                      std::to_string(b->xor64) + " " + std::to_string(b->xxh3));
      } else if (const auto* st = std::get_if<trace::StepRecord>(&r.body)) {
        out.push_back("S " + std::to_string(st->step) + " " + std::to_string(static_cast<int>(st->kind)) + " " +
                      std::to_string(st->loss_bits) + " " + std::to_string(st->params_xxh3));
      }
    }
    return out;
  }

  std::string WriteControl(const ControlFile& c) {
    const std::string path = Path("control.json");
    EXPECT_TRUE(WriteFileAtomically(path, ControlFileJson(c).dump()).ok());
    return path;
  }

  MemoryStore store_;
};

TEST_F(SessionContinueTest, AStoppedRunReRunResumesBitwiseEqualToAnUninterruptedOne) {
  auto whole = Train(Options(Path("whole")));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();

  // Stop after step 2: ShouldCheckpoint is true at a requested stop.
  auto first = Train(Options(Path("cut")), false, 2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  uint64_t start = 0;
  auto rest = Train(Options(Path("cut")), false, -1, &start);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(start, 3u);
  EXPECT_EQ(*rest, *whole);
  EXPECT_EQ(Computation(TracePathFor(Path("cut"), 0)), Computation(TracePathFor(Path("whole"), 0)));
}

TEST_F(SessionContinueTest, AForgottenRestoreChangesTheResumedRun) {
  auto whole = Train(Options(Path("whole")), true);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(Train(Options(Path("cut")), true, 2).ok());
  auto rest = Train(Options(Path("cut")), true);
  ASSERT_TRUE(rest.ok());
  // The momentum restarts from zero on resume: the plant the CLI tests use.
  EXPECT_NE(*rest, *whole);
}

// Two ranks on threads, each with its own communicator of one in-process
// world (as rank processes have theirs), run to the end or stopped after
// `stop_after`. Returns each rank's final parameters.
std::vector<SessionContinueTest::RankOutcome> SessionContinueTest::TryTwoRanks(const std::string& dir,
                                                                               int64_t stop_after, bool fallback) {
  InProcessWorld world(2);
  std::vector<RankOutcome> outcomes(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      InProcessCommunicator comm(world, r);
      SessionOptions o = Options(dir);
      o.rank = r;
      o.world_size = 2;
      o.communicator = &comm;
      o.resume_fallback = fallback;
      auto w = Train(o, false, stop_after, &outcomes[r].start);
      outcomes[r].status = w.status();
      if (w.ok()) outcomes[r].params = *w;
      if (!w.ok()) world.Abort(w.status());
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

std::vector<std::vector<float>> SessionContinueTest::RunTwoRanks(const std::string& dir, int64_t stop_after) {
  std::vector<std::vector<float>> finals;
  for (const RankOutcome& o : TryTwoRanks(dir, stop_after, false)) {
    EXPECT_TRUE(o.status.ok()) << o.status.ToString();
    finals.push_back(o.params);
  }
  return finals;
}

// Every rank calls Checkpoint, each writes its shard, rank 0 commits once all
// are written (both ranks' trace positions), and both resume from it bitwise.
TEST_F(SessionContinueTest, TwoRanksCheckpointByShardsAndResume) {
  const std::string whole_dir = Path("whole"), cut_dir = Path("cut");
  const auto whole = RunTwoRanks(whole_dir, -1);
  RunTwoRanks(cut_dir, 2);
  const std::string ckpt = cut_dir + "/ckpt/2";
  ASSERT_EQ(store_.saved.count(ckpt), 1u);
  EXPECT_EQ(store_.saved[ckpt].world_size, 2);
  EXPECT_TRUE(store_.pending.empty()) << "every written shard was committed";
  ASSERT_EQ(store_.saved[ckpt].positions.size(), 2u);
  EXPECT_GT(store_.saved[ckpt].positions[1], 0u);
  EXPECT_EQ(RunTwoRanks(cut_dir, -1), whole);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Computation(TracePathFor(cut_dir, r)), Computation(TracePathFor(whole_dir, r))) << r;
  }
}

// The ranks resume from the newest checkpoint *every* rank's trace reaches,
// and agree on it before any of them cuts its trace: rank 1's trace cut
// short of the newest checkpoint (as an interrupted rollback or a user's
// truncation leaves it) makes both ranks refuse without resume_fallback,
// naming rank 1 and changing nothing, and both fall back with it.
TEST_F(SessionContinueTest, TwoRanksResumeOnlyFromACheckpointEveryTraceReaches) {
  const std::string whole_dir = Path("whole"), cut_dir = Path("cut");
  const auto whole = RunTwoRanks(whole_dir, -1);
  RunTwoRanks(cut_dir, 4);  // checkpoints of steps 1, 3 and 4 (the stop's)
  ASSERT_EQ(store_.saved.count(cut_dir + "/ckpt/4"), 1u);
  const uint64_t at3 = store_.saved[cut_dir + "/ckpt/3"].positions[1];
  ASSERT_GT(at3, 0u);
  ASSERT_TRUE(trace::TruncateTraceAt(TracePathFor(cut_dir, 1), at3).ok());
  const std::string rank0_before = ReadBytes(TracePathFor(cut_dir, 0));
  const std::string rank1_before = ReadBytes(TracePathFor(cut_dir, 1));

  for (const RankOutcome& o : TryTwoRanks(cut_dir, -1, /*fallback=*/false)) {
    EXPECT_EQ(o.status.code(), StatusCode::kCorruption) << o.status.ToString();
    EXPECT_NE(o.status.message().find("rank 1"), std::string::npos) << o.status.ToString();
    EXPECT_NE(o.status.message().find("--fallback"), std::string::npos) << o.status.ToString();
  }
  EXPECT_EQ(ReadBytes(TracePathFor(cut_dir, 0)), rank0_before) << "rank 0 cut its trace before the ranks agreed";
  EXPECT_EQ(ReadBytes(TracePathFor(cut_dir, 1)), rank1_before);

  const auto resumed = TryTwoRanks(cut_dir, -1, /*fallback=*/true);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
    EXPECT_EQ(resumed[r].start, 4u) << "rank " << r << " did not resume after step 3's checkpoint";
    EXPECT_EQ(resumed[r].params, whole[r]) << r;
    EXPECT_EQ(Computation(TracePathFor(cut_dir, r)), Computation(TracePathFor(whole_dir, r))) << r;
  }
}

// A communicator that is not this rank's is refused in one line.
TEST_F(SessionContinueTest, ACommunicatorOfAnotherRankIsRefused) {
  InProcessGroup world(2);
  SessionOptions o = Options(Path("run"));
  o.rank = 1;
  o.world_size = 2;
  o.communicator = world.ranks[0].get();
  auto s = Session::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("rank 1 of 2 but its communicator is rank 0 of 2"), std::string::npos)
      << s.status().ToString();
}

TEST_F(SessionContinueTest, ADifferentConfigurationIsRefusedAndChangesNothing) {
  ASSERT_TRUE(Train(Options(Path("run")), false, 2).ok());
  const std::string trace_before = ReadBytes(TracePathFor(Path("run"), 0));
  const std::string config_before = ReadBytes(ConfigPathFor(Path("run")));
  SessionOptions o = Options(Path("run"));
  o.config_json = R"({"lr":0.25})";
  auto r = Train(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("another configuration"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(ReadBytes(TracePathFor(Path("run"), 0)), trace_before);
  EXPECT_EQ(ReadBytes(ConfigPathFor(Path("run"))), config_before);
}

TEST_F(SessionContinueTest, WithoutACheckpointAnotherRunInTheDirectoryIsNotReplaced) {
  SessionOptions o = Options(Path("run"));
  o.checkpoint_every = 0;
  ASSERT_TRUE(Train(o).ok());
  const std::string trace_before = ReadBytes(TracePathFor(Path("run"), 0));
  // The same run again starts over (nothing to resume from)...
  uint64_t start = 99;
  ASSERT_TRUE(Train(o, false, -1, &start).ok());
  EXPECT_EQ(start, 0u);
  // ...another configuration, or another seed, is refused and replaces nothing.
  const std::string trace_again = ReadBytes(TracePathFor(Path("run"), 0));
  SessionOptions other = o;
  other.config_json = R"({"lr":0.25})";
  auto r = Train(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lr 0.5 -> 0.25"), std::string::npos) << r.status().ToString();
  other = o;
  other.seed = 10;
  r = Train(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("seed 9"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(ReadBytes(TracePathFor(Path("run"), 0)), trace_again);
  EXPECT_EQ(trace_before.size(), trace_again.size());
}

TEST_F(SessionContinueTest, APendingRollbackIsRefused) {
  ASSERT_TRUE(Train(Options(Path("run")), false, 2).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("run") + "/" + kPendingRollbackFile, "{\"step\":1}\n").ok());
  auto r = Train(Options(Path("run")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unfinished rollback"), std::string::npos);
}

TEST_F(SessionContinueTest, WithoutAStoreCheckpointIsAClearError) {
  SessionOptions o = Options(Path("run"));
  o.checkpoints = nullptr;
  auto r = Train(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("dgrr::Open"), std::string::npos);
}

TEST_F(SessionContinueTest, WritesALaunchRecordOfThisProcess) {
  ASSERT_TRUE(Train(Options(Path("run"))).ok());
  auto launch = ReadLaunchRecord(Path("run"));
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  ASSERT_FALSE(launch->argv.empty());
  auto digest = FileContentDigest(launch->executable);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, launch->executable_xxh3);
  for (const auto& [name, value] : launch->environment) EXPECT_TRUE(LaunchVariableMatters(name)) << name;
}

TEST(LaunchRecordVariables, WhatAnMpiLauncherSetForOneJobIsToldFromAUsersTuning) {
  for (const char* job : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess",
                          "OMPI_MCA_ess_base_jobid", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
                          "OMPI_MCA_rmaps_base_oversubscribe"}) {
    EXPECT_TRUE(IsMpiJobVariable(job)) << job;
  }
  for (const char* kept : {"OMPI_MCA_btl", "OMPI_MCA_coll_tuned_use_dynamic_rules", "OMP_NUM_THREADS", "PATH"}) {
    EXPECT_FALSE(IsMpiJobVariable(kept)) << kept;
  }
}

TEST_F(SessionContinueTest, UnderControlItRestoresVerifiesStopsAndReports) {
  ASSERT_TRUE(Train(Options(Path("recorded"))).ok());
  ControlFile c;
  c.run_dir = Path("replay");
  c.restore_checkpoint = Path("recorded") + "/ckpt/1";
  c.verify_run_dir = Path("recorded");
  c.stop_after_step = 3;
  c.checkpoint_steps = {3};
  ControlEnv env(WriteControl(c));
  uint64_t start = 0;
  auto trained = Train(Options(Path("program-dir")), false, -1, &start);
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  EXPECT_EQ(start, 2u);
  EXPECT_FALSE(PathExists(Path("program-dir")));  // the control's run_dir replaces it
  auto result = ReadControlResult(ControlResultPath(Path("replay"), 0));
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->outcome, ControlOutcome::kCompleted) << result->message;
  EXPECT_EQ(result->restored_step, std::optional<uint64_t>(1));
  EXPECT_EQ(result->last_step, std::optional<uint64_t>(3));
  EXPECT_EQ(result->boundaries_verified, 2u);
  EXPECT_EQ(result->steps_verified, 2u);
  EXPECT_EQ(result->checkpoints_written, std::vector<uint64_t>{3});
}

TEST_F(SessionContinueTest, UnderControlAMismatchIsReportedWithBothFingerprints) {
  // Recorded by a program that forgets to register its momentum, stopped
  // after step 2 and resumed: step 3 ran with the momentum back at zero. A
  // replay from the start carries the momentum through and differs at the
  // first boundary of step 3.
  ASSERT_TRUE(Train(Options(Path("recorded")), true, 2).ok());
  ASSERT_TRUE(Train(Options(Path("recorded")), true).ok());
  ControlFile c;
  c.run_dir = Path("replay");
  c.verify_run_dir = Path("recorded");
  ControlEnv env(WriteControl(c));
  auto r = Train(Options(Path("program-dir")), true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIntegrityFailure) << r.status().ToString();
  auto result = ReadControlResult(ControlResultPath(Path("replay"), 0));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->outcome, ControlOutcome::kMismatch);
  ASSERT_TRUE(result->mismatch);
  EXPECT_EQ(result->mismatch->step, 3u);
  EXPECT_EQ(result->mismatch->boundary, "fc.out");
  EXPECT_NE(result->mismatch->recorded_xxh3, result->mismatch->replayed_xxh3);
  EXPECT_EQ(result->steps_verified, 3u);  // steps 0, 1 and 2 agreed
}

TEST_F(SessionContinueTest, UnderControlAMissingCheckpointIsNotFound) {
  ControlFile c;
  c.run_dir = Path("replay");
  c.restore_checkpoint = Path("nowhere/ckpt/step-00000001.h5");
  ControlEnv env(WriteControl(c));
  auto r = Train(Options(Path("program-dir")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  auto result = ReadControlResult(ControlResultPath(Path("replay"), 0));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->outcome, ControlOutcome::kFailed);
  EXPECT_NE(result->message.find("nowhere"), std::string::npos);
}

TEST_F(SessionContinueTest, UnderControlDumpsTheAskedBoundary) {
  ControlFile c;
  c.run_dir = Path("replay");
  c.dumps.push_back({"fc.out", 2, 0, Path("dump-{rank}.h5")});
  ControlEnv env(WriteControl(c));
  ASSERT_TRUE(Train(Options(Path("program-dir"))).ok());
  ASSERT_EQ(store_.dumps.size(), 1u);
  EXPECT_EQ(store_.dumps[0].path, Path("dump-0.h5"));
  EXPECT_EQ(store_.dumps[0].step, 2u);
  ASSERT_EQ(store_.dumps[0].tensors.size(), 1u);
  EXPECT_EQ(store_.dumps[0].tensors[0].bytes.size(), 16u);
}

TEST_F(SessionContinueTest, AControlFileWithAnUnknownKeyIsRefused) {
  const std::string path = Path("control.json");
  ASSERT_TRUE(WriteFileAtomically(path, R"({"schema":"dgrr.control/1","run_dir":"x","rewind":true})").ok());
  auto c = ReadControlFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCorruption);
  EXPECT_NE(c.status().message().find("rewind"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomically(path, R"({"schema":"dgrr.control/2","run_dir":"x"})").ok());
  EXPECT_FALSE(ReadControlFile(path).ok());
  ControlEnv env(path);
  auto s = Session::Open(Options(Path("run")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption);
}

TEST_F(SessionContinueTest, ControlAndLaunchDocumentsRoundTrip) {
  ControlFile c;
  c.run_dir = "/r";
  c.mode = RecordMode::kTrusted;
  c.restore_checkpoint = "/c.h5";
  c.verify_run_dir = "/v";
  c.stop_after_step = 7;
  c.checkpoint_steps = {3, 7};
  c.periodic_checkpoints = true;
  c.dumps.push_back({"a.b", 4, std::nullopt, "/d/{rank}.h5"});
  const std::string path = Path("c.json");
  ASSERT_TRUE(WriteFileAtomically(path, ControlFileJson(c).dump()).ok());
  auto back = ReadControlFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ControlFileJson(*back), ControlFileJson(c));

  LaunchRecord l;
  l.argv = {"prog", "--out", "x"};
  l.working_directory = "/w";
  l.executable = "/w/prog";
  l.executable_xxh3 = 0x0123456789abcdefull;
  l.environment = {{"OMP_NUM_THREADS", "4"}};
  ASSERT_TRUE(WriteLaunchRecord(dir_.string(), l).ok());
  auto lb = ReadLaunchRecord(dir_.string());
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_EQ(LaunchRecordJson(*lb), LaunchRecordJson(l));
  // Without a launcher: version 1, as before version 2 existed.
  EXPECT_EQ(LaunchRecordJson(l)["schema"], "dgrr.launch/1");

  // A torchrun worker's record (version 2) round-trips its launcher.
  l.launcher = {kTorchrunLauncher, 2, 1};
  EXPECT_EQ(LaunchRecordJson(l)["schema"], "dgrr.launch/2");
  ASSERT_TRUE(WriteLaunchRecord(dir_.string(), l).ok());
  lb = ReadLaunchRecord(dir_.string());
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_EQ(lb->launcher, l.launcher);
  EXPECT_EQ(LaunchRecordJson(*lb), LaunchRecordJson(l));
}

// torchrun's worker variables make the launcher; without them there is none.
TEST(LaunchRecordTorchrun, TheLauncherComesFromTorchrunsWorkerVariables) {
  ::unsetenv("TORCHELASTIC_RUN_ID");
  auto none = TorchrunLauncherFromEnvironment();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->name.empty());
  ::setenv("TORCHELASTIC_RUN_ID", "none", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  auto two_nodes = TorchrunLauncherFromEnvironment();
  ASSERT_TRUE(two_nodes.ok());
  EXPECT_EQ(*two_nodes, (LaunchRecord::Launcher{kTorchrunLauncher, 2, 2}));
  ::setenv("WORLD_SIZE", "x", 1);
  auto bad = TorchrunLauncherFromEnvironment();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("WORLD_SIZE is 'x'"), std::string::npos) << bad.status().message();
  for (const char* v : {"TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "WORLD_SIZE"}) ::unsetenv(v);
}

}  // namespace
}  // namespace dgrr
