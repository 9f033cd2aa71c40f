// dgrr replay, bisect and plan on runs of a user program (the toy program,
// toy_program.cc), through the real binary in processes of their own: the
// commands re-launch the program from its launch.json.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/replay/reexec_util.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr {
namespace {

using test_support::RecordToyRun;
using test_support::RunProgram;
using test_support::ToyResult;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class ReexecCliTest : public test_support::TempDirTest {
 protected:
  // stdout and stderr together.
  // stdout and stderr together, less the launch preview (reexec_trust_test.cc tests it).
  ToyResult Dgrr(const std::vector<std::string>& args) {
    ToyResult r = RunProgram(args, Path("dgrr.out"), std::string(DGRR_BINARY_DIR) + "/cli/dgrr");
    r.output = test_support::WithoutLaunchPreview(r.output);
    return r;
  }
  // The recorded argv without --flip STEP: the trace holds the fault, the
  // program replayed does not.
  void DropFlipFromLaunch(const std::string& run) {
    std::ifstream in(run + "/launch.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
    std::vector<std::string> argv = j["argv"], kept;
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--flip") ++i;
      else kept.push_back(argv[i]);
    }
    j["argv"] = kept;
    std::ofstream(run + "/launch.json", std::ios::trunc) << j.dump(2) << "\n";
  }
};

TEST_F(ReexecCliTest, ReplayOfAUserProgramVerifiesEveryRecord) {
  const std::string run = Path("run");
  RecordToyRun(run);
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "replayed steps 2..5 of " + run +
                          " from the checkpoint of step 1: 12 boundaries and 4 step ends match the recorded traces\n");
  // --from picks the newest checkpoint before it; --to stops early.
  r = Dgrr({"replay", run, "--from", "4", "--to", "4", "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["schema"], "dgrr.replay/1");
  EXPECT_EQ(j["from_checkpoint"], 3);
  EXPECT_EQ(j["first_step"], 4);
  EXPECT_EQ(j["last_step"], 4);
  EXPECT_EQ(j["result"], "verified");
  EXPECT_EQ(j["boundaries_verified"], 3);
  EXPECT_EQ(j["steps_verified"], 1);
}

TEST_F(ReexecCliTest, ReplayNamesAFlippedBitAtItsStepAndBoundary) {
  const std::string run = Path("run");
  RecordToyRun(run, {"--flip", "3"});
  DropFlipFromLaunch(run);
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 5) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  // Named as compare names it: the examples and the record's index in the recorded trace.
  EXPECT_EQ(r.output.rfind("dgrr replay: step 3, rank 0, boundary fc.out, examples 12+4 (record #", 0), 0u)
      << r.output;
  EXPECT_NE(r.output.find(" of the recorded trace): recorded xor64 0x"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", replayed xor64 0x"), std::string::npos) << r.output;

  r = Dgrr({"replay", run, "--checkpoint", "1", "--json"});
  EXPECT_EQ(r.rc, 5);
  const std::string json = r.output.substr(0, r.output.rfind("}\n") + 2);
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["result"], "diverged");
  EXPECT_EQ(j["message"].get<std::string>().rfind("step 3, rank 0, boundary fc.out, examples 12+4 (record #", 0), 0u);
}

TEST_F(ReexecCliTest, ReplayOfAResumeThatForgotTheMomentumStopsWhereItIsFirstUsed) {
  const std::string run = Path("run");
  RecordToyRun(run, {"--forget-restore"});
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 5) << r.output;
  EXPECT_EQ(r.output.rfind("dgrr replay: step 2, rank 0, boundary sgd.params, examples 8+4 (record #", 0), 0u)
      << r.output;
}

TEST_F(ReexecCliTest, ASignalToDgrrReachesTheReplayedProgram) {
  // The toy program pauses after step 3 of the replay until asked to stop;
  // SIGTERM goes to dgrr, which forwards it: the program's session stops the
  // loop and closes normally, and dgrr reports that the replay ended before
  // --to instead of hanging or dying.
  const std::string run = Path("run"), kept = Path("kept"), marker = Path("paused");
  RecordToyRun(run);
  const std::string dgrr = std::string(DGRR_BINARY_DIR) + "/cli/dgrr", log = Path("dgrr.out");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(100);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("TOY_PAUSE_AT_STEP", "3", 1);
    ::setenv("TOY_PAUSE_MARKER", marker.c_str(), 1);
    ::execl(dgrr.c_str(), dgrr.c_str(), "replay", run.c_str(), "--checkpoint", "1", "--keep", kept.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(101);
  }
  // Wait for the program to reach its pause (bounded, so a broken build
  // fails instead of hanging; not a timing assertion).
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 12000 && !std::filesystem::exists(marker); ++i) nanosleep(&tick, nullptr);
  ASSERT_TRUE(std::filesystem::exists(marker));
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream in(log);
  const std::string output = test_support::WithoutLaunchPreview({std::istreambuf_iterator<char>(in), {}});
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 5) << output;
  EXPECT_EQ(output, "dgrr replay: rank 0 stopped after step 3, before --to 5: the program ended its loop early\n");
  std::ifstream result_file(kept + "/control-result.rank0.json");
  const auto result = nlohmann::json::parse(result_file);
  EXPECT_EQ(result["outcome"], "completed") << result.dump();
  EXPECT_EQ(result["last_step"], 3) << result.dump();
  EXPECT_TRUE(std::filesystem::exists(kept + "/program.log"));
}

TEST_F(ReexecCliTest, AChangedExecutableIsOneLineAndExit5UnlessAllowed) {
  const std::string program = Path("toy-copy");
  const std::string run = Path("run");
  test_support::RecordThenChangeProgram(program, run);
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 5) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_EQ(r.output.rfind("dgrr replay: " + program + ": the executable changed since the recording (digest 0x", 0),
            0u)
      << r.output;
  EXPECT_NE(r.output.find("; pass --allow-changed-program to replay it anyway\n"), std::string::npos) << r.output;

  r = Dgrr({"replay", run, "--checkpoint", "1", "--allow-changed-program"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("replaying it anyway"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("12 boundaries and 4 step ends match"), std::string::npos) << r.output;
}

TEST_F(ReexecCliTest, ARunWithoutALaunchRecordIsOneLineAndExit3) {
  const std::string run = Path("run");
  RecordToyRun(run);
  std::filesystem::remove(run + "/launch.json");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"replay", run},
                                               std::vector<std::string>{"plan", run},
                                               std::vector<std::string>{"bisect", "--good", run, "--bad", run}}) {
    ToyResult r = Dgrr(args);
    EXPECT_EQ(r.rc, 3) << args[0] << ": " << r.output;
    ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
    EXPECT_EQ(r.output.rfind("dgrr " + args[0] + ": " + run + ": no launch.json: ", 0), 0u) << r.output;
  }
}

TEST_F(ReexecCliTest, AMissingCheckpointIsOneLineAndExit2) {
  const std::string run = Path("run");
  RecordToyRun(run);
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "2"});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_EQ(r.output, "dgrr replay: " + run + ": no checkpoint of step 2 (" + run +
                          "/ckpt/step-00000002.h5 does not exist)\n");
}

TEST_F(ReexecCliTest, ADamagedCheckpointTheProgramRefusesIsExit3NamingTheFile) {
  // The header reads (dgrr picks the checkpoint), the payload does not (the
  // program's session refuses it on restore): the child's Corruption is the
  // command's exit 3, not a replay integrity failure.
  const std::string run = Path("run");
  RecordToyRun(run);
  const std::string shard = run + "/ckpt/step-00000001.rank-0.h5";
  std::string bytes = ReadBytes(shard);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x5a;
  WriteBytes(shard, bytes);
  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 3) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find(shard + ": offset "), std::string::npos) << r.output;
}

TEST_F(ReexecCliTest, AProgramThatSkipsResumeIsSaidByReplayRollbackAndBisect) {
  // TOY_SKIP_RESUME is not recorded: only the re-executions skip Resume().
  const std::string run = Path("run"), bad = Path("bad"), kept = Path("kept");
  RecordToyRun(run);
  RecordToyRun(bad, {"--flip", "3"});
  ::setenv("TOY_SKIP_RESUME", "1", 1);
  const ToyResult replay = Dgrr({"replay", run, "--checkpoint", "1", "--keep", kept});
  const ToyResult rollback = Dgrr({"rollback", run, "--step", "4", "--quiet"});
  const ToyResult bisect = Dgrr({"bisect", "--good", run, "--bad", bad, "--quiet"});
  ::unsetenv("TOY_SKIP_RESUME");
  const std::string refusal = "call Resume() before the first step";
  for (const ToyResult* r : {&replay, &rollback, &bisect}) {
    EXPECT_EQ(r->rc, 5) << r->output;
    ASSERT_EQ(Lines(r->output).size(), 1u) << r->output;
    EXPECT_NE(r->output.find(refusal), std::string::npos) << r->output;
  }
  // The session's refusal is in its result file, not "completed".
  std::ifstream result_file(kept + "/control-result.rank0.json");
  const auto result = nlohmann::json::parse(result_file);
  EXPECT_EQ(result["outcome"], "failed") << result.dump();
  EXPECT_EQ(result["status"], "failed_precondition") << result.dump();
  EXPECT_NE(result["message"].get<std::string>().find(refusal), std::string::npos) << result.dump();
}

TEST_F(ReexecCliTest, RollbackShowsTheProgressOfAnyProgramsReExecution) {
  // The toy program prints no progress of its own: its session does.
  const std::string run = Path("run");
  RecordToyRun(run);
  ToyResult r = Dgrr({"rollback", run, "--step", "4"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("dgrr rollback: re-executed step 4, verified against the traces (rolling back to step 4)\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rolled back " + run + " to step 4 (it had reached step 5): re-executed steps 4..4 from "
                          "the checkpoint of step 3"),
            std::string::npos)
      << r.output;
}

TEST_F(ReexecCliTest, ARollbackWhoseReRunStopsBeforeTheStepIsExit5AndLeavesTheRun) {
  // The recorded command now runs 3 steps: re-executed from the checkpoint
  // of step 3, it never reaches step 4.
  const std::string run = Path("run");
  RecordToyRun(run);
  std::ifstream in(run + "/launch.json");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  in.close();
  std::vector<std::string> argv = j["argv"];
  ASSERT_EQ(argv[argv.size() - 2], "--steps");
  argv.back() = "3";
  j["argv"] = argv;
  std::ofstream(run + "/launch.json", std::ios::trunc) << j.dump(2) << "\n";
  const std::string trace_before = ReadBytes(run + "/rank0.trace");
  ToyResult r = Dgrr({"rollback", run, "--step", "4", "--quiet"});
  EXPECT_EQ(r.rc, 5) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("rank 0 stopped before its first step, before step 4"), std::string::npos) << r.output;
  EXPECT_EQ(ReadBytes(run + "/rank0.trace"), trace_before);
  EXPECT_TRUE(std::filesystem::exists(run + "/ckpt/step-00000005.h5"));
}

TEST_F(ReexecCliTest, BisectNamesTheFlippedBoundaryAndStep) {
  const std::string good = Path("good"), bad = Path("bad");
  RecordToyRun(good);
  RecordToyRun(bad, {"--flip", "3"});
  ToyResult r = Dgrr({"bisect", "--good", good, "--bad", bad, "--quiet", "--json"});
  ASSERT_EQ(r.rc, 4) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["verdict"], "divergence");
  EXPECT_EQ(j["evidence"]["last_agreeing_step"], 2);
  // Only the interval was replayed, from the common checkpoint of step 1.
  EXPECT_EQ(j["replay"]["from_checkpoint"], 1);
  EXPECT_EQ(j["replay"]["first_step"], 2);
  EXPECT_EQ(j["replay"]["last_step"], 3);
  EXPECT_EQ(j["replay"]["good_matches_recording"], true);
  EXPECT_EQ(j["replay"]["bad_matches_recording"], true);
  EXPECT_EQ(j["divergence"]["a"]["name"], "fc.out");
  EXPECT_EQ(j["divergence"]["a"]["step"], 3);
  EXPECT_EQ(j["divergence"]["a"]["rank"], 0);

  r = Dgrr({"bisect", "--good", good, "--bad", bad, "--quiet"});
  EXPECT_EQ(r.rc, 4);
  EXPECT_NE(r.output.find("first divergence: pair #3: step 3 rank 0 forward output fc.out"), std::string::npos)
      << r.output;
}

TEST_F(ReexecCliTest, PlanListsWhatTheCheckpointsSave) {
  const std::string run = Path("run"), forgot = Path("forgot");
  RecordToyRun(run);
  RecordToyRun(forgot, {"--forget-restore"});
  ToyResult r = Dgrr({"plan", run});
  ASSERT_EQ(r.rc, 0) << r.output;
  // What was registered is saved; that nothing has role counter or cursor is said.
  EXPECT_EQ(r.output.find("everything registered is saved"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no program IR: the entries the program registered are saved; what it did not register "
                          "is not, and is not listed"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("no entry has role counter, cursor: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoint of step 5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fc.weight     parameter  f32    [4,8]         128"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sgd.momentum  optimizer  f32    [4,8]         128"), std::string::npos) << r.output;

  r = Dgrr({"plan", forgot, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["schema"], "dgrr.saved-state/1");
  EXPECT_EQ(j["checkpoint_step"], 5);
  ASSERT_EQ(j["entries"].size(), 1u);  // the forgotten momentum is not saved
  EXPECT_EQ(j["roles_absent"], nlohmann::json::array({"optimizer", "counter", "cursor"}));
  EXPECT_EQ(j["entries"][0]["name"], "fc.weight");
  EXPECT_EQ(j["entries"][0]["bytes"], 128);
  EXPECT_EQ(j["entries"][0]["replicated"], false);

  std::filesystem::remove_all(run + "/ckpt");
  r = Dgrr({"plan", run});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("has no checkpoint"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dgrr
