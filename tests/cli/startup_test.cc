// What every `dgrr` command loads before main: libcublas (through
// cublasLt's static initialisers) costs ~80-100 ms and ~200 MB of touched
// pages per process, so cuBLAS is opened with dlopen where it is used
// (runtime/cublas_handle.cc, runtime/gpu_info.cc), never linked. A link
// that brings it back (it came back once with `--gemm cublas`, unnoticed for
// a week: `dgrr compare` took ~150 ms instead of ~10) fails here. The dynamic
// linker says what it loads (LD_DEBUG=libs).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

std::string LoadedLibraries(const std::string& command) {
  const std::string line = "LD_DEBUG=libs " + command + " 2>&1 >/dev/null";
  std::string text;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return text;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) text += buffer.data();
  EXPECT_EQ(pclose(pipe), 0) << text;
  return text;
}

TEST(Startup, DgrrLoadsNoCublasBeforeItIsAskedTo) {
  const std::string dgrr = std::string(DGRR_BINARY_DIR) + "/cli/dgrr";
  const std::string loaded = LoadedLibraries(dgrr + " --version");
  // The dynamic linker's trace names every library it opens ("calling
  // init: /.../libc.so.6"): it ran, and libc is in it.
  ASSERT_NE(loaded.find("libc.so"), std::string::npos) << loaded;
  EXPECT_EQ(loaded.find("libcublas"), std::string::npos) << loaded;
}

}  // namespace
