#include "checkpoint/fast_forward.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

namespace dgrr::checkpoint {
namespace {

using ir::Program;
using ir::ProgramBuilder;
using Names = std::set<std::string>;

// A reconstruction of DETrain's Table 4 example (the paper's text was not
// available to us): the data iterator is loop-carried and not saved, the model
// is saved, and everything else is dead at the checkpoint.
Program DetrainTable4() {
  ProgramBuilder b;
  b.BuildModel("model1");                      // 1
  b.Assign("data", "load_data", {});           // 2
  b.For("epoch", [&] {                         // 3
    b.For("batch", [&] {                       // 4
      b.Assign({"X", "Y", "data"}, "data.next", {"data"}, "X, Y = data.next()");  // 5
      b.ModelCall("loss", "model1", {"X", "Y"});  // 6
      b.Backward("g", "loss");                 // 7
      b.Update("model1", {"model1", "g"});     // 8
      b.Checkpoint({"model1"});                // 9
    });
  });
  return b.Build();
}

std::vector<FastForwardPlan> PlansOrDie(const Program& program) {
  StatusOr<std::vector<FastForwardPlan>> plans = PlanFastForward(program);
  EXPECT_TRUE(plans.ok()) << plans.status().ToString();
  return plans.ok() ? *plans : std::vector<FastForwardPlan>{};
}

VarAction ActionOf(const FastForwardPlan& plan, const std::string& name) {
  const VariablePlan* var = plan.Find(name);
  EXPECT_NE(var, nullptr) << name;
  return var ? var->action : VarAction::kDropped;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FastForwardTest, DetrainTable4) {
  const std::vector<FastForwardPlan> plans = PlansOrDie(DetrainTable4());
  ASSERT_EQ(plans.size(), 1u);
  const FastForwardPlan& plan = plans[0];
  EXPECT_EQ(plan.checkpoint, 1);
  EXPECT_EQ(plan.statement, 9);
  EXPECT_EQ(plan.saved, std::vector<std::string>({"model1"}));
  ASSERT_EQ(plan.variables.size(), 6u);  // exactly Table 4's variables
  EXPECT_EQ(ActionOf(plan, "data"), VarAction::kFastForward);
  EXPECT_EQ(ActionOf(plan, "model1"), VarAction::kSaved);
  for (const char* dead : {"X", "Y", "loss", "g"}) EXPECT_EQ(ActionOf(plan, dead), VarAction::kDropped) << dead;

  const VariablePlan& data = *plan.Find("data");
  EXPECT_EQ(data.replay, std::vector<int>({2, 5})) << "load, then next() once per skipped batch";
  EXPECT_EQ(data.reason,
            "needed by `X, Y = data.next()` (statement 5) in the next iteration of `for batch:`; not saved by "
            "checkpoint#1, so resume re-executes the statements that define it");
  EXPECT_EQ(plan.replay, std::vector<int>({2, 5}));
  EXPECT_EQ(plan.replay_labels.at(5), "X, Y = data.next()");
  EXPECT_TRUE(Contains(plan.Find("model1")->reason, "restored from checkpoint#1"));
  EXPECT_TRUE(Contains(plan.Find("X")->reason, "redefined by `X, Y = data.next()`")) << plan.Find("X")->reason;
}

TEST(FastForwardTest, NeededSetsFollowTable3Rules) {
  StatusOr<NeededSets> sets = AnalyzeNeeded(DetrainTable4());
  ASSERT_TRUE(sets.ok()) << sets.status().ToString();
  EXPECT_EQ(sets->after.at(9), Names({"data", "model1"}));
  EXPECT_EQ(sets->before.at(8), Names({"data", "g", "model1"}));
  EXPECT_EQ(sets->before.at(7), Names({"data", "loss", "model1"}));
  EXPECT_EQ(sets->before.at(6), Names({"X", "Y", "data", "model1"}));
  EXPECT_EQ(sets->before.at(5), Names({"data", "model1"}));
  EXPECT_EQ(sets->before.at(2), Names({"model1"}));
  EXPECT_EQ(sets->before.at(1), Names({}));
}

TEST(FastForwardTest, RightHandSideIsNeededOnlyWhenTheLeftHandSideIs) {
  // `stats` is never needed, so computing it does not make its inputs needed.
  ProgramBuilder b;
  b.BuildModel("model1");                                 // 1
  b.Assign("probe", "make_probe", {});                    // 2
  b.For("step", [&] {                                     // 3
    b.Assign("stats", "summarise", {"model1", "probe"});  // 4
    b.Assign("loss", "model1", {"model1"});               // 5
    b.Backward("g", "loss");                              // 6
    b.Update("model1", {"model1", "g"});                  // 7
    b.Checkpoint({"model1"});                             // 8
  });
  const Program p = b.Build();
  StatusOr<NeededSets> sets = AnalyzeNeeded(p);
  ASSERT_TRUE(sets.ok());
  EXPECT_EQ(sets->before.at(4), sets->after.at(4));
  EXPECT_EQ(sets->before.at(4).count("probe"), 0u);
  const FastForwardPlan plan = PlansOrDie(p).at(0);
  EXPECT_EQ(ActionOf(plan, "probe"), VarAction::kDropped);
  EXPECT_EQ(plan.Find("probe")->reason, "not needed after checkpoint#1: nothing needed depends on it");
  EXPECT_EQ(ActionOf(plan, "stats"), VarAction::kDropped);
  EXPECT_EQ(plan.Find("stats")->reason, "not needed after checkpoint#1: never used again");
  EXPECT_TRUE(plan.replay.empty());
}

TEST(FastForwardTest, CheckpointInsideNestedLoopsAndOuterLoopState) {
  ProgramBuilder b;
  b.BuildModel("model1");                     // 1
  b.Assign("data", "load_data", {});          // 2
  b.Assign("lr", "init_lr", {});              // 3
  b.For("epoch", [&] {                        // 4
    b.For("batch", [&] {                      // 5
      b.Assign({"X", "Y", "data"}, "data.next", {"data"});  // 6
      b.ModelCall("loss", "model1", {"X", "Y"});            // 7
      b.Backward("g", "loss");                // 8
      b.Update("model1", {"model1", "g", "lr"});  // 9
      b.Checkpoint({"model1"});               // 10
    });
    b.Assign("lr", "decay", {"lr", "epoch"});  // 11: the loop variable is position, not state
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "lr"), VarAction::kFastForward);
  EXPECT_EQ(plan.Find("lr")->replay, std::vector<int>({3, 11}));
  EXPECT_TRUE(Contains(plan.Find("lr")->reason, "(statement 9) in the next iteration of `for batch:`"))
      << plan.Find("lr")->reason;
  EXPECT_EQ(plan.Find("data")->replay, std::vector<int>({2, 6}));
  EXPECT_EQ(plan.replay, std::vector<int>({2, 3, 6, 11}));
  EXPECT_EQ(plan.Find("epoch"), nullptr) << "loop variables are the resume position";
}

TEST(FastForwardTest, NextUseAfterTheInnerLoopIsReported) {
  ProgramBuilder b;
  b.BuildModel("model1");                   // 1
  b.Assign("acc", "zero", {});              // 2
  b.For("epoch", [&] {                      // 3
    b.For("batch", [&] {                    // 4
      b.Assign("acc", "accumulate", {"acc"});  // 5
      b.Checkpoint({"model1"});             // 6
    });
    b.Update("model1", {"model1", "acc"});  // 7
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "acc"), VarAction::kFastForward);
  // Its nearest use is the next batch's accumulate (5), which is in the loop.
  EXPECT_TRUE(Contains(plan.Find("acc")->reason, "(statement 5) in the next iteration of `for batch:`"))
      << plan.Find("acc")->reason;
}

TEST(FastForwardTest, UseLaterInTheSameIterationIsAfterTheCheckpoint) {
  ProgramBuilder b;
  b.BuildModel("model1");                    // 1
  b.Assign("lr", "init_lr", {});             // 2
  b.For("step", [&] {                        // 3
    b.Checkpoint({"model1"});                // 4
    b.Assign("loss", "model1", {"model1"});  // 5
    b.Backward("g", "loss");                 // 6
    b.Update("model1", {"model1", "g", "lr"});  // 7
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_TRUE(Contains(plan.Find("lr")->reason, "needed by `model1 = update(model1, g, lr)` (statement 7) after "
                                                "checkpoint#1; not saved"))
      << plan.Find("lr")->reason;
  EXPECT_EQ(plan.Find("lr")->replay, std::vector<int>({2}));
}

TEST(FastForwardTest, LoopCarriedCounterIsFastForwardedButPerIterationValueIsDropped) {
  ProgramBuilder b;
  b.BuildModel("model1");                      // 1
  b.Assign("step", "zero", {});                // 2
  b.For("batch", [&] {                         // 3
    b.Assign("step", "increment", {"step"});   // 4: defined in one iteration, used in the next
    b.Assign("lr", "schedule", {"step"});      // 5: defined and used in the same iteration
    b.Assign("loss", "model1", {"model1"});    // 6
    b.Backward("g", "loss");                   // 7
    b.Update("model1", {"model1", "g", "lr"});  // 8
    b.Checkpoint({"model1"});                  // 9
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "step"), VarAction::kFastForward);
  EXPECT_EQ(plan.Find("step")->replay, std::vector<int>({2, 4}));
  EXPECT_EQ(ActionOf(plan, "lr"), VarAction::kDropped);
  EXPECT_EQ(plan.Find("lr")->reason,
            "not needed after checkpoint#1: redefined by `lr = schedule(step)` before any use that matters");
  EXPECT_EQ(plan.replay, std::vector<int>({2, 4}));
}

TEST(FastForwardTest, SavedAndRedefinedAfterIsRestored) {
  ProgramBuilder b;
  b.BuildModel("model1");                           // 1
  b.Assign("data", "load_data", {});                // 2
  b.For("batch", [&] {                              // 3
    b.Checkpoint({"model1", "data"});               // 4 at the top of the body
    b.Assign({"X", "data"}, "data.next", {"data"});  // 5 redefines a saved variable
    b.Assign("loss", "model1", {"model1", "X"});    // 6
    b.Backward("g", "loss");                        // 7
    b.Update("model1", {"model1", "g"});            // 8 redefines a saved variable
    b.Checkpoint({"model1", "X"});                  // 9 saves a dead variable
  });
  const std::vector<FastForwardPlan> plans = PlansOrDie(b.Build());
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(ActionOf(plans[0], "model1"), VarAction::kSaved);
  EXPECT_EQ(ActionOf(plans[0], "data"), VarAction::kSaved);
  EXPECT_TRUE(Contains(plans[0].Find("data")->reason, "(statement 5) after checkpoint#1"));
  for (const char* dead : {"X", "loss", "g"}) EXPECT_EQ(ActionOf(plans[0], dead), VarAction::kDropped) << dead;
  EXPECT_TRUE(plans[0].replay.empty());

  EXPECT_EQ(plans[1].checkpoint, 2);
  EXPECT_EQ(plans[1].statement, 9);
  EXPECT_EQ(ActionOf(plans[1], "X"), VarAction::kSaved);
  EXPECT_EQ(plans[1].Find("X")->reason, "restored from checkpoint#2; not needed after it, restoring is harmless");
  EXPECT_EQ(ActionOf(plans[1], "data"), VarAction::kFastForward);
  EXPECT_EQ(plans[1].Find("data")->replay, std::vector<int>({2, 5}));
}

TEST(FastForwardTest, UnsavedStateOnlyAnUpdateDefinesIsAnError) {
  ProgramBuilder b;
  b.BuildModel("model1");                                         // 1
  b.Assign("opt_state", "init_adam", {});                         // 2
  b.For("batch", [&] {                                            // 3
    b.Assign("loss", "model1", {"model1"});                       // 4
    b.Backward("g", "loss");                                      // 5
    b.Update({"model1", "opt_state"}, {"model1", "g", "opt_state"});  // 6
    b.Checkpoint({"model1"});                                     // 7
  });
  StatusOr<std::vector<FastForwardPlan>> plans = PlanFastForward(b.Build());
  ASSERT_TRUE(plans.status().IsInvalidArgument()) << plans.status().ToString();
  const std::string& message = plans.status().message();
  EXPECT_TRUE(Contains(message, "checkpoint#1 (statement 7): `opt_state`")) << message;
  EXPECT_TRUE(Contains(message, "update statement 6")) << message;
  EXPECT_TRUE(Contains(message, "add `opt_state` to the checkpoint")) << message;

  ProgramBuilder fixed;
  fixed.BuildModel("model1");
  fixed.Assign("opt_state", "init_adam", {});
  fixed.For("batch", [&] {
    fixed.Assign("loss", "model1", {"model1"});
    fixed.Backward("g", "loss");
    fixed.Update({"model1", "opt_state"}, {"model1", "g", "opt_state"});
    fixed.Checkpoint({"model1", "opt_state"});
  });
  const FastForwardPlan plan = PlansOrDie(fixed.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "opt_state"), VarAction::kSaved);
  EXPECT_TRUE(plan.replay.empty());
}

TEST(FastForwardTest, HistoryThroughTheSavedModelCannotBeReplayed) {
  // ema depends on every past model, so saving only the final model does not
  // let resume regenerate it: that would re-run the updates.
  ProgramBuilder b;
  b.BuildModel("model1");                      // 1
  b.Assign("ema", "copy", {"model1"});         // 2
  b.For("batch", [&] {                         // 3
    b.Assign("loss", "model1", {"model1"});    // 4
    b.Backward("g", "loss");                   // 5
    b.Update("model1", {"model1", "g"});       // 6
    b.Assign("ema", "mix", {"ema", "model1"});  // 7
    b.Checkpoint({"model1"});                  // 8
  });
  b.Outputs({"model1", "ema"});
  StatusOr<std::vector<FastForwardPlan>> plans = PlanFastForward(b.Build());
  ASSERT_TRUE(plans.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(plans.status().message(), "`ema`")) << plans.status().message();
  // The nearest non-replayable statement of the slice: the update of model1.
  EXPECT_TRUE(Contains(plans.status().message(), "update statement 6")) << plans.status().message();
}

TEST(FastForwardTest, GradientHistoryCannotBeReplayed) {
  ProgramBuilder b;
  b.BuildModel("model1");                              // 1
  b.Assign("gsum", "zero", {});                        // 2
  b.For("batch", [&] {                                 // 3
    b.Assign("loss", "model1", {"model1"});            // 4
    b.Backward("g", "loss");                           // 5
    b.Assign("gsum", "accumulate", {"gsum", "g"});     // 6
    b.Update("model1", {"model1", "gsum"});            // 7
    b.Checkpoint({"model1"});                          // 8
  });
  StatusOr<std::vector<FastForwardPlan>> plans = PlanFastForward(b.Build());
  ASSERT_TRUE(plans.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(plans.status().message(), "`gsum`")) << plans.status().message();
  EXPECT_TRUE(Contains(plans.status().message(), "backward statement 5 (`g = backward(loss)`)"))
      << plans.status().message();
}

TEST(FastForwardTest, UpdateOutsideTheSliceIsNeverReplayed) {
  const FastForwardPlan plan = PlansOrDie(DetrainTable4()).at(0);
  for (int id : plan.replay) {
    EXPECT_NE(id, 7) << "backward";
    EXPECT_NE(id, 8) << "update";
  }
}

TEST(FastForwardTest, UnsavedGeneratorIsFastForwardedByReplayingItsDraws) {
  ProgramBuilder b;
  b.CreateGenerator("rng1", {"seed"});      // 1
  b.BuildModel("model1");                   // 2
  b.For("batch", [&] {                      // 3
    b.RandomGen("rng1", "mask");            // 4
    b.ModelCall("loss", "model1", {"mask"});  // 5
    b.Backward("g", "loss");                // 6
    b.Update("model1", {"model1", "g"});    // 7
    b.Checkpoint({"model1"});               // 8
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "rng1"), VarAction::kFastForward);
  EXPECT_EQ(plan.Find("rng1")->replay, std::vector<int>({1, 4}));
  EXPECT_EQ(ActionOf(plan, "mask"), VarAction::kDropped);
  EXPECT_EQ(ActionOf(plan, "seed"), VarAction::kDropped);
}

TEST(FastForwardTest, ProgramInputIsFastForwardedWithNothingToReplay) {
  ProgramBuilder b;
  b.BuildModel("model1");
  b.For("batch", [&] {
    b.Assign("loss", "model1", {"model1"});
    b.Backward("g", "loss");
    b.Update("model1", {"model1", "g", "base_lr"});
    b.Checkpoint({"model1"});
  });
  const FastForwardPlan plan = PlansOrDie(b.Build()).at(0);
  EXPECT_EQ(ActionOf(plan, "base_lr"), VarAction::kFastForward);
  EXPECT_TRUE(plan.Find("base_lr")->replay.empty());
  EXPECT_TRUE(Contains(plan.Find("base_lr")->reason, "program input"));
}

TEST(FastForwardTest, NoCheckpointNoPlan) {
  ProgramBuilder b;
  b.Assign("x", "f", {});
  EXPECT_TRUE(PlansOrDie(b.Build()).empty());
}

TEST(FastForwardTest, InvalidProgramIsRejected) {
  Program p = DetrainTable4();
  p.body[2].body[0].body[0].defs.push_back("X");  // defines X twice
  EXPECT_TRUE(PlanFastForward(p).status().IsInvalidArgument());
  EXPECT_TRUE(AnalyzeNeeded(p).status().IsInvalidArgument());
}

TEST(FastForwardTest, TextNamesEveryVariableAndTheReplay) {
  const std::string text = PlansToText(PlansOrDie(DetrainTable4()));
  EXPECT_TRUE(Contains(text, "checkpoint#1 (statement 9): checkpoint(model1)\n")) << text;
  EXPECT_TRUE(Contains(text, "  fast_forward data: needed by")) << text;
  EXPECT_TRUE(Contains(text, "  saved        model1: restored")) << text;
  EXPECT_TRUE(Contains(text, "    5  X, Y = data.next()\n")) << text;
}

// ---------------------------------------------------------------------------
// JSON, schema dgrr.plan/1
// ---------------------------------------------------------------------------

TEST(FastForwardJsonTest, RoundTripsAndIsDeterministic) {
  const std::vector<FastForwardPlan> plans = PlansOrDie(DetrainTable4());
  const std::string json = PlansToJson(plans);
  EXPECT_EQ(json, PlansToJson(PlansOrDie(DetrainTable4())));
  EXPECT_EQ(json.rfind("{\n  \"schema\": \"dgrr.plan/1\",", 0), 0u) << json;
  StatusOr<std::vector<FastForwardPlan>> parsed = PlansFromJson(json, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, plans);
}

TEST(FastForwardJsonTest, DocumentedFieldsHaveTheDocumentedValues) {
  const nlohmann::json doc = nlohmann::json::parse(PlansToJson(PlansOrDie(DetrainTable4())));
  const nlohmann::json& ckpt = doc["checkpoints"][0];
  EXPECT_EQ(ckpt["checkpoint"], 1);
  EXPECT_EQ(ckpt["statement"], 9);
  EXPECT_EQ(ckpt["label"], "checkpoint(model1)");
  EXPECT_EQ(ckpt["saved"], nlohmann::json::array({"model1"}));
  EXPECT_EQ(ckpt["replay"][1]["statement"], 5);
  EXPECT_EQ(ckpt["replay"][1]["label"], "X, Y = data.next()");
  bool saw_data = false;
  for (const nlohmann::json& var : ckpt["variables"]) {
    if (var["name"] != "data") continue;
    saw_data = true;
    EXPECT_EQ(var["action"], "fast_forward");
    EXPECT_EQ(var["replay"], nlohmann::json::array({2, 5}));
  }
  EXPECT_TRUE(saw_data);
}

class FastForwardJsonRejectTest : public ::testing::Test {
 protected:
  // Applies `edit` to a valid plan document and expects it to be refused
  // with a message containing `expected`.
  void ExpectRejected(const std::function<void(nlohmann::json&)>& edit, const std::string& expected) {
    nlohmann::json doc = nlohmann::json::parse(PlansToJson(PlansOrDie(DetrainTable4())));
    edit(doc);
    StatusOr<std::vector<FastForwardPlan>> parsed = PlansFromJson(doc.dump(), "run/plan.json");
    ASSERT_FALSE(parsed.ok()) << "accepted: " << doc.dump();
    EXPECT_TRUE(parsed.status().IsCorruption());
    EXPECT_TRUE(Contains(parsed.status().message(), "run/plan.json: ")) << parsed.status().message();
    EXPECT_TRUE(Contains(parsed.status().message(), expected)) << parsed.status().message();
  }
};

TEST_F(FastForwardJsonRejectTest, NotJson) {
  StatusOr<std::vector<FastForwardPlan>> parsed = PlansFromJson("{\"schema\": ", "p.json");
  ASSERT_TRUE(parsed.status().IsCorruption());
  EXPECT_EQ(parsed.status().message().rfind("p.json: $: not valid JSON: ", 0), 0u) << parsed.status().message();
}

TEST_F(FastForwardJsonRejectTest, OtherSchemaVersion) {
  ExpectRejected([](nlohmann::json& d) { d["schema"] = "dgrr.plan/2"; },
                 "$.schema: expected \"dgrr.plan/1\", found \"dgrr.plan/2\"");
}

TEST_F(FastForwardJsonRejectTest, UnknownKey) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["extra"] = 1; },
                 "$.checkpoints[0]: unknown key \"extra\"");
}

TEST_F(FastForwardJsonRejectTest, MissingKey) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["variables"][2].erase("reason"); },
                 "$.checkpoints[0].variables[2]: missing key \"reason\"");
}

TEST_F(FastForwardJsonRejectTest, UnknownAction) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["variables"][0]["action"] = "recompute"; },
                 "$.checkpoints[0].variables[0].action: unknown action \"recompute\"");
}

TEST_F(FastForwardJsonRejectTest, BadStatementId) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["statement"] = -3; },
                 "$.checkpoints[0].statement: expected a positive integer");
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["statement"] = "9"; },
                 "$.checkpoints[0].statement: expected a positive integer");
}

TEST_F(FastForwardJsonRejectTest, ReplayOfAStatementNotListed) {
  ExpectRejected(
      [](nlohmann::json& d) {
        for (nlohmann::json& var : d["checkpoints"][0]["variables"]) {
          if (var["name"] == "data") var["replay"].push_back(8);
        }
      },
      "replays statement 8, which the checkpoint's replay list lacks");
}

TEST_F(FastForwardJsonRejectTest, ReplayOnANonFastForwardVariable) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["variables"][0]["replay"] = {2}; },
                 "only a fast_forward variable replays statements");
}

TEST_F(FastForwardJsonRejectTest, WrongTypes) {
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"] = nlohmann::json::object(); },
                 "$.checkpoints: expected an array");
  ExpectRejected([](nlohmann::json& d) { d["checkpoints"][0]["saved"][0] = 5; },
                 "$.checkpoints[0].saved[0]: expected a string");
}

}  // namespace
}  // namespace dgrr::checkpoint
