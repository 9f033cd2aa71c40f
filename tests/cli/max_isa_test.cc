// DGRR_MAX_ISA (base/cpu_isa.h) caps the vector kernels every dispatcher may
// pick, so the AVX2 and SSE2 paths run, and are measured, on a CPU with
// AVX-512. The cap is read once a process, so these tests run the real
// binary: `dgrr env` names the kernels each cap leaves, a value outside
// sse2/avx2/avx512 is refused in one line (exit 1) before any work, and runs
// trained under each cap are equal bit for bit (`dgrr compare` exit 0).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/support/temp_dir_test.h"

namespace {

struct Result {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

Result RunShell(const std::string& command) {
  Result r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.out += buffer.data();
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Dgrr() { return std::string(DGRR_BINARY_DIR) + "/cli/dgrr"; }

// The kernel lines of `dgrr env` (after "kernels", before the plugin's).
std::string KernelLines(const std::string& env) {
  const size_t from = env.find("\nkernels");
  const size_t to = env.find("\nhdf5 plugin");
  return from == std::string::npos || to == std::string::npos ? "" : env.substr(from, to - from);
}

class MaxIsaTest : public dgrr::test_support::TempDirTest {};

TEST_F(MaxIsaTest, AnUnknownValueIsRefusedInOneLineBeforeAnyWork) {
  const Result r = RunShell("DGRR_MAX_ISA=avx3 " + Dgrr() + " train --model tiny --steps 1 --quiet --out " + Path("run"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.out, "dgrr: DGRR_MAX_ISA='avx3': expected sse2, avx2 or avx512 (the widest vector "
                   "instruction set dgrr's kernels may use)\n");
  EXPECT_FALSE(std::filesystem::exists(Path("run")));
  // Help and the version need no kernel, and still answer.
  EXPECT_EQ(RunShell("DGRR_MAX_ISA=avx3 " + Dgrr() + " --version").rc, 0);
}

TEST_F(MaxIsaTest, EnvNamesTheKernelsEachCapLeaves) {
  const Result sse2 = RunShell("DGRR_MAX_ISA=sse2 " + Dgrr() + " env");
  ASSERT_EQ(sse2.rc, 0) << sse2.out;
  const std::string sse2_kernels = KernelLines(sse2.out);
  ASSERT_NE(sse2_kernels.find("now sse2"), std::string::npos) << sse2.out;
  ASSERT_NE(sse2_kernels.find("model products and layers: sse2"), std::string::npos) << sse2.out;
  const size_t header_end = sse2_kernels.find('\n', 1);
  EXPECT_EQ(sse2_kernels.find("avx", header_end), std::string::npos) << sse2_kernels;

  const Result avx2 = RunShell("DGRR_MAX_ISA=avx2 " + Dgrr() + " env");
  ASSERT_EQ(avx2.rc, 0) << avx2.out;
  const std::string avx2_kernels = KernelLines(avx2.out);
  ASSERT_NE(avx2_kernels.find("now avx2"), std::string::npos) << avx2.out;
  EXPECT_EQ(avx2_kernels.find("avx512", avx2_kernels.find('\n', 1)), std::string::npos) << avx2_kernels;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(avx2_kernels.find("model products and layers: avx2"), std::string::npos) << avx2_kernels;
    EXPECT_NE(avx2_kernels.find("fingerprint stripes:       avx2"), std::string::npos) << avx2_kernels;
  }
  // The cap is not part of the environment fingerprint: the bits never depend on it.
  const Result plain = RunShell(Dgrr() + " env");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  auto digest = [](const std::string& text) {
    const size_t at = text.find("digest:");
    return at == std::string::npos ? std::string("(none)") : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_EQ(digest(plain.out), digest(sse2.out));
  EXPECT_EQ(digest(plain.out), digest(avx2.out));
}

TEST_F(MaxIsaTest, RunsUnderEveryCapAreEqualBitForBit) {
  const std::string train = " train --model tiny --steps 2 --quiet --out ";
  for (const char* cap : {"sse2", "avx2", "avx512"}) {
    const Result r = RunShell(std::string("DGRR_MAX_ISA=") + cap + " " + Dgrr() + train + Path(cap));
    ASSERT_EQ(r.rc, 0) << cap << ": " << r.out;
  }
  for (const char* cap : {"sse2", "avx2"}) {
    const Result r = RunShell(Dgrr() + " compare " + Path("avx512") + " " + Path(cap));
    EXPECT_EQ(r.rc, 0) << cap << ": " << r.out;
  }
}

}  // namespace
