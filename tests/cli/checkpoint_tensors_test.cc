// Checkpoints as named tensors: the reference trainer saves one dataset per
// parameter and per AdamW moment tensor, with the model's names and shapes;
// runs whose checkpoints hold the earlier flat entries (params, adamw.m,
// adamw.v) still replay, roll back and resume bit for bit; and
// `dgrr diff-tensor` compares two checkpoints tensor by tensor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "model/config.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CheckpointTensorsTest : public test_support::TempDirTest {
 protected:
  // Trains a tiny run; returns train's stdout.
  std::string Train(const std::string& out, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train", "--model", "tiny", "--out", out, "--steps", "6", "--ckpt-every", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandOutput r = RunCaptured(args);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.out;
  }
  static std::string ParamsXxh3(const std::string& out) {
    const size_t at = out.find("params xxh3 ");
    return at == std::string::npos ? "" : out.substr(at + 12, 16);
  }
};

// The checkpoint of `step` rewritten as runs wrote it before the per-tensor
// layout: one flat f32 entry each for params, adamw.m and adamw.v (the
// tensors concatenated in the model's layout order), same meta, same trace
// positions.
void RewriteAsFlat(const std::string& run, uint64_t step) {
  const std::string path = checkpoint::CheckpointPath(run, step);
  auto ckpt = checkpoint::ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto preset = model::PresetByName("tiny");
  ASSERT_TRUE(preset.ok());
  const model::ParameterLayout layout(preset->model);
  std::vector<std::vector<float>> flat(3, std::vector<float>(layout.total_size()));
  const char* prefixes[] = {"", "adamw.m.", "adamw.v."};
  for (size_t v = 0; v < 3; ++v) {
    for (const model::NamedTensor& t : layout.tensors()) {
      const checkpoint::SavedEntry* e = ckpt->Find(0, prefixes[v] + t.name);
      ASSERT_NE(e, nullptr) << prefixes[v] << t.name;
      ASSERT_EQ(e->shape, t.shape) << t.name;
      std::memcpy(flat[v].data() + t.offset, e->data.data(), e->data.size());
    }
  }
  uint64_t adamw_t = 0;
  std::memcpy(&adamw_t, ckpt->Find(0, "adamw.t")->data.data(), 8);
  StateRegistry flat_state;
  const int64_t n = static_cast<int64_t>(layout.total_size());
  const char* names[] = {"params", "adamw.m", "adamw.v"};
  for (size_t v = 0; v < 3; ++v) {
    ASSERT_TRUE(flat_state
                    .Register({names[v], flat[v].data(), static_cast<uint64_t>(n) * 4, DType::kF32, {n},
                               v == 0 ? StateRole::kParameter : StateRole::kOptimizer,
                               RestorePolicy::kCheckpoint, true})
                    .ok());
  }
  ASSERT_TRUE(flat_state.Register({"adamw.t", &adamw_t, 8, DType::kU64, {1}, StateRole::kCounter,
                                   RestorePolicy::kCheckpoint, true}).ok());
  std::vector<checkpoint::ShardRecord> shards;
  for (const checkpoint::SavedRank& r : ckpt->ranks) {
    auto shard = checkpoint::WriteCheckpointShard(path, ckpt->meta, {r.rank, &flat_state, r.trace_position});
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    shards.push_back(*shard);
  }
  ASSERT_TRUE(checkpoint::CommitCheckpoint(path, ckpt->meta, shards).ok());
  auto again = checkpoint::ReadCheckpoint(path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_NE(again->Find(0, "params"), nullptr);
  ASSERT_EQ(again->Find(0, "wte"), nullptr);
}

TEST_F(CheckpointTensorsTest, EveryParameterAndMomentIsADatasetNamedAndShapedAsTheModelHasIt) {
  Train(Path("run"), {"--ranks", "2"});
  auto ckpt = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(Path("run"), 5));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto preset = model::PresetByName("tiny");
  ASSERT_TRUE(preset.ok());
  const model::ParameterLayout layout(preset->model);
  EXPECT_EQ(ckpt->replicated.size(), 3 * layout.tensors().size() + 1)
      << "per tensor x3 and adamw.t (the plan fast-forwards the cursor)";
  for (const model::NamedTensor& t : layout.tensors()) {
    const checkpoint::SavedEntry* p = ckpt->Find(1, t.name);
    ASSERT_NE(p, nullptr) << t.name;
    EXPECT_EQ(p->shape, t.shape) << t.name;
    EXPECT_EQ(p->role, StateRole::kParameter);
    for (const std::string moment : {"adamw.m.", "adamw.v."}) {
      const checkpoint::SavedEntry* m = ckpt->Find(1, moment + t.name);
      ASSERT_NE(m, nullptr) << moment << t.name;
      EXPECT_EQ(m->shape, t.shape);
      EXPECT_EQ(m->role, StateRole::kOptimizer);
    }
  }
  const checkpoint::SavedEntry* qkv = ckpt->Find(0, "block0.attn.qkv.w");
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(preset->model.channels, 64);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(ckpt->Find(0, "params"), nullptr);
  // What a user of h5py sees in rank 0's shard (the zstd filter through
  // dgrr's plugin).
  const std::string shard = checkpoint::ShardPath(checkpoint::CheckpointPath(Path("run"), 5), 0);
  const std::string listing = Path("h5py.txt");
  const std::string cmd = "HDF5_PLUGIN_PATH='" + std::string(DGRR_BINARY_DIR) +
                          "/hdf5_plugin' /usr/bin/python3 -c 'import h5py, sys\n"
                          "f = h5py.File(sys.argv[1], \"r\")\n"
                          "for n in f[\"replicated\"]: print(\"/replicated/%s %s %s\" % (n, f[\"replicated\"][n].shape, "
                          "f[\"replicated\"][n][()].dtype))' '" + shard + "' > '" + listing + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string seen = ReadBytes(listing);
  EXPECT_NE(seen.find("/replicated/block0.attn.qkv.w (64, 192) float32\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("/replicated/adamw.v.wte ("), std::string::npos) << seen;
  EXPECT_NE(seen.find("/replicated/adamw.t (1,) uint64\n"), std::string::npos) << seen;
  // The plan still speaks of the program's variables.
  const CommandOutput plan = RunCaptured({"plan", Path("run")});
  ASSERT_EQ(plan.rc, 0) << plan.err;
  EXPECT_NE(plan.out.find("params"), std::string::npos) << plan.out;
}

// Old runs still replay, roll back and resume: their checkpoints are split
// into the model's tensors on restore, and every recorded bit agrees.
TEST_F(CheckpointTensorsTest, RunsWithFlatCheckpointsReplayRollBackAndResumeBitForBit) {
  const std::string full = ParamsXxh3(Train(Path("full"), {"--ranks", "2"}));
  ASSERT_FALSE(full.empty());
  // A run of the same options stopped after step 3, its checkpoints rewritten
  // the old way.
  const std::string run = Path("old");
  Train(run, {"--ranks", "2"});
  RewriteAsFlat(run, 1);
  RewriteAsFlat(run, 3);
  fs::remove(checkpoint::CheckpointPath(run, 5));
  for (int r = 0; r < 2; ++r) fs::remove(checkpoint::ShardPath(checkpoint::CheckpointPath(run, 5), r));

  CommandOutput r = RunCaptured({"replay", run, "--from", "2", "--quiet"});
  EXPECT_EQ(r.rc, 0) << "replay from the flat checkpoint of step 1 reproduces every record: " << r.err;
  r = RunCaptured({"rollback", run, "--step", "4", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto rewritten = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(run, 4));
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().ToString();
  EXPECT_NE(rewritten->Find(0, "wte"), nullptr) << "the checkpoint rollback writes is per tensor";
  r = RunCaptured({"rollback", run, "--step", "3", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = RunCaptured({"train", "--out", run, "--resume"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(ParamsXxh3(r.out), full) << "resumed from the flat checkpoint of step 3: " << r.out;
}

TEST_F(CheckpointTensorsTest, DiffTensorComparesCheckpointsTensorByTensor) {
  Train(Path("a"), {"--ranks", "1"});
  Train(Path("b"), {"--ranks", "1"});
  Train(Path("flipped"), {"--ranks", "1", "--inject", "bitflip:step=5,at=block0.attn.qkv.w,index=7"});

  CommandOutput r = RunCaptured({"diff-tensor", Path("a"), Path("b")});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("(checkpoint of step 5, 1 rank, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("identical: "), std::string::npos) << r.out;
  r = RunCaptured({"diff-tensor", checkpoint::CheckpointPath(Path("a"), 3), Path("b"), "--step", "3", "-q"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "");

  r = RunCaptured({"diff-tensor", Path("a"), Path("flipped"), "--json"});
  ASSERT_EQ(r.rc, kExitDivergence) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["schema"], "dgrr.diff-tensor/2");
  EXPECT_EQ(j["a"]["kind"], "checkpoint");
  EXPECT_EQ(j["a"]["step"], 5);
  EXPECT_EQ(j["total"]["differing"], 1) << "one flipped bit, in one tensor";
  EXPECT_EQ(j["total"]["max_ulp_diff"], 1 << 20);
  EXPECT_TRUE(j["only_in_a"].empty() && j["only_in_b"].empty() && j["mismatched"].empty());
  int differing_tensors = 0;
  for (const json& d : j["datasets"]) {
    if (d["differing"] == 0) continue;
    ++differing_tensors;
    EXPECT_EQ(d["name"], "replicated/block0.attn.qkv.w");
    EXPECT_EQ(d["first_differences"][0]["flat_index"], 7);
    EXPECT_EQ(d["shape"].size(), 2u);
  }
  EXPECT_EQ(differing_tensors, 1);

  // One shard against the other run's: the same finding, in text.
  const std::string shard_a = checkpoint::ShardPath(checkpoint::CheckpointPath(Path("a"), 5), 0);
  const std::string shard_f = checkpoint::ShardPath(checkpoint::CheckpointPath(Path("flipped"), 5), 0);
  r = RunCaptured({"diff-tensor", shard_a, shard_f});
  EXPECT_EQ(r.rc, kExitDivergence) << r.err;
  EXPECT_NE(r.out.find("(checkpoint shard of rank 0 of 1, step 5, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replicated/block0.attn.qkv.w (f32 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": 1 of "), std::string::npos) << r.out;

  // An earlier step of the flipped run, before the flip, agrees.
  EXPECT_EQ(RunCaptured({"diff-tensor", Path("a"), Path("flipped"), "--step", "3", "-q"}).rc, kExitOk);
  // Errors: no such step, a damaged checkpoint, like compared with unlike.
  r = RunCaptured({"diff-tensor", Path("a"), Path("b"), "--step", "4"});
  EXPECT_EQ(r.rc, kExitIO);
  EXPECT_NE(r.err.find("no checkpoint of step 4"), std::string::npos) << r.err;
  std::string bytes = ReadBytes(shard_f);
  bytes[bytes.size() - 9] ^= 1;
  WriteBytes(shard_f, bytes);
  r = RunCaptured({"diff-tensor", Path("a"), Path("flipped")});
  EXPECT_EQ(r.rc, kExitInvalidData);
  EXPECT_NE(r.err.find("step-00000005.rank-0.h5"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(RunCaptured({"replay", Path("a"), "--from", "1", "--to", "1", "--dump", "loss@1", "--dump-dir",
                         Path("dumps"), "-q"})
                .rc,
            0);
  r = RunCaptured({"diff-tensor", Path("dumps") + "/loss@1.rank0.h5", Path("a")});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("A is a dump and B a checkpoint"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace dgrr::cli
