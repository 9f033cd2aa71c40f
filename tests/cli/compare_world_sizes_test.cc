// dgrr compare and dgrr bisect across runs of different world sizes: runs of
// one config on 1, 2 and 4 ranks are compared as logical runs and certified
// whole, in both directions; a flipped per-example boundary on one rank is
// named at its step, boundary, example and both sides' ranks; a replicated
// boundary flipped on one rank only is named with that rank; bisect finds
// both across world sizes (docs/compare.md §6.3, docs/json/compare.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "replay/compare.h"
#include "tests/cli/run_captured.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kSteps = 3;
// The tiny model records this many replicated boundaries per step on every
// rank (all-reduced gradients, AdamW's inputs and outputs).
constexpr uint64_t kReplicatedPerStep = 140;

const char* kExampleFlip = "bitflip:step=1,rank=2,at=block0.mlp.fc.out,example=13";
const char* kReplicaFlip = "bitflip:step=1,rank=3,at=allreduce.block1.mlp.fc.dw";

class CompareWorldSizesTest : public ::testing::Test {
 protected:
  // Runs are shared by the suite: each takes a fraction of a second, but
  // there is no need to train them once per test.
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("dgrr-compare-world-sizes-" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    for (int ranks : {1, 2, 4}) Train("r" + std::to_string(ranks), ranks, nullptr, 0);
    Train("example_flip4", 4, kExampleFlip, 0);
    // The session's cross-rank parameter check stops this run after step 1
    // (exit 4), with every rank's trace of steps 0 and 1 written.
    Train("replica_flip4", 4, kReplicaFlip, 4);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Run(const std::string& name) { return (*dir_ / name).string(); }
  static void Train(const std::string& name, int ranks, const char* fault, int expected_rc) {
    std::vector<std::string> args = {"train", "--out",   Run(name),         "--model", "tiny",
                                     "--steps", std::to_string(kSteps), "--ranks", std::to_string(ranks),
                                     "--quiet"};
    if (fault != nullptr) {
      args.push_back("--inject");
      args.push_back(fault);
    }
    CommandOutput r = RunCaptured(args);
    ASSERT_EQ(r.rc, expected_rc) << r.err;
  }
  static std::pair<int, json> CompareJson(const std::string& a, const std::string& b) {
    CommandOutput r = RunCaptured({"compare", Run(a), Run(b), "--json"});
    json j;
    if (!r.out.empty()) j = json::parse(r.out);
    return {r.rc, j};
  }
  static fs::path* dir_;
};
fs::path* CompareWorldSizesTest::dir_ = nullptr;

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST_F(CompareWorldSizesTest, OneTwoFourRanksCertifyTheWholeRunBothWays) {
  const std::map<std::string, uint64_t> world = {{"r1", 1}, {"r2", 2}, {"r4", 4}};
  for (const auto& [a, wa] : world) {
    for (const auto& [b, wb] : world) {
      if (a == b) continue;
      SCOPED_TRACE(a + " vs " + b);
      auto [rc, j] = CompareJson(a, b);
      ASSERT_EQ(rc, 0) << j.dump(1);
      EXPECT_EQ(j["schema"], "dgrr.compare/4");
      EXPECT_EQ(j["verdict"], "no_divergence");
      EXPECT_EQ(j["ranks"], "logical");
      EXPECT_EQ(j["alignment"]["mode"], "lockstep");
      EXPECT_EQ(j["alignment"]["length_a"], j["alignment"]["length_b"]);
      EXPECT_EQ(j["coverage"]["uncompared"], 0);
      const json& c = j["certification"];
      EXPECT_EQ(c["certified_steps"], kSteps);
      EXPECT_EQ(c["certified_pairs"], j["alignment"]["length_a"]);
      EXPECT_EQ(c["pairs"], j["alignment"]["length_a"]);
      EXPECT_EQ(c["prefix_ends_at"], "end");
      EXPECT_EQ(j["rank_disagreements"]["count"], 0);
      // Every replicated boundary of every rank but 0 was checked.
      EXPECT_EQ(j["a"]["replicas_checked"], (wa - 1) * kReplicatedPerStep * kSteps);
      EXPECT_EQ(j["b"]["replicas_checked"], (wb - 1) * kReplicatedPerStep * kSteps);
    }
  }
}

TEST_F(CompareWorldSizesTest, EqualWorldSizesStayPairedRankByRank) {
  auto [rc, j] = CompareJson("r4", "example_flip4");
  ASSERT_EQ(rc, 4);
  EXPECT_EQ(j["ranks"], "paired");
  EXPECT_EQ(j["a"]["replicas_checked"], 0);
  EXPECT_EQ(j["divergence"]["first"]["a"]["rank"], 2);
  EXPECT_EQ(j["divergence"]["first"]["a"]["name"], "block0.mlp.fc.out");
}

// The streaming path at any chunk size and the in-memory path give the same
// certified prefix: step boundaries and chunk boundaries are independent.
TEST_F(CompareWorldSizesTest, ChunkSizeAndPathDoNotChangeTheResult) {
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}}) {
    for (bool in_memory : {false, true}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (in_memory ? " in memory" : " streamed"));
      replay::CompareOptions options;
      options.chunk_items = chunk;
      options.keep_sequences = in_memory;
      auto clean = replay::CompareRuns(Run("r4"), Run("r1"), options);
      ASSERT_TRUE(clean.ok()) << clean.status().ToString();
      EXPECT_TRUE(clean->logical);
      EXPECT_FALSE(clean->found_difference());
      EXPECT_EQ(clean->certify.certified_steps, static_cast<uint64_t>(kSteps));
      auto flipped = replay::CompareRuns(Run("r1"), Run("replica_flip4"), options);
      ASSERT_TRUE(flipped.ok()) << flipped.status().ToString();
      EXPECT_EQ(flipped->rank_disagreement_count, 5u);
      EXPECT_TRUE(flipped->prefix_ends_at_rank_disagreement);
      EXPECT_EQ(flipped->certify.certified_steps, 1u);
    }
  }
}

TEST_F(CompareWorldSizesTest, PerExampleFlipOnOneRankIsNamedWithBothSidesRanks) {
  for (bool flipped_is_a : {false, true}) {
    SCOPED_TRACE(flipped_is_a ? "flipped run as A" : "flipped run as B");
    auto [rc, j] = flipped_is_a ? CompareJson("example_flip4", "r1") : CompareJson("r1", "example_flip4");
    ASSERT_EQ(rc, 4) << j.dump(1);
    EXPECT_EQ(j["verdict"], "divergence");
    EXPECT_EQ(j["ranks"], "logical");
    const json& first = j["divergence"]["first"];
    const json& flipped = flipped_is_a ? first["a"] : first["b"];
    const json& clean = flipped_is_a ? first["b"] : first["a"];
    for (const json* side : {&flipped, &clean}) {
      EXPECT_EQ((*side)["step"], 1);
      EXPECT_EQ((*side)["name"], "block0.mlp.fc.out");
      EXPECT_EQ((*side)["first_example"], 13);
      EXPECT_EQ((*side)["example_count"], 1);
    }
    EXPECT_EQ(flipped["rank"], 2);  // examples 12 and 13 of step 1 are rank 2's of 4
    EXPECT_EQ(flipped["world_size"], 4);
    EXPECT_TRUE(EndsWith(flipped["trace"].get<std::string>(), "rank2.trace"));
    EXPECT_EQ(clean["rank"], 0);
    EXPECT_EQ(clean["world_size"], 1);
    EXPECT_NE(flipped["xxh3"], clean["xxh3"]);
    EXPECT_EQ(j["certification"]["certified_steps"], 1);
    EXPECT_EQ(j["certification"]["prefix_ends_at"], "divergence");
    EXPECT_EQ(j["rank_disagreements"]["count"], 0);
  }
  CommandOutput text = RunCaptured({"compare", Run("example_flip4"), Run("r1")});
  EXPECT_EQ(text.rc, 4);
  EXPECT_NE(text.out.find("first divergence: pair #"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("step 1 forward output block0.mlp.fc.out f32[16,256] examples 13+1, "
                          "rank 2 of 4 vs rank 0 of 1"),
            std::string::npos)
      << text.out;
}

TEST_F(CompareWorldSizesTest, ReplicatedFlipOnOneRankIsNamedWithThatRank) {
  auto [rc, j] = CompareJson("r1", "replica_flip4");
  ASSERT_EQ(rc, 4) << j.dump(1);
  EXPECT_EQ(j["verdict"], "divergence");
  // Rank 0 of the flipped run agrees with the 1-rank run: no pair differs,
  // the finding is within run B.
  EXPECT_TRUE(j["divergence"].is_null());
  const json& d = j["rank_disagreements"];
  ASSERT_GE(d["count"].get<uint64_t>(), 1u);
  const json& first = d["first"][0];
  EXPECT_EQ(first["side"], "B");
  EXPECT_EQ(first["kind"], "differs");
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["rank"], 3);
  EXPECT_EQ(first["world_size"], 4);
  EXPECT_EQ(first["copy"]["name"], "allreduce.block1.mlp.fc.dw");
  EXPECT_EQ(first["copy"]["rank"], 3);
  EXPECT_TRUE(EndsWith(first["copy"]["trace"].get<std::string>(), "rank3.trace"));
  EXPECT_EQ(first["reference"]["rank"], 0);
  EXPECT_EQ(first["reference"]["name"], "allreduce.block1.mlp.fc.dw");
  EXPECT_NE(first["copy"]["xxh3"], first["reference"]["xxh3"]);
  // Only rank 3 disagrees, and only from its flipped gradient on.
  for (const json& x : d["first"]) {
    EXPECT_EQ(x["rank"], 3);
    EXPECT_EQ(x["step"], 1);
  }
  EXPECT_EQ(j["certification"]["prefix_ends_at"], "rank_disagreement");
  EXPECT_EQ(j["certification"]["certified_steps"], 1);  // step 0 only

  CommandOutput text = RunCaptured({"compare", Run("replica_flip4"), Run("r2")});
  EXPECT_EQ(text.rc, 4);
  EXPECT_NE(text.out.find("A step 1 rank 3 of 4: collective output allreduce.block1.mlp.fc.dw"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("result: divergence"), std::string::npos);
}

std::pair<int, json> BisectJson(const std::string& good, const std::string& bad) {
  CommandOutput r = RunCaptured({"bisect", "--good", good, "--bad", bad, "--json", "--quiet"});
  json j;
  if (!r.out.empty()) j = json::parse(r.out);
  return {r.rc, j};
}

TEST_F(CompareWorldSizesTest, BisectAcrossWorldSizes) {
  {
    auto [rc, j] = BisectJson(Run("r1"), Run("r4"));
    EXPECT_EQ(rc, 0) << j.dump(1);
    EXPECT_EQ(j["verdict"], "agree");
  }
  {
    auto [rc, j] = BisectJson(Run("r2"), Run("example_flip4"));
    ASSERT_EQ(rc, 4) << j.dump(1);
    EXPECT_EQ(j["evidence"]["first_differing_step"], 1);
    const json& b = j["compare"]["divergence"]["first"]["b"];
    EXPECT_EQ(b["name"], "block0.mlp.fc.out");
    EXPECT_EQ(b["first_example"], 13);
    EXPECT_EQ(b["rank"], 2);
    EXPECT_EQ(j["compare"]["divergence"]["first"]["a"]["world_size"], 2);
  }
  {
    // Rank 0's STEP records of the flipped run equal the 1-rank run's; rank
    // 3's do not, and bisect holds every rank to the good run's rank 0.
    auto [rc, j] = BisectJson(Run("r1"), Run("replica_flip4"));
    ASSERT_EQ(rc, 4) << j.dump(1);
    EXPECT_EQ(j["evidence"]["first_differing_step"], 1);
    EXPECT_EQ(j["compare"]["rank_disagreements"]["first"][0]["rank"], 3);
  }
}

}  // namespace
}  // namespace dgrr::cli
