#include "runtime/program_ir.h"

#include <gtest/gtest.h>

namespace dgrr::ir {
namespace {

using Names = std::vector<std::string>;

// for epoch: data_parallel: mask = random_gen(rng1); loss = model1(X, mask) ...
Program SmallTrainingLoop() {
  ProgramBuilder b;
  b.CreateGenerator("rng1", {"seed"});
  b.BuildModel("model1", {"rng1"});
  b.For("epoch", [&] {
    b.DataParallel([&] {
      b.RandomGen("rng1", "mask");
      b.ModelCall("loss", "model1", {"X", "mask"});
      b.Backward("g", "loss");
    });
    b.Update("model1", {"model1", "g"});
    b.Checkpoint({"model1"});
  });
  return b.Build();
}

TEST(ProgramIrTest, IdsFollowProgramOrderAndBlocksNest) {
  const Program p = SmallTrainingLoop();
  const std::vector<StatementRef> all = p.Preorder();
  ASSERT_EQ(all.size(), 9u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].stmt->id, static_cast<int>(i) + 1);
  ASSERT_EQ(p.body.size(), 3u);
  EXPECT_EQ(p.body[2].kind, StmtKind::kFor);
  EXPECT_EQ(p.body[2].loop_var, "epoch");
  ASSERT_EQ(p.body[2].body.size(), 3u);
  EXPECT_EQ(p.body[2].body[0].kind, StmtKind::kDataParallel);
  EXPECT_EQ(p.body[2].body[0].body.size(), 3u);
  EXPECT_EQ(all[4].parent_id, 4);  // random_gen inside data_parallel 4
  EXPECT_EQ(all[4].depth, 2);
  EXPECT_EQ(all[8].parent_id, 3);  // checkpoint inside for 3
  EXPECT_EQ(p.Find(7)->kind, StmtKind::kBackward);
  EXPECT_EQ(p.Find(10), nullptr);
}

TEST(ProgramIrTest, EachKindRecordsItsDefsAndUses) {
  const Program p = SmallTrainingLoop();
  const Statement& create = *p.Find(1);
  EXPECT_EQ(create.defs, Names({"rng1"}));
  EXPECT_EQ(create.uses, Names({"seed"}));
  EXPECT_EQ(create.generator, "rng1");
  const Statement& draw = *p.Find(5);
  EXPECT_EQ(draw.defs, Names({"mask", "rng1"})) << "a draw advances its generator";
  EXPECT_EQ(draw.uses, Names({"rng1"}));
  EXPECT_EQ(draw.generator, "rng1");
  const Statement& call = *p.Find(6);
  EXPECT_EQ(call.defs, Names({"loss"}));
  EXPECT_EQ(call.uses, Names({"model1", "X", "mask"}));
  EXPECT_EQ(p.Find(8)->defs, Names({"model1"}));
  EXPECT_EQ(p.Find(8)->uses, Names({"model1", "g"}));
  EXPECT_TRUE(p.Find(9)->defs.empty());
  EXPECT_EQ(p.Find(9)->uses, Names({"model1"}));
  EXPECT_FALSE(p.Find(7)->Replayable());
  EXPECT_FALSE(p.Find(8)->Replayable());
  EXPECT_TRUE(p.Find(6)->Replayable());
}

TEST(ProgramIrTest, DumpShowsIdsIndentationAndLabels) {
  const Program p = SmallTrainingLoop();
  EXPECT_EQ(p.Dump(),
            "1  rng1 = create_generator(seed)\n"
            "2  model1 = build(rng1)\n"
            "3  for epoch:\n"
            "4    data_parallel:\n"
            "5      mask = random_gen(rng1)\n"
            "6      loss = model1(X, mask)\n"
            "7      g = backward(loss)\n"
            "8    model1 = update(model1, g)\n"
            "9    checkpoint(model1)\n"
            "outputs: model1\n");
}

TEST(ProgramIrTest, CustomLabelAndMultipleDefs) {
  ProgramBuilder b;
  const int id = b.Assign({"X", "Y", "data"}, "data.next", {"data"}, "X, Y = data.next()");
  b.Assign({"a"}, "f", {});
  const Program p = b.Build();
  EXPECT_EQ(id, 1);
  EXPECT_EQ(p.Find(1)->label, "X, Y = data.next()");
  EXPECT_EQ(p.Find(1)->defs, Names({"X", "Y", "data"}));
  EXPECT_EQ(p.Find(2)->label, "a = f()");
}

TEST(ProgramIrTest, OutputsDefaultToModelsAndCanBeReplaced) {
  EXPECT_EQ(SmallTrainingLoop().outputs, Names({"model1"}));
  ProgramBuilder b;
  b.Assign("ema", "copy", {"w"});
  EXPECT_TRUE(b.Build().outputs.empty());
  b.Outputs({"ema"});
  EXPECT_EQ(b.Build().outputs, Names({"ema"}));
}

TEST(ProgramIrTest, VariablesExcludeLoopVariables) {
  ProgramBuilder b;
  b.For("epoch", [&] { b.Assign("lr", "schedule", {"epoch", "base_lr"}); });
  const Program p = b.Build();
  EXPECT_EQ(p.LoopVariables(), Names({"epoch"}));
  EXPECT_EQ(p.Variables(), Names({"base_lr", "lr"}));
}

TEST(ProgramIrTest, EnclosingLoopsInnermostFirst) {
  ProgramBuilder b;
  b.For("epoch", [&] {
    b.DataParallel([&] {
      b.For("batch", [&] { b.Assign("x", "f", {}); });
    });
  });
  const Program p = b.Build();
  EXPECT_EQ(p.EnclosingLoops(4), std::vector<int>({3, 1}));
  EXPECT_EQ(p.EnclosingLoops(1), std::vector<int>());
}

TEST(ProgramIrTest, CopiesAreIndependentValues) {
  const Program a = SmallTrainingLoop();
  Program b = a;
  EXPECT_EQ(a, b);
  b.body[2].body[2].uses.push_back("extra");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.Find(9)->uses, Names({"model1"}));
}

TEST(ProgramIrTest, BuiltProgramsValidate) {
  EXPECT_TRUE(ValidateProgram(SmallTrainingLoop()).ok());
  EXPECT_TRUE(ValidateProgram(Program{}).ok());
}

TEST(ProgramIrTest, ValidateRejectsBadNames) {
  ProgramBuilder b;
  b.Assign("x", "f", {"2bad"});
  const Status s = ValidateProgram(b.Build());
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("statement 1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("2bad"), std::string::npos) << s.ToString();

  ProgramBuilder empty_name;
  empty_name.Assign("", "f", {});
  EXPECT_TRUE(ValidateProgram(empty_name.Build()).IsInvalidArgument());
}

TEST(ProgramIrTest, ValidateRejectsTamperedStructure) {
  Program ids = SmallTrainingLoop();
  ids.body[1].id = 7;
  EXPECT_TRUE(ValidateProgram(ids).IsInvalidArgument());

  Program leaf_body = SmallTrainingLoop();
  leaf_body.body[0].body.push_back(Statement{});
  EXPECT_TRUE(ValidateProgram(leaf_body).IsInvalidArgument());

  Program draw = SmallTrainingLoop();
  draw.body[2].body[0].body[0].generator.clear();
  EXPECT_TRUE(ValidateProgram(draw).IsInvalidArgument());

  Program block_defs = SmallTrainingLoop();
  block_defs.body[2].defs.push_back("x");
  EXPECT_TRUE(ValidateProgram(block_defs).IsInvalidArgument());

  Program checkpoint_defs = SmallTrainingLoop();
  checkpoint_defs.body[2].body[2].defs.push_back("x");
  EXPECT_TRUE(ValidateProgram(checkpoint_defs).IsInvalidArgument());
}

TEST(ProgramIrTest, ValidateRejectsAssignedLoopVariableAndUnknownOutput) {
  ProgramBuilder loop;
  loop.For("i", [&] { loop.Assign("i", "inc", {"i"}); });
  EXPECT_TRUE(ValidateProgram(loop.Build()).IsInvalidArgument());

  ProgramBuilder out;
  out.Assign("x", "f", {});
  out.Outputs({"y"});
  const Status s = ValidateProgram(out.Build());
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("'y'"), std::string::npos) << s.ToString();
}

TEST(ProgramIrTest, ValidateRejectsDuplicateDefs) {
  ProgramBuilder b;
  b.Assign({"x", "x"}, "f", {});
  EXPECT_TRUE(ValidateProgram(b.Build()).IsInvalidArgument());
}

TEST(ProgramIrTest, KindNames) {
  EXPECT_STREQ(StmtKindName(StmtKind::kRandomGen), "random_gen");
  EXPECT_STREQ(StmtKindName(StmtKind::kDataParallel), "data_parallel");
  EXPECT_STREQ(StmtKindName(StmtKind::kUpdate), "update");
}

}  // namespace
}  // namespace dgrr::ir
