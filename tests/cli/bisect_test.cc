// dgrr bisect, in-process: each injected fault of a cheaply recorded (sdc)
// run with checkpoints is named exactly, by boundary, step and rank, after
// replaying only the interval where the runs part.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cli/command.h"
#include "model/config.h"
#include "model/trainer.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class BisectCommandTest : public ::dgrr::test_support::TempDirTest {
 protected:
  static std::pair<std::string, std::string> Quiet(const std::function<void()>& f) { return CaptureOutput(f); }
  // A 16-step tiny run on 2 ranks and 2 threads, recorded in `mode`, with a
  // checkpoint every 4 steps.
  std::string Train(const std::string& name, const std::vector<std::string>& faults,
                    const std::string& mode = "sdc") {
    const std::string out = Path(name);
    std::vector<std::string> args = {"train", "--out",       out, "--steps",      "16", "--ranks", "2",
                                     "--threads", "2", "--mode", mode, "--ckpt-every", "4", "--quiet"};
    for (const auto& f : faults) {
      args.push_back("--inject");
      args.push_back(f);
    }
    int rc = -1;
    auto [stdout_text, err] = Quiet([&] { rc = RunDgrr(args); });
    EXPECT_EQ(rc, 0) << err;
    return out;
  }
  // Runs bisect --json; returns the exit code and the document.
  std::pair<int, json> Bisect(const std::string& good, const std::string& bad,
                              std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"bisect", "--good", good, "--bad", bad, "--json", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    int rc = -1;
    auto [out, err] = Quiet([&] { rc = RunDgrr(args); });
    json j;
    if (!out.empty()) j = json::parse(out);
    last_err_ = err;
    return {rc, j};
  }
  uint64_t Pick(uint64_t n) {
    lcg_ = lcg_ * 6364136223846793005ull + 1442695040888963407ull;
    return (lcg_ >> 33) % n;
  }
  uint64_t lcg_ = 11;
  std::string last_err_;
};

// Checks the replay interval is the minimal one the evidence allows: from the
// newest checkpoint before `step` (they are at steps 3, 7, 11, 15) to `step`.
void ExpectReplayedOnlyTheInterval(const json& j, uint64_t step) {
  const json& r = j.at("replay");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r.at("last_step"), step);
  if (step >= 4) {
    EXPECT_EQ(r.at("from_checkpoint"), step / 4 * 4 - 1);
    EXPECT_EQ(r.at("first_step"), step / 4 * 4);
  } else {
    EXPECT_TRUE(r.at("from_checkpoint").is_null());
    EXPECT_EQ(r.at("first_step"), 0);
  }
  EXPECT_EQ(r.at("steps_replayed"), step - r.at("first_step").get<uint64_t>() + 1);
}

TEST_F(BisectCommandTest, BitflipIsNamedAtItsBoundaryStepAndRank) {
  const std::string good = Train("good", {});
  const auto names = *model::PerExampleBoundaryNames(model::PresetByName("tiny")->model);
  for (int trial = 0; trial < 2; ++trial) {
    const uint64_t step = 1 + Pick(15);
    const int rank = static_cast<int>(Pick(2));
    const std::string at = names[Pick(names.size())];
    const std::string bad = Train("flip" + std::to_string(trial),
                                  {"bitflip:step=" + std::to_string(step) + ",rank=" + std::to_string(rank) +
                                   ",at=" + at + ",bit=22"});
    auto [rc, j] = Bisect(good, bad);
    ASSERT_EQ(rc, kExitDivergence) << last_err_;
    EXPECT_EQ(j.at("schema"), "dgrr.bisect/1");
    EXPECT_EQ(j.at("verdict"), "divergence");
    EXPECT_EQ(j.at("evidence").at("kind"), "step_fingerprints");
    EXPECT_EQ(j.at("evidence").at("first_differing_step"), step);
    const json& d = j.at("divergence");
    EXPECT_EQ(d.at("a").at("name"), at);
    EXPECT_EQ(d.at("a").at("step"), step) << at;
    EXPECT_EQ(d.at("a").at("rank"), rank) << at;
    ExpectReplayedOnlyTheInterval(j, step);
    EXPECT_EQ(j.at("replay").at("good_matches_recording"), true);
    EXPECT_EQ(j.at("replay").at("bad_matches_recording"), true);
  }
}

TEST_F(BisectCommandTest, RaceIsNamedAtTheRacyAccumulation) {
  const std::string good = Train("good", {});
  const model::ParameterLayout layout(model::PresetByName("tiny")->model);
  const std::string param = layout.tensors()[Pick(layout.tensors().size())].name;
  const uint64_t step = 1 + Pick(15);
  // A real race can happen to add in tree order; one of a few runs differs.
  json j;
  int rc = 0;
  for (int attempt = 0; attempt < 4 && rc != kExitDivergence; ++attempt) {
    const std::string bad = Train("race" + std::to_string(attempt),
                                  {"race:step=" + std::to_string(step) + ",at=" + param});
    std::tie(rc, j) = Bisect(good, bad);
  }
  ASSERT_EQ(rc, kExitDivergence) << last_err_;
  EXPECT_EQ(j.at("divergence").at("a").at("name"), "allreduce." + model::GradientName(param));
  EXPECT_EQ(j.at("divergence").at("a").at("step"), step);
  ExpectReplayedOnlyTheInterval(j, step);
}

TEST_F(BisectCommandTest, ReduceOrderAndSharedRngAreNamedAtTheirStep) {
  const std::string good = Train("good", {});
  uint64_t step = 1 + Pick(15);
  auto [rc, j] = Bisect(good, Train("ro", {"reduce-order:step=" + std::to_string(step)}));
  ASSERT_EQ(rc, kExitDivergence) << last_err_;
  EXPECT_EQ(j.at("divergence").at("a").at("step"), step);
  EXPECT_EQ(j.at("divergence").at("a").at("name").get<std::string>().rfind("allreduce.", 0), 0u);
  ExpectReplayedOnlyTheInterval(j, step);

  step = 1 + Pick(15);
  std::tie(rc, j) = Bisect(good, Train("srng", {"shared-rng:step=" + std::to_string(step)}));
  ASSERT_EQ(rc, kExitDivergence) << last_err_;
  EXPECT_EQ(j.at("divergence").at("a").at("step"), step);
  EXPECT_NE(j.at("divergence").at("a").at("name").get<std::string>().find("dropout.out"), std::string::npos)
      << "the first mask drawn from the shared generator";
  ExpectReplayedOnlyTheInterval(j, step);
}

TEST_F(BisectCommandTest, WithoutStepRecordsCheckpointDigestsAreBinarySearched) {
  // Mode off records nothing: only the checkpoints' state digests are left.
  const std::string good = Train("good", {}, "off");
  const std::string bad = Train("bad", {"reduce-order:step=9"}, "off");
  auto [rc, j] = Bisect(good, bad);
  ASSERT_EQ(rc, kExitDivergence) << last_err_;
  EXPECT_EQ(j.at("evidence").at("kind"), "checkpoint_digests");
  EXPECT_EQ(j.at("evidence").at("last_agreeing_step"), 7);
  EXPECT_EQ(j.at("evidence").at("first_differing_step"), 11) << "the checkpoint after the fault";
  // 4 common checkpoints (3, 7, 11, 15): a binary search reads 2 pairs of headers, not 4.
  EXPECT_EQ(j.at("evidence").at("checkpoint_headers_read"), 4);
  EXPECT_EQ(j.at("replay").at("from_checkpoint"), 7);
  EXPECT_EQ(j.at("replay").at("last_step"), 11);
  EXPECT_TRUE(j.at("replay").at("bad_matches_recording").is_null()) << "nothing recorded";
  EXPECT_EQ(j.at("divergence").at("a").at("step"), 9);
  EXPECT_EQ(j.at("divergence").at("a").at("name").get<std::string>().rfind("allreduce.", 0), 0u);
}

TEST_F(BisectCommandTest, AgreeingRunsNeedNoReplay) {
  const std::string a = Train("a", {});
  // Another mode and thread count record differently but train the same.
  const std::string b = Path("b");
  int rc = -1;
  Quiet([&] {
    rc = RunDgrr({"train", "--out", b, "--steps", "16", "--ranks", "2", "--threads", "1", "--mode", "trusted",
                  "--ckpt-every", "4", "--quiet"});
  });
  ASSERT_EQ(rc, 0);
  json j;
  std::tie(rc, j) = Bisect(a, b);
  EXPECT_EQ(rc, kExitOk) << last_err_;
  EXPECT_EQ(j.at("verdict"), "agree");
  EXPECT_EQ(j.at("evidence").at("steps_compared"), 16);
  EXPECT_EQ(j.at("evidence").at("last_common_step"), 15);
  EXPECT_TRUE(j.at("replay").is_null());
  EXPECT_TRUE(j.at("divergence").is_null());
}

TEST_F(BisectCommandTest, ADifferenceThatDoesNotReproduceIsSaidSo) {
  // A transient fault: the bad run's recording shows a flip at step 6, but
  // nothing in its config will make a replay flip again (as with a bit
  // flipped by failing hardware).
  const std::string good = Train("good", {});
  const std::string bad = Train("bad", {"bitflip:step=6,rank=0,at=block0.mlp.gelu.out,bit=20"});
  fs::copy_file(good + "/config.json", bad + "/config.json", fs::copy_options::overwrite_existing);
  fs::remove_all(bad + "/ckpt");
  fs::copy(good + "/ckpt", bad + "/ckpt");
  auto [rc, j] = Bisect(good, bad);
  EXPECT_EQ(rc, kExitReplayIntegrity) << last_err_;
  EXPECT_EQ(j.at("verdict"), "not_reproduced");
  EXPECT_EQ(j.at("evidence").at("first_differing_step"), 6);
  EXPECT_EQ(j.at("replay").at("bad_matches_recording"), false);
  EXPECT_TRUE(j.at("divergence").is_null());
}

TEST_F(BisectCommandTest, KeptReplaysCanBeComparedAgain) {
  const std::string good = Train("good", {});
  const std::string bad = Train("bad", {"reduce-order:step=5"});
  const std::string keep = Path("replays");
  auto [rc, j] = Bisect(good, bad, {"--keep", keep});
  ASSERT_EQ(rc, kExitDivergence) << last_err_;
  EXPECT_EQ(j.at("replay").at("good_dir"), keep + "/good");
  int compare_rc = -1;
  Quiet([&] { compare_rc = RunDgrr({"compare", keep + "/good", keep + "/bad"}); });
  EXPECT_EQ(compare_rc, kExitDivergence);
  // --keep refuses to reuse a directory.
  std::tie(rc, j) = Bisect(good, bad, {"--keep", keep});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(last_err_.find("exists"), std::string::npos) << last_err_;
}

TEST_F(BisectCommandTest, BadInput) {
  const std::string good = Train("good", {});
  auto [rc, j] = Bisect(good, Path("missing"));
  EXPECT_EQ(rc, kExitIO);
  EXPECT_NE(last_err_.find("missing"), std::string::npos) << last_err_;
  int usage = -1;
  Quiet([&] { usage = RunDgrr({"bisect", "--good", good}); });
  EXPECT_EQ(usage, kExitUsage);
  // A run missing a rank's trace is refused, naming it, not bisected on fewer ranks.
  const std::string partial = Train("partial", {});
  fs::remove(partial + "/rank1.trace");
  std::tie(rc, j) = Bisect(good, partial);
  EXPECT_EQ(rc, kExitIO);
  EXPECT_NE(last_err_.find("rank1.trace"), std::string::npos) << last_err_;
  // Every trace of a run gone: refused as compare refuses it, never "agree".
  const std::string traceless = Train("traceless", {});
  fs::remove(traceless + "/rank0.trace");
  fs::remove(traceless + "/rank1.trace");
  std::tie(rc, j) = Bisect(good, traceless);
  EXPECT_EQ(rc, kExitIO) << last_err_;
  EXPECT_NE(last_err_.find("rank0.trace"), std::string::npos) << last_err_;
  std::tie(rc, j) = Bisect(traceless, good);
  EXPECT_EQ(rc, kExitIO) << last_err_;
  // Nothing recorded and no checkpoints: nothing to bisect with.
  const std::string bare = Path("bare");
  Quiet([&] {
    ASSERT_EQ(RunDgrr({"train", "--out", bare, "--steps", "2", "--mode", "off", "--quiet"}), 0);
  });
  std::tie(rc, j) = Bisect(bare, bare);
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(last_err_.find("nothing to bisect"), std::string::npos) << last_err_;
  // A damaged checkpoint header is invalid data, named.
  const std::string ckpt = good + "/ckpt/step-00000003.h5";
  {
    std::FILE* f = std::fopen(ckpt.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 40, SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
  }
  const std::string bad = Train("bad", {"reduce-order:step=5"});
  std::tie(rc, j) = Bisect(good, bad);
  EXPECT_EQ(rc, kExitInvalidData) << last_err_;
  EXPECT_NE(last_err_.find("step-00000003.h5"), std::string::npos) << last_err_;
}

}  // namespace
}  // namespace dgrr::cli
