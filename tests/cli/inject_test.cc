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
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
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

// The clean runs, recorded once per suite that needs them.
void RecordCleanRuns() {
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

void RemoveCleanRuns() {
  fs::remove_all(clean->dir);
  delete clean;
  clean = nullptr;
}

// The new tensor faults of issue 26 (item 5), beside bitflip.
enum class Kind { kMultibit, kStuckByte, kRandom, kNan, kInf };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kMultibit: return "multibit";
    case Kind::kStuckByte: return "stuck-byte";
    case Kind::kRandom: return "random";
    case Kind::kNan: return "nan";
    case Kind::kInf: return "inf";
  }
  return "?";
}
using KindAndPart = std::tuple<Kind, Part>;

uint64_t ParamSalt(Part p) { return static_cast<uint64_t>(p); }
uint64_t ParamSalt(const KindAndPart& kp) {
  return 0x10000 * (1 + static_cast<uint64_t>(std::get<0>(kp))) + static_cast<uint64_t>(std::get<1>(kp));
}

template <typename Param>
class DrillTest : public test_support::TempDirTest, public ::testing::WithParamInterface<Param> {
 public:
  static void SetUpTestSuite() { RecordCleanRuns(); }
  static void TearDownTestSuite() { RemoveCleanRuns(); }

 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(clean != nullptr && clean->ok) << "the clean runs could not be recorded";
  }
  // A fixed pseudo-random sequence per part and test (SplitMix64).
  void Seed(uint64_t salt) { state_ = 0x5eed0000 + 0x100 * salt + ParamSalt(this->GetParam()); }
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
using InjectDrillTest = DrillTest<Part>;
using InjectKindDrillTest = DrillTest<KindAndPart>;

// The fault's EVENT is recorded on its rank at its step, naming the element
// and bit, before the record of the tensor it corrupted.
void ExpectEventBeforeRecord(const std::string& run, int rank, uint64_t step, const std::string& at,
                             const std::string& fired);
void ExpectEventBeforeRecord(const std::string& run, int rank, uint64_t step, const std::string& spec,
                             const std::string& at, uint64_t index, int bit) {
  ExpectEventBeforeRecord(run, rank, step, at,
                          spec + " fired: element " + std::to_string(index) + " bit " + std::to_string(bit));
}
// `fired`: how the EVENT's payload starts.
void ExpectEventBeforeRecord(const std::string& run, int rank, uint64_t step, const std::string& at,
                             const std::string& fired) {
  const CommandOutput inspect = RunCaptured({"inspect", run + "/rank" + std::to_string(rank) + ".trace",
                                             "--step", std::to_string(step), "--json"});
  ASSERT_EQ(inspect.rc, 0) << inspect.err;
  int64_t event = -1, record = -1;
  const json doc = json::parse(inspect.out);
    for (const json& r : doc.at("records")) {
    if (r.at("type") == "event" && r.at("kind") == "fault_injected") {
      EXPECT_EQ(event, -1) << "one EVENT per fault";
      event = r.at("index");
      EXPECT_EQ(r.at("payload_text").get<std::string>().rfind(fired, 0), 0u) << r.at("payload_text");
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

// A spec of `kind` at element `index` of `b`, with its other fields picked;
// `visible`: the values an sdc recording cannot miss (see the bitflip bisect
// test: the top exponent bits, NaN and Inf, at the last element).
std::string KindSpec(Kind kind, Part part, const Boundary& b, uint64_t step, int rank, uint64_t index,
                     const std::function<uint64_t(uint64_t)>& pick, bool visible) {
  const bool bytes = part == Part::kTokens;
  std::string spec = std::string(KindName(kind)) + ":step=" + std::to_string(step) + ",rank=" + std::to_string(rank) +
                     ",at=" + b.name + ",index=" + std::to_string(index);
  switch (kind) {
    case Kind::kMultibit: {
      const uint64_t room = b.elements - index;
      if (visible) return spec + (bytes ? ",bits=0+1" : ",bits=30+29");
      const uint64_t span = 1 + pick(std::min<uint64_t>(room, 3));
      if (pick(2) == 0) {
        const int width = bytes ? 8 : 32;
        const int first = static_cast<int>(pick(width));
        const int second = (first + 1 + static_cast<int>(pick(width - 1))) % width;
        spec += ",bits=" + std::to_string(first) + "+" + std::to_string(second);
      } else {
        spec += ",count=" + std::to_string(2 + pick(bytes ? 6 : 10));
      }
      return spec + ",elements=" + std::to_string(span);
    }
    case Kind::kStuckByte:
      // The top byte of a float at 0xff is a negative NaN or a huge value,
      // which no tensor of a healthy run holds; a text byte is never 0xff.
      if (visible || bytes) return spec + ",value=0xff";
      return spec + ",byte=3,value=" + std::to_string(0xf0 + pick(16));
    case Kind::kRandom:
    case Kind::kNan: return spec;
    case Kind::kInf: return spec + (pick(2) ? ",sign=-" : "");
  }
  return spec;
}

TEST_P(InjectKindDrillTest, CompareNamesTheCorruptedBoundaryStepAndRank) {
  const auto [kind, part] = GetParam();
  Seed(3);
  const std::vector<Boundary>& candidates = clean->boundaries[part];
  ASSERT_FALSE(candidates.empty()) << "the trace records no boundary of this part";
  const Boundary& b = candidates[Pick(candidates.size())];
  const uint64_t step = Pick(kSteps);
  const int rank = static_cast<int>(Pick(kRanks));
  const uint64_t index = Pick(b.elements);
  const std::string spec =
      KindSpec(kind, part, b, step, rank, index, [this](uint64_t n) { return Pick(n); }, /*visible=*/false);
  const std::string faulty = Path("faulty");
  TrainFaulty(faulty, "full", spec);

  const CommandOutput compare = RunCaptured({"compare", clean->full, faulty, "--json"});
  ASSERT_EQ(compare.rc, kExitDivergence) << spec << ": " << compare.err;
  const json first = json::parse(compare.out).at("divergence").at("first");
  EXPECT_EQ(first.at("a").at("name"), b.name) << spec;
  EXPECT_EQ(first.at("a").at("step"), step) << spec;
  EXPECT_EQ(first.at("a").at("rank"), rank) << spec;
  EXPECT_EQ(first.at("b").at("name"), b.name) << spec;
  ExpectEventBeforeRecord(faulty, rank, step, b.name,
                          std::string(KindName(kind)) + " fired: element " + std::to_string(index) + " 0x");
}

TEST_P(InjectKindDrillTest, BisectOfSdcRunsNamesTheCorruptedBoundaryStepAndRank) {
  const auto [kind, part] = GetParam();
  Seed(4);
  std::vector<Boundary> candidates = clean->boundaries[part];
  uint64_t step = Pick(kSteps);
  // As for the bitflip (above): a moment shows in an sdc recording only once
  // it has moved the parameters, and only its first moment; the softmax's
  // input gradient is observed after its last use.
  if (part == Part::kOptimizerState) {
    step = 2 * Pick(kSteps / 2);
    std::erase_if(candidates, [](const Boundary& b) { return b.name.rfind("adamw.m.", 0) != 0; });
  }
  std::erase_if(candidates, [](const Boundary& b) { return b.name.find(".attn.softmax.dinp") != std::string::npos; });
  ASSERT_FALSE(candidates.empty()) << "the trace records no boundary of this part";
  const Boundary& b = candidates[Pick(candidates.size())];
  const int rank = static_cast<int>(Pick(kRanks));
  const std::string spec = KindSpec(kind, part, b, step, rank, b.elements - 1, [this](uint64_t n) { return Pick(n); },
                                    /*visible=*/true);
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
  // The fault's randomness is the run's (seed, step, rank, example,
  // element), not the process's: bisect's replay re-fires the same bits.
  EXPECT_EQ(j.at("replay").at("bad_matches_recording"), true) << "the replay re-fires the fault";
}

std::string KindAndPartName(const ::testing::TestParamInfo<KindAndPart>& info) {
  std::string kind = KindName(std::get<0>(info.param));
  std::erase(kind, '-');
  return kind + "_" + PartName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    EveryKindAndPartOfAStep, InjectKindDrillTest,
    ::testing::Combine(::testing::Values(Kind::kMultibit, Kind::kStuckByte, Kind::kRandom, Kind::kNan, Kind::kInf),
                       ::testing::Values(Part::kForward, Part::kLoss, Part::kActivationGradient,
                                         Part::kParameterGradient, Part::kCollective, Part::kOptimizerState,
                                         Part::kOptimizerUpdate)),
    KindAndPartName);
// A token byte has no NaN or Inf (refused: InjectNamesTest).
INSTANTIATE_TEST_SUITE_P(EveryKindOfTheTokens, InjectKindDrillTest,
                         ::testing::Combine(::testing::Values(Kind::kMultibit, Kind::kStuckByte, Kind::kRandom),
                                            ::testing::Values(Part::kTokens)),
                         KindAndPartName);

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

TEST_F(InjectNamesTest, EveryTensorFaultIsCheckedAgainstItsTarget) {
  EXPECT_EQ(TrainWith("nan:step=1,at=data.tokens"), kExitUsage);
  EXPECT_NE(err_.find("data.tokens holds bytes, which have no nan"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("inf:step=1,at=data.tokens,index=3"), kExitUsage);
  EXPECT_EQ(TrainWith("multibit:step=1,at=data.tokens,bits=2+8"), kExitUsage);
  EXPECT_NE(err_.find("bit 8 is out of range"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("multibit:step=1,at=data.tokens,count=9"), kExitUsage);
  EXPECT_EQ(TrainWith("multibit:step=1,at=loss,elements=2"), kExitUsage);
  EXPECT_NE(err_.find("elements=2 from index 0 runs past the end: loss has 1 element(s) per example"),
            std::string::npos)
      << err_;
  EXPECT_EQ(TrainWith("stuck-byte:step=1,at=data.tokens,byte=1"), kExitUsage);
  EXPECT_NE(err_.find("has 1 byte(s)"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("random:step=1,at=block0.mlp.fc.ouy"), kExitUsage);
  EXPECT_NE(err_.find("closest: block0.mlp.fc.out"), std::string::npos) << err_;
  EXPECT_EQ(TrainWith("random:step=1,rank=1,at=embed.out,example=8"), kExitUsage);
  EXPECT_NE(err_.find("examples 12..15"), std::string::npos) << err_;
  EXPECT_EQ(RunCaptured({"train", "--model", "tiny", "--out", Path("refused"), "--steps", "4", "--quiet",
                         "--inject", "nan:step=1,at=wte", "--inject", "bitflip:step=1,at=loss"})
                .rc,
            kExitUsage)
      << "two tensor faults at one step and rank";
  EXPECT_FALSE(fs::exists(Path("refused")));
}

// config.json records each fault as its spec: a run with the new kinds
// resumes with them, and an older run's file (bitflip only) reads as before.
TEST_F(InjectNamesTest, TheNewKindsAreRecordedInConfigJson) {
  const std::string run = Path("run");
  const std::vector<std::string> faults = {"multibit:step=1,rank=1,at=block0.mlp.fc.out,count=3,elements=2",
                                           "stuck-byte:step=2,at=wte,byte=1,value=0x5a",
                                           "random:step=2,rank=1,at=data.tokens,index=3", "inf:step=3,at=loss,sign=-"};
  std::vector<std::string> args = {"train", "--model", "tiny", "--out", run, "--steps", "4", "--ranks", "2", "--quiet"};
  for (const std::string& f : faults) args.insert(args.end(), {"--inject", f});
  const int rc = RunCaptured(args).rc;
  EXPECT_TRUE(rc == kExitOk || rc == kExitDivergence) << rc;
  auto recorded = model::TrainOptionsFromRun(run);
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  ASSERT_EQ(recorded->faults.size(), faults.size());
  for (size_t i = 0; i < faults.size(); ++i) EXPECT_EQ(recorded->faults[i].text, faults[i]);
  EXPECT_EQ(recorded->faults[0].kind, model::FaultKind::kMultibit);
  EXPECT_EQ(*recorded->faults[0].count, 3);
  EXPECT_EQ(recorded->faults[1].value, 0x5a);
  EXPECT_TRUE(recorded->faults[3].negative);
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
