// `dgrr train --device cuda-sim`: the model's device kernels on the CPU grid
// emulator give runs bitwise equal to --device cpu (`dgrr compare` exit 0)
// for tiny at 1 and 2 ranks, a reduced small, and across resumes that cross
// from cpu to cuda-sim and back; `--device cuda` trains equal to cpu where a
// GPU is (scripts/gpu-checks.sh runs this suite there) and is refused in one
// line (exit 1) where none is; `--gemm cublas` off --device cuda, or with the audit, is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "runtime/run_directory.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

class EmulatedGridTrainTest : public test_support::TempDirTest, protected CapturedCommands {
 protected:
  int Train(const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--out", Path(name), "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(args);
  }
  int Compare(const std::string& a, const std::string& b) {
    return RunCommand({"compare", Path(a), Path(b)});
  }
  std::string Device(const std::string& name) {
    auto text = ReadFileToString(ConfigPathFor(Path(name)));
    return text.ok() ? nlohmann::json::parse(*text).value("device", std::string("(absent)")) : "(unreadable)";
  }
  // Copies run `from` to `to` without its checkpoints of steps >= `step`, so
  // that a resume of `to` starts from the checkpoint before.
  void CopyCutAt(const std::string& from, const std::string& to, int step) {
    fs::copy(Path(from), Path(to), fs::copy_options::recursive);
    for (const auto& entry : fs::directory_iterator(Path(to) + "/ckpt")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 && std::stoi(name.substr(5, 8)) >= step) fs::remove(entry.path());
    }
  }
};

TEST_F(EmulatedGridTrainTest, TinyOneRankEqualsCpu) {
  ASSERT_EQ(Train("cpu", {"--steps", "3"}), 0) << err_;
  ASSERT_EQ(Train("sim", {"--steps", "3", "--device", "cuda-sim"}), 0) << err_;
  EXPECT_EQ(Device("sim"), "cuda-sim");
  EXPECT_EQ(Device("cpu"), "(absent)");  // a cpu run's config.json is as before the key
  EXPECT_EQ(Compare("cpu", "sim"), 0) << out_ << err_;
  EXPECT_NE(out_.find("device: (absent) | \"cuda-sim\"  (never changes results)"), std::string::npos) << out_;
}

// The device engine asks the recorder which boundaries it wants before
// handing one over (StepRecorder::Wants): in `trusted` mode the skipped ones
// are never handed over, and the trace is still the cpu run's, record for
// record.
TEST_F(EmulatedGridTrainTest, TinyTrustedModeEqualsCpu) {
  ASSERT_EQ(Train("cpu", {"--steps", "2", "--mode", "trusted"}), 0) << err_;
  ASSERT_EQ(Train("sim", {"--steps", "2", "--mode", "trusted", "--device", "cuda-sim"}), 0) << err_;
  EXPECT_EQ(Compare("cpu", "sim"), 0) << out_ << err_;
}

TEST_F(EmulatedGridTrainTest, TinyTwoRanksEqualsCpuAndResumesAcrossDevices) {
  const std::vector<std::string> run = {"--steps", "4", "--ranks", "2", "--ckpt-every", "2"};
  ASSERT_EQ(Train("cpu", run), 0) << err_;
  auto sim = run;
  for (const char* a : {"--threads", "2", "--device", "cuda-sim"}) sim.push_back(a);
  ASSERT_EQ(Train("sim", sim), 0) << err_;
  EXPECT_EQ(Compare("cpu", "sim"), 0) << out_ << err_;
  // Started on the CPU, continued on the emulated grid from step 2.
  CopyCutAt("cpu", "cpu-then-sim", 3);
  ASSERT_EQ(Train("cpu-then-sim", {"--resume", "--device", "cuda-sim"}), 0) << err_;
  EXPECT_EQ(Device("cpu-then-sim"), "cuda-sim");
  EXPECT_EQ(Compare("cpu", "cpu-then-sim"), 0) << out_ << err_;
  // And back.
  CopyCutAt("sim", "sim-then-cpu", 3);
  ASSERT_EQ(Train("sim-then-cpu", {"--resume", "--device", "cpu"}), 0) << err_;
  EXPECT_EQ(Device("sim-then-cpu"), "(absent)");
  EXPECT_EQ(Compare("cpu", "sim-then-cpu"), 0) << out_ << err_;
  // A resume without --device keeps the run's.
  CopyCutAt("sim", "sim-again", 3);
  ASSERT_EQ(Train("sim-again", {"--resume"}), 0) << err_;
  EXPECT_EQ(Device("sim-again"), "cuda-sim");
}

// The small preset's shape (4 layers, 128 channels, 64 positions), two
// examples of one step: the emulator runs every thread one after another.
TEST_F(EmulatedGridTrainTest, ReducedSmallEqualsCpu) {
  const std::vector<std::string> run = {"--model", "small", "--batch", "2", "--steps", "1"};
  ASSERT_EQ(Train("cpu", run), 0) << err_;
  auto sim = run;
  sim.insert(sim.end(), {"--device", "cuda-sim"});
  ASSERT_EQ(Train("sim", sim), 0) << err_;
  EXPECT_EQ(Compare("cpu", "sim"), 0) << out_ << err_;
}

// DGRR_KERNEL_TIMES=DIR (model/kernel_times.h): each launcher of the run (the
// batch's and the optimizer's) writes one dgrr.kernel_times/1 file, whose
// rows add up to its timed total and are counted per launch: a run of two
// steps launches every kernel and copies exactly twice as often as a run of
// one.
class KernelTimesTrainTest : public EmulatedGridTrainTest {
 protected:
  void TearDown() override { ::unsetenv("DGRR_KERNEL_TIMES"); }
  // The run's files, merged: kernel name -> calls.
  std::map<std::string, uint64_t> TimedRun(const std::string& name, const std::string& steps) {
    ::setenv("DGRR_KERNEL_TIMES", Path(name + "-times").c_str(), 1);
    EXPECT_EQ(Train(name, {"--steps", steps, "--device", "cuda-sim"}), 0) << err_;
    ::unsetenv("DGRR_KERNEL_TIMES");
    std::map<std::string, uint64_t> calls;
    int files = 0;
    for (const auto& entry : fs::directory_iterator(Path(name + "-times"))) {
      ++files;
      const std::string file = entry.path().filename().string();
      EXPECT_EQ(file.rfind("kernel-times-", 0), 0u) << file;
      auto text = ReadFileToString(entry.path().string());
      EXPECT_TRUE(text.ok());
      if (!text.ok()) continue;
      const nlohmann::json j = nlohmann::json::parse(*text);
      EXPECT_EQ(j.at("schema"), "dgrr.kernel_times/1");
      EXPECT_EQ(j.at("device"), "cuda-sim");
      EXPECT_EQ(j.at("clock"), "host steady clock");
      double sum = 0, previous = 1e300;
      for (const auto& row : j.at("rows")) {
        const double seconds = row.at("seconds").get<double>();
        EXPECT_LE(seconds, previous) << "rows are the longest first";
        previous = seconds;
        EXPECT_GE(seconds, 0.0);
        EXPECT_GT(row.at("calls").get<uint64_t>(), 0u);
        sum += seconds;
        calls[row.at("name").get<std::string>()] += row.at("calls").get<uint64_t>();
      }
      EXPECT_NEAR(sum, j.at("timed_s").get<double>(), 1e-9 + 1e-12 * sum);
      // The emulator's timed intervals lie inside the launcher's life.
      EXPECT_LE(j.at("timed_s").get<double>(), j.at("lifetime_s").get<double>());
    }
    EXPECT_EQ(files, 2) << "the batch's launcher and the optimizer's";
    return calls;
  }
};

TEST_F(KernelTimesTrainTest, EveryLauncherWritesItsLaunchesPerKernel) {
  const auto one = TimedRun("one", "1");
  const auto two = TimedRun("two", "2");
  for (const char* kernel : {"GemmKernel", "CausalProductKernel", "SoftmaxForwardKernel", "TreeSumKernel",
                             "SumOfSquaresKernel", "AdamWSegmentsKernel", "DropoutMaskKernel"}) {
    EXPECT_GT(one.count(kernel), 0u) << kernel;
  }
  EXPECT_EQ(one.at("SumOfSquaresKernel"), 1u);   // the global norm, once a step
  EXPECT_EQ(one.at("AdamWSegmentsKernel"), 1u);  // every tensor's update in one launch
  EXPECT_EQ(one.count("AdamWKernel"), 0u);
  // Every buffer a backward block accumulates into, zeroed in one launch
  // (tiny: one worker, one block).
  EXPECT_EQ(one.at("ZeroRangesKernel"), 1u);
  EXPECT_EQ(one.count("FillKernel"), 0u);
  ASSERT_EQ(one.size(), two.size());
  for (const auto& [name, n] : one) {
    ASSERT_EQ(two.count(name), 1u) << name;
    EXPECT_EQ(two.at(name), 2 * n) << name;
  }
  // Timing changes no bit.
  ASSERT_EQ(Train("plain", {"--steps", "2", "--device", "cuda-sim"}), 0) << err_;
  EXPECT_EQ(Compare("plain", "two"), 0) << out_ << err_;
}

TEST_F(KernelTimesTrainTest, AFolderThatCannotBeMadeIsRefusedBeforeTheRunStarts) {
  ASSERT_TRUE(WriteFileAtomically(Path("a-file"), "x").ok());
  ::setenv("DGRR_KERNEL_TIMES", Path("a-file").c_str(), 1);
  EXPECT_EQ(Train("run", {"--steps", "1", "--device", "cuda-sim"}), 2);
  EXPECT_NE(err_.find("DGRR_KERNEL_TIMES=" + Path("a-file")), std::string::npos) << err_;
  EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  EXPECT_FALSE(fs::exists(Path("run"))) << "nothing of the run is written";
  // The cpu device has no launcher: the variable is not read.
  EXPECT_EQ(Train("cpu", {"--steps", "1"}), 0) << err_;
}

TEST_F(EmulatedGridTrainTest, BadDeviceAndGemmSettingsAreOneLineUsageErrors) {
  EXPECT_EQ(Train("a", {"--device", "gpu"}), 1);
  EXPECT_EQ(err_, "dgrr train: --device: unknown device 'gpu' (known: cpu, cuda-sim, cuda)\n");
  EXPECT_EQ(Train("b", {"--gemm", "cublas", "--device", "cuda-sim"}), 1);
  EXPECT_EQ(err_, "dgrr train: --gemm cublas runs on --device cuda only (this run: --device cuda-sim)\n");
  EXPECT_EQ(Train("c", {"--gemm", "fast"}), 1);
  EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  // The audit recomputes with the exact products: it cannot check cuBLAS's
  // (refused before the device is looked for, so on any machine).
  EXPECT_EQ(Train("d", {"--gemm", "cublas", "--device", "cuda", "--audit-every", "2"}), 1);
  EXPECT_EQ(err_,
            "dgrr train: --audit-every recomputes examples with the exact products and cannot check a "
            "--gemm cublas run: use --gemm exact, or leave --audit-every out\n");
  for (const char* name : {"a", "b", "c", "d"}) EXPECT_FALSE(fs::exists(ConfigPathFor(Path(name)))) << name;
}

// On a machine with a GPU: --device cuda trains bitwise equal to the CPU.
// Without one: refused before anything is written, in one line, exit 1.
class CudaDeviceTrainTest : public EmulatedGridTrainTest {};

TEST_F(CudaDeviceTrainTest, TinyEqualsCpuOrIsRefusedInOneLine) {
  if (Train("gpu", {"--steps", "3", "--device", "cuda"}) != 0) {
    EXPECT_EQ(Train("gpu", {"--steps", "3", "--device", "cuda"}), 1);
    EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
    EXPECT_EQ(err_.rfind("dgrr train: --device cuda: ", 0), 0u) << err_;
    EXPECT_FALSE(fs::exists(ConfigPathFor(Path("gpu"))));
    GTEST_SKIP() << "no CUDA device: " << err_;
  }
  ASSERT_EQ(Train("cpu", {"--steps", "3"}), 0) << err_;
  EXPECT_EQ(Compare("cpu", "gpu"), 0) << out_ << err_;
}

}  // namespace
}  // namespace dgrr::cli
