#include "runtime/session.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "base/file.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/op_guard.h"
#include "runtime/session_seams.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

using trace::Direction;
using trace::Phase;

class SessionTest : public ::dgrr::test_support::TempDirTest {
 protected:
  SessionOptions Options(int rank = 0, int world = 1) {
    SessionOptions o;
    o.run_dir = dir_.string();
    o.rank = rank;
    o.world_size = world;
    o.seed = 42;
    o.gpu = false;
    o.config_json = R"({"model":"unit","lr":0.1})";
    return o;
  }
};

// A tiny "training step": two guarded boundaries and a parameter update.
Status RunSteps(Session& s, std::vector<float>& params, int steps) {
  DGRR_RETURN_IF_ERROR(s.state().Register({"params", params.data(), params.size() * 4, DType::kF32,
                                           {static_cast<int64_t>(params.size())},
                                           StateRole::kParameter}));
  DGRR_ASSIGN_OR_RETURN(auto act, s.DeclareBoundary("layer0.out", Phase::kForward,
                                                    Direction::kOutput, OpKind::kMatmul));
  DGRR_ASSIGN_OR_RETURN(auto grad, s.DeclareBoundary("grads.allreduce", Phase::kCollective,
                                                     Direction::kOutput, OpKind::kCollective));
  for (int step = 0; step < steps; ++step) {
    DGRR_RETURN_IF_ERROR(s.BeginStep(step));
    std::vector<float> y(params.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = params[i] * 2.0f + static_cast<float>(step);
    DGRR_ASSIGN_OR_RETURN(TensorRef yt, MakeTensorRef(y.data(), DType::kF32,
                                                      {static_cast<int64_t>(y.size())}));
    DGRR_RETURN_IF_ERROR(s.Record(act, yt, {0, 1}));
    DGRR_RETURN_IF_ERROR(s.Record(grad, yt, {0, 1}));
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.01f * y[i];
    DGRR_RETURN_IF_ERROR(s.EndStep(step, y[0]));
  }
  return s.Close();
}

TEST_F(SessionTest, WritesTraceEnvAndConfig) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<float> params(16, 0.5f);
  ASSERT_TRUE(RunSteps(**s, params, 3).ok());

  EXPECT_TRUE(PathExists(ConfigPathFor(dir_.string())));
  auto env = ReadFileToString(EnvPathFor(dir_.string(), 0));
  ASSERT_TRUE(env.ok());
  EXPECT_NE(env->find("dgrr.env/1"), std::string::npos);

  auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header.seed, 42u);
  EXPECT_EQ(t->header.env_digest, (*s)->env_digest());
  EXPECT_EQ(t->header.config_digest, (*s)->config_digest());
  int boundaries = 0, step_ends = 0;
  for (const auto& r : t->records) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
      ++boundaries;
      EXPECT_EQ(b->byte_count, 64u);
      EXPECT_EQ(b->ndim, 1);
      EXPECT_EQ(b->dims[0], 16u);
    }
    if (auto* st = std::get_if<trace::StepRecord>(&r.body); st && st->kind == trace::StepKind::kEnd) {
      ++step_ends;
      EXPECT_NE(st->params_xxh3, 0u);
    }
  }
  EXPECT_EQ(boundaries, 6);
  EXPECT_EQ(step_ends, 3);
}

// Issue 26, item 4: EndStep hands the step's records to the kernel, so the
// file holds every ended step while the session is still open (a process
// killed now would keep them); before, they waited in the writer's buffer.
TEST_F(SessionTest, EndStepLeavesTheStepOnDiskBeforeClose) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<float> params(16, 0.5f);
  ASSERT_TRUE((*s)->state().Register({"params", params.data(), params.size() * 4, DType::kF32,
                                      {static_cast<int64_t>(params.size())}, StateRole::kParameter})
                  .ok());
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE((*s)->BeginStep(step).ok());
    auto t = MakeTensorRef(params.data(), DType::kF32, {static_cast<int64_t>(params.size())});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*s)->Record("layer0.out", trace::Phase::kForward, trace::Direction::kOutput, *t, {0, 1}).ok());
    ASSERT_TRUE((*s)->EndStep(step, 1.0f).ok());
    trace::VerifySummary summary;
    ASSERT_TRUE(trace::VerifyTrace(TracePathFor(dir_.string(), 0), &summary).ok());
    EXPECT_TRUE(summary.warning.empty()) << summary.warning;
    EXPECT_EQ(summary.records, (*s)->trace_position()) << "step " << step;
    EXPECT_TRUE(summary.has_step);
    EXPECT_EQ(summary.last_step, step);
  }
  ASSERT_TRUE((*s)->Close().ok());
}

TEST_F(SessionTest, StepRecordCarriesFingerprintOfParametersAfterUpdate) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok());
  std::vector<float> params(16, 0.5f);
  ASSERT_TRUE(RunSteps(**s, params, 2).ok());
  const Fingerprint expected = FingerprintBytes(params.data(), params.size() * 4);
  auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(t.ok());
  const trace::StepRecord* last = nullptr;
  for (const auto& r : t->records) {
    if (auto* st = std::get_if<trace::StepRecord>(&r.body)) last = st;
  }
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->params_xor64, expected.xor64);
  EXPECT_EQ(last->params_xxh3, expected.xxh3);
}

// What hooks that record whatever runs through a model ask before they do
// (dgrr.torch: an evaluation between steps is no step's record).
TEST_F(SessionTest, InStepFromBeginStepToItsEndStep) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok());
  Session& session = **s;
  EXPECT_FALSE(session.in_step());
  ASSERT_TRUE(session.BeginStep(0).ok());
  EXPECT_TRUE(session.in_step());
  EXPECT_FALSE(session.EndStep(1, 0.0f).ok());  // not this step's end: still in it
  EXPECT_TRUE(session.in_step());
  ASSERT_TRUE(session.EndStep(0, 0.0f).ok());
  EXPECT_FALSE(session.in_step());
  ASSERT_TRUE(session.Close().ok());
}

TEST_F(SessionTest, ModesChooseWhatIsRecorded) {
  auto count = [&](RecordMode mode) {
    std::filesystem::remove_all(dir_);
    SessionOptions o = Options();
    o.mode = mode;
    auto s = Session::Open(o);
    EXPECT_TRUE(s.ok());
    std::vector<float> params(8, 1.0f);
    EXPECT_TRUE(RunSteps(**s, params, 2).ok());
    auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
    EXPECT_TRUE(t.ok());
    int boundaries = 0, steps = 0;
    for (const auto& r : t->records) {
      boundaries += std::holds_alternative<trace::BoundaryRecord>(r.body);
      steps += std::holds_alternative<trace::StepRecord>(r.body);
    }
    return std::pair{boundaries, steps};
  };
  EXPECT_EQ(count(RecordMode::kFull), (std::pair{4, 4}));
  EXPECT_EQ(count(RecordMode::kTrusted), (std::pair{2, 4})) << "the matmul output is trusted";
  EXPECT_EQ(count(RecordMode::kSdc), (std::pair{2, 4})) << "only the collective";
  EXPECT_EQ(count(RecordMode::kOff), (std::pair{0, 0}));
}

TEST_F(SessionTest, TracesAreIdenticalAcrossRunsApartFromRunIdAndTimes) {
  std::vector<std::vector<trace::Record>> runs;
  for (int run = 0; run < 2; ++run) {
    std::filesystem::remove_all(dir_);
    auto s = Session::Open(Options());
    ASSERT_TRUE(s.ok());
    std::vector<float> params(16, 0.25f);
    ASSERT_TRUE(RunSteps(**s, params, 3).ok());
    auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
    ASSERT_TRUE(t.ok());
    for (auto& r : t->records) {
      if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) b->host_time_ns = 0;
      if (auto* st = std::get_if<trace::StepRecord>(&r.body)) st->host_time_ns = 0;
    }
    runs.push_back(t->records);
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(runs[0][i].body == runs[1][i].body) << i;
}

TEST_F(SessionTest, RefusesExistingRunUnlessOverwriteOrResume) {
  {
    auto s = Session::Open(Options());
    ASSERT_TRUE(s.ok());
    std::vector<float> params(4, 1.0f);
    ASSERT_TRUE(RunSteps(**s, params, 1).ok());
  }
  auto again = Session::Open(Options());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(ExitCodeFor(again.status()), kExitUsage);
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos);

  SessionOptions o = Options();
  o.open_mode = OpenMode::kResume;
  auto resumed = Session::Open(o);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  const uint64_t before = (*resumed)->trace_position();
  EXPECT_GT(before, 0u);
  ASSERT_TRUE((*resumed)->RecordEvent(trace::EventKind::kResumed, "from step 0").ok());
  ASSERT_TRUE((*resumed)->Close().ok());
  auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->records.size(), before + 1);

  o.open_mode = OpenMode::kOverwrite;
  auto fresh = Session::Open(o);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->trace_position(), 0u);
}

TEST_F(SessionTest, BadInputIsAClearError) {
  SessionOptions o = Options();
  o.run_dir = "";
  EXPECT_TRUE(Session::Open(o).status().IsInvalidArgument());
  o = Options(3, 2);
  EXPECT_TRUE(Session::Open(o).status().IsInvalidArgument());
  o = Options();
  o.config_json = "{not json";
  EXPECT_TRUE(Session::Open(o).status().IsInvalidArgument());

  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok());
  auto too_long = (*s)->DeclareBoundary(std::string(trace::kMaxNameLength + 1, 'x'),
                                        Phase::kForward, Direction::kOutput);
  EXPECT_TRUE(too_long.status().IsInvalidArgument());
  EXPECT_NE(too_long.status().message().find("exceeds"), std::string::npos);
  auto h = (*s)->DeclareBoundary("x", Phase::kForward, Direction::kOutput);
  ASSERT_TRUE(h.ok());
  TensorRef null_tensor;
  null_tensor.bytes = 16;
  null_tensor.dtype = DType::kUnknown;
  null_tensor.ndim = 1;
  null_tensor.dims[0] = 16;
  Status st = (*s)->Record(*h, null_tensor, {0, 1});
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("null"), std::string::npos) << st.message();
}

TEST_F(SessionTest, UnwritableDirectoryIsAnIOError) {
  // A run directory below a regular file cannot be created, even by root
  // (who ignores permission bits, so a read-only directory would not do).
  ASSERT_TRUE(CreateDirectories(dir_.string()).ok());
  ASSERT_TRUE(WriteFileAtomically(dir_.string() + "/plainfile", "x").ok());
  SessionOptions o = Options();
  o.run_dir = dir_.string() + "/plainfile/run";
  auto s = Session::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ExitCodeFor(s.status()), kExitIO) << s.status().ToString();
  EXPECT_NE(s.status().message().find("plainfile/run"), std::string::npos);
}

TEST_F(SessionTest, OpGuardRecordsInputsThenOutputs) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok());
  auto in = (*s)->DeclareBoundary("fc.in", Phase::kForward, Direction::kInput);
  auto out = (*s)->DeclareBoundary("fc.out", Phase::kForward, Direction::kOutput);
  ASSERT_TRUE(in.ok() && out.ok());
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  ASSERT_TRUE((*s)->BeginStep(0).ok());
  {
    OpGuard g(**s, {5, 2});
    g.Input(*in, *MakeTensorRef(x, DType::kF32, {4}));
    g.Output(*out, *MakeTensorRef(y, DType::kF32, {4}));
    for (int i = 0; i < 4; ++i) y[i] = 2 * x[i];  // the operator runs inside the scope
  }
  ASSERT_TRUE((*s)->EndStep(0, 0.0f).ok());
  ASSERT_TRUE((*s)->Close().ok());
  auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(t.ok());
  std::vector<trace::BoundaryRecord> b;
  for (const auto& r : t->records) {
    if (auto* p = std::get_if<trace::BoundaryRecord>(&r.body)) b.push_back(*p);
  }
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(t->names[b[0].name_id], "fc.in");
  EXPECT_EQ(t->names[b[1].name_id], "fc.out");
  EXPECT_EQ(b[1].xxh3, FingerprintBytes(y, sizeof y).xxh3) << "output fingerprinted after the op ran";
  EXPECT_EQ(b[1].first_example, 5u);
  EXPECT_EQ(b[1].example_count, 2u);
}

// kRanks sessions in sdc mode on threads, each on its own communicator of
// one in-process world, each halving 32 parameters a step for 4 steps; rank
// `bad` flips a sign at step `bad_step`. A rank that cannot open aborts the
// world, releasing the others.
struct SdcRun {
  std::vector<Status> results;
  std::vector<std::vector<SdcMismatch>> mismatches;
};
SdcRun RunSdcRanks(int ranks, int bad, uint64_t bad_step,
                   const std::function<SessionOptions(int, int)>& options) {
  SdcRun run{std::vector<Status>(ranks), std::vector<std::vector<SdcMismatch>>(ranks)};
  InProcessGroup comms(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      SessionOptions o = options(r, ranks);
      o.mode = RecordMode::kSdc;
      o.communicator = comms.ranks[static_cast<size_t>(r)].get();
      auto s = Session::Open(o);
      if (!s.ok()) {
        run.results[r] = s.status();
        comms.world->Abort(run.results[r]);
        return;
      }
      std::vector<float> params(32, 1.0f);
      (void)(*s)->state().Register({"params", params.data(), params.size() * 4, DType::kF32,
                                    {32}, StateRole::kParameter});
      for (uint64_t step = 0; step < 4; ++step) {
        (void)(*s)->BeginStep(step);
        for (auto& p : params) p *= 0.5f;
        if (r == bad && step == bad_step) params[7] = -params[7];  // a silent corruption
        Status st = (*s)->EndStep(step, 1.0f);
        if (!st.ok()) {
          run.results[r] = st;
          break;
        }
      }
      run.mismatches[r] = (*s)->sdc_mismatches();
      (void)(*s)->Close();
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

void ExpectEveryRankNames(const SdcRun& run, int bad, uint64_t bad_step) {
  for (size_t r = 0; r < run.results.size(); ++r) {
    ASSERT_EQ(run.results[r].code(), StatusCode::kDivergence) << r << " " << run.results[r].ToString();
    EXPECT_NE(run.results[r].message().find("after step " + std::to_string(bad_step)), std::string::npos);
    EXPECT_NE(run.results[r].message().find("rank " + std::to_string(bad)), std::string::npos)
        << run.results[r].ToString();
    ASSERT_EQ(run.mismatches[r].size(), 1u);
    EXPECT_EQ(run.mismatches[r][0].rank, bad);
    EXPECT_EQ(run.mismatches[r][0].step, bad_step);
    EXPECT_NE(run.mismatches[r][0].rank_fingerprint, run.mismatches[r][0].reference);
  }
}

TEST_F(SessionTest, SdcCheckNamesTheFaultyRank) {
  const SdcRun run = RunSdcRanks(3, /*bad=*/2, /*bad_step=*/2, [&](int r, int n) { return Options(r, n); });
  ExpectEveryRankNames(run, 2, 2);
  auto t = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(t.ok());
  bool found_event = false;
  for (const auto& rec : t->records) {
    if (auto* e = std::get_if<trace::EventRecord>(&rec.body)) {
      found_event |= e->kind == trace::EventKind::kSdcMismatch && e->step == 2 &&
                     e->payload.find("rank=2") != std::string::npos;
    }
  }
  EXPECT_TRUE(found_event);
}

// Another rank, another step: the check names whichever rank differs.
TEST_F(SessionTest, SdcCheckNamesAnotherFaultyRankAtAnotherStep) {
  const SdcRun run = RunSdcRanks(3, /*bad=*/1, /*bad_step=*/1, [&](int r, int n) { return Options(r, n); });
  ExpectEveryRankNames(run, 1, 1);
}

TEST(RecordingMode, ParsesNamesAndFilters) {
  EXPECT_EQ(ParseRecordMode("trusted"), RecordMode::kTrusted);
  EXPECT_FALSE(ParseRecordMode("most").has_value());
  EXPECT_FALSE(ShouldRecordBoundary(RecordMode::kTrusted, trace::Phase::kForward, OpKind::kMatmul));
  EXPECT_TRUE(ShouldRecordBoundary(RecordMode::kTrusted, trace::Phase::kForward, OpKind::kNorm));
  EXPECT_TRUE(ShouldRecordBoundary(RecordMode::kSdc, trace::Phase::kCollective, OpKind::kCollective));
  EXPECT_FALSE(ShouldRecordBoundary(RecordMode::kSdc, trace::Phase::kOptimizer, OpKind::kOptimizer));
}

}  // namespace
}  // namespace dgrr

namespace dgrr {
namespace {

TEST_F(SessionTest, RecordFingerprintEqualsRecord) {
  auto s = Session::Open(Options());
  ASSERT_TRUE(s.ok());
  auto h = (*s)->DeclareBoundary("w.out", trace::Phase::kForward, trace::Direction::kOutput);
  ASSERT_TRUE(h.ok());
  float y[6] = {1, 2, 3, 4, 5, 6};
  auto t = MakeTensorRef(y, DType::kF32, {2, 3});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*s)->Record(*h, *t, {3, 1}).ok());
  TensorRef meta = *t;
  meta.data = nullptr;  // the worker already fingerprinted it
  ASSERT_TRUE((*s)->RecordFingerprint(*h, meta, FingerprintBytes(y, sizeof y), {3, 1}).ok());
  ASSERT_TRUE((*s)->Close().ok());
  auto tr = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(tr.ok());
  std::vector<trace::BoundaryRecord> b;
  for (const auto& r : tr->records) {
    if (auto* p = std::get_if<trace::BoundaryRecord>(&r.body)) b.push_back(*p);
  }
  ASSERT_EQ(b.size(), 2u);
  b[0].host_time_ns = b[1].host_time_ns = 0;
  b[1].seq = b[0].seq;
  EXPECT_TRUE(b[0] == b[1]);
}

// The seams (runtime/session_seams.h): what the trainer, the re-execution
// machinery and tests substitute inside a session, outside SessionOptions.

// Refuses the boundary named `refuse`; counts what it was shown.
class CountingCheck : public RecordCheck {
 public:
  explicit CountingCheck(std::string refuse) : refuse_(std::move(refuse)) {}
  Status CheckBoundary(const trace::BoundaryRecord&, std::string_view name) override {
    names.emplace_back(name);
    if (name == refuse_) return Status::IntegrityFailure("refused " + std::string(name));
    return Status::OK();
  }
  Status CheckStep(const trace::StepRecord& record) override {
    step_ends.push_back(record.step);
    return Status::OK();
  }
  std::vector<std::string> names;
  std::vector<uint64_t> step_ends;

 private:
  std::string refuse_;
};

TEST_F(SessionTest, SeamCheckSeesEachRecordAndItsRefusalStopsTheAppend) {
  CountingCheck check("b");
  SessionSeams seams;
  seams.check = &check;
  auto s = Session::Open(Options(), seams);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto a = (*s)->DeclareBoundary("a", trace::Phase::kForward, trace::Direction::kOutput);
  auto b = (*s)->DeclareBoundary("b", trace::Phase::kForward, trace::Direction::kOutput);
  ASSERT_TRUE(a.ok() && b.ok());
  float y[4] = {1, 2, 3, 4};
  auto t = MakeTensorRef(y, DType::kF32, {4});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*s)->BeginStep(0).ok());
  ASSERT_TRUE((*s)->Record(*a, *t, {0, 1}).ok());
  ASSERT_TRUE((*s)->EndStep(0, 1.0f).ok());
  ASSERT_TRUE((*s)->BeginStep(1).ok());
  const Status refused = (*s)->Record(*b, *t, {0, 1});
  EXPECT_EQ(refused.code(), StatusCode::kIntegrityFailure) << refused.ToString();
  ASSERT_TRUE((*s)->Close().ok());
  EXPECT_EQ(check.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(check.step_ends, (std::vector<uint64_t>{0}));
  auto tr = trace::ReadWholeTrace(TracePathFor(dir_.string(), 0));
  ASSERT_TRUE(tr.ok()) << tr.status().ToString();
  int boundaries = 0;
  for (const auto& r : tr->records) boundaries += std::holds_alternative<trace::BoundaryRecord>(r.body) ? 1 : 0;
  EXPECT_EQ(boundaries, 1) << "the refused record is not appended";
}

// An environment of the test's own: the controls are read from and set in it.
class MapEnvironment : public ProcessEnvironment {
 public:
  std::map<std::string, std::string> vars;
  std::optional<std::string> Get(const std::string& name) const override {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void Set(const std::string& name, const std::string& value) override { vars.emplace(name, value); }
  std::optional<std::string> ReadTextFile(const std::string&) const override { return std::nullopt; }
};

TEST_F(SessionTest, SeamEnvironmentIsTheOneTheControlsUse) {
  MapEnvironment env;
  env.vars["NCCL_PROTO"] = "LL128";  // the user's choice, recorded with a warning
  SessionSeams seams;
  seams.environment = &env;
  SessionOptions o = Options();
  o.gpu = true;
  auto s = Session::Open(o, seams);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(env.vars["NCCL_ALGO"], "Ring") << "dgrr's default, set in the substituted environment";
  const ControlSetting* proto = (*s)->controls().Find("NCCL_PROTO");
  ASSERT_NE(proto, nullptr);
  EXPECT_EQ(proto->value, "LL128");
  EXPECT_EQ(proto->origin, ControlOrigin::kEnvironment);
  ASSERT_TRUE((*s)->Close().ok());
}

}  // namespace
}  // namespace dgrr
