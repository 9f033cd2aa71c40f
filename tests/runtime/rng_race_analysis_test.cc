#include "runtime/rng_race_analysis.h"

#include <gtest/gtest.h>

namespace dgrr::ir {
namespace {

using Names = std::vector<std::string>;

Names Racy(const Program& program) {
  StatusOr<RngRaceReport> report = AnalyzeRngRaces(program);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? report->RacyGenerators() : Names{"<error>"};
}

// A reconstruction of DETrain's running example (its Fig. 4; the paper's text
// was not available to us): three generators shared by a data-parallel
// training loop. rng1 (dropout) and rng3 (augmentation) are created before the
// region and drawn by every worker: racy. rng2 is created inside the region,
// so each worker has its own. rng4 shuffles once, before the region.
Program DetrainFigure4() {
  ProgramBuilder b;
  b.CreateGenerator("rng1", {"seed"});      // 1
  b.CreateGenerator("rng3", {"seed"});      // 2
  b.CreateGenerator("rng4", {"seed"});      // 3
  b.RandomGen("rng1", "w0");                // 4  weight init, sequential
  b.BuildModel("model1", {"w0"});           // 5
  b.RandomGen("rng4", "order");             // 6  shuffle, sequential
  b.Assign("data", "loader", {"order"});    // 7
  b.For("epoch", [&] {                      // 8
    b.DataParallel([&] {                    // 9
      b.CreateGenerator("rng2", {"seed"});  // 10
      b.For("batch", [&] {                  // 11
        b.Assign({"X", "Y", "data"}, "data.next", {"data"}, "X, Y = data.next()");  // 12
        b.RandomGen("rng3", "aug");         // 13
        b.RandomGen("rng1", "mask");        // 14
        b.RandomGen("rng2", "noise");       // 15
        b.ModelCall("loss", "model1", {"X", "Y", "aug", "mask", "noise"});  // 16
        b.Backward("g", "loss");            // 17
      });
    });
    b.Update("model1", {"model1", "g"});    // 18
    b.Checkpoint({"model1"});               // 19
  });
  return b.Build();
}

TEST(RngRaceTest, DetrainFigure4FlagsExactlyRng1AndRng3) {
  const Program p = DetrainFigure4();
  StatusOr<RngRaceReport> report = AnalyzeRngRaces(p);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->RacyGenerators(), Names({"rng1", "rng3"}));
  ASSERT_EQ(report->racy.size(), 2u);
  const RngRaceFinding& rng1 = report->racy[0];
  EXPECT_EQ(rng1.created_at, 1);
  ASSERT_EQ(rng1.draws.size(), 1u) << "the sequential init draw at 4 is not racy";
  EXPECT_EQ(rng1.draws[0].statement, 14);
  EXPECT_EQ(rng1.draws[0].region, 9);
  const RngRaceFinding& rng3 = report->racy[1];
  EXPECT_EQ(rng3.created_at, 2);
  ASSERT_EQ(rng3.draws.size(), 1u);
  EXPECT_EQ(rng3.draws[0].statement, 13);
}

TEST(RngRaceTest, ReportNamesTheDrawAndTheFix) {
  const Program p = DetrainFigure4();
  const std::string text = AnalyzeRngRaces(p)->ToString(p);
  EXPECT_NE(text.find("rng1: drawn at statement 14 (`mask = random_gen(rng1)`)"), std::string::npos) << text;
  EXPECT_NE(text.find("data-parallel region 9"), std::string::npos) << text;
  EXPECT_NE(text.find("created at statement 1"), std::string::npos) << text;
  EXPECT_NE(text.find("counter-based stream"), std::string::npos) << text;
  EXPECT_EQ(text.find("rng2"), std::string::npos) << text;
}

TEST(RngRaceTest, NoRegionNoRace) {
  ProgramBuilder b;
  b.CreateGenerator("g");
  b.For("i", [&] { b.RandomGen("g", "x"); });
  EXPECT_TRUE(Racy(b.Build()).empty());
}

TEST(RngRaceTest, GeneratorCreatedOutsideAndDrawnInsideIsRacy) {
  ProgramBuilder b;
  b.CreateGenerator("g");
  b.DataParallel([&] { b.RandomGen("g", "x"); });
  EXPECT_EQ(Racy(b.Build()), Names({"g"}));
}

TEST(RngRaceTest, GeneratorCreatedInsideTheRegionIsPrivate) {
  ProgramBuilder b;
  b.DataParallel([&] {
    b.CreateGenerator("g");
    b.RandomGen("g", "x");
  });
  EXPECT_TRUE(Racy(b.Build()).empty());
}

TEST(RngRaceTest, DrawBeforeCreationInsideTheRegionIsRacy) {
  // The first draw happens before this worker's own generator exists, so it
  // reaches the shared one (flow sensitivity).
  ProgramBuilder b;
  b.CreateGenerator("g");
  b.DataParallel([&] {
    b.RandomGen("g", "x");
    b.CreateGenerator("g");
    b.RandomGen("g", "y");
  });
  StatusOr<RngRaceReport> report = AnalyzeRngRaces(b.Build());
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->racy.size(), 1u);
  ASSERT_EQ(report->racy[0].draws.size(), 1u);
  EXPECT_EQ(report->racy[0].draws[0].statement, 3);
}

TEST(RngRaceTest, GeneratorUsedOnlyBeforeOrAfterTheRegionIsSafe) {
  ProgramBuilder b;
  b.CreateGenerator("g");
  b.RandomGen("g", "before");
  b.DataParallel([&] { b.Assign("y", "f", {"before"}); });
  b.RandomGen("g", "after");  // leaving the region restores g
  EXPECT_TRUE(Racy(b.Build()).empty());
}

TEST(RngRaceTest, GlobalGeneratorIsSafeOutsideAndRacyInside) {
  ProgramBuilder b;
  b.RandomGen("torch_default", "x");  // never created: a framework global
  b.DataParallel([&] { b.RandomGen("torch_default", "y"); });
  StatusOr<RngRaceReport> report = AnalyzeRngRaces(b.Build());
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->RacyGenerators(), Names({"torch_default"}));
  EXPECT_EQ(report->racy[0].created_at, 0);
  ASSERT_EQ(report->racy[0].draws.size(), 1u);
  EXPECT_EQ(report->racy[0].draws[0].statement, 3);
}

TEST(RngRaceTest, NestedRegionMakesTheOuterRegionsGeneratorsShared) {
  ProgramBuilder b;
  b.DataParallel([&] {                 // 1
    b.CreateGenerator("outer");        // 2
    b.RandomGen("outer", "a");         // 3 private to the outer region
    b.DataParallel([&] {               // 4
      b.RandomGen("outer", "b");       // 5 shared by the inner workers
      b.CreateGenerator("inner");      // 6
      b.RandomGen("inner", "c");       // 7 private
    });
    b.RandomGen("outer", "d");         // 8 restored on leaving the inner region
    b.RandomGen("inner", "e");         // 9 created inside the outer region, so private to it
  });
  StatusOr<RngRaceReport> report = AnalyzeRngRaces(b.Build());
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->RacyGenerators(), Names({"outer"}));
  ASSERT_EQ(report->racy[0].draws.size(), 1u);
  EXPECT_EQ(report->racy[0].draws[0].statement, 5);
  EXPECT_EQ(report->racy[0].draws[0].region, 4) << "the innermost region";
}

TEST(RngRaceTest, RegionInsideLoopSeesGeneratorsCreatedInTheLoopBody) {
  ProgramBuilder b;
  b.For("epoch", [&] {
    b.CreateGenerator("per_epoch");  // re-created each epoch, still outside the region
    b.DataParallel([&] { b.RandomGen("per_epoch", "x"); });
  });
  EXPECT_EQ(Racy(b.Build()), Names({"per_epoch"}));
}

TEST(RngRaceTest, LoopInsideRegionUsingItsOwnGeneratorIsSafe) {
  ProgramBuilder b;
  b.DataParallel([&] {
    b.CreateGenerator("g");
    b.For("batch", [&] {
      b.RandomGen("g", "x");
      b.For("step", [&] { b.RandomGen("g", "y"); });
    });
  });
  EXPECT_TRUE(Racy(b.Build()).empty());
}

TEST(RngRaceTest, CreationLaterInTheLoopBodyDoesNotCoverTheFirstIteration) {
  // In the first iteration the draw precedes this worker's creation of h.
  ProgramBuilder b;
  b.CreateGenerator("h");
  b.DataParallel([&] {
    b.For("batch", [&] {
      b.RandomGen("h", "x");
      b.CreateGenerator("h");
    });
  });
  EXPECT_EQ(Racy(b.Build()), Names({"h"}));
}

TEST(RngRaceTest, DeeplyNestedLoopsReachAFixedPoint) {
  ProgramBuilder b;
  b.CreateGenerator("a");
  b.For("i", [&] {
    b.For("j", [&] {
      b.DataParallel([&] {
        b.For("k", [&] {
          b.RandomGen("a", "x");
          b.CreateGenerator("b");
          b.RandomGen("b", "y");
        });
      });
      b.RandomGen("b", "z");
    });
  });
  EXPECT_EQ(Racy(b.Build()), Names({"a"}));
}

TEST(RngRaceTest, InvalidProgramIsRejected) {
  Program p = DetrainFigure4();
  p.body[0].id = 42;
  EXPECT_TRUE(AnalyzeRngRaces(p).status().IsInvalidArgument());
}

}  // namespace
}  // namespace dgrr::ir
