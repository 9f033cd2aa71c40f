// HDF5+zstd checkpoint files: round trip, replicated-state checks, size bound,
// damage refused, atomic writes, newest-good lookup, and h5dump through the
// plugin library.
#include "checkpoint/checkpoint_file.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/coding.h"
#include "base/file.h"

namespace dgrr::checkpoint {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() / ("dgrr_ckpt_" + std::to_string(::getpid()) + "_" +
                                          info->test_suite_name() + "_" + info->name())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A rank's training state shaped like the tiny model (model/config.cc preset
// "tiny": 117,504 f32 parameters) with AdamW moments and counters.
struct RankState {
  std::vector<float> params, adam_m, adam_v;
  uint64_t step = 0;
  uint64_t cursor[2] = {0, 0};
  uint64_t rng_position = 0;
  std::vector<float> scratch;
  StateRegistry registry;

  RankState(int rank, size_t n_params, uint32_t seed) : params(n_params), adam_m(n_params), adam_v(n_params) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (size_t i = 0; i < n_params; ++i) {
      params[i] = normal(gen);
      adam_m[i] = normal(gen) * 1e-3f;
      adam_v[i] = std::abs(normal(gen)) * 1e-6f;
    }
    step = 40;
    cursor[0] = 1;
    cursor[1] = 1000 + rank;
    rng_position = 77 + rank;
    scratch.assign(16, 1.0f);
    const int64_t rows = static_cast<int64_t>(n_params / 64);
    Add({"params", params.data(), n_params * 4, DType::kF32, {rows, 64}, StateRole::kParameter,
         RestorePolicy::kCheckpoint, true});
    Add({"adam.m", adam_m.data(), n_params * 4, DType::kF32, {}, StateRole::kOptimizer,
         RestorePolicy::kCheckpoint, true});
    Add({"adam.v", adam_v.data(), n_params * 4, DType::kF32, {}, StateRole::kOptimizer,
         RestorePolicy::kCheckpoint, true});
    Add({"opt.step", &step, 8, DType::kU64, {}, StateRole::kCounter, RestorePolicy::kCheckpoint, true});
    Add({"data.cursor", cursor, 16, DType::kU64, {2}, StateRole::kCursor, RestorePolicy::kCheckpoint, false});
    Add({"rng.dropout", &rng_position, 8, DType::kU64, {}, StateRole::kRng, RestorePolicy::kCheckpoint, false});
    Add({"act.scratch", scratch.data(), 64, DType::kF32, {}, StateRole::kOther, RestorePolicy::kNone, false});
  }
  void Add(StateEntry e) { EXPECT_TRUE(registry.Register(std::move(e)).ok()); }
};

constexpr size_t kTinyParams = 117504;

CheckpointMeta Meta(uint64_t step, int world_size) {
  CheckpointMeta meta;
  meta.step = step;
  meta.config_digest = 0x1234567890abcdefull;
  meta.run_id_hex = "00112233445566778899aabbccddeeff";
  meta.world_size = world_size;
  meta.plan_json = R"({"plans":[{"loop":"train","vars":[]}]})";
  return meta;
}

std::vector<RankSnapshot> Snapshots(std::vector<std::unique_ptr<RankState>>& ranks) {
  std::vector<RankSnapshot> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    out.push_back({static_cast<int>(r), &ranks[r]->registry, 1000 * (r + 1)});
  }
  return out;
}

std::vector<std::unique_ptr<RankState>> MakeRanks(int world, size_t n_params) {
  std::vector<std::unique_ptr<RankState>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<RankState>(r, n_params, 7));
  return ranks;
}

TEST(CheckpointFile, RoundTripIsBitExactAndRestores) {
  TempDir dir;
  auto ranks = MakeRanks(2, 4096);
  const std::string path = CheckpointPath(dir.path(), 40);
  EXPECT_EQ(path, dir.path() + "/ckpt/step-00000040.h5");
  ASSERT_TRUE(WriteCheckpoint(path, Meta(40, 2), Snapshots(ranks)).ok());

  StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->meta.step, 40u);
  EXPECT_EQ(ckpt->meta.world_size, 2);
  EXPECT_EQ(ckpt->meta.config_digest, 0x1234567890abcdefull);
  EXPECT_EQ(ckpt->meta.run_id_hex, "00112233445566778899aabbccddeeff");
  EXPECT_EQ(ckpt->meta.plan_json, Meta(40, 2).plan_json);
  EXPECT_FALSE(ckpt->dgrr_version.empty());
  ASSERT_EQ(ckpt->replicated.size(), 4u) << "params, adam.m, adam.v, opt.step stored once";
  ASSERT_EQ(ckpt->ranks.size(), 2u);
  EXPECT_EQ(ckpt->ranks[1].trace_position, 2000u);
  EXPECT_EQ(ckpt->ranks[1].entries.size(), 2u) << "data.cursor, rng.dropout; scratch not saved";
  const SavedEntry* params = ckpt->Find(0, "params");
  ASSERT_NE(params, nullptr);
  EXPECT_EQ(params->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(0, std::memcmp(params->data.data(), ranks[0]->params.data(), params->data.size()));
  EXPECT_EQ(ckpt->Find(1, "act.scratch"), nullptr);
  EXPECT_EQ(ckpt->ranks[0].state_digest, StateDigest(ranks[0]->registry));
  EXPECT_NE(ckpt->ranks[0].state_digest, ckpt->ranks[1].state_digest);
  StatusOr<CheckpointHeader> header = ReadCheckpointHeader(path);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->step, 40u);
  EXPECT_EQ(header->state_digest, ckpt->state_digest);

  // Restore into fresh states seeded differently; bytes must come back exactly.
  for (int r = 0; r < 2; ++r) {
    RankState fresh(r, 4096, 99);
    fresh.cursor[1] = 5;
    fresh.scratch.assign(16, 3.0f);
    ASSERT_TRUE(RestoreRank(*ckpt, r, fresh.registry).ok());
    EXPECT_EQ(fresh.params, ranks[r]->params);
    EXPECT_EQ(fresh.adam_v, ranks[r]->adam_v);
    EXPECT_EQ(fresh.cursor[1], ranks[r]->cursor[1]);
    EXPECT_EQ(fresh.rng_position, ranks[r]->rng_position);
    EXPECT_EQ(fresh.scratch[0], 3.0f) << "RestorePolicy::kNone is left alone";
    EXPECT_EQ(StateDigest(fresh.registry), ckpt->ranks[r].state_digest);
  }
}

TEST(CheckpointFile, OddDtypesShapesAndEmptyEntriesRoundTrip) {
  TempDir dir;
  std::vector<uint16_t> bf16(3 * 5 * 7);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(0x3f80 + i * 977);
  std::string blob("opaque\x00\xff bytes", 14);
  std::vector<int8_t> bools = {1, 0, 1};
  StateRegistry registry;
  ASSERT_TRUE(registry.Register({"w.bf16", bf16.data(), bf16.size() * 2, DType::kBF16, {3, 5, 7},
                                 StateRole::kParameter, RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(registry.Register({"blob", blob.data(), blob.size(), DType::kUnknown, {},
                                 StateRole::kOther, RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(registry.Register({"empty", nullptr, 0, DType::kF32, {}, StateRole::kOther,
                                 RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(registry.Register({"flags", bools.data(), 3, DType::kBool, {3}, StateRole::kOther,
                                 RestorePolicy::kCheckpoint, false}).ok());
  CheckpointWriteOptions options;
  options.chunk_bytes = 64;  // forces chunks split across the trailing dimensions, with edges
  CheckpointMeta meta = Meta(2, 1);
  meta.plan_json.clear();
  const std::string path = dir.path() + "/odd.h5";
  ASSERT_TRUE(WriteCheckpoint(path, meta, {{0, &registry, 9}}, options).ok());
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_TRUE(ckpt->meta.plan_json.empty());
  const SavedEntry* w = ckpt->Find(0, "w.bf16");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(0, std::memcmp(w->data.data(), bf16.data(), bf16.size() * 2));
  EXPECT_EQ(std::string(ckpt->Find(0, "blob")->data.begin(), ckpt->Find(0, "blob")->data.end()), blob);
  EXPECT_TRUE(ckpt->Find(0, "empty")->data.empty());
  std::vector<uint16_t> bf16_back(bf16.size(), 0);
  std::string blob_back(blob.size(), ' ');
  std::vector<int8_t> bools_back(3, 7);
  StateRegistry into;
  ASSERT_TRUE(into.Register({"w.bf16", bf16_back.data(), bf16.size() * 2, DType::kBF16, {3, 5, 7},
                             StateRole::kParameter, RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(into.Register({"blob", blob_back.data(), blob.size(), DType::kUnknown, {},
                             StateRole::kOther, RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(into.Register({"empty", nullptr, 0, DType::kF32, {}, StateRole::kOther,
                             RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(into.Register({"flags", bools_back.data(), 3, DType::kBool, {3}, StateRole::kOther,
                             RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(RestoreRank(*ckpt, 0, into).ok());
  EXPECT_EQ(bf16_back, bf16);
  EXPECT_EQ(blob_back, blob);
  EXPECT_EQ(bools_back, bools);
  EXPECT_EQ(StateDigest(into), StateDigest(registry));
}

TEST(CheckpointFile, RewriteKeepsTheStateAndTakesNewTracePositionsAndMeta) {
  TempDir dir;
  auto ranks = MakeRanks(2, 4096);
  const std::string source_path = dir.path() + "/scratch/step.h5";
  ASSERT_TRUE(WriteCheckpoint(source_path, Meta(40, 2), Snapshots(ranks)).ok());
  StatusOr<Checkpoint> source = ReadCheckpoint(source_path);
  ASSERT_TRUE(source.ok()) << source.status().ToString();

  CheckpointMeta meta = source->meta;
  meta.run_id_hex = "ffeeddccbbaa99887766554433221100";
  const std::string path = CheckpointPath(dir.path(), 40);
  ASSERT_TRUE(RewriteCheckpoint(*source, path, meta, {17, 23}).ok());
  StatusOr<Checkpoint> rewritten = ReadCheckpoint(path);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().ToString();
  EXPECT_EQ(rewritten->ranks[0].trace_position, 17u);
  EXPECT_EQ(rewritten->ranks[1].trace_position, 23u);
  EXPECT_EQ(rewritten->meta.run_id_hex, meta.run_id_hex);
  EXPECT_EQ(rewritten->meta.step, 40u);
  EXPECT_EQ(rewritten->meta.plan_json, source->meta.plan_json);
  EXPECT_EQ(rewritten->state_digest, source->state_digest) << "the state is written as loaded";
  ASSERT_EQ(rewritten->replicated.size(), source->replicated.size());
  for (size_t i = 0; i < source->replicated.size(); ++i) {
    EXPECT_EQ(rewritten->replicated[i].name, source->replicated[i].name);
    EXPECT_TRUE(rewritten->replicated[i].data == source->replicated[i].data);
    EXPECT_EQ(rewritten->replicated[i].shape, source->replicated[i].shape);
    EXPECT_EQ(rewritten->replicated[i].role, source->replicated[i].role);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(rewritten->ranks[r].state_digest, source->ranks[r].state_digest);
    RankState fresh(r, 4096, 99);
    ASSERT_TRUE(RestoreRank(*rewritten, r, fresh.registry).ok());
    EXPECT_EQ(fresh.params, ranks[r]->params);
    EXPECT_EQ(fresh.cursor[1], ranks[r]->cursor[1]) << "rank-own entries stay with their rank";
  }

  // Odd dtypes and an empty entry survive a rewrite as well.
  std::vector<uint16_t> bf16 = {1, 2, 3, 4, 5, 6};
  StateRegistry odd;
  ASSERT_TRUE(odd.Register({"w.bf16", bf16.data(), 12, DType::kBF16, {2, 3}, StateRole::kParameter,
                            RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(odd.Register({"empty", nullptr, 0, DType::kF32, {}, StateRole::kOther,
                            RestorePolicy::kCheckpoint, false}).ok());
  ASSERT_TRUE(WriteCheckpoint(dir.path() + "/odd.h5", Meta(2, 1), {{0, &odd, 5}}).ok());
  StatusOr<Checkpoint> odd_source = ReadCheckpoint(dir.path() + "/odd.h5");
  ASSERT_TRUE(odd_source.ok());
  ASSERT_TRUE(RewriteCheckpoint(*odd_source, dir.path() + "/odd2.h5", odd_source->meta, {6}).ok());
  StatusOr<Checkpoint> odd_back = ReadCheckpoint(dir.path() + "/odd2.h5");
  ASSERT_TRUE(odd_back.ok()) << odd_back.status().ToString();
  EXPECT_EQ(odd_back->ranks[0].trace_position, 6u);
  EXPECT_EQ(odd_back->state_digest, odd_source->state_digest);

  // Positions or world size that do not fit the source are refused, nothing written.
  EXPECT_TRUE(RewriteCheckpoint(*source, dir.path() + "/bad.h5", meta, {1}).IsInvalidArgument());
  meta.world_size = 3;
  EXPECT_TRUE(RewriteCheckpoint(*source, dir.path() + "/bad.h5", meta, {1, 2, 3}).IsInvalidArgument());
  EXPECT_FALSE(fs::exists(dir.path() + "/bad.h5"));
}

TEST(CheckpointFile, CompressibleStateIsStoredCompressedAndDecodedInProcess) {
  TempDir dir;
  std::vector<int32_t> counts(300000);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int32_t>(1000 + i % 50);
  StateRegistry registry;
  ASSERT_TRUE(registry.Register({"counts", counts.data(), counts.size() * 4, DType::kI32, {},
                                 StateRole::kCounter, RestorePolicy::kCheckpoint, true}).ok());
  const std::string path = dir.path() + "/z.h5";
  CheckpointWriteOptions options;
  options.chunk_bytes = 256 << 10;  // several chunks, the last one partial
  ASSERT_TRUE(WriteCheckpoint(path, Meta(1, 1), {{0, &registry, 0}}, options).ok());
  EXPECT_LT(*FileSize(path), counts.size() * 4 / 20) << "stored as zstd frames";
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);  // decoded by the registered filter
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const SavedEntry* saved = ckpt->Find(0, "counts");
  ASSERT_NE(saved, nullptr);
  ASSERT_EQ(saved->data.size(), counts.size() * 4);
  EXPECT_EQ(0, std::memcmp(saved->data.data(), counts.data(), saved->data.size()));
}

// Chunks are read straight from the file (H5Dread_chunk), raw ones in place:
// frames and raw chunks, whole and at the edges, in one dataset, must read
// back as written.
TEST(CheckpointFile, MixedRawAndCompressedEdgeChunksReadBackExactly) {
  TempDir dir;
  std::mt19937 gen(7);
  std::vector<float> values(9 * 6 * 7);
  for (size_t i = 0; i < values.size(); ++i) {
    // The first rows repeat (zstd frames), the rest is noise (stored raw).
    values[i] = i < 3 * 6 * 7 ? static_cast<float>(i % 4) : std::uniform_real_distribution<float>(-1, 1)(gen);
  }
  for (uint64_t chunk_bytes : {uint64_t{64}, uint64_t{6 * 7 * 4 * 2}, uint64_t{1} << 20}) {
    StateRegistry registry;
    ASSERT_TRUE(registry.Register({"w", values.data(), values.size() * 4, DType::kF32, {9, 6, 7},
                                   StateRole::kParameter, RestorePolicy::kCheckpoint, false}).ok());
    CheckpointWriteOptions options;
    options.chunk_bytes = chunk_bytes;
    const std::string path = dir.path() + "/m" + std::to_string(chunk_bytes) + ".h5";
    ASSERT_TRUE(WriteCheckpoint(path, Meta(1, 1), {{0, &registry, 0}}, options).ok());
    StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    const SavedEntry* w = ckpt->Find(0, "w");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->data.size(), values.size() * 4);
    EXPECT_EQ(0, std::memcmp(w->data.data(), values.data(), w->data.size())) << "chunk_bytes " << chunk_bytes;
  }
}

TEST(CheckpointFile, SameStateSameBytesForAnyThreadCount) {
  TempDir dir;
  auto ranks = MakeRanks(1, 300032);
  CheckpointWriteOptions one, four;
  one.threads = 1;
  four.threads = 4;
  one.chunk_bytes = four.chunk_bytes = 64 << 10;
  ASSERT_TRUE(WriteCheckpoint(dir.path() + "/a.h5", Meta(1, 1), Snapshots(ranks), one).ok());
  ASSERT_TRUE(WriteCheckpoint(dir.path() + "/b.h5", Meta(1, 1), Snapshots(ranks), four).ok());
  EXPECT_EQ(*ReadFileToString(dir.path() + "/a.h5"), *ReadFileToString(dir.path() + "/b.h5"));
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(dir.path() + "/b.h5");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(0, std::memcmp(ckpt->Find(0, "adam.m")->data.data(), ranks[0]->adam_m.data(), 300032 * 4));
}

TEST(CheckpointFile, ReplicatedDisagreementNamesEntryAndRanks) {
  TempDir dir;
  auto ranks = MakeRanks(3, 1024);
  ranks[2]->adam_v[10] = 1.0f;
  const std::string path = dir.path() + "/x.h5";
  Status s = WriteCheckpoint(path, Meta(1, 3), Snapshots(ranks));
  ASSERT_FALSE(s.ok());
  // Replicated state whose copies differ is a divergence of the ranks (exit
  // 4, as the per-step SDC check reports it), not a usage error.
  EXPECT_EQ(s.code(), StatusCode::kDivergence) << s.ToString();
  EXPECT_NE(s.message().find("'adam.v'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 and rank 2"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("byte 40"), std::string::npos) << s.ToString();
  EXPECT_FALSE(PathExists(path));
}

TEST(CheckpointFile, TinyModelFileWithin16KiBOfRawState) {
  TempDir dir;
  auto ranks = MakeRanks(1, kTinyParams);
  const std::string path = dir.path() + "/tiny.h5";
  ASSERT_TRUE(WriteCheckpoint(path, Meta(40, 1), Snapshots(ranks)).ok());
  const uint64_t raw = 3 * kTinyParams * 4 + 8 + 16 + 8;
  const uint64_t size = *FileSize(path);
  std::printf("tiny checkpoint: %llu bytes, raw state %llu bytes\n",
              static_cast<unsigned long long>(size), static_cast<unsigned long long>(raw));
  EXPECT_LE(size, raw + 16384) << "file " << size << " raw " << raw;
}

// Damaged copies need no durability: a plain write keeps the loops fast.
void WriteDamaged(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Writes a small checkpoint and returns its bytes.
std::string SmallCheckpoint(const std::string& path) {
  auto ranks = MakeRanks(2, 512);
  EXPECT_TRUE(WriteCheckpoint(path, Meta(3, 2), Snapshots(ranks)).ok());
  return *ReadFileToString(path);
}

TEST(CheckpointFile, FlippedBytesAreRefusedAsCorruption) {
  TempDir dir;
  const std::string good = dir.path() + "/good.h5";
  const std::string bytes = SmallCheckpoint(good);
  const std::string bad = dir.path() + "/bad.h5";
  std::mt19937_64 gen(1);
  std::vector<size_t> offsets;
  for (size_t i = 0; i < 64; ++i) offsets.push_back(i);  // every header byte
  for (int i = 0; i < 150; ++i) offsets.push_back(gen() % bytes.size());
  for (size_t offset : offsets) {
    std::string damaged = bytes;
    damaged[offset] = static_cast<char>(damaged[offset] ^ (1 + gen() % 255));
    WriteDamaged(bad, damaged);
    StatusOr<Checkpoint> ckpt = ReadCheckpoint(bad);
    ASSERT_FALSE(ckpt.ok()) << "flip at " << offset;
    EXPECT_TRUE(ckpt.status().IsCorruption()) << ckpt.status().ToString();
    EXPECT_NE(ckpt.status().message().find("offset"), std::string::npos) << ckpt.status().ToString();
  }
}

TEST(CheckpointFile, TruncatedFilesAreRefusedAsCorruption) {
  TempDir dir;
  const std::string good = dir.path() + "/good.h5";
  const std::string bytes = SmallCheckpoint(good);
  const std::string bad = dir.path() + "/bad.h5";
  std::mt19937_64 gen(2);
  std::vector<size_t> cuts = {0, 1, 8, 63, 511, 512, 513, bytes.size() - 1};
  for (int i = 0; i < 60; ++i) cuts.push_back(gen() % bytes.size());
  for (size_t cut : cuts) {
    WriteDamaged(bad, bytes.substr(0, cut));
    StatusOr<Checkpoint> ckpt = ReadCheckpoint(bad);
    ASSERT_FALSE(ckpt.ok()) << "cut at " << cut;
    EXPECT_TRUE(ckpt.status().IsCorruption()) << ckpt.status().ToString();
    EXPECT_NE(ckpt.status().message().find("truncated"), std::string::npos) << ckpt.status().ToString();
  }
  // Trailing garbage is refused too.
  WriteDamaged(bad, bytes + "x");
  EXPECT_TRUE(ReadCheckpoint(bad).status().IsCorruption());
}

// Re-stamps the user-block hashes so the damage gets past the file-level check,
// as if the header had been forged: the per-dataset xxh3 still catches it.
void RestampHeader(std::string& bytes) {
  auto* p = reinterpret_cast<uint8_t*>(bytes.data());
  EncodeFixed64(p + 32, XXH3_64bits(p + 512, bytes.size() - 512));
  EncodeFixed64(p + 56, XXH3_64bits(p, 56));
}

TEST(CheckpointFile, DatasetHashNamesTheDamagedDataset) {
  TempDir dir;
  auto ranks = MakeRanks(1, 4096);  // random floats: chunks stored raw, so findable
  const std::string path = dir.path() + "/c.h5";
  ASSERT_TRUE(WriteCheckpoint(path, Meta(1, 1), Snapshots(ranks)).ok());
  std::string bytes = *ReadFileToString(path);
  const std::string needle(reinterpret_cast<const char*>(ranks[0]->adam_v.data()) + 400, 64);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "adam.v chunk stored uncompressed";
  bytes[at + 3] ^= 0x10;
  RestampHeader(bytes);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_TRUE(ckpt.status().IsCorruption());
  EXPECT_NE(ckpt.status().message().find("/replicated/adam.v"), std::string::npos) << ckpt.status().ToString();
  EXPECT_NE(ckpt.status().message().find("hash mismatch"), std::string::npos) << ckpt.status().ToString();
}

TEST(CheckpointFile, FailedWriteLeavesOldCheckpointAndNoFile) {
  TempDir dir;
  auto ranks = MakeRanks(1, 200000);  // 2.4 MB: several write blocks
  const std::string path = CheckpointPath(dir.path(), 10);
  ASSERT_TRUE(WriteCheckpoint(path, Meta(10, 1), Snapshots(ranks)).ok());
  const std::string before = *ReadFileToString(path);
  ranks[0]->params[0] += 1.0f;
  CheckpointWriteOptions options;
  int calls = 0;
  options.fault_hook = [&](const char* stage) {
    ++calls;
    EXPECT_STREQ(stage, "before-header");
    return Status::IOError("injected: disk full");
  };
  Status s = WriteCheckpoint(path, Meta(10, 1), Snapshots(ranks), options);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(*ReadFileToString(path), before);
  const std::string other = CheckpointPath(dir.path(), 20);
  EXPECT_FALSE(WriteCheckpoint(other, Meta(20, 1), Snapshots(ranks), options).ok());
  EXPECT_FALSE(PathExists(other));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path() + "/ckpt")) {
    ++files;
    EXPECT_EQ(e.path().filename(), "step-00000010.h5") << "temporary left behind";
  }
  EXPECT_EQ(files, 1u);
  EXPECT_TRUE(ReadCheckpoint(path).ok());
}

TEST(CheckpointFile, NewestGoodCheckpointFallsBackOnlyWhenAsked) {
  TempDir dir;
  auto ranks = MakeRanks(1, 256);
  for (uint64_t step : {10, 20, 30}) {
    ASSERT_TRUE(WriteCheckpoint(CheckpointPath(dir.path(), step), Meta(step, 1), Snapshots(ranks)).ok());
  }
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/ckpt/step-00000040.h5.tmp.1.0", "junk").ok());
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/ckpt/notes.txt", "junk").ok());
  EXPECT_EQ(*ListCheckpointSteps(dir.path()), (std::vector<uint64_t>{10, 20, 30}));
  EXPECT_TRUE(ListCheckpointSteps(dir.path() + "/none")->empty());

  const std::string newest = CheckpointPath(dir.path(), 30);
  std::string bytes = *ReadFileToString(newest);
  ASSERT_TRUE(TruncateFile(newest, bytes.size() / 2).ok());
  StatusOr<Checkpoint> strict = FindNewestGoodCheckpoint(dir.path(), 100, false);
  EXPECT_TRUE(strict.status().IsCorruption()) << strict.status().ToString();
  EXPECT_NE(strict.status().message().find("--fallback"), std::string::npos) << strict.status().ToString();
  std::vector<std::string> skipped;
  StatusOr<Checkpoint> lenient = FindNewestGoodCheckpoint(dir.path(), 100, true, &skipped);
  ASSERT_TRUE(lenient.ok()) << lenient.status().ToString();
  EXPECT_EQ(lenient->path, CheckpointPath(dir.path(), 20));
  EXPECT_EQ(lenient->meta.step, 20u) << "returned loaded, not just named";
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000030.h5"), std::string::npos) << skipped[0];
  EXPECT_EQ(FindNewestGoodCheckpoint(dir.path(), 15, false)->path, CheckpointPath(dir.path(), 10));
  EXPECT_TRUE(FindNewestGoodCheckpoint(dir.path(), 5, true).status().IsNotFound());
}

TEST(CheckpointFile, RestoreRefusesMismatchedRegistries) {
  TempDir dir;
  auto ranks = MakeRanks(1, 256);
  const std::string path = dir.path() + "/r.h5";
  ASSERT_TRUE(WriteCheckpoint(path, Meta(1, 1), Snapshots(ranks)).ok());
  StatusOr<Checkpoint> ckpt = ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok());

  RankState bigger(0, 512, 1);
  Status s = RestoreRank(*ckpt, 0, bigger.registry);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'params'"), std::string::npos) << s.ToString();
  EXPECT_EQ(bigger.params[0], RankState(0, 512, 1).params[0]) << "nothing copied on failure";

  RankState same(0, 256, 1);
  uint64_t extra = 0;
  ASSERT_TRUE(same.registry.Register({"sched.warmup", &extra, 8, DType::kU64, {}, StateRole::kCounter,
                                      RestorePolicy::kCheckpoint, false}).ok());
  s = RestoreRank(*ckpt, 0, same.registry);
  EXPECT_NE(s.message().find("'sched.warmup' is not in the checkpoint"), std::string::npos) << s.ToString();
  EXPECT_TRUE(RestoreRank(*ckpt, 0, same.registry, {"sched.warmup"}).ok());
  EXPECT_FALSE(RestoreRank(*ckpt, 1, same.registry).ok());
}

// h5dump (a separate, standard program) lists a checkpoint and decodes a
// zstd-compressed dataset through the plugin library.
TEST(CheckpointFile, H5dumpReadsThroughThePlugin) {
  if (std::system("command -v h5dump > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "h5dump not on PATH (install hdf5-tools)";
  }
  TempDir dir;
  std::vector<int32_t> counts(1000);
  for (int i = 0; i < 1000; ++i) counts[i] = 1000 + i % 50;  // compresses even at fast levels
  StateRegistry registry;
  ASSERT_TRUE(registry.Register({"counts", counts.data(), 4000, DType::kI32, {}, StateRole::kCounter,
                                 RestorePolicy::kCheckpoint, true}).ok());
  const std::string path = dir.path() + "/h.h5";
  ASSERT_TRUE(WriteCheckpoint(path, Meta(5, 1), {{0, &registry, 0}}).ok());

  auto run = [&](const std::string& plugin_dir, const std::string& args) {
    const std::string out = dir.path() + "/out.txt";
    const std::string cmd = "HDF5_PLUGIN_PATH='" + plugin_dir + "' h5dump " + args + " '" + path +
                            "' > '" + out + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    return std::make_pair(rc, *ReadFileToString(out));
  };
  auto [rc, listing] = run(DGRR_HDF5_PLUGIN_DIR, "-p -H");
  EXPECT_EQ(rc, 0) << listing;
  EXPECT_NE(listing.find("DATASET \"counts\""), std::string::npos) << listing;
  EXPECT_NE(listing.find("GROUP \"ranks\""), std::string::npos) << listing;
  EXPECT_NE(listing.find("ATTRIBUTE \"xxh3\""), std::string::npos) << listing;
  EXPECT_NE(listing.find("32015"), std::string::npos) << "zstd filter in the pipeline: " << listing;

  auto [rc2, data] = run(DGRR_HDF5_PLUGIN_DIR, "-d /replicated/counts");
  EXPECT_EQ(rc2, 0) << data;
  EXPECT_NE(data.find("1047, 1048, 1049"), std::string::npos) << data;

  auto [rc3, without] = run(dir.path() + "/no-plugins", "-d /replicated/counts");
  EXPECT_EQ(without.find("1047, 1048, 1049"), std::string::npos) << "decoded without the plugin?";
}

}  // namespace
}  // namespace dgrr::checkpoint
