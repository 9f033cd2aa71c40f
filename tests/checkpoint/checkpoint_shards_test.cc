// Checkpoint formats v2 and v3: per-rank shards committed by a manifest. A
// step exists only with its manifest; a damaged, missing or foreign shard is
// refused naming its file; uncommitted shards are garbage; v3 spreads the
// replicated entries over the shards and v2 (all in rank 0's) still reads.
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
  std::vector<ShardRecord> WriteShards(uint64_t step, const CheckpointWriteOptions& options = {},
                                      const CheckpointWriteOptions* rank1_options = nullptr) {
    std::vector<ShardRecord> shards;
    for (int r = 0; r < 2; ++r) {
      auto shard = WriteCheckpointShard(CheckpointPath(dir_, step), Meta(step),
                                        {r, &ranks_[r]->registry, 10u * (r + 1)},
                                        r == 1 && rank1_options != nullptr ? *rank1_options : options);
      EXPECT_TRUE(shard.ok()) << shard.status().ToString();
      if (shard.ok()) shards.push_back(*shard);
    }
    return shards;
  }
  void Commit(uint64_t step, std::vector<ShardRecord> shards, const CheckpointWriteOptions& options = {}) {
    ASSERT_TRUE(CommitCheckpoint(CheckpointPath(dir_, step), Meta(step), std::move(shards), options).ok());
  }
  // The replicated entries each rank's shard holds, read alone.
  std::vector<size_t> HeldPerShard(uint64_t step) const {
    std::vector<size_t> held;
    for (int r = 0; r < 2; ++r) {
      auto shard = ReadCheckpointShard(ShardPath(CheckpointPath(dir_, step), r));
      EXPECT_TRUE(shard.ok()) << shard.status().ToString();
      held.push_back(shard.ok() ? shard->replicated.size() : 999);
    }
    return held;
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

  // Flips a byte of `damaged`'s shard of `step`; `reader`, which needs that
  // shard, refuses the checkpoint naming it.
  void ExpectReaderNamesDamagedShard(uint64_t step, int damaged, int reader) {
    const std::string shard = ShardPath(CheckpointPath(dir_, step), damaged);
    FlipByte(shard, static_cast<std::streamoff>(fs::file_size(shard) - 10));
    auto read = ReadCheckpointForRank(CheckpointPath(dir_, step), reader);
    ASSERT_FALSE(read.ok());
    EXPECT_NE(read.status().message().find(shard + ": offset 512"), std::string::npos) << read.status().ToString();
  }
  // A third replicated entry on every rank, "a.bias" (12,000 bytes).
  void AddReplicatedBias() {
    for (auto& r : ranks_) {
      ASSERT_TRUE(r->registry.Register({"a.bias", bias_.data(), bias_.size() * 4, DType::kF32, {3000},
                                        StateRole::kParameter, RestorePolicy::kCheckpoint, true}).ok());
    }
  }

  std::string dir_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<float> bias_ = std::vector<float>(3000, 1.5f);
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
  ExpectReaderNamesDamagedShard(4, 0, 1);
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

TEST(ReplicatedShares, EntriesGoToTheRankWhereTheirFirstByteFalls) {
  // 4 entries of 10 bytes over 2 ranks: share 20, starts 0 10 20 30.
  EXPECT_EQ(ReplicatedShareOwners({10, 10, 10, 10}, 2, 1), (std::vector<int>{0, 0, 1, 1}));
  // A big entry first pushes the rest to later ranks; the last rank takes the tail.
  EXPECT_EQ(ReplicatedShareOwners({30, 5, 5}, 2, 1), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(ReplicatedShareOwners({10, 10, 10, 10, 10}, 4, 1), (std::vector<int>{0, 0, 1, 2, 3}));
  // Less than the minimum share stays whole on rank 0; one rank holds all.
  EXPECT_EQ(ReplicatedShareOwners({10, 10, 10, 10}, 2, 100), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(ReplicatedShareOwners({10, 10}, 1, 1), (std::vector<int>{0, 0}));
  EXPECT_EQ(ReplicatedShareOwners({0, 0, 7}, 3, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(ReplicatedShareOwners({}, 2, 1).empty());
}

// v3: with shares small enough, each shard holds part of the replicated
// state; every reader gathers it, with the digest of the same state written
// as v1 or v2, and a rank needs every shard that holds some.
TEST_F(CheckpointShards, ReplicatedEntriesSpreadOverTheShardsReadBackWhole) {
  CheckpointWriteOptions spread;
  spread.replicated_share_min_bytes = 1;
  // By name: a.bias (12,000 bytes), opt.step (8), weights (12,000); share
  // 12,004: weights starts at 12,008, on rank 1.
  AddReplicatedBias();
  Commit(6, WriteShards(6, spread));
  EXPECT_EQ(HeldPerShard(6), (std::vector<size_t>{2, 1})) << "a.bias and opt.step on rank 0, weights on rank 1";
  auto ckpt = ReadCheckpoint(CheckpointPath(dir_, 6));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ASSERT_EQ(ckpt->replicated.size(), 3u);
  EXPECT_EQ(ckpt->replicated[0].name, "a.bias");
  EXPECT_EQ(ckpt->replicated[2].name, "weights");
  // The same state as v1 and as v2: the same overall digest.
  const std::string v1 = dir_ + "/v1.h5";
  ASSERT_TRUE(WriteCheckpoint(v1, Meta(6), {{0, &ranks_[0]->registry, 10}, {1, &ranks_[1]->registry, 20}}).ok());
  EXPECT_EQ(ReadCheckpoint(v1)->state_digest, ckpt->state_digest);
  CheckpointWriteOptions v2;
  v2.format_version = 2;
  v2.replicated_share_min_bytes = 1;
  Commit(8, WriteShards(8, v2), v2);
  EXPECT_EQ(HeldPerShard(8), (std::vector<size_t>{3, 0})) << "v2 keeps them all in rank 0's shard";
  EXPECT_EQ(ReadCheckpointHeader(CheckpointPath(dir_, 8))->format_version, 2u);
  auto older = ReadCheckpoint(CheckpointPath(dir_, 8));
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_EQ(older->state_digest, ckpt->state_digest);
  EXPECT_EQ(older->replicated.size(), 3u);
  for (uint64_t step : {6u, 8u}) {
    for (int r = 0; r < 2; ++r) {
      auto mine = ReadCheckpointForRank(CheckpointPath(dir_, step), r);
      ASSERT_TRUE(mine.ok()) << step << " rank " << r << ": " << mine.status().ToString();
      EXPECT_EQ(mine->replicated.size(), 3u) << step << " rank " << r;
      Rank fresh(r);
      std::vector<float> bias(3000, 0.0f);
      ASSERT_TRUE(fresh.registry.Register({"a.bias", bias.data(), bias.size() * 4, DType::kF32, {3000},
                                           StateRole::kParameter, RestorePolicy::kCheckpoint, true}).ok());
      fresh.cursor = 0;
      fresh.weights.assign(fresh.weights.size(), 0.0f);
      ASSERT_TRUE(RestoreRank(*mine, r, fresh.registry).ok());
      EXPECT_EQ(fresh.cursor, 100u + r);
      EXPECT_EQ(fresh.weights, ranks_[r]->weights);
      EXPECT_EQ(bias, bias_);
    }
  }
  // Rank 0 of v3 needs rank 1's shard (it holds weights) and names it when damaged.
  ExpectReaderNamesDamagedShard(6, 1, 0);
}

// Deferred reading: the shards are verified whole when read, the bytes go
// straight from them into the registered buffers at restore; a shard
// replaced in between is refused, naming it.
TEST_F(CheckpointShards, DeferredEntriesAreReadStraightIntoTheRegisteredBuffers) {
  CheckpointWriteOptions spread;
  spread.replicated_share_min_bytes = 1;
  Commit(4, WriteShards(4, spread));
  for (int r = 0; r < 2; ++r) {
    auto read = r == 0 ? ReadCheckpoint(CheckpointPath(dir_, 4), EntryData::kDeferred)
                       : ReadCheckpointForRank(CheckpointPath(dir_, 4), r, EntryData::kDeferred);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    const SavedEntry* weights = read->Find(r, "weights");
    ASSERT_NE(weights, nullptr);
    EXPECT_TRUE(weights->data.empty() && weights->deferred != nullptr);
    EXPECT_EQ(weights->size(), 12000u);
    EXPECT_EQ(read->state_digest, ReadCheckpoint(CheckpointPath(dir_, 4))->state_digest);
    Rank fresh(r);
    fresh.cursor = 0;
    fresh.step = 0;
    fresh.weights.assign(fresh.weights.size(), 0.0f);
    ASSERT_TRUE(RestoreRank(*read, r, fresh.registry).ok());
    EXPECT_EQ(fresh.cursor, 100u + r);
    EXPECT_EQ(fresh.step, 9u);
    EXPECT_EQ(fresh.weights, ranks_[r]->weights);
  }
  // Rank 1's shard replaced after it was verified: the restore refuses it.
  auto read = ReadCheckpointForRank(CheckpointPath(dir_, 4), 1, EntryData::kDeferred);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ranks_[1]->cursor = 555;
  ASSERT_TRUE(WriteCheckpointShard(CheckpointPath(dir_, 4), Meta(4), {1, &ranks_[1]->registry, 20}, spread).ok());
  Rank fresh(1);
  const Status restored = RestoreRank(*read, 1, fresh.registry);
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.message().find(ShardPath(CheckpointPath(dir_, 4), 1) + ": the file was replaced or modified"),
            std::string::npos)
      << restored.ToString();
}

// Shards that disagree on who holds what (written with other share sizes):
// an entry held twice, or by nobody, is refused naming the shard.
TEST_F(CheckpointShards, ReplicatedEntriesHeldTwiceOrByNoShardAreRefused) {
  AddReplicatedBias();
  CheckpointWriteOptions spread, whole;
  spread.replicated_share_min_bytes = 1;  // rank 0: a.bias, opt.step; rank 1: weights
  Commit(4, WriteShards(4, whole, &spread));  // rank 0 holds all three, rank 1 weights again
  auto twice = ReadCheckpoint(CheckpointPath(dir_, 4));
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(twice.status().IsCorruption());
  EXPECT_NE(twice.status().message().find(ShardPath(CheckpointPath(dir_, 4), 1) +
                                          ": /replicated/weights: another shard holds it too"),
            std::string::npos)
      << twice.status().ToString();
  Commit(6, WriteShards(6, spread, &whole));  // rank 0: a.bias, opt.step; rank 1 none: weights lost
  auto lost = ReadCheckpoint(CheckpointPath(dir_, 6));
  ASSERT_FALSE(lost.ok());
  EXPECT_NE(lost.status().message().find(ShardPath(CheckpointPath(dir_, 6), 0) +
                                         ": /ranks/0: state_digest does not match the saved entries"),
            std::string::npos)
      << lost.status().ToString();
  EXPECT_FALSE(ReadCheckpointForRank(CheckpointPath(dir_, 6), 1).ok());
  CheckpointWriteOptions bad;
  bad.format_version = 4;
  EXPECT_TRUE(WriteCheckpointShard(CheckpointPath(dir_, 8), Meta(8), {0, &ranks_[0]->registry, 1}, bad)
                  .status()
                  .IsInvalidArgument());
}

}  // namespace
}  // namespace dgrr::checkpoint
