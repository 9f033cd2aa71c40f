// CompareRuns over real trace files and run directories: lockstep, planted
// divergences, the tolerant fallback, --ignore, rank merging, configs, errors.
#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "replay/compare.h"
#include "replay/run_comparison.h"
#include "replay/trace_items.h"
#include "runtime/run_directory.h"
#include "runtime/session.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

struct Spec {
  std::string name;
  uint64_t step = 0;
  uint64_t first_example = 0;
  uint32_t example_count = 1;
  uint64_t xor64 = 0;
  uint64_t xxh3 = 0;
};

// A model-like sequence: `steps` steps of `per_step` boundaries with distinct
// names; fingerprints derived from position so both runs agree by default.
std::vector<Spec> ModelLike(int steps, int per_step) {
  std::vector<Spec> out;
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < per_step; ++k) {
      Spec spec;
      spec.name = "block" + std::to_string(k) + ".out";
      spec.step = s;
      spec.first_example = s * 4;
      spec.example_count = 4;
      spec.xor64 = 0x1000 + s * 100 + k;
      spec.xxh3 = 0x9000 + s * 100 + k;
      out.push_back(spec);
    }
  }
  return out;
}

class CompareTracesTest : public ::dgrr::test_support::TempDirTest {
 protected:

  // Writes the boundaries with the trace writer; a STEP end record between
  // steps, so record indexes differ from boundary positions.
  static void WriteTrace(const std::string& path, const std::vector<Spec>& specs) {
    trace::TraceHeader header;
    header.seed = 7;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    uint64_t seq = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      auto id = (*writer)->InternName(s.name);
      ASSERT_TRUE(id.ok());
      trace::BoundaryRecord r;
      r.step = s.step;
      r.seq = seq++;
      r.name_id = *id;
      r.ndim = 2;
      r.dims[0] = 4;
      r.dims[1] = 8;
      r.byte_count = 128;
      r.first_example = s.first_example;
      r.example_count = s.example_count;
      r.xor64 = s.xor64;
      r.xxh3 = s.xxh3;
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
      if (i + 1 == specs.size() || specs[i + 1].step != s.step) {
        trace::StepRecord step;
        step.step = s.step;
        step.kind = trace::StepKind::kEnd;
        ASSERT_TRUE((*writer)->AppendStep(step).ok());
      }
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }

  // Record index of boundary `position` in a trace written by WriteTrace.
  static uint64_t RecordIndexOf(const std::string& path, uint64_t position) {
    auto trace = trace::ReadWholeTrace(path);
    EXPECT_TRUE(trace.ok());
    uint64_t seen = 0;
    for (const trace::Record& r : trace->records) {
      if (std::holds_alternative<trace::BoundaryRecord>(r.body) && seen++ == position) return r.index;
    }
    ADD_FAILURE() << "no boundary " << position;
    return 0;
  }

};

TEST_F(CompareTracesTest, TraceWithItselfIsLockstepWithoutDivergence) {
  const std::string a = Path("a.trace");
  WriteTrace(a, ModelLike(5, 10));
  auto r = CompareRuns(a, a, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->diverged());
  EXPECT_TRUE(r->lockstep);
  EXPECT_EQ(r->certify.pairs, 50u);
  EXPECT_EQ(r->certify.certified_pairs, 50u);
  EXPECT_EQ(r->certify.certified_steps, 5u);
  EXPECT_EQ(r->a.boundaries, 50u);
}

TEST_F(CompareTracesTest, PlantedXxh3BitIsFoundWithStepNameAndRecordIndexes) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  std::vector<Spec> specs = ModelLike(5, 10);
  WriteTrace(a, specs);
  specs[23].xxh3 ^= 1u << 7;  // step 2, block3.out
  WriteTrace(b, specs);
  CompareOptions options;
  options.chunk_items = 7;  // several chunks, the divergence inside one
  auto r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->diverged());
  EXPECT_TRUE(r->lockstep);
  const ReportedPair& d = *r->first_divergence;
  EXPECT_EQ(d.a.name, "block3.out");
  EXPECT_EQ(d.a.record.step, 2u);
  EXPECT_EQ(d.a.record.rank, 0u);
  EXPECT_EQ(d.a.index, 23u);
  EXPECT_EQ(d.a.record_index, RecordIndexOf(a, 23));
  EXPECT_EQ(d.b.record_index, RecordIndexOf(b, 23));
  EXPECT_EQ(d.a.record.xxh3 ^ d.b.record.xxh3, 1u << 7);
  EXPECT_EQ(d.a.record.xor64, d.b.record.xor64);
  EXPECT_EQ(d.a.trace, a);
  EXPECT_EQ(d.b.trace, b);
  EXPECT_EQ(r->certify.certified_pairs, 23u);
  EXPECT_EQ(r->certify.certified_steps, 2u);
  EXPECT_EQ(r->certify.kind, DivergenceKind::kIsolated);
  ASSERT_EQ(r->before.size(), 3u);
  ASSERT_EQ(r->after.size(), 3u);
  EXPECT_EQ(r->before.back().a.name, "block2.out");
  EXPECT_EQ(r->after.front().a.name, "block4.out");
  EXPECT_EQ(r->certify.later_differing, 0u);
}

TEST_F(CompareTracesTest, StreamingAndInMemoryPathsReportTheSame) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  std::vector<Spec> specs = ModelLike(4, 6);
  WriteTrace(a, specs);
  for (size_t i = 10; i < specs.size(); ++i) specs[i].xor64 += 1;  // propagates
  WriteTrace(b, specs);
  CompareOptions streamed;
  streamed.chunk_items = 5;
  CompareOptions in_memory;
  in_memory.keep_sequences = true;
  auto s = CompareRuns(a, b, streamed);
  auto m = CompareRuns(a, b, in_memory);
  ASSERT_TRUE(s.ok() && m.ok());
  EXPECT_EQ(CompareJson(*s).dump(), CompareJson(*m).dump());
  EXPECT_EQ(s->certify.kind, DivergenceKind::kPropagates);
  EXPECT_EQ(s->certify.later_differing, specs.size() - 11);
}

TEST_F(CompareTracesTest, InsertedBoundaryAndLocalSwapAreTolerated) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  std::vector<Spec> specs = ModelLike(6, 10);
  WriteTrace(a, specs);
  std::vector<Spec> changed = specs;
  std::swap(changed[31], changed[32]);  // local reordering in step 3
  Spec extra = specs[15];
  extra.name = "debug.probe";
  changed.insert(changed.begin() + 15, extra);  // only in B
  WriteTrace(b, changed);
  auto r = CompareRuns(a, b, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->diverged());
  EXPECT_FALSE(r->lockstep);
  EXPECT_EQ(r->lockstep_prefix, 15u);
  EXPECT_EQ(r->unmatched_a, 0u);
  EXPECT_EQ(r->unmatched_b, 1u);
  EXPECT_EQ(r->certify.pairs, 60u);
  EXPECT_EQ(r->stats.length_b, 61u);
  EXPECT_NEAR(r->stats.length_ratio, 61.0 / 60.0, 1e-12);
  EXPECT_NEAR(r->stats.unmatched_fraction, 1.0 / 121.0, 1e-12);
  EXPECT_GT(r->stats.anchor_density, 0.0);
}

TEST_F(CompareTracesTest, DivergenceAfterInsertionReportsBothRecordIndexes) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  std::vector<Spec> specs = ModelLike(4, 8);
  WriteTrace(a, specs);
  std::vector<Spec> changed = specs;
  changed[20].xor64 ^= 4;
  Spec extra = specs[3];
  extra.name = "inserted";
  changed.insert(changed.begin() + 3, extra);
  WriteTrace(b, changed);
  auto r = CompareRuns(a, b, {});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->diverged());
  EXPECT_EQ(r->first_divergence->a.index, 20u);
  EXPECT_EQ(r->first_divergence->b.index, 21u);
  EXPECT_EQ(r->first_divergence->a.record_index, RecordIndexOf(a, 20));
  EXPECT_EQ(r->first_divergence->b.record_index, RecordIndexOf(b, 21));
  EXPECT_EQ(r->first_divergence->b.name, "block4.out");
}

TEST_F(CompareTracesTest, IgnoreGlobHidesADivergence) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  std::vector<Spec> specs = ModelLike(3, 10);
  WriteTrace(a, specs);
  specs[14].xxh3 ^= 2;  // block4.out
  WriteTrace(b, specs);
  CompareOptions options;
  options.ignore_globs = {"block4.*"};
  auto r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->diverged());
  EXPECT_EQ(r->a.ignored, 3u);
  EXPECT_EQ(r->certify.pairs, 27u);
  options.ignore_globs = {"block5.*"};
  r = CompareRuns(a, b, options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->diverged());
}

TEST_F(CompareTracesTest, MissingAndCorruptedTracesNameTheFile) {
  const std::string a = Path("a.trace"), bad = Path("bad.trace");
  WriteTrace(a, ModelLike(2, 4));
  auto missing = CompareRuns(a, Path("nope.trace"), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ExitCodeFor(missing.status()), kExitIO);
  EXPECT_NE(missing.status().message().find("nope.trace"), std::string::npos);

  std::filesystem::copy_file(a, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(trace::RecordOffset(2) + 40));
    f.put('\x5a');
  }
  auto corrupt = CompareRuns(a, bad, {});
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(ExitCodeFor(corrupt.status()), kExitInvalidData);
  EXPECT_NE(corrupt.status().message().find("bad.trace"), std::string::npos);
}

// ---- run directories, built with the Session API -----------------------------

// A data-parallel run of `world` ranks over 8 examples per step: per-example
// boundaries (example_count 1) whose values depend only on the example, a
// per-rank partial loss over the rank's shard, and an all-reduced gradient
// every rank holds a copy of (rank `bf16_grad_rank` records its copy as bf16).
// Rank `rank` of `world` of a run with `run_id`, CPU only, seed 11.
StatusOr<std::unique_ptr<Session>> OpenRank(const std::string& dir, int rank, int world, const RunId& run_id,
                                            const std::string& config) {
  SessionOptions o;
  o.run_dir = dir;
  o.rank = rank;
  o.world_size = world;
  o.seed = 11;
  o.run_id = run_id;
  o.config_json = config;
  o.gpu = false;
  return Session::Open(o);
}

void WriteDataParallelRun(const std::string& dir, int world, const std::string& config,
                          int steps = 2, int diverge_example = -1, int bf16_grad_rank = -1) {
  constexpr int kBatch = 8;
  const RunId run_id = NewRunId();
  for (int rank = 0; rank < world; ++rank) {
    auto session = OpenRank(dir, rank, world, run_id, config);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    Session& s = **session;
    const int per_rank = kBatch / world;
    for (int step = 0; step < steps; ++step) {
      ASSERT_TRUE(s.BeginStep(step).ok());
      for (int layer = 0; layer < 2; ++layer) {
        for (int k = 0; k < per_rank; ++k) {
          const uint64_t e = static_cast<uint64_t>(step) * kBatch + rank * per_rank + k;
          std::vector<float> act(6);
          for (size_t i = 0; i < act.size(); ++i) act[i] = 0.5f * e + layer + i;
          if (static_cast<int>(e) == diverge_example && layer == 1) act[2] += 1e-3f;
          auto t = MakeTensorRef(act.data(), DType::kF32, {2, 3});
          ASSERT_TRUE(t.ok());
          ASSERT_TRUE(s.Record("layer" + std::to_string(layer) + ".out", trace::Phase::kForward,
                               trace::Direction::kOutput, *t, {e, 1})
                          .ok());
        }
      }
      std::vector<float> partial(1, static_cast<float>(rank + step));
      auto pt = MakeTensorRef(partial.data(), DType::kF32, {1});
      ASSERT_TRUE(s.Record("loss.partial", trace::Phase::kForward, trace::Direction::kOutput, *pt,
                           {static_cast<uint64_t>(step * kBatch + rank * per_rank),
                            static_cast<uint32_t>(per_rank)})
                      .ok());
      std::vector<float> grad(4, 0.25f * step);
      std::vector<uint16_t> grad_bf16(4, 0x3e80);
      auto gt = rank == bf16_grad_rank ? MakeTensorRef(grad_bf16.data(), DType::kBF16, {4})
                                       : MakeTensorRef(grad.data(), DType::kF32, {4});
      ASSERT_TRUE(s.Record("grad.allreduce", trace::Phase::kCollective, trace::Direction::kOutput,
                           *gt, {static_cast<uint64_t>(step * kBatch), kBatch})
                      .ok());
      ASSERT_TRUE(s.EndStep(step, 1.0f).ok());
    }
    ASSERT_TRUE(s.Close().ok());
  }
}

TEST_F(CompareTracesTest, OneRankRunMatchesFourRankRunOfTheSameConfig) {
  const std::string one = Path("one"), four = Path("four");
  WriteDataParallelRun(one, 1, R"({"lr": 0.1})");
  WriteDataParallelRun(four, 4, R"({"lr": 0.1})");
  auto r = CompareRuns(one, four, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->diverged()) << CompareText(*r);
  EXPECT_FALSE(r->ranks_paired);
  EXPECT_EQ(r->a.world_size, 1u);
  EXPECT_EQ(r->b.world_size, 4u);
  EXPECT_TRUE(r->configs_available);
  EXPECT_TRUE(r->config_differences.empty());
  // Compared as logical runs (docs/compare.md §6.3): 2 steps x (16
  // per-example + rank 0's all-reduce) pair; the per-rank partial losses stay
  // unpaired.
  EXPECT_TRUE(r->logical);
  EXPECT_EQ(r->certify.pairs, 2u * 17u);
  EXPECT_EQ(r->unmatched_a, 2u);
  EXPECT_EQ(r->unmatched_b, 2u * 4u);
  // The 3 other ranks' all-reduce copies are checked against rank 0's (equal)
  // and not compared across runs. The partial losses have no counterpart:
  // never compared, so the certified prefix ends before the first of them.
  EXPECT_EQ(r->b.replicas_checked, 2u * 3u);
  EXPECT_EQ(r->rank_disagreement_count, 0u);
  EXPECT_EQ(r->coverage.replicas, 0u);
  EXPECT_EQ(r->coverage.no_counterpart, 2u * (1u + 4u));
  EXPECT_EQ(r->coverage.ambiguous + r->coverage.outside_reach, 0u);
  EXPECT_TRUE(r->certify.stopped_at_uncompared);
  EXPECT_EQ(r->certify.certified_pairs, 16u);
  ASSERT_FALSE(r->uncompared.empty());
  EXPECT_EQ(r->uncompared.front().boundary.name, "loss.partial");
  EXPECT_EQ(r->uncompared.front().why, Unpaired::kNoCounterpart);
  // And the other way round.
  auto back = CompareRuns(four, one, {});
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->diverged());
}

// A rank whose copy of a replicated boundary has another dtype disagrees with
// rank 0 on it (`differs`): the dtype is compared, not part of the key that
// pairs the copies, so it is not two findings (one missing, one extra).
TEST_F(CompareTracesTest, ARankCopyInAnotherDtypeDiffersFromRankZeros) {
  const std::string one = Path("one"), four = Path("four");
  WriteDataParallelRun(one, 1, R"({"lr": 0.1})");
  WriteDataParallelRun(four, 4, R"({"lr": 0.1})", 2, -1, /*bf16_grad_rank=*/2);
  auto r = CompareRuns(one, four, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->logical);
  EXPECT_FALSE(r->diverged());
  EXPECT_EQ(r->rank_disagreement_count, 2u);  // one per step
  ASSERT_EQ(r->rank_disagreements.size(), 2u);
  for (const ReportedRankDisagreement& d : r->rank_disagreements) {
    EXPECT_EQ(d.kind, RankDisagreement::Kind::kDiffers);
    EXPECT_EQ(d.rank, 2u);
    ASSERT_TRUE(d.copy.has_value());
    EXPECT_EQ(d.copy->record.dtype, DType::kBF16);
    EXPECT_EQ(d.reference->record.dtype, DType::kF32);
  }
}

TEST_F(CompareTracesTest, MergedRanksLocateADivergenceInTheRightRankTrace) {
  const std::string one = Path("one"), four = Path("four");
  WriteDataParallelRun(one, 1, "{}");
  WriteDataParallelRun(four, 4, "{}", 2, /*diverge_example=*/13);  // step 1, rank 2
  auto r = CompareRuns(one, four, {});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->diverged());
  const ReportedPair& d = *r->first_divergence;
  EXPECT_EQ(d.a.name, "layer1.out");
  EXPECT_EQ(d.a.record.first_example, 13u);
  EXPECT_EQ(d.b.record.rank, 2u);
  EXPECT_EQ(d.b.record.step, 1u);
  EXPECT_EQ(d.b.trace, TracePathFor(four, 2));
  EXPECT_EQ(d.a.trace, TracePathFor(one, 0));
}

TEST_F(CompareTracesTest, EqualWorldSizesPairRankByRankAndListConfigDifferences) {
  const std::string a = Path("a"), b = Path("b");
  WriteDataParallelRun(a, 2, R"({"lr": 0.1, "model": {"layers": 2}})");
  WriteDataParallelRun(b, 2, R"({"lr": 0.2, "model": {"layers": 2}})", 2, /*diverge_example=*/5);
  auto r = CompareRuns(a, b, {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ranks_paired);
  EXPECT_TRUE(r->lockstep);
  ASSERT_EQ(r->config_differences.size(), 1u);
  EXPECT_EQ(r->config_differences[0].key, "lr");
  EXPECT_EQ(r->config_differences[0].a, "0.1");
  EXPECT_EQ(r->config_differences[0].b, "0.2");
  EXPECT_TRUE(r->config_digests_differ);
  EXPECT_TRUE(r->environments_available);
  ASSERT_TRUE(r->diverged());
  EXPECT_EQ(r->first_divergence->b.record.rank, 1u);
  EXPECT_EQ(r->first_divergence->b.trace, TracePathFor(b, 1));
  // The text report names the config difference before the divergence.
  const std::string text = CompareText(*r);
  EXPECT_LT(text.find("lr: 0.1 | 0.2"), text.find("first divergence"));
}

// A DDP-like job: each rank records its micro-batch's forward and backward
// (rank-level: example_count is the micro-batch), then the reduced gradient
// and the update. In the faulty run rank 1's backward differs at step 1, and
// so does every rank's reduced gradient, which sums rank 1's contribution:
// compare names rank 1's own record, which causally comes first.
void WriteDdpLikeRun(const std::string& dir, bool rank1_faulty_at_step1) {
  constexpr int kWorld = 2, kPerRank = 4, kSteps = 3;
  const RunId run_id = NewRunId();
  for (int rank = 0; rank < kWorld; ++rank) {
    auto session = OpenRank(dir, rank, kWorld, run_id, "{}");
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    Session& s = **session;
    for (int step = 0; step < kSteps; ++step) {
      const bool fault = rank1_faulty_at_step1 && step == 1;
      const uint64_t first = static_cast<uint64_t>(step * kWorld * kPerRank + rank * kPerRank);
      auto record = [&](const char* name, trace::Phase phase, float value, uint64_t f, uint32_t n) {
        std::vector<float> v(4, value);
        auto t = MakeTensorRef(v.data(), DType::kF32, {4});
        ASSERT_TRUE(t.ok());
        ASSERT_TRUE(s.Record(name, phase, trace::Direction::kOutput, *t, {f, n}).ok());
      };
      ASSERT_TRUE(s.BeginStep(step).ok());
      record("mlp.out", trace::Phase::kForward, 1.0f + step + rank, first, kPerRank);
      record("mlp.in.grad", trace::Phase::kBackward, 2.0f + step + rank + (fault && rank == 1 ? 0.5f : 0.0f), first,
             kPerRank);
      const uint64_t batch_first = static_cast<uint64_t>(step * kWorld * kPerRank);
      record("w.grad", trace::Phase::kCollective, 3.0f + step + (fault ? 0.25f : 0.0f), batch_first,
             kWorld * kPerRank);
      record("w", trace::Phase::kOptimizer, 4.0f + step + (fault ? 0.125f : 0.0f), batch_first, kWorld * kPerRank);
      ASSERT_TRUE(s.EndStep(step, 1.0f).ok());
    }
    ASSERT_TRUE(s.Close().ok());
  }
}

TEST_F(CompareTracesTest, AFaultyRanksOwnRecordComesBeforeTheReducedGradientsThatReceivedIt) {
  const std::string a = Path("a"), b = Path("b");
  WriteDdpLikeRun(a, false);
  WriteDdpLikeRun(b, true);
  auto r = CompareRuns(a, b, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->diverged());
  const auto& first = r->first_divergence->b;
  EXPECT_EQ(first.record.step, 1u);
  EXPECT_EQ(first.record.rank, 1u);
  EXPECT_EQ(first.record.phase, trace::Phase::kBackward);
  EXPECT_EQ(first.name, "mlp.in.grad");
  EXPECT_EQ(first.trace, TracePathFor(b, 1));
  EXPECT_EQ(r->certify.certified_steps, 1u);
}

// The installed API (replay/run_comparison.h) reports what CompareRuns
// finds, as plain values, and the same text and JSON as `dgrr compare`.
TEST_F(CompareTracesTest, TheInstalledApiReportsWhatCompareRunsFinds) {
  const std::string a = Path("a"), b = Path("b"), c = Path("c");
  WriteDdpLikeRun(a, false);
  WriteDdpLikeRun(b, true);
  WriteDdpLikeRun(c, false);
  auto same = CompareRunDirectories(a, c);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_FALSE(same->differs);
  EXPECT_EQ(same->exit_code(), kExitOk);
  EXPECT_FALSE(same->first_a.has_value());
  EXPECT_EQ(same->certified_steps, 3u);
  EXPECT_EQ(same->certified_pairs, same->pairs);

  auto api = CompareRunDirectories(a, b, {});
  auto direct = CompareRuns(a, b, {});
  ASSERT_TRUE(api.ok() && direct.ok());
  EXPECT_TRUE(api->differs);
  EXPECT_EQ(api->exit_code(), kExitDivergence);
  ASSERT_TRUE(api->first_b.has_value());
  EXPECT_EQ(api->first_b->name, "mlp.in.grad");
  EXPECT_EQ(api->first_b->phase, "backward");
  EXPECT_EQ(api->first_b->step, 1u);
  EXPECT_EQ(api->first_b->rank, 1u);
  EXPECT_EQ(api->first_b->trace, TracePathFor(b, 1));
  EXPECT_EQ(api->first_b->record_index, direct->first_divergence->b.record_index);
  EXPECT_EQ(api->difference, "values");
  EXPECT_EQ(api->differing_pairs, direct->certify.differing);
  EXPECT_EQ(api->certified_steps, 1u);
  EXPECT_EQ(api->text, CompareText(*direct));
  EXPECT_EQ(nlohmann::json::parse(api->json), nlohmann::json::parse(CompareJson(*direct).dump()));

  auto missing = CompareRunDirectories(a, Path("nowhere"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ExitCodeFor(missing.status()), kExitIO);
}

// A setting that differs while every recorded value agrees explained
// nothing: the report must not call it a likely explanation.
TEST_F(CompareTracesTest, ASettingThatChangedNothingIsNotALikelyExplanation) {
  const std::string a = Path("a"), b = Path("b");
  WriteDataParallelRun(a, 2, R"({"lr": 0.1, "note": "first"})");
  WriteDataParallelRun(b, 2, R"({"lr": 0.1, "note": "second"})");
  auto r = CompareRuns(a, b, {});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->diverged());
  const std::string text = CompareText(*r);
  EXPECT_NE(text.find("config: 1 difference (none changed a recorded value)"), std::string::npos) << text;
  EXPECT_EQ(text.find("likely explanation"), std::string::npos) << text;
}

TEST_F(CompareTracesTest, RunDirectoryMissingARankTraceIsAnIoError) {
  const std::string a = Path("a");
  WriteDataParallelRun(a, 2, "{}", 1);
  std::filesystem::remove(TracePathFor(a, 1));
  auto r = CompareRuns(a, a, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitIO);
  EXPECT_NE(r.status().message().find("rank1.trace"), std::string::npos);
}

TEST(CompareJsonDiff, FlattensNestedKeysAndEnvironmentControls) {
  auto a = nlohmann::json::parse(R"({"x": 1, "o": {"p": [1, 2]}, "only_a": true})");
  auto b = nlohmann::json::parse(R"({"x": 1, "o": {"p": [1, 3]}, "only_b": "s"})");
  std::vector<KeyDifference> d = DiffJson(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "o.p[1]");
  EXPECT_EQ(d[1].key, "only_a");
  EXPECT_FALSE(d[1].b.has_value());
  EXPECT_EQ(d[2].key, "only_b");
  EXPECT_EQ(d[2].b, "\"s\"");

  // An empty list against a filled one is the new elements, nothing more.
  d = DiffJson(nlohmann::json::parse(R"({"inject": [], "m": {}})"),
               nlohmann::json::parse(R"({"inject": ["bitflip:step=3"], "m": {"k": 1}})"));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "inject[0]");
  EXPECT_FALSE(d[0].a.has_value());
  EXPECT_EQ(d[1].key, "m.k");
  // ...but an empty list against an absent key is still a difference.
  d = DiffJson(nlohmann::json::parse(R"({"inject": [], "x": 1})"), nlohmann::json::parse(R"({"x": 1})"));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "inject");

  // Keys as the walk names them, siblings after deep subtrees included: the
  // shared path is cut back to each value's parent before its key is added.
  d = DiffJson(nlohmann::json::parse(R"({"a": {"b": [[{"c": 1}], 2], "": {"": 3}, "[k]": 4}, "z": [5, {"y": 6}]})"),
               nlohmann::json::parse(R"({"a": {"b": [[{"c": 0}], 0], "": {"": 0}, "[k]": 0}, "z": [0, {"y": 0}]})"));
  std::vector<std::string> keys;
  for (const KeyDifference& k : d) keys.push_back(k.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a..", "a.[k]", "a.b[0][0].c", "a.b[1]", "z[0]", "z[1].y"}));
  d = DiffJson(nlohmann::json(1), nlohmann::json(2));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "(root)");

  auto env_a = nlohmann::json::parse(
      R"({"schema": "dgrr.env/1", "host": {"hostname": "h1", "cpu_model": "X"},
          "controls": [{"name": "NCCL_ALGO", "value": "Ring", "origin": "dgrr default"}],
          "collected_unix_ns": 1})");
  auto env_b = nlohmann::json::parse(
      R"({"schema": "dgrr.env/1", "host": {"hostname": "h2", "cpu_model": "X"},
          "controls": [{"name": "NCCL_ALGO", "value": "Tree", "origin": "environment"}],
          "collected_unix_ns": 2})");
  d = DiffJson(EnvironmentForDiff(env_a), EnvironmentForDiff(env_b));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "controls.NCCL_ALGO.origin");
  EXPECT_EQ(d[1].key, "controls.NCCL_ALGO.value");
}

}  // namespace
}  // namespace dgrr::replay
