// Checkpoint format v2: per-rank shards committed by a manifest. A step
// exists only with its manifest; a damaged, missing or foreign shard is
// refused naming its file; uncommitted shards are garbage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "checkpoint/checkpoint_file.h"

namespace dgrr::checkpoint {
namespace {

namespace fs = std::filesystem;

// One rank: replicated weights and a step counter, its own cursor.
struct Rank {
  std::vector<float> weights;
  uint64_t step = 9;
  uint64_t cursor = 0;
  StateRegistry registry;
  explicit Rank(int rank) : weights(3000) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 97) * 0.25f;
    cursor = 100 + static_cast<uint64_t>(rank);
    EXPECT_TRUE(registry.Register({"weights", weights.data(), weights.size() * 4, DType::kF32, {30, 100},
                                   StateRole::kParameter, RestorePolicy::kCheckpoint, true}).ok());
    EXPECT_TRUE(registry.Register({"opt.step", &step, 8, DType::kU64, {}, StateRole::kCounter,
                                   RestorePolicy::kCheckpoint, true}).ok());
    EXPECT_TRUE(registry.Register({"data.cursor", &cursor, 8, DType::kU64, {}, StateRole::kCursor,
                                   RestorePolicy::kCheckpoint, false}).ok());
  }
};

class CheckpointShards : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / ("dgrr_shards_" + std::to_string(::getpid()) + "_" + info->name())).string();
    fs::remove_all(dir_);
    for (int r = 0; r < 2; ++r) ranks_.push_back(std::make_unique<Rank>(r));
  }
  void TearDown() override { fs::remove_all(dir_); }

  CheckpointMeta Meta(uint64_t step) const {
    CheckpointMeta meta;
    meta.step = step;
    meta.config_digest = 0xfeed;
    meta.run_id_hex = "00112233445566778899aabbccddeeff";
    meta.world_size = 2;
    meta.plan_json = R"({"plans":[]})";
    return meta;
  }
  // Both shards, as two rank processes would write them, then the manifest.
  std::vector<ShardRecord> WriteShards(uint64_t step) {
    std::vector<ShardRecord> shards;
    for (int r = 0; r < 2; ++r) {
      auto shard = WriteCheckpointShard(CheckpointPath(dir_, step), Meta(step),
                                        {r, &ranks_[r]->registry, 10u * (r + 1)});
      EXPECT_TRUE(shard.ok()) << shard.status().ToString();
      if (shard.ok()) shards.push_back(*shard);
    }
    return shards;
  }
  void Commit(uint64_t step, std::vector<ShardRecord> shards) {
    ASSERT_TRUE(CommitCheckpoint(CheckpointPath(dir_, step), Meta(step), std::move(shards)).ok());
  }
  static void FlipByte(const std::string& path, std::streamoff offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(offset);
    f.write(&c, 1);
  }

  std::string dir_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

TEST_F(CheckpointShards, ShardsAndManifestReadBackAsOneCheckpointWithTheV1Digest) {
  Commit(4, WriteShards(4));
  auto ckpt = ReadCheckpoint(CheckpointPath(dir_, 4));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->ranks.size(), 2u);
  EXPECT_EQ(ckpt->ranks[1].trace_position, 20u);
  EXPECT_EQ(ckpt->replicated.size(), 2u) << "weights and opt.step, once, from rank 0's shard";
  EXPECT_EQ(ckpt->meta.plan_json, Meta(4).plan_json);
  // The same state as a v1 file has the same overall digest (bisect compares them).
  const std::string v1 = dir_ + "/v1.h5";
  ASSERT_TRUE(WriteCheckpoint(v1, Meta(4), {{0, &ranks_[0]->registry, 10}, {1, &ranks_[1]->registry, 20}}).ok());
  auto single = ReadCheckpoint(v1);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  EXPECT_EQ(single->state_digest, ckpt->state_digest);
  EXPECT_EQ(ReadCheckpointHeader(CheckpointPath(dir_, 4))->state_digest, ckpt->state_digest);
  Rank fresh(1);
  fresh.cursor = 0;
  fresh.weights.assign(fresh.weights.size(), 0.0f);
  ASSERT_TRUE(RestoreRank(*ckpt, 1, fresh.registry).ok());
  EXPECT_EQ(fresh.cursor, 101u);
  EXPECT_EQ(fresh.weights, ranks_[1]->weights);
}

TEST_F(CheckpointShards, WithoutItsManifestAStepDoesNotExistAndItsShardsAreGarbage) {
  Commit(2, WriteShards(2));
  WriteShards(4);  // killed before the manifest
  ASSERT_TRUE(fs::exists(ShardPath(CheckpointPath(dir_, 4), 1)));
  EXPECT_EQ(*ListCheckpointSteps(dir_), std::vector<uint64_t>{2});
  auto newest = FindNewestGoodCheckpoint(dir_, UINT64_MAX, /*fallback=*/false);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->meta.step, 2u);
  auto removed = RemoveStaleTemporaries(dir_);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 2);
  EXPECT_FALSE(fs::exists(ShardPath(CheckpointPath(dir_, 4), 0)));
  EXPECT_TRUE(fs::exists(ShardPath(CheckpointPath(dir_, 2), 1))) << "a committed step's shards stay";
  EXPECT_TRUE(ReadCheckpoint(CheckpointPath(dir_, 2)).ok());
}

TEST_F(CheckpointShards, AFlippedByteInAShardIsRefusedNamingTheShard) {
  Commit(4, WriteShards(4));
  const std::string shard = ShardPath(CheckpointPath(dir_, 4), 1);
  FlipByte(shard, static_cast<std::streamoff>(fs::file_size(shard) - 10));
  auto ckpt = ReadCheckpoint(CheckpointPath(dir_, 4));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_TRUE(ckpt.status().IsCorruption()) << ckpt.status().ToString();
  EXPECT_NE(ckpt.status().message().find(shard + ": offset 512"), std::string::npos) << ckpt.status().ToString();
}

TEST_F(CheckpointShards, AMissingShardIsRefusedNamingItAndTheManifest) {
  Commit(4, WriteShards(4));
  const std::string shard = ShardPath(CheckpointPath(dir_, 4), 1);
  fs::remove(shard);
  auto ckpt = ReadCheckpoint(CheckpointPath(dir_, 4));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_TRUE(ckpt.status().IsCorruption()) << ckpt.status().ToString();
  EXPECT_NE(ckpt.status().message().find(shard + ": offset 0: missing"), std::string::npos)
      << ckpt.status().ToString();
  // With --fallback an older good checkpoint is used instead.
  Commit(2, WriteShards(2));
  std::vector<std::string> skipped;
  auto older = FindNewestGoodCheckpoint(dir_, UINT64_MAX, /*fallback=*/true, &skipped);
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_EQ(older->meta.step, 2u);
  ASSERT_EQ(skipped.size(), 1u);
}

TEST_F(CheckpointShards, AShardOfAnotherWriteIsRefusedByTheManifestsHash) {
  std::vector<ShardRecord> shards = WriteShards(4);
  Commit(4, shards);
  // Rank 1's shard written again with other contents (a later attempt at the
  // same step that never committed): it is whole, but not what was committed.
  ranks_[1]->cursor = 555;
  ASSERT_TRUE(WriteCheckpointShard(CheckpointPath(dir_, 4), Meta(4), {1, &ranks_[1]->registry, 20}).ok());
  auto ckpt = ReadCheckpoint(CheckpointPath(dir_, 4));
  ASSERT_FALSE(ckpt.ok());
  const std::string shard = ShardPath(CheckpointPath(dir_, 4), 1);
  EXPECT_NE(ckpt.status().message().find(shard + ": offset "), std::string::npos) << ckpt.status().ToString();
  EXPECT_NE(ckpt.status().message().find("manifest"), std::string::npos) << ckpt.status().ToString();
}

TEST_F(CheckpointShards, AShardIsNotACheckpointAndAManifestNeedsEveryRank) {
  std::vector<ShardRecord> shards = WriteShards(4);
  auto read = ReadCheckpoint(ShardPath(CheckpointPath(dir_, 4), 0));
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("dgrr checkpoint shard"), std::string::npos) << read.status().ToString();
  shards.pop_back();
  EXPECT_FALSE(CommitCheckpoint(CheckpointPath(dir_, 4), Meta(4), shards).ok());
  EXPECT_FALSE(fs::exists(CheckpointPath(dir_, 4)));
}

// A resuming rank reads the manifest and its own shard; rank 0's too only when
// its digest covers replicated entries (which rank 0's shard holds).
TEST_F(CheckpointShards, ARankReadsItsOwnShardAndRankZerosOnlyForReplicatedState) {
  Commit(4, WriteShards(4));
  auto one = ReadCheckpointForRank(CheckpointPath(dir_, 4), 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->loaded_rank, 1);
  EXPECT_EQ(one->replicated.size(), 2u) << "rank 1 restores the replicated weights and opt.step";
  EXPECT_EQ(one->ranks[0].trace_position, 10u) << "the other rank's records come from the manifest";
  EXPECT_TRUE(one->ranks[0].entries.empty());
  Rank fresh(1);
  fresh.cursor = 0;
  fresh.weights.assign(fresh.weights.size(), 0.0f);
  ASSERT_TRUE(RestoreRank(*one, 1, fresh.registry).ok());
  EXPECT_EQ(fresh.cursor, 101u);
  EXPECT_EQ(fresh.weights, ranks_[1]->weights);
  EXPECT_TRUE(RestoreRank(*one, 0, fresh.registry).IsInvalidArgument()) << "rank 0's part was not read";
  // Rank 0's shard damaged: rank 1 needs it (replicated state) and says so.
  const std::string shard0 = ShardPath(CheckpointPath(dir_, 4), 0);
  FlipByte(shard0, static_cast<std::streamoff>(fs::file_size(shard0) - 10));
  auto damaged = ReadCheckpointForRank(CheckpointPath(dir_, 4), 1);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(shard0 + ": offset 512"), std::string::npos)
      << damaged.status().ToString();
}

TEST_F(CheckpointShards, WithoutReplicatedStateARankNeverReadsAnotherRanksShard) {
  std::vector<std::vector<float>> own(2, std::vector<float>(5000));
  std::vector<StateRegistry> registries(2);
  std::vector<ShardRecord> shards;
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < own[r].size(); ++i) own[r][i] = static_cast<float>(r * 7 + i % 13);
    ASSERT_TRUE(registries[r].Register({"w", own[r].data(), own[r].size() * 4, DType::kF32, {50, 100},
                                        StateRole::kParameter, RestorePolicy::kCheckpoint, false}).ok());
    auto shard = WriteCheckpointShard(CheckpointPath(dir_, 6), Meta(6), {r, &registries[r], 5u + r});
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    shards.push_back(*shard);
  }
  Commit(6, shards);
  const std::string shard0 = ShardPath(CheckpointPath(dir_, 6), 0);
  FlipByte(shard0, static_cast<std::streamoff>(fs::file_size(shard0) - 10));
  auto one = ReadCheckpointForRank(CheckpointPath(dir_, 6), 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(one->replicated.empty());
  std::vector<float> back(5000, 0.0f);
  StateRegistry into;
  ASSERT_TRUE(into.Register({"w", back.data(), back.size() * 4, DType::kF32, {50, 100}, StateRole::kParameter,
                             RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(RestoreRank(*one, 1, into).ok());
  EXPECT_EQ(back, own[1]);
  // Rank 0 reads its own (damaged) shard and refuses it, naming it.
  auto zero = ReadCheckpointForRank(CheckpointPath(dir_, 6), 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(zero.status().IsCorruption());
  EXPECT_NE(zero.status().message().find(shard0 + ": offset 512"), std::string::npos) << zero.status().ToString();
  // The ranks' agreement makes both fall back to step 2 together, or (without
  // fallback) both fail, the healthy rank naming the one that failed.
  Commit(2, WriteShards(2));
  auto agree_for = [&](int me) {
    return [&, me](const std::string& path, const Status& mine) -> Status {
      const Status other = ReadCheckpointForRank(path, 1 - me).status();
      if (!mine.ok()) return mine;
      if (!other.ok()) return Status::Corruption(path + ": rank " + std::to_string(1 - me) + " failed");
      return Status::OK();
    };
  };
  for (int me = 0; me < 2; ++me) {
    auto found = FindNewestGoodCheckpointForRank(dir_, UINT64_MAX, /*fallback=*/true, me, agree_for(me));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->meta.step, 2u) << "rank " << me;
    EXPECT_EQ(found->loaded_rank, me);
    auto strict = FindNewestGoodCheckpointForRank(dir_, UINT64_MAX, /*fallback=*/false, me, agree_for(me));
    ASSERT_FALSE(strict.ok()) << "rank " << me;
    EXPECT_NE(strict.status().message().find("checkpoint of step 6 (pass --fallback"), std::string::npos)
        << strict.status().ToString();
  }
}

}  // namespace
}  // namespace dgrr::checkpoint
