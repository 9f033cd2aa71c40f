// The re-executor on a real program: the toy program (toy_program.cc) is
// recorded in a process of its own, then launched again from its launch.json
// under a control file, and its results read back.
#include "replay/reexecute.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"
#include "trace_format/reader.h"
#include "tests/replay/reexec_util.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::replay {
namespace {

using test_support::RecordToyRun;

// Drops `--flip STEP` from a run's recorded argv: the program replayed is
// the fixed one, the trace the faulty one.
void ForgetFlipInLaunchRecord(const std::string& run_dir) {
  const std::string path = run_dir + "/launch.json";
  std::ifstream in(path);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  std::vector<std::string> argv = j["argv"], kept;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--flip") {
      ++i;
      continue;
    }
    kept.push_back(argv[i]);
  }
  ASSERT_LT(kept.size(), argv.size());
  j["argv"] = kept;
  std::ofstream(path, std::ios::trunc) << j.dump(2) << "\n";
}

ControlFile VerifyFrom(const std::string& run, std::optional<uint64_t> checkpoint, uint64_t last) {
  ControlFile c;
  if (checkpoint) c.restore_checkpoint = checkpoint::CheckpointPath(run, *checkpoint);
  c.verify_run_dir = run;
  c.stop_after_step = last;
  return c;
}

class ReexecuteTest : public test_support::TempDirTest {};

TEST_F(ReexecuteTest, RecordedWorldSizeComesFromTheTraces) {
  RecordToyRun(Path("run"));
  auto world = RecordedWorldSize(Path("run"));
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  EXPECT_EQ(*world, 1);
  EXPECT_FALSE(RecordedWorldSize(Path("nothing")).ok());
}

TEST_F(ReexecuteTest, ReplayFromACheckpointReproducesTheRun) {
  const std::string run = Path("run");
  RecordToyRun(run);
  std::vector<std::string> lines;
  ReexecuteOptions options;
  options.output = [&](const std::string& line) { lines.push_back(line); };
  auto r = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->mismatch);
  ASSERT_EQ(r->ranks.size(), 1u);
  EXPECT_EQ(r->ranks[0].outcome, ControlOutcome::kCompleted);
  EXPECT_EQ(r->ranks[0].restored_step, std::optional<uint64_t>(1));
  EXPECT_EQ(r->ranks[0].last_step, std::optional<uint64_t>(5));
  // Steps 2..5, three boundaries and one step end each.
  EXPECT_EQ(r->boundaries_verified, 12u);
  EXPECT_EQ(r->steps_verified, 4u);
  // The program's output reached the log and the callback, line by line:
  // its own, and its session's progress at the first and the last step (and,
  // on a slow machine, every few seconds between).
  std::vector<std::string> own, progress;
  for (const std::string& line : lines) (line.rfind("dgrr: ", 0) == 0 ? progress : own).push_back(line);
  ASSERT_EQ(own.size(), 4u);
  EXPECT_EQ(own[0].rfind("step 2 loss", 0), 0u) << own[0];
  ASSERT_GE(progress.size(), 2u);
  EXPECT_EQ(progress.front(), "dgrr: re-executed step 2, verified against the traces");
  EXPECT_EQ(progress.back(), "dgrr: re-executed step 5, verified against the traces");
  std::ifstream log(r->log_path);
  EXPECT_TRUE(log.good());
  EXPECT_TRUE(std::filesystem::exists(Path("replay") + "/control.json"));
}

TEST_F(ReexecuteTest, ReplayFromTheStartStopsWhereTheControlSays) {
  const std::string run = Path("run");
  RecordToyRun(run);
  auto r = Reexecute(run, Path("replay"), VerifyFrom(run, std::nullopt, 2), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->mismatch);
  EXPECT_EQ(r->ranks[0].last_step, std::optional<uint64_t>(2));
  EXPECT_EQ(r->boundaries_verified, 9u);
  EXPECT_EQ(r->steps_verified, 3u);
}

TEST_F(ReexecuteTest, AFlippedRecordingIsNamedAtItsStepAndBoundary) {
  const std::string run = Path("run");
  RecordToyRun(run, {"--flip", "3"});
  ForgetFlipInLaunchRecord(run);
  auto r = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->mismatch);
  EXPECT_EQ(r->mismatch->step, 3u);
  EXPECT_EQ(r->mismatch->rank, 0);
  EXPECT_EQ(r->mismatch->boundary, "fc.out");
  EXPECT_NE(r->mismatch->recorded_xxh3, r->mismatch->replayed_xxh3);
  // The examples and the record's index in the recorded trace, as compare names them.
  EXPECT_EQ(r->mismatch->first_example, 12u);
  EXPECT_EQ(r->mismatch->example_count, 4u);
  std::optional<uint64_t> index;
  {
    auto reader = trace::TraceReader::Open(run + "/rank0.trace");
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    trace::Record record;
    for (bool done = false; !index;) {
      ASSERT_TRUE((*reader)->Next(&record, &done).ok());
      if (done) break;
      const auto* b = std::get_if<trace::BoundaryRecord>(&record.body);
      const std::string* name = b ? (*reader)->name(b->name_id) : nullptr;
      if (b && b->step == 3 && name && *name == "fc.out") index = record.index;
    }
  }
  ASSERT_TRUE(index);
  EXPECT_EQ(r->mismatch->recorded_index, *index);
  const std::string text = MismatchText(*r->mismatch);
  EXPECT_EQ(text.rfind("step 3, rank 0, boundary fc.out, examples 12+4 (record #" + std::to_string(*index) +
                           " of the recorded trace): recorded xor64 ",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find(", replayed xor64 "), std::string::npos) << text;
  // Step 2 was verified before the difference.
  EXPECT_GE(r->boundaries_verified, 3u);
}

TEST_F(ReexecuteTest, AForgottenRestoreShowsAtTheFirstBoundaryThatDependsOnIt) {
  // The momentum is not registered, so the checkpoint does not hold it: the
  // run resumed from step 1 starts step 2 with zero momentum, which first
  // shows in the updated parameters (forward and gradient do not read it).
  const std::string run = Path("run");
  RecordToyRun(run, {"--forget-restore"});
  auto r = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->mismatch);
  EXPECT_EQ(r->mismatch->step, 2u);
  EXPECT_EQ(r->mismatch->boundary, "sgd.params");
}

TEST_F(ReexecuteTest, AChangedExecutableIsRefusedUnlessAllowed) {
  const std::string program = Path("toy-copy");
  const std::string run = Path("run");
  test_support::RecordThenChangeProgram(program, run);
  auto refused = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kIntegrityFailure);
  EXPECT_NE(refused.status().message().find(program + ": the executable changed since the recording (digest "),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("pass --allow-changed-program"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(Path("replay")));  // refused before anything was written

  ReexecuteOptions allow;
  allow.allow_changed_program = true;
  auto r = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), allow);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->mismatch);
  EXPECT_EQ(r->steps_verified, 4u);
}

TEST_F(ReexecuteTest, AProgramThatFailsIsReportedWithItsRankAndExitCode) {
  const std::string run = Path("run");
  RecordToyRun(run);
  ControlFile c = VerifyFrom(run, 1, 5);
  c.restore_checkpoint = checkpoint::CheckpointPath(run, 99);
  auto r = Reexecute(run, Path("replay"), c, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIntegrityFailure);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("rank 0 failed (the program exited with code 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("step-00000099.h5"), std::string::npos) << m;
}

TEST_F(ReexecuteTest, AnExistingOutputDirectoryOrAMissingRecordIsRefused) {
  const std::string run = Path("run");
  RecordToyRun(run);
  std::filesystem::create_directories(Path("taken"));
  auto taken = Reexecute(run, Path("taken"), VerifyFrom(run, 1, 5), {});
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), StatusCode::kFailedPrecondition);

  std::filesystem::remove(run + "/launch.json");
  auto none = Reexecute(run, Path("replay"), VerifyFrom(run, 1, 5), {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no launch.json"), std::string::npos);
}

}  // namespace
}  // namespace dgrr::replay
