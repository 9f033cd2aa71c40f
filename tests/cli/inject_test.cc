// Drills at every recorded boundary: `dgrr train --inject bitflip:...,at=NAME`
// for a pseudo-random boundary of each part of a training step (the input
// tokens, a forward output, the loss, an activation gradient, the gradient
// AdamW reads, an all-reduced gradient, AdamW's moments, an updated
// parameter), at a pseudo-random step and rank, is named exactly, by
// boundary, step and rank, by `dgrr compare` of full recordings and by
// `dgrr bisect` of sdc recordings with checkpoints. The boundary names come
// from a real trace, as a user would take them from `dgrr inspect`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/command.h"
#include "model/faults.h"
#include "model/trainer.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kSteps = 8;  // checkpoints (every 2 steps) after steps 1, 3, 5, 7
constexpr int kRanks = 2;

// The parts of a step a boundary can belong to, told apart by the phase the
// trace gives it and, in the optimizer phase, by its name.
enum class Part {
  kTokens,
  kForward,
  kLoss,
  kActivationGradient,
  kParameterGradient,
  kCollective,
  kOptimizerState,
  kOptimizerUpdate,
};

const char* PartName(Part p) {
  switch (p) {
    case Part::kTokens: return "Tokens";
    case Part::kForward: return "Forward";
    case Part::kLoss: return "Loss";
    case Part::kActivationGradient: return "ActivationGradient";
    case Part::kParameterGradient: return "ParameterGradient";
    case Part::kCollective: return "Collective";
    case Part::kOptimizerState: return "OptimizerState";
    case Part::kOptimizerUpdate: return "OptimizerUpdate";
  }
  return "?";
}

Part PartOf(const std::string& phase, const std::string& name) {
  if (phase == "data") return Part::kTokens;
  if (phase == "forward") return name == "loss" ? Part::kLoss : Part::kForward;
  if (phase == "backward") return Part::kActivationGradient;
  if (phase == "collective") return Part::kCollective;
  if (name.rfind("adamw.", 0) == 0) return Part::kOptimizerState;
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0) return Part::kParameterGradient;
  return Part::kOptimizerUpdate;
}

struct Boundary {
  std::string name;
  uint64_t elements = 0;
};

// Recorded once for the whole suite: the clean runs and the boundary names.
struct Clean {
  std::string dir, full, sdc;
  std::map<Part, std::vector<Boundary>> boundaries;  // step 0 of rank 0, in recording order
  std::vector<std::string> names;
  bool ok = false;
};
Clean* clean = nullptr;

std::vector<std::string> TrainArgs(const std::string& out, const std::string& mode) {
  return {"train", "--model", "tiny", "--out", out, "--steps", std::to_string(kSteps), "--ranks",
          std::to_string(kRanks), "--threads", "2", "--mode", mode, "--ckpt-every", "2", "--quiet"};
}

class InjectDrillTest : public test_support::TempDirTest, public ::testing::WithParamInterface<Part> {
 public:
  static void SetUpTestSuite() {
    clean = new Clean;
    clean->dir = (fs::temp_directory_path() / ("dgrr-" + std::to_string(::getpid()) + "-inject-clean")).string();
    fs::remove_all(clean->dir);
    clean->full = clean->dir + "/full";
    clean->sdc = clean->dir + "/sdc";
    if (RunCaptured(TrainArgs(clean->full, "full")).rc != 0) return;
    if (RunCaptured(TrainArgs(clean->sdc, "sdc")).rc != 0) return;
    const CommandOutput inspect =
        RunCaptured({"inspect", clean->full + "/rank0.trace", "--step", "0", "--json"});
    if (inspect.rc != 0) return;
    const json doc = json::parse(inspect.out);
    for (const json& r : doc.at("records")) {
      if (r.at("type") != "boundary") continue;
      const std::string name = r.at("name");
      if (std::find(clean->names.begin(), clean->names.end(), name) != clean->names.end()) continue;
      uint64_t elements = 1;
      for (const json& d : r.at("dims")) elements *= d.get<uint64_t>();
      clean->names.push_back(name);
      clean->boundaries[PartOf(r.at("phase"), name)].push_back({name, elements});
    }
    clean->ok = true;
  }
  static void TearDownTestSuite() {
    fs::remove_all(clean->dir);
    delete clean;
    clean = nullptr;
  }

 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(clean != nullptr && clean->ok) << "the clean runs could not be recorded";
  }
  // A fixed pseudo-random sequence per part and test (SplitMix64).
  void Seed(uint64_t salt) { state_ = 0x5eed0000 + 0x100 * salt + static_cast<uint64_t>(GetParam()); }
  uint64_t Pick(uint64_t n) {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % n;
  }
  // Trains a faulty copy of a clean run. A fault in one rank's copy of the
  // replicated state stops it with exit 4: the SDC check once the parameters
  // differ, or the checkpoint writer when a moment differs at a checkpoint
  // step (docs/model.md); either way after recording the step.
  void TrainFaulty(const std::string& out, const std::string& mode, const std::string& spec) {
    std::vector<std::string> args = TrainArgs(out, mode);
    args.insert(args.end(), {"--inject", spec});
    const CommandOutput r = RunCaptured(args);
    EXPECT_TRUE(r.rc == kExitOk || r.rc == kExitDivergence) << spec << ": " << r.err;
  }
  uint64_t state_ = 0;
};

// The fault's EVENT is recorded on its rank at its step, naming the element
// and bit, before the record of the tensor it corrupted.
void ExpectEventBeforeRecord(const std::string& run, int rank, uint64_t step, const std::string& spec,
                             const std::string& at, uint64_t index, int bit) {
  const CommandOutput inspect = RunCaptured({"inspect", run + "/rank" + std::to_string(rank) + ".trace",
                                             "--step", std::to_string(step), "--json"});
  ASSERT_EQ(inspect.rc, 0) << inspect.err;
  int64_t event = -1, record = -1;
  const json doc = json::parse(inspect.out);
    for (const json& r : doc.at("records")) {
    if (r.at("type") == "event" && r.at("kind") == "fault_injected") {
      EXPECT_EQ(event, -1) << "one EVENT per fault";
      event = r.at("index");
      EXPECT_EQ(r.at("payload_text").get<std::string>().rfind(spec + " fired: element " + std::to_string(index) +
                                                                  " bit " + std::to_string(bit),
                                                              0),
                0u)
          << r.at("payload_text");
    }
    if (r.at("type") == "boundary" && r.at("name") == at && record < 0 && event >= 0) record = r.at("index");
  }
  ASSERT_GE(event, 0) << "no fault EVENT at step " << step << " on rank " << rank;
  EXPECT_GT(record, event) << at << " is recorded after its fault's EVENT";
}

TEST_P(InjectDrillTest, CompareNamesTheFlippedBoundaryStepAndRank) {
  Seed(1);
  const std::vector<Boundary>& candidates = clean->boundaries[GetParam()];
  ASSERT_FALSE(candidates.empty()) << "the trace records no boundary of this part";
  const Boundary& b = candidates[Pick(candidates.size())];
  const uint64_t step = Pick(kSteps);
  const int rank = static_cast<int>(Pick(kRanks));
  const uint64_t index = Pick(b.elements);
  const int bit = static_cast<int>(Pick(GetParam() == Part::kTokens ? 8 : 32));
  const std::string spec = "bitflip:step=" + std::to_string(step) + ",rank=" + std::to_string(rank) +
                           ",at=" + b.name + ",index=" + std::to_string(index) + ",bit=" + std::to_string(bit);
  const std::string faulty = Path("faulty");
  TrainFaulty(faulty, "full", spec);

  const CommandOutput compare = RunCaptured({"compare", clean->full, faulty, "--json"});
  ASSERT_EQ(compare.rc, kExitDivergence) << spec << ": " << compare.err;
  const json first = json::parse(compare.out).at("divergence").at("first");
  EXPECT_EQ(first.at("a").at("name"), b.name) << spec;
  EXPECT_EQ(first.at("a").at("step"), step) << spec;
  EXPECT_EQ(first.at("a").at("rank"), rank) << spec;
  EXPECT_EQ(first.at("b").at("name"), b.name) << spec;
  ExpectEventBeforeRecord(faulty, rank, step, spec, b.name, index, bit);
}

TEST_P(InjectDrillTest, BisectOfSdcRunsNamesTheFlippedBoundaryStepAndRank) {
  Seed(2);
  std::vector<Boundary> candidates = clean->boundaries[GetParam()];
  uint64_t step = Pick(kSteps);
  if (GetParam() == Part::kOptimizerState) {
    // A moment is not in the STEP record: an sdc recording shows it only once
    // it has moved the parameters, the step after, and only when no
    // checkpoint of its own step refused the ranks' differing copies. A
    // second moment beside a zero first moment never moves them.
    step = 2 * Pick(kSteps / 2);  // checkpoints follow the odd steps
    std::erase_if(candidates, [](const Boundary& b) { return b.name.rfind("adamw.m.", 0) != 0; });
  }
  // The fused attention backward has used the softmax's input gradient by the
  // time it is observed: a flip there changes its record and nothing else
  // (docs/model.md), which a recording of the parameters cannot show.
  std::erase_if(candidates, [](const Boundary& b) { return b.name.find(".attn.softmax.dinp") != std::string::npos; });
  ASSERT_FALSE(candidates.empty()) << "the trace records no boundary of this part";
  const Boundary& b = candidates[Pick(candidates.size())];
  const int rank = static_cast<int>(Pick(kRanks));
  // An sdc recording shows only what reaches the parameters, the loss or the
  // checkpointed state. The last element is read by every operator (the
  // first token's query meets only its own key, whose softmax weight is 1
  // whatever the score; the causal softmax's upper triangle is never read),
  // and the top exponent bit changes any float, zero included, by far more
  // than rounding hides. Tokens keep the default bit of a byte.
  std::string spec = "bitflip:step=" + std::to_string(step) + ",rank=" + std::to_string(rank) + ",at=" + b.name +
                     ",index=" + std::to_string(b.elements - 1);
  if (GetParam() != Part::kTokens) spec += ",bit=30";
  const std::string faulty = Path("faulty");
  TrainFaulty(faulty, "sdc", spec);

  const CommandOutput bisect = RunCaptured({"bisect", "--good", clean->sdc, "--bad", faulty, "--json", "--quiet"});
  ASSERT_EQ(bisect.rc, kExitDivergence) << spec << ": " << bisect.err << bisect.out;
  const json j = json::parse(bisect.out);
  EXPECT_EQ(j.at("verdict"), "divergence");
  const json& a = j.at("divergence").at("a");
  EXPECT_EQ(a.at("name"), b.name) << spec;
  EXPECT_EQ(a.at("step"), step) << spec;
  EXPECT_EQ(a.at("rank"), rank) << spec;
  const json& replay = j.at("replay");
  EXPECT_LE(replay.at("first_step").get<uint64_t>(), step);
  EXPECT_GE(replay.at("last_step").get<uint64_t>(), step);
  EXPECT_LT(replay.at("steps_replayed").get<uint64_t>(), static_cast<uint64_t>(kSteps))
      << "bisect replays an interval, not the run";
  EXPECT_EQ(replay.at("good_matches_recording"), true);
  EXPECT_EQ(replay.at("bad_matches_recording"), true) << "the replay re-fires the fault";
}

INSTANTIATE_TEST_SUITE_P(EveryPartOfAStep, InjectDrillTest,
                         ::testing::Values(Part::kTokens, Part::kForward, Part::kLoss, Part::kActivationGradient,
                                           Part::kParameterGradient, Part::kCollective, Part::kOptimizerState,
                                           Part::kOptimizerUpdate),
                         [](const ::testing::TestParamInfo<Part>& info) { return PartName(info.param); });

class InjectNamesTest : public test_support::TempDirTest {
 protected:
  // Every boundary name a one-step run of `tiny` on 2 ranks records.
  std::vector<std::string> RecordedNames() {
    const std::string run = Path("names");
    EXPECT_EQ(RunCaptured({"train", "--model", "tiny", "--out", run, "--steps", "1", "--ranks", "2", "--quiet"}).rc,
              0);
    const CommandOutput inspect = RunCaptured({"inspect", run + "/rank0.trace", "--json"});
    EXPECT_EQ(inspect.rc, 0) << inspect.err;
    std::vector<std::string> names;
    const json doc = json::parse(inspect.out);
    for (const json& r : doc.at("records")) {
      if (r.at("type") != "boundary") continue;
      const std::string name = r.at("name");
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  }
  // Runs `dgrr train` with one fault; returns the exit code, keeps stderr.
  int TrainWith(const std::string& spec) {
    const CommandOutput r = RunCaptured({"train", "--model", "tiny", "--out", Path("refused"), "--steps", "4",
                                         "--ranks", "2", "--quiet", "--inject", spec});
    err_ = r.err;
    return r.rc;
  }
  std::string err_;
};

TEST_F(InjectNamesTest, EveryNameTheTraceRecordsIsAFlipTarget) {
  const std::vector<std::string> names = RecordedNames();
  for (const char* named_in_the_issue :
       {"block0.mlp.proj.w.grad", "adamw.v.block1.attn.qkv.w", "allreduce.block1.mlp.fc.dw"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), named_in_the_issue), names.end()) << named_in_the_issue;
  }
  ASSERT_GT(names.size(), 150u);
  for (const std::string& name : names) {
    model::TrainOptions o;
    o.out_dir = Path("unused");
    o.steps = 4;
    o.ranks = 2;
    o.faults.push_back(*model::ParseFaultSpec("bitflip:step=3,rank=1,at=" + name));
    auto trainer = model::Trainer::Create(o);
    EXPECT_TRUE(trainer.ok()) << name << ": " << trainer.status().ToString();
  }
  EXPECT_FALSE(fs::exists(Path("unused"))) << "validation writes nothing";
}

TEST_F(InjectNamesTest, ANameNoRunRecordsIsRefusedNamingTheClosestRealOnes) {
  EXPECT_EQ(TrainWith("bitflip:step=1,at=block0.mlp.proj.w.grd"), kExitUsage);
  EXPECT_NE(err_.find("records no boundary 'block0.mlp.proj.w.grd'"), std::string::npos) << err_;
  EXPECT_NE(err_.find("closest: block0.mlp.proj.w.grad,"), std::string::npos) << err_;
  EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << "one line: " << err_;
  EXPECT_EQ(TrainWith("bitflip:step=1,at=allreduce.block1.mlp.fc.w"), kExitUsage);
  EXPECT_NE(err_.find("closest: allreduce.block1.mlp.fc.dw"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(Path("refused"))) << "a refused run leaves nothing behind";
}

TEST_F(InjectNamesTest, ElementBitAndExampleMustExistInTheTarget) {
  EXPECT_EQ(TrainWith("bitflip:step=1,at=loss,index=1"), kExitUsage);
  EXPECT_NE(err_.find("loss has 1 element(s) per example"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("bitflip:step=1,at=data.tokens,bit=8"), kExitUsage);
  EXPECT_NE(err_.find("8 bits (0..7)"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("bitflip:step=1,at=adamw.m.wpe,example=8"), kExitUsage);
  EXPECT_NE(err_.find("once per batch"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("bitflip:step=1,rank=1,at=embed.out,example=8"), kExitUsage);
  EXPECT_NE(err_.find("examples 12..15"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("bitflip:step=1,at=wpe,index=999999"), kExitUsage);
  EXPECT_NE(err_.find("index=999999 is out of range"), std::string::npos) << err_;
  EXPECT_EQ(RunCaptured({"train", "--model", "tiny", "--out", Path("refused"), "--steps", "4", "--quiet",
                         "--inject", "bitflip:step=1,at=wte", "--inject", "bitflip:step=1,at=loss"})
                .rc,
            kExitUsage)
      << "two bitflips at one step and rank";
  EXPECT_FALSE(fs::exists(Path("refused")));
}

TEST_F(InjectNamesTest, RaceTakesTheParameterItsGradientOrItsAllReduce) {
  for (const char* at : {"block0.mlp.fc.w", "block0.mlp.fc.dw", "allreduce.block0.mlp.fc.dw"}) {
    model::TrainOptions o;
    o.out_dir = Path("unused");
    o.steps = 4;
    o.faults.push_back(*model::ParseFaultSpec(std::string("race:step=1,at=") + at));
    EXPECT_TRUE(model::Trainer::Create(o).ok()) << at;
  }
  EXPECT_EQ(TrainWith("race:step=1,at=block0.mlp.fc.out"), kExitUsage);
  EXPECT_NE(err_.find("whose gradient reduction could race"), std::string::npos) << err_;
}

}  // namespace
}  // namespace dgrr::cli
