// DGRR_MAX_ISA (base/cpu_isa.h) caps the vector kernels every dispatcher may
// pick, so the AVX2 and SSE2 paths run, and are measured, on a CPU with
// AVX-512. The cap is read once a process, so these tests run the real
// binary (run_process.h): `dgrr env` names the kernels each cap leaves, a
// value outside sse2/avx2/avx512 is refused in one line (exit 1) before any
// work, and runs trained under each cap are equal bit for bit (`dgrr
// compare` exit 0).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli/run_process.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

class MaxIsaTest : public test_support::TempDirTest {
 protected:
  // `dgrr args...` with DGRR_MAX_ISA=cap ("" leaves the variable as it is).
  ProcessResult Dgrr(const std::string& cap, const std::vector<std::string>& args) {
    ProcessOptions options;
    if (!cap.empty()) options.env["DGRR_MAX_ISA"] = cap;
    options.capture_out = true;
    return RunDgrrProcess(args, options, Path("stderr-" + std::to_string(++runs_)));
  }
  int runs_ = 0;
};

// The kernel lines of `dgrr env` (after "kernels", before the plugin's).
std::string KernelLines(const std::string& env) {
  const size_t from = env.find("\nkernels");
  const size_t to = env.find("\nhdf5 plugin");
  return from == std::string::npos || to == std::string::npos ? "" : env.substr(from, to - from);
}

std::string DigestLine(const std::string& env) {
  const size_t at = env.find("digest:");
  return at == std::string::npos ? std::string("(none)") : env.substr(at, env.find('\n', at) - at);
}

TEST_F(MaxIsaTest, AnUnknownValueIsRefusedInOneLineBeforeAnyWork) {
  const ProcessResult r = Dgrr("avx3", {"train", "--model", "tiny", "--steps", "1", "--quiet", "--out", Path("run")});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.err, "dgrr: DGRR_MAX_ISA='avx3': expected sse2, avx2 or avx512 (the widest vector "
                   "instruction set dgrr's kernels may use)\n");
  EXPECT_FALSE(std::filesystem::exists(Path("run")));
  // The version needs no kernel, and still answers.
  EXPECT_EQ(Dgrr("avx3", {"--version"}).rc, 0);
}

TEST_F(MaxIsaTest, EnvNamesTheKernelsEachCapLeaves) {
  const ProcessResult sse2 = Dgrr("sse2", {"env"});
  ASSERT_EQ(sse2.rc, 0) << sse2.err;
  const std::string sse2_kernels = KernelLines(sse2.out);
  ASSERT_NE(sse2_kernels.find("DGRR_MAX_ISA caps them: sse2"), std::string::npos) << sse2.out;
  ASSERT_NE(sse2_kernels.find("model products and layers: sse2"), std::string::npos) << sse2.out;
  EXPECT_EQ(sse2_kernels.find("avx", sse2_kernels.find('\n', 1)), std::string::npos) << sse2_kernels;

  const ProcessResult avx2 = Dgrr("avx2", {"env"});
  ASSERT_EQ(avx2.rc, 0) << avx2.err;
  const std::string avx2_kernels = KernelLines(avx2.out);
  ASSERT_NE(avx2_kernels.find("DGRR_MAX_ISA caps them: avx2"), std::string::npos) << avx2.out;
  EXPECT_EQ(avx2_kernels.find("avx512", avx2_kernels.find('\n', 1)), std::string::npos) << avx2_kernels;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(avx2_kernels.find("model products and layers: avx2"), std::string::npos) << avx2_kernels;
    EXPECT_NE(avx2_kernels.find("fingerprint stripes:       avx2"), std::string::npos) << avx2_kernels;
  }
  // The cap is not part of the environment fingerprint: the bits never depend on it.
  const ProcessResult widest = Dgrr("avx512", {"env"});
  ASSERT_EQ(widest.rc, 0) << widest.err;
  EXPECT_NE(DigestLine(widest.out), "(none)");
  EXPECT_EQ(DigestLine(widest.out), DigestLine(sse2.out));
  EXPECT_EQ(DigestLine(widest.out), DigestLine(avx2.out));
}

TEST_F(MaxIsaTest, RunsUnderEveryCapAreEqualBitForBit) {
  for (const char* cap : {"sse2", "avx2", "avx512"}) {
    const ProcessResult r = Dgrr(cap, {"train", "--model", "tiny", "--steps", "2", "--quiet", "--out", Path(cap)});
    ASSERT_EQ(r.rc, 0) << cap << ": " << r.err;
  }
  for (const char* cap : {"sse2", "avx2"}) {
    const ProcessResult r = Dgrr("", {"compare", Path("avx512"), Path(cap)});
    EXPECT_EQ(r.rc, 0) << cap << ": " << r.out << r.err;
  }
}

}  // namespace
}  // namespace dgrr::cli
