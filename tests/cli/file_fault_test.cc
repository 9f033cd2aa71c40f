// `dgrr train` with a fault injected into its checkpoint write: one line
// naming the file and the cause, exit 2, and the run still resumes to the
// same result as a run that never failed. Once in-process (the fault
// injector installed directly) and once as a real process through the
// DGRR_TEST_FAULT test hook.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/file_system.h"
#include "tests/cli/run_captured.h"
#include "tests/cli/run_process.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTrain = {"--steps", "6", "--ckpt-every", "2", "--quiet"};

std::vector<std::string> TrainArgs(const std::string& out) {
  std::vector<std::string> args = {"train", "--out", out};
  args.insert(args.end(), kTrain.begin(), kTrain.end());
  return args;
}

size_t Lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

class FileFaultCli : public test_support::TempDirTest, public CapturedCommands {
 protected:
  // The failed run resumes and ends where an untroubled run ends.
  void ExpectResumesToTheCleanResult(const std::string& run) {
    ASSERT_EQ(RunCommand({"train", "--out", run, "--resume", "--quiet"}), 0) << err_;
    EXPECT_EQ(RunCommand({"verify", run + "/rank0.trace"}), 0) << out_ << err_;
    const std::string clean = Path("clean");
    ASSERT_EQ(RunCommand(TrainArgs(clean)), 0) << err_;
    EXPECT_EQ(RunCommand({"compare", run, clean}), 0) << out_ << err_;
    for (const auto& e : fs::directory_iterator(run + "/ckpt")) {
      EXPECT_FALSE(IsTemporaryName(e.path().filename().string())) << e.path();
    }
  }
};

TEST_F(FileFaultCli, CheckpointRenameFailureInProcess) {
  const std::string run = Path("run");
  {
    FaultInjectingFileSystem injector;
    // Per checkpoint a shard is renamed, then the manifest: the 4th is step 3's manifest.
    auto spec = FaultSpec::Parse("rename:4:ENOSPC:/ckpt/");
    ASSERT_TRUE(spec.ok());
    injector.SetFault(*spec);
    ScopedFileSystemOverride use(&injector);
    EXPECT_EQ(RunCommand(TrainArgs(run)), 2) << err_;
    EXPECT_EQ(injector.injected(), 1u);
  }
  EXPECT_EQ(Lines(err_), 1u) << err_;
  EXPECT_NE(err_.find(run + "/ckpt/step-00000003.h5"), std::string::npos) << err_;
  EXPECT_NE(err_.find(std::strerror(ENOSPC)), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(run + "/ckpt/step-00000003.h5"));
  ExpectResumesToTheCleanResult(run);
}

TEST_F(FileFaultCli, CheckpointShortWriteThroughTheTestHook) {
  const std::string run = Path("run");
  std::vector<std::string> args = TrainArgs(run);
  // The fourth write-at under ckpt/ stamps the header of the second checkpoint's
  // manifest (step 3; each checkpoint stamps its shard, then its manifest).
  ProcessResult r = RunDgrrProcess(args, {{{"DGRR_TEST_FAULT", "write-at+short:4:ENOSPC:/ckpt/"}}}, Path("stderr.txt"));
  ASSERT_TRUE(r.exited) << "dgrr ended on signal " << -r.rc;
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(run + "/ckpt/step-00000003.h5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::strerror(ENOSPC)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(run + "/ckpt/step-00000003.h5"));
  ExpectResumesToTheCleanResult(run);
}

// libhdf5's own write of the checkpoint body fails (the kernel refuses to
// grow a file past RLIMIT_FSIZE, as a full disk would): one line naming the
// checkpoint and the cause, exit 2, no crash at exit, and the run resumes.
TEST_F(FileFaultCli, CheckpointFailingInsideLibhdf5) {
  const std::string run = Path("run");
  // The tiny model's first checkpoint holds ~1.4 MB of incompressible
  // floats; the traces, config and environment stay well below the limit.
  ProcessResult r = RunDgrrProcess(TrainArgs(run), {{}, 700 * 1024}, Path("stderr.txt"));
  ASSERT_TRUE(r.exited) << "dgrr ended on signal " << -r.rc << ": " << r.err;
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(run + "/ckpt/step-00000001."), std::string::npos) << r.err;  // its shard
  EXPECT_NE(r.err.find(std::strerror(EFBIG)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(run + "/ckpt/step-00000001.h5"));
  ExpectResumesToTheCleanResult(run);
}

// Bounded input: a run file that is a FIFO or a link to /dev/zero is one
// line and exit 3; `--data /dev/zero` is one line and exit 1. Nothing hangs
// (a blocking open of the FIFO would hang this test) or reads without end.
TEST_F(FileFaultCli, NonRegularInputsAreOneLineNeverAHang) {
  const std::string run = Path("run");
  ASSERT_EQ(RunCommand(TrainArgs(run)), 0) << err_;
  const std::string zero_run = Path("zero"), fifo_run = Path("fifo");
  fs::copy(run, zero_run, fs::copy_options::recursive);
  fs::copy(run, fifo_run, fs::copy_options::recursive);
  fs::remove(zero_run + "/config.json");
  fs::create_symlink("/dev/zero", zero_run + "/config.json");
  fs::remove(fifo_run + "/config.json");
  ASSERT_EQ(::mkfifo((fifo_run + "/config.json").c_str(), 0644), 0);
  fs::remove(fifo_run + "/rank0.env.json");
  ASSERT_EQ(::mkfifo((fifo_run + "/rank0.env.json").c_str(), 0644), 0);
  const std::string fifo_trace = Path("rank0.trace");
  ASSERT_EQ(::mkfifo(fifo_trace.c_str(), 0644), 0);

  struct Case {
    std::vector<std::string> args;
    int rc;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"train", "--out", zero_run, "--resume", "--quiet"}, 3, zero_run + "/config.json: a character device"},
      {{"train", "--out", fifo_run, "--resume", "--quiet"}, 3, fifo_run + "/config.json: a FIFO"},
      {{"plan", fifo_run}, 3, fifo_run + "/config.json: a FIFO"},
      {{"compare", run, fifo_run}, 3, fifo_run + "/"},
      {{"verify", fifo_trace}, 3, fifo_trace + ": a FIFO"},
      {{"inspect", fifo_trace}, 3, fifo_trace + ": a FIFO"},
      {{"train", "--out", Path("new"), "--data", "/dev/zero", "--steps", "2", "--quiet"}, 1,
       "/dev/zero: a character device"},
      {{"train", "--out", Path("new2"), "--data", fifo_trace, "--steps", "2", "--quiet"}, 1, fifo_trace + ": a FIFO"},
  };
  for (const Case& c : cases) {
    std::string line;
    for (const std::string& a : c.args) line += a + " ";
    SCOPED_TRACE(line);
    EXPECT_EQ(RunCommand(c.args), c.rc) << err_;
    EXPECT_EQ(Lines(err_), 1u) << err_;
    EXPECT_NE(err_.find(c.names), std::string::npos) << err_;
  }
}

}  // namespace
}  // namespace dgrr::cli
