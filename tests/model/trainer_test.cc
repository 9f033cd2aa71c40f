// The trainer end to end, in-process: reproducibility across runs, ranks and
// threads, and the faults it can inject.
#include "model/trainer.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include "tests/support/timeless_records.h"
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>
#include <tuple>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "model/launch.h"
#include "model/numerics.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/session.h"
#include "trace_format/reader.h"

namespace dgrr::model {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public ::dgrr::test_support::TempDirTest {
 protected:
  TrainOptions Options(const std::string& name, int ranks = 1, int threads = 1) {
    TrainOptions o;
    o.out_dir = (dir_ / name).string();
    o.steps = 3;
    o.seed = 11;
    o.ranks = ranks;
    o.threads = threads;
    return o;
  }
  TrainResult Train(const TrainOptions& o, Status* status = nullptr) {
    auto t = Trainer::Create(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    TrainResult r;
    Status s = t.ok() ? (*t)->Run(nullptr, &r) : t.status();
    if (status) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return r;
  }
};

std::vector<trace::Record> Records(const std::string& run_dir, int rank) {
  return test_support::TimelessRecords(TracePathFor(run_dir, rank));
}

// The per-example boundaries of a run, over all its ranks, keyed by
// (example, name, occurrence) -> fingerprint.
using ExampleKey = std::tuple<uint64_t, std::string, int>;
std::map<ExampleKey, std::pair<uint64_t, uint64_t>> PerExampleBoundaries(const std::string& run_dir,
                                                                         int ranks) {
  std::map<ExampleKey, std::pair<uint64_t, uint64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    auto t = trace::ReadWholeTrace(TracePathFor(run_dir, r));
    EXPECT_TRUE(t.ok());
    if (!t.ok()) continue;
    std::map<std::pair<uint64_t, std::string>, int> seen;
    for (const auto& rec : t->records) {
      const auto* b = std::get_if<trace::BoundaryRecord>(&rec.body);
      if (b == nullptr || b->example_count != 1) continue;
      const std::string& name = t->names[b->name_id];
      const int n = seen[{b->first_example, name}]++;
      EXPECT_TRUE(out.emplace(ExampleKey{b->first_example, name, n},
                              std::pair{b->xor64, b->xxh3}).second)
          << "example " << b->first_example << " recorded twice";
    }
  }
  return out;
}

struct FirstDifference {
  bool found = false;
  uint64_t step = 0;
  std::string name;
  uint32_t rank = 0;
};
// The first BOUNDARY record that differs between two traces of the same shape.
FirstDifference FirstDifferingBoundary(const std::string& a_dir, const std::string& b_dir, int rank) {
  auto a = trace::ReadWholeTrace(TracePathFor(a_dir, rank));
  auto b = trace::ReadWholeTrace(TracePathFor(b_dir, rank));
  EXPECT_TRUE(a.ok() && b.ok());
  FirstDifference d;
  if (!a.ok() || !b.ok()) return d;
  std::vector<const trace::BoundaryRecord*> ba, bb;
  for (const auto& r : a->records)
    if (auto* p = std::get_if<trace::BoundaryRecord>(&r.body)) ba.push_back(p);
  for (const auto& r : b->records)
    if (auto* p = std::get_if<trace::BoundaryRecord>(&r.body)) bb.push_back(p);
  EXPECT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < std::min(ba.size(), bb.size()); ++i) {
    EXPECT_EQ(a->names[ba[i]->name_id], b->names[bb[i]->name_id]) << "traces differ in shape at " << i;
    if (ba[i]->xor64 != bb[i]->xor64 || ba[i]->xxh3 != bb[i]->xxh3) {
      d.found = true;
      d.step = ba[i]->step;
      d.name = a->names[ba[i]->name_id];
      d.rank = ba[i]->rank;
      return d;
    }
  }
  return d;
}

TEST_F(TrainerTest, IdenticalRunsGiveIdenticalTracesApartFromRunIdAndTimes) {
  Train(Options("a", 2, 2));
  Train(Options("b", 2, 2));
  for (int r = 0; r < 2; ++r) {
    const auto a = Records((dir_ / "a").string(), r), b = Records((dir_ / "b").string(), r);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 100u);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(a[i].body == b[i].body) << "rank " << r << " record " << i;
  }
  auto ha = trace::ReadWholeTrace(TracePathFor((dir_ / "a").string(), 0));
  auto hb = trace::ReadWholeTrace(TracePathFor((dir_ / "b").string(), 0));
  EXPECT_NE(ha->header.run_id, hb->header.run_id);
  EXPECT_EQ(ha->header.config_digest, hb->header.config_digest);
}

TEST_F(TrainerTest, ParametersAndPerExampleBoundariesIndependentOfRanksAndThreads) {
  const TrainResult base = Train(Options("r1t1"));
  const auto base_examples = PerExampleBoundaries((dir_ / "r1t1").string(), 1);
  ASSERT_GT(base_examples.size(), 3u * 8u * 20u);
  for (int ranks : {1, 2, 4}) {
    for (int threads : {1, 2, 4}) {
      if (ranks == 1 && threads == 1) continue;
      const std::string name = "r" + std::to_string(ranks) + "t" + std::to_string(threads);
      const TrainResult r = Train(Options(name, ranks, threads));
      EXPECT_EQ(r.params, base.params) << name;
      EXPECT_EQ(PerExampleBoundaries((dir_ / name).string(), ranks), base_examples) << name;
    }
  }
}

// One Trainer per rank, each on its own thread, meeting only through its
// communicator: what `mpirun -np R dgrr train` runs, with threads for
// processes. options_for(r) gives rank r's options.
std::vector<Status> RunAsRanks(int ranks, const std::function<TrainOptions(int)>& options_for,
                               std::vector<TrainResult>* results) {
  InProcessGroup group(ranks);
  std::vector<Status> statuses(static_cast<size_t>(ranks));
  results->assign(static_cast<size_t>(ranks), TrainResult{});
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto t = Trainer::Create(options_for(r));
      Status s = t.status();
      if (t.ok()) s = (*t)->RunAsRank(*group.ranks[static_cast<size_t>(r)], nullptr, &(*results)[r]);
      if (!s.ok()) group.ranks[static_cast<size_t>(r)]->Abort(s);
      statuses[static_cast<size_t>(r)] = s;
    });
  }
  for (auto& th : threads) th.join();
  return statuses;
}

TEST_F(TrainerTest, OneTrainerPerRankWritesTheRunOfOneProcessBitwise) {
  TrainOptions o = Options("threads", 4, 1);
  o.ckpt_every = 2;
  o.steps = 4;
  const TrainResult base = Train(o);
  std::vector<TrainResult> results;
  const auto statuses = RunAsRanks(4, [&](int) {
    TrainOptions p = o;
    p.out_dir = (dir_ / "ranks").string();
    return p;
  }, &results);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    EXPECT_EQ(results[r].params, base.params) << "rank " << r;
    const auto a = Records((dir_ / "threads").string(), r), b = Records((dir_ / "ranks").string(), r);
    ASSERT_EQ(a.size(), b.size()) << "rank " << r;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(a[i].body == b[i].body) << "rank " << r << " record " << i;
  }
  for (uint64_t step : {1, 3}) {
    auto a = ReadFileToString(checkpoint::CheckpointPath((dir_ / "threads").string(), step));
    auto b = ReadFileToString(checkpoint::CheckpointPath((dir_ / "ranks").string(), step));
    ASSERT_TRUE(a.ok() && b.ok());
    // Only the run id (random per run) may differ.
    auto ca = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath((dir_ / "threads").string(), step));
    auto cb = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath((dir_ / "ranks").string(), step));
    ASSERT_TRUE(ca.ok() && cb.ok());
    ASSERT_EQ(ca->ranks.size(), cb->ranks.size());
    for (size_t r = 0; r < ca->ranks.size(); ++r) EXPECT_EQ(ca->ranks[r].trace_position, cb->ranks[r].trace_position);
    EXPECT_EQ(a->size(), b->size());
  }
}

// `small` holds about 10 MB of replicated state (parameters and AdamW
// moments): checkpoint format v3 spreads it over both ranks' shards, and a
// stopped run resumed through the trainer's own restorer (which reads the
// entries in memory) ends bitwise as the uninterrupted one.
TEST_F(TrainerTest, SmallsReplicatedStateSpreadOverTheShardsResumesBitwise) {
  TrainOptions o = Options("whole", 2, 1);
  o.preset = "small";
  o.steps = 3;
  o.ckpt_every = 2;
  const TrainResult whole = Train(o);
  TrainOptions cut = o;
  cut.out_dir = (dir_ / "cut").string();
  std::atomic<int> stop{1};  // stops after step 0, checkpointing it
  cut.stop = &stop;
  const TrainResult first = Train(cut);
  ASSERT_TRUE(first.stopped && first.checkpoint_at_stop);
  const std::string manifest = checkpoint::CheckpointPath(cut.out_dir, 0);
  for (int r = 0; r < 2; ++r) {
    auto shard = checkpoint::ReadCheckpointShard(checkpoint::ShardPath(manifest, r));
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    EXPECT_GT(shard->replicated.size(), 10u) << "rank " << r << "'s shard holds a share of the replicated state";
  }
  TrainOptions resume = cut;
  resume.stop = nullptr;
  resume.resume = true;
  const TrainResult resumed = Train(resume);
  EXPECT_EQ(resumed.first_step, 1);
  EXPECT_EQ(resumed.params, whole.params);
}

TEST_F(TrainerTest, RanksGivenDifferentConfigurationsAreRefusedOnEveryRankNamingThem) {
  std::vector<TrainResult> results;
  const auto statuses = RunAsRanks(4, [&](int r) {
    TrainOptions p = Options("mixed", 4, 1);
    if (r == 2) p.lr = 0.5f;
    return p;
  }, &results);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << statuses[r].ToString();
    EXPECT_NE(statuses[r].message().find("rank(s) 2 of 4"), std::string::npos) << statuses[r].message();
  }
  EXPECT_FALSE(fs::exists(dir_ / "mixed" / "config.json"));
}

// Rank 0 writes the replicated state from its own memory, so the ranks
// first show they hold the same: a moment flipped on one rank at a
// checkpoint's step is named (entry and rank), and no checkpoint is written.
TEST_F(TrainerTest, CheckpointOfStateThatDiffersAcrossRanksIsRefusedNamingEntryAndRank) {
  TrainOptions o = Options("moment", 4, 1);
  o.ckpt_every = 2;
  o.faults.push_back(*ParseFaultSpec("bitflip:step=1,rank=3,at=adamw.m.wte"));
  Status s;
  Train(o, &s);
  EXPECT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("'adamw.m.wte' differs between rank 0 and rank 3"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointPath(o.out_dir, 1)));
}

TEST_F(TrainerTest, RaceMakesOtherwiseIdenticalRunsDiffer) {
  auto with_race = [&](const std::string& name) {
    TrainOptions o = Options(name, 1, 4);
    o.batch = 16;
    for (uint64_t step : {0, 1, 2}) {
      o.faults.push_back(*ParseFaultSpec("race:step=" + std::to_string(step) + ",at=block0.mlp.fc.w"));
    }
    return Train(o).params;
  };
  const Fingerprint first = with_race("race0");
  bool differs = false;
  for (int attempt = 1; attempt <= 6 && !differs; ++attempt) {
    differs = with_race("race" + std::to_string(attempt)) != first;
  }
  EXPECT_TRUE(differs) << "a real race between 4 workers gave the same sums 7 times in a row";
  // The control: the same run without the race is reproducible.
  TrainOptions o = Options("clean0", 1, 4);
  o.batch = 16;
  const Fingerprint c0 = Train(o).params;
  o.out_dir = (dir_ / "clean1").string();
  EXPECT_EQ(Train(o).params, c0);
}

TEST_F(TrainerTest, SharedRngMakesOtherwiseIdenticalRunsDiffer) {
  auto with_shared = [&](const std::string& name) {
    TrainOptions o = Options(name, 1, 4);
    o.batch = 16;
    for (uint64_t step : {0, 1, 2}) {
      o.faults.push_back(*ParseFaultSpec("shared-rng:step=" + std::to_string(step)));
    }
    return Train(o).params;
  };
  const Fingerprint first = with_shared("srng0");
  bool differs = false;
  for (int attempt = 1; attempt <= 6 && !differs; ++attempt) {
    differs = with_shared("srng" + std::to_string(attempt)) != first;
  }
  EXPECT_TRUE(differs) << "4 workers drew from one generator in the same order 7 times in a row";
}

TEST_F(TrainerTest, BitflipChangesTheNamedBoundaryAtTheNamedStepAndNothingBefore) {
  Train(Options("clean", 2, 2));
  TrainOptions o = Options("flip", 2, 2);
  o.faults.push_back(*ParseFaultSpec("bitflip:step=1,rank=1,at=block1.mlp.gelu.out"));
  Train(o);
  const FirstDifference d = FirstDifferingBoundary((dir_ / "clean").string(), (dir_ / "flip").string(), 1);
  ASSERT_TRUE(d.found);
  EXPECT_EQ(d.step, 1u);
  EXPECT_EQ(d.name, "block1.mlp.gelu.out");
  EXPECT_EQ(d.rank, 1u);
  // Rank 0 sees the corruption only through the all-reduce, after rank 1's backward.
  const FirstDifference d0 = FirstDifferingBoundary((dir_ / "clean").string(), (dir_ / "flip").string(), 0);
  ASSERT_TRUE(d0.found);
  EXPECT_EQ(d0.step, 1u);
  EXPECT_EQ(d0.name.rfind("allreduce.", 0), 0u) << d0.name;
}

TEST_F(TrainerTest, ReduceOrderShowsFirstAtTheCollective) {
  Train(Options("clean"));
  TrainOptions o = Options("ro");
  o.faults.push_back(*ParseFaultSpec("reduce-order:step=2"));
  Train(o);
  const FirstDifference d = FirstDifferingBoundary((dir_ / "clean").string(), (dir_ / "ro").string(), 0);
  ASSERT_TRUE(d.found);
  EXPECT_EQ(d.step, 2u);
  EXPECT_EQ(d.name.rfind("allreduce.", 0), 0u) << d.name;
}

TEST_F(TrainerTest, ParameterBitflipIsCaughtByTheSdcCheckNamingTheRank) {
  TrainOptions o = Options("sdc", 4, 1);
  o.mode = RecordMode::kSdc;
  o.faults.push_back(*ParseFaultSpec("bitflip:step=1,rank=2,at=block0.attn.qkv.w"));
  Status s;
  Train(o, &s);
  ASSERT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("after step 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 2 holds"), std::string::npos) << s.message();
}

TEST_F(TrainerTest, SdcModeRecordsOnlyCollectivesAndSteps) {
  TrainOptions o = Options("sdc");
  o.mode = RecordMode::kSdc;
  Train(o);
  auto t = trace::ReadWholeTrace(TracePathFor(o.out_dir, 0));
  ASSERT_TRUE(t.ok());
  int steps = 0, collectives = 0;
  for (const auto& r : t->records) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) {
      EXPECT_EQ(b->phase, trace::Phase::kCollective);
      ++collectives;
    }
    steps += std::holds_alternative<trace::StepRecord>(r.body);
  }
  EXPECT_EQ(steps, 6);
  // Every step records the all-reduce of every parameter tensor, and nothing else.
  const size_t tensors = ParameterLayout(PresetByName("tiny")->model).tensors().size();
  EXPECT_EQ(collectives, static_cast<int>(3 * tensors));
}

TEST_F(TrainerTest, BadInputIsRefusedBeforeAnythingIsWritten) {
  auto refused = [&](TrainOptions o, StatusCode code, const std::string& needle) {
    auto t = Trainer::Create(o);
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_EQ(t.status().code(), code) << t.status().ToString();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
    EXPECT_FALSE(fs::exists(o.out_dir)) << needle;
  };
  TrainOptions o = Options("bad");
  o.preset = "huge";
  refused(o, StatusCode::kInvalidArgument, "huge");
  o = Options("bad");
  o.steps = 0;
  refused(o, StatusCode::kInvalidArgument, "--steps");
  o = Options("bad", 4);
  o.batch = 6;
  refused(o, StatusCode::kInvalidArgument, "not divisible");
  o = Options("bad");
  o.batch = -1;
  refused(o, StatusCode::kInvalidArgument, "--batch");
  o = Options("bad");
  o.data_file = (dir_ / "missing.txt").string();
  refused(o, StatusCode::kNotFound, "missing.txt");
  ASSERT_TRUE(CreateDirectories(dir_.string()).ok());
  ASSERT_TRUE(WriteFileAtomically((dir_ / "short.txt").string(), "too short").ok());
  o.data_file = (dir_ / "short.txt").string();
  refused(o, StatusCode::kInvalidArgument, "--data");
  o = Options("bad");
  o.faults.push_back(*ParseFaultSpec("bitflip:step=1,at=block9.nothing"));
  refused(o, StatusCode::kInvalidArgument, "block9.nothing");
  o = Options("bad");
  o.faults.push_back(*ParseFaultSpec("bitflip:step=99,at=loss"));
  refused(o, StatusCode::kInvalidArgument, "past the last step");
  EXPECT_FALSE(ParseFaultSpec("meteor:step=1").ok());
  EXPECT_FALSE(ParseFaultSpec("bitflip:at=loss").ok()) << "step is required";
  EXPECT_FALSE(ParseFaultSpec("race:step=x,at=wte").ok());
}

TEST_F(TrainerTest, RefusesANonEmptyRunDirectoryUnlessForced) {
  TrainOptions o = Options("run");
  Train(o);
  ASSERT_TRUE(WriteFileAtomically(o.out_dir + "/notes.txt", "mine").ok());
  auto again = Trainer::Create(o);
  ASSERT_TRUE(again.ok());
  Status s = (*again)->Run(nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--force"), std::string::npos);
  o.force = true;
  Train(o);
  EXPECT_TRUE(PathExists(o.out_dir + "/notes.txt")) << "--force removes only dgrr's own files";
  EXPECT_TRUE(PathExists(o.out_dir + "/config.json"));
}

TEST_F(TrainerTest, LossFallsOnTheEmbeddedCorpus) {
  TrainOptions o = Options("learn", 2, 2);
  o.steps = 200;
  o.mode = RecordMode::kOff;
  std::vector<float> losses;
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok());
  TrainResult r;
  ASSERT_TRUE((*t)->Run([&](const TrainProgress& p) { losses.push_back(p.loss); }, &r).ok());
  ASSERT_EQ(losses.size(), 200u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += losses[i] / 10, last += losses[190 + i] / 10;
  EXPECT_LT(last, first - 1.5) << "mean loss of the first 10 steps " << first << ", last 10 " << last;
  EXPECT_LT(last, 2.6) << "below what byte frequencies alone give";
}

}  // namespace
}  // namespace dgrr::model

namespace dgrr::model {
namespace {

// BOUNDARY and STEP records (EVENTs say where a run was resumed, so they may
// legitimately differ), times zeroed.
std::vector<trace::RecordBody> Computation(const std::string& run_dir, int rank) {
  std::vector<trace::RecordBody> out;
  for (auto& r : Records(run_dir, rank)) {
    if (std::holds_alternative<trace::BoundaryRecord>(r.body) ||
        std::holds_alternative<trace::StepRecord>(r.body)) {
      out.push_back(r.body);
    }
  }
  return out;
}

void CopyRun(const fs::path& from, const fs::path& to, uint64_t keep_up_to_step) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(to / "ckpt")) {
    const std::string name = e.path().filename().string();  // step-00000040.h5
    if (std::stoull(name.substr(5, 8)) > keep_up_to_step) fs::remove(e.path());
  }
}

TEST_F(TrainerTest, ResumingAtEveryCheckpointReproducesTheUninterruptedRun) {
  for (int ranks : {1, 4}) {
    const std::string u = "u" + std::to_string(ranks);
    TrainOptions o = Options(u, ranks, 1);
    o.steps = 40;
    o.ckpt_every = 10;
    const TrainResult full = Train(o);
    for (uint64_t ckpt : {9, 19, 29}) {
      const std::string v = u + "_from" + std::to_string(ckpt);
      CopyRun(dir_ / u, dir_ / v, ckpt);
      TrainOptions r;
      r.out_dir = (dir_ / v).string();
      r.resume = true;
      auto t = Trainer::Create(r);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      TrainResult resumed;
      ASSERT_TRUE((*t)->Run(nullptr, &resumed).ok());
      EXPECT_EQ((*t)->first_step(), static_cast<int64_t>(ckpt) + 1);
      EXPECT_EQ(resumed.params, full.params) << v;
      for (int rank = 0; rank < ranks; ++rank) {
        const auto a = Computation((dir_ / u).string(), rank);
        const auto b = Computation((dir_ / v).string(), rank);
        ASSERT_EQ(a.size(), b.size()) << v << " rank " << rank;
        for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(a[i] == b[i]) << v << " rank " << rank << " record " << i;
      }
    }
  }
}

TEST_F(TrainerTest, SkipRestoreDivergesAtTheFirstBoundaryThatDependsOnIt) {
  TrainOptions o = Options("u");
  o.steps = 20;
  o.ckpt_every = 10;
  Train(o);
  CopyRun(dir_ / "u", dir_ / "v", 9);
  TrainOptions r;
  r.out_dir = (dir_ / "v").string();
  r.resume = true;
  r.faults.push_back(*ParseFaultSpec("skip-restore:adamw.m"));
  auto t = Trainer::Create(r);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run(nullptr, nullptr).ok());
  const FirstDifference d = FirstDifferingBoundary((dir_ / "u").string(), (dir_ / "v").string(), 0);
  ASSERT_TRUE(d.found);
  EXPECT_EQ(d.step, 10u) << "nothing before the first update after the resume reads adamw.m";
  EXPECT_EQ(d.name, "wte") << "the first parameter AdamW updates with the forgotten moment";

  r.faults = {*ParseFaultSpec("skip-restore:cursor")};
  EXPECT_TRUE(Trainer::Create(r).status().IsInvalidArgument()) << "cursor is fast-forwarded, not restored";
  TrainOptions fresh = Options("w");
  fresh.faults.push_back(*ParseFaultSpec("skip-restore:params"));
  EXPECT_TRUE(Trainer::Create(fresh).status().IsInvalidArgument()) << "only with --resume";
}

TEST_F(TrainerTest, CorruptNewestCheckpointIsRefusedUnlessFallingBack) {
  TrainOptions o = Options("u", 2, 1);
  o.steps = 12;
  o.ckpt_every = 4;
  const TrainResult full = Train(o);
  CopyRun(dir_ / "u", dir_ / "v", 7);
  const std::string newest = checkpoint::CheckpointPath((dir_ / "v").string(), 7);
  {
    auto bytes = ReadFileToString(newest);
    ASSERT_TRUE(bytes.ok());
    (*bytes)[bytes->size() / 2] ^= 0x10;
    ASSERT_TRUE(WriteFileAtomically(newest, *bytes).ok());
  }
  TrainOptions r;
  r.out_dir = (dir_ / "v").string();
  r.resume = true;
  auto t = Trainer::Create(r);
  ASSERT_TRUE(t.ok());
  Status s = (*t)->Run(nullptr, nullptr);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(ExitCodeFor(s), kExitInvalidData);
  r.fallback = true;
  t = Trainer::Create(r);
  ASSERT_TRUE(t.ok());
  TrainResult resumed;
  ASSERT_TRUE((*t)->Run(nullptr, &resumed).ok());
  EXPECT_EQ((*t)->first_step(), 4);
  EXPECT_EQ(resumed.params, full.params);
}

}  // namespace
}  // namespace dgrr::model

#include "replay/compare.h"

namespace dgrr::model {
namespace {

// Each fault, injected at a pseudo-random step, rank and boundary, is named
// exactly by `dgrr compare` against the same run without it.
class FaultLocalizationTest : public TrainerTest {
 protected:
  replay::ReportedPair FirstDivergence(const TrainOptions& faulty) {
    TrainOptions clean = faulty;
    clean.out_dir = (dir_ / "clean").string();
    clean.faults.clear();
    Train(clean);
    Train(faulty);
    auto r = replay::CompareRuns(clean.out_dir, faulty.out_dir, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !r->first_divergence) {
      ADD_FAILURE() << "no divergence found";
      return {};
    }
    return *r->first_divergence;
  }
  uint64_t lcg_ = 7;
  uint64_t Pick(uint64_t n) {
    lcg_ = lcg_ * 6364136223846793005ull + 1442695040888963407ull;
    return (lcg_ >> 33) % n;
  }
};

TEST_F(FaultLocalizationTest, BitflipIsNamedAtItsBoundaryStepAndRank) {
  const auto names = *PerExampleBoundaryNames(PresetByName("tiny")->model);
  for (int trial = 0; trial < 3; ++trial) {
    TrainOptions o = Options("flip" + std::to_string(trial), 2, 2);
    o.steps = 4;
    const uint64_t step = Pick(4);
    const int rank = static_cast<int>(Pick(2));
    const std::string at = names[Pick(names.size())];
    o.faults.push_back(*ParseFaultSpec("bitflip:step=" + std::to_string(step) + ",rank=" +
                                       std::to_string(rank) + ",at=" + at + ",bit=22"));
    const auto d = FirstDivergence(o);
    EXPECT_EQ(d.a.name, at);
    EXPECT_EQ(d.a.record.step, step) << at;
    EXPECT_EQ(d.a.record.rank, static_cast<uint32_t>(rank)) << at;
    fs::remove_all(dir_ / "clean");
  }
}

TEST_F(FaultLocalizationTest, RaceIsNamedAtTheRacyAccumulationNotDownstream) {
  TrainOptions o = Options("race", 1, 4);
  o.batch = 16;
  o.steps = 3;
  const ParameterLayout layout(PresetByName("tiny")->model);
  const std::string param = layout.tensors()[Pick(layout.tensors().size())].name;
  // A real race can happen to add in tree-like order; one of a few tries differs.
  replay::ReportedPair d;
  for (int attempt = 0; attempt < 6 && d.a.name.empty(); ++attempt) {
    o.out_dir = (dir_ / ("race" + std::to_string(attempt))).string();
    o.faults = {*ParseFaultSpec("race:step=1,at=" + param)};
    TrainOptions clean = o;
    clean.out_dir = (dir_ / "clean").string();
    clean.faults.clear();
    if (attempt == 0) Train(clean);
    Train(o);
    auto r = replay::CompareRuns(clean.out_dir, o.out_dir, {});
    ASSERT_TRUE(r.ok());
    if (r->first_divergence) d = *r->first_divergence;
  }
  ASSERT_FALSE(d.a.name.empty()) << "the race never changed a sum";
  EXPECT_EQ(d.a.name, "allreduce." + GradientName(param));
  EXPECT_EQ(d.a.record.step, 1u);
}

TEST_F(FaultLocalizationTest, ReduceOrderAndSharedRngAreNamedAtTheirStep) {
  TrainOptions o = Options("ro", 2, 1);
  o.steps = 4;
  o.faults.push_back(*ParseFaultSpec("reduce-order:step=2"));
  auto d = FirstDivergence(o);
  EXPECT_EQ(d.a.record.step, 2u);
  EXPECT_EQ(d.a.name.rfind("allreduce.", 0), 0u) << d.a.name;
  fs::remove_all(dir_ / "clean");

  o = Options("srng", 1, 2);
  o.steps = 4;
  o.faults.push_back(*ParseFaultSpec("shared-rng:step=3"));
  d = FirstDivergence(o);
  EXPECT_EQ(d.a.record.step, 3u);
  EXPECT_NE(d.a.name.find("dropout.out"), std::string::npos)
      << "the first mask drawn from the shared generator: " << d.a.name;
}

// --audit-every: each rank recomputes its neighbour's examples and compares.
class AuditTest : public TrainerTest {
 protected:
  // The audit's EVENT records of a trace, as (step, payload).
  static std::vector<std::pair<uint64_t, std::string>> AuditEvents(const std::string& run_dir, int rank) {
    std::vector<std::pair<uint64_t, std::string>> out;
    for (const auto& rec : Records(run_dir, rank)) {
      const auto* e = std::get_if<trace::EventRecord>(&rec.body);
      if (e != nullptr && e->kind == trace::EventKind::kSdcMismatch) out.emplace_back(e->step, e->payload);
    }
    return out;
  }
  static bool HasStepEnd(const std::string& run_dir, int rank, uint64_t step) {
    for (const auto& rec : Records(run_dir, rank)) {
      const auto* s = std::get_if<trace::StepRecord>(&rec.body);
      if (s != nullptr && s->step == step && s->kind == trace::StepKind::kEnd) return true;
    }
    return false;
  }
};

TEST_F(AuditTest, CleanRunRecordsExactlyWhatTheUnauditedRunRecords) {
  for (RecordMode mode : {RecordMode::kFull, RecordMode::kSdc}) {
    const std::string tag = std::string(RecordModeName(mode));
    TrainOptions plain = Options("plain_" + tag, 2, 2);
    plain.mode = mode;
    TrainOptions audited = plain;
    audited.out_dir = (dir_ / ("audited_" + tag)).string();
    audited.audit_every = 1;
    Status s;
    const TrainResult a = Train(plain);
    const TrainResult b = Train(audited, &s);
    ASSERT_TRUE(s.ok()) << tag << ": " << s.ToString();
    EXPECT_EQ(a.params, b.params) << tag;
    for (int r = 0; r < 2; ++r) {
      const auto ra = Records(plain.out_dir, r), rb = Records(audited.out_dir, r);
      ASSERT_EQ(ra.size(), rb.size()) << tag << " rank " << r;
      ASSERT_GT(ra.size(), 3u) << tag;
      // A passing audit records nothing: every record, events included, is
      // the unaudited run's.
      for (size_t i = 0; i < ra.size(); ++i) {
        ASSERT_TRUE(ra[i].body == rb[i].body) << tag << " rank " << r << " record " << i;
      }
    }
  }
}

TEST_F(AuditTest, AuditSettingIsRecordedInConfigAndReadBack) {
  TrainOptions o = Options("cfg", 2);
  o.steps = 1;
  o.audit_every = 7;
  Train(o);
  auto read = TrainOptionsFromRun(o.out_dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->audit_every, 7);
  // A run recorded before the option existed has no key, and ran unaudited.
  auto text = ReadFileToString(ConfigPathFor(o.out_dir), 1 << 20);
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  ASSERT_EQ(j.at("audit_every"), 7);
  j.erase("audit_every");
  ASSERT_TRUE(WriteFileAtomically(ConfigPathFor(o.out_dir), j.dump()).ok());
  read = TrainOptionsFromRun(o.out_dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->audit_every, 0);
  TrainOptions bad = Options("bad", 2);
  bad.audit_every = -1;
  auto t = Trainer::Create(bad);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
}

// config.json records the numerics version (model/numerics.h); a run of
// another version, or one recorded before the key existed (version 1,
// separate multiply and add), is refused for resume and re-execution: one
// Corruption (exit 3) naming both versions.
TEST_F(TrainerTest, RunOfAnotherNumericsVersionIsRefusedForResumeAndReexecution) {
  TrainOptions o = Options("numerics");
  o.steps = 2;
  o.ckpt_every = 1;
  Train(o);
  const std::string path = ConfigPathFor(o.out_dir);
  auto text = ReadFileToString(path, 1 << 20);
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  ASSERT_EQ(j.at("numerics"), kNumericsVersion);
  ASSERT_TRUE(TrainOptionsFromRun(o.out_dir).ok());
  for (int recorded : {0, 1, 3}) {
    if (recorded == 0) {
      j.erase("numerics");  // a run recorded before the key: version 1
    } else {
      j["numerics"] = recorded;
    }
    ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
    const std::string version = "numerics version " + std::to_string(recorded == 0 ? 1 : recorded);
    auto read = TrainOptionsFromRun(o.out_dir);
    ASSERT_FALSE(read.ok());
    EXPECT_TRUE(read.status().IsCorruption()) << read.status().ToString();
    const std::string message(read.status().message());
    EXPECT_NE(message.find(path + ": the run was recorded with " + version), std::string::npos) << message;
    EXPECT_NE(message.find("this dgrr computes numerics version " + std::to_string(kNumericsVersion)),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    // --resume and the re-execution of replay, rollback and bisect.
    TrainOptions resume = Options("numerics");
    resume.resume = true;
    auto t = Trainer::Create(resume);
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(t.status().IsCorruption()) << t.status().ToString();
    auto launch = LaunchOfRun(o.out_dir);
    ASSERT_FALSE(launch.ok());
    EXPECT_TRUE(launch.status().IsCorruption()) << launch.status().ToString();
  }
}

// A flip in rank 1's backward pass (an activation gradient, before the
// all-reduce) corrupts the gradient every rank then applies: all ranks hold
// the same wrong parameters, so the parameter check passes, while the audit
// names rank 1, the step, the example and the boundary.
TEST_F(AuditTest, BackwardBitflipIsNamedByTheAuditButNotByTheParameterCheck) {
  const std::string flip = "bitflip:step=2,rank=1,at=block0.mlp.fc.dinp";
  auto spec = ParseFaultSpec(flip);
  ASSERT_TRUE(spec.ok());

  TrainOptions unaudited = Options("unaudited", 2);
  unaudited.steps = 4;
  unaudited.faults = {*spec};
  Status s;
  const TrainResult corrupted = Train(unaudited, &s);
  EXPECT_TRUE(s.ok()) << "the parameter check alone should not see it: " << s.ToString();
  TrainOptions clean = Options("clean", 2);
  clean.steps = 4;
  EXPECT_NE(Train(clean).params, corrupted.params) << "the flip must change the run";
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(AuditEvents(unaudited.out_dir, r).empty());

  TrainOptions audited = unaudited;
  audited.out_dir = (dir_ / "audited").string();
  audited.audit_every = 1;
  Train(audited, &s);
  ASSERT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("audit at step 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 1 computed example 20 differently from rank 0's recomputation, first at "
                             "block0.mlp.fc.dinp"),
            std::string::npos)
      << s.message();
  for (int r = 0; r < 2; ++r) {
    const auto events = AuditEvents(audited.out_dir, r);
    ASSERT_EQ(events.size(), 1u) << "rank " << r;
    EXPECT_EQ(events[0].first, 2u);
    EXPECT_EQ(events[0].second, "audit rank=1 by=0 example=20 at=block0.mlp.fc.dinp");
    // It stops before the corrupted gradient is applied.
    EXPECT_TRUE(HasStepEnd(audited.out_dir, r, 1));
    EXPECT_FALSE(HasStepEnd(audited.out_dir, r, 2));
  }
}

TEST_F(AuditTest, AuditNamesRankTwoOfFourInSdcModeOnlyAtStepsItRuns) {
  auto spec = ParseFaultSpec("bitflip:step=2,rank=2,at=block1.attn.qkv.dinp,example=21");
  ASSERT_TRUE(spec.ok());
  TrainOptions o = Options("r4", 4);
  o.steps = 4;
  o.mode = RecordMode::kSdc;  // records no per-example boundary; the audit still sees them
  o.faults = {*spec};
  o.audit_every = 2;
  Status s;
  Train(o, &s);
  ASSERT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("rank 2 computed example 21 differently from rank 1's recomputation, first at "
                             "block1.attn.qkv.dinp"),
            std::string::npos)
      << s.message();
  const auto events = AuditEvents(o.out_dir, 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], std::make_pair(uint64_t{2}, std::string("audit rank=2 by=1 example=21 at=block1.attn.qkv.dinp")));

  // Audited at steps 0 and 3 only: step 2's corruption goes unseen.
  TrainOptions every3 = o;
  every3.out_dir = (dir_ / "every3").string();
  every3.audit_every = 3;
  Train(every3, &s);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A wrong input (the tokens a rank read) is named at the tokens themselves.
TEST_F(AuditTest, CorruptedInputTokensAreNamedAtDataTokens) {
  auto spec = ParseFaultSpec("bitflip:step=1,rank=0,at=data.tokens");
  ASSERT_TRUE(spec.ok());
  TrainOptions o = Options("tokens", 2);
  o.faults = {*spec};
  o.audit_every = 1;
  Status s;
  Train(o, &s);
  ASSERT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 computed example 8 differently from rank 1's recomputation, first at "
                             "data.tokens"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace dgrr::model
