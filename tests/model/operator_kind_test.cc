// The operator kind the model reports at each boundary decides what `trusted`
// mode records (runtime/recording_mode.h). Until the model reported it, the
// trainer inferred it from the boundary's name; this pins the records that
// inference gave, so that passing the kind changed no recorded bit.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "model/gpt.h"
#include "model/trainer.h"
#include "runtime/session.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"

namespace dgrr::model {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The former rule (model/trainer.cc before the model reported kinds): which
// boundaries `trusted` left out, by name.
bool FormerlyTrusted(const std::string& name) {
  const bool backward = EndsWith(name, ".dinp");
  if (!backward && (EndsWith(name, ".qkv.out") || EndsWith(name, ".proj.out") || EndsWith(name, ".fc.out") ||
                    name == "lm_head.logits" || EndsWith(name, ".gelu.out") || EndsWith(name, ".dropout.out") ||
                    EndsWith(name, ".residual.out"))) {
    return true;
  }
  // Optimizer: AdamW's moments and its gradient input; the updated parameters are recorded.
  return name.rfind("adamw.m.", 0) == 0 || name.rfind("adamw.v.", 0) == 0 || EndsWith(name, ".grad");
}

std::vector<std::string> RecordedNames(const std::string& run_dir) {
  auto t = trace::ReadWholeTrace(TracePathFor(run_dir, 0));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::string> names;
  if (!t.ok()) return names;
  for (const auto& rec : t->records) {
    if (const auto* b = std::get_if<trace::BoundaryRecord>(&rec.body)) names.push_back(t->names[b->name_id]);
  }
  return names;
}

class OperatorKindTest : public ::dgrr::test_support::TempDirTest {
 protected:
  std::vector<std::string> Run(RecordMode mode) {
    TrainOptions o;
    o.out_dir = (dir_ / std::string(RecordModeName(mode))).string();
    o.steps = 1;
    o.seed = 5;
    o.batch = 2;
    o.mode = mode;
    auto t = Trainer::Create(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    TrainResult r;
    const Status s = (*t)->Run(nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return RecordedNames(o.out_dir);
  }
};

TEST_F(OperatorKindTest, TrustedRecordsWhatTheFormerNameRuleRecorded) {
  const std::vector<std::string> full = Run(RecordMode::kFull);
  ASSERT_GT(full.size(), 50u);
  std::vector<std::string> expected;
  size_t left_out = 0;
  for (const std::string& name : full) {
    if (FormerlyTrusted(name)) {
      ++left_out;
    } else {
      expected.push_back(name);
    }
  }
  ASSERT_GT(left_out, 10u);  // the rule did leave something out
  EXPECT_EQ(Run(RecordMode::kTrusted), expected);
}

// What the model reports, boundary by boundary, for one example.
class OperatorCollector final : public BoundaryObserver {
 public:
  void OnBoundary(std::string_view name, Phase phase, Operator op, bool, const float*, std::span<const int64_t>,
                  uint64_t, uint32_t) override {
    seen.push_back({std::string(name), phase, op});
  }
  struct Seen {
    std::string name;
    Phase phase;
    Operator op;
  };
  std::vector<Seen> seen;
};

TEST(OperatorReportTest, TheModelNamesTheOperatorOfEveryBoundary) {
  auto preset = PresetByName("tiny");
  ASSERT_TRUE(preset.ok());
  GptConfig config = preset->model;
  config.attn_dropout = config.resid_dropout = 0;
  auto gpt = Gpt::Create(config);
  ASSERT_TRUE(gpt.ok());
  OperatorCollector collector;
  ExampleHooks hooks;
  hooks.observer = &collector;
  ExampleEngine<float> engine(config);
  std::vector<uint8_t> tokens(static_cast<size_t>(config.seq_len) + 1, 'a');
  std::vector<float> grad(gpt->num_parameters());
  engine.Forward(gpt->parameters(), tokens.data(), 0, hooks);
  engine.Backward(gpt->parameters(), tokens.data(), 0, grad.data(), hooks);
  auto op_of = [&](const std::string& name) {
    for (const auto& s : collector.seen) {
      if (s.name == name) return OperatorName(s.op);
    }
    return "absent";
  };
  EXPECT_STREQ(op_of("embed.out"), "embedding");
  EXPECT_STREQ(op_of("block0.ln1.out"), "norm");
  EXPECT_STREQ(op_of("block0.attn.qkv.out"), "matmul");
  EXPECT_STREQ(op_of("block0.attn.softmax.out"), "attention");
  EXPECT_STREQ(op_of("block0.attn.out"), "attention");
  EXPECT_STREQ(op_of("block1.mlp.gelu.out"), "elementwise");
  EXPECT_STREQ(op_of("block1.mlp.residual.out"), "elementwise");
  EXPECT_STREQ(op_of("lm_head.logits"), "matmul");
  EXPECT_STREQ(op_of("loss"), "loss");
  EXPECT_STREQ(op_of("block0.mlp.fc.dinp"), "matmul");
  for (const auto& s : collector.seen) {
    EXPECT_EQ(s.phase, EndsWith(s.name, ".dinp") ? Phase::kBackward : Phase::kForward) << s.name;
    EXPECT_NE(s.op, Operator::kOther) << s.name << ": every per-example boundary has a kind";
  }
}

}  // namespace
}  // namespace dgrr::model
