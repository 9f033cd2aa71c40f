// libFuzzer target: the dgrr command line, run in-process (cli::RunDgrr).
//
// The input is split into argv words at whitespace. Only the read-only
// commands are run (verify, inspect, compare, plan, env, diff-tensor, help,
// --help, --version); anything else is skipped, and so is `compare
// --perfetto` (it writes a file wherever the fuzzer says). Words naming the
// fixture files are replaced by real paths, so the commands get past "no such
// file" and parse their options against real runs:
//   @RUN  @RUNB   two short runs of the tiny model (B with a bitflip fault)
//   @TRACE @TRACEB their rank-0 traces
//   @CKPT         a checkpoint of @RUN          @DUMP @DUMPB  tensor dumps
// The fixtures are made once per process (LLVMFuzzerInitialize) by the same
// in-process `dgrr train` / `dgrr replay --dump` a user would run.
// Output is silenced around each run; sanitizer reports still reach the real
// stderr. DGRR_FUZZ_VERBOSE=1 keeps the output (to look at one input).
#include <fcntl.h>
#include <hdf5.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "fuzz/scratch.h"

namespace {

std::map<std::string, std::string>& Fixtures() {
  static std::map<std::string, std::string> fixtures;
  return fixtures;
}

// Points fds 1 and 2 at /dev/null while alive (unless verbose).
class Silence {
 public:
  Silence() {
    if (Verbose()) return;
    std::cout.flush();
    std::fflush(nullptr);
    saved_out_ = dup(1);
    saved_err_ = dup(2);
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  ~Silence() {
    if (saved_out_ < 0) return;
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    dup2(saved_out_, 1);
    dup2(saved_err_, 2);
    close(saved_out_);
    close(saved_err_);
  }
  static bool Verbose() {
    static const bool verbose = std::getenv("DGRR_FUZZ_VERBOSE") != nullptr;
    return verbose;
  }

 private:
  int saved_out_ = -1, saved_err_ = -1;
};

int Run(const std::vector<std::string>& args) {
  Silence quiet;
  return dgrr::cli::RunDgrr(args);
}

// Makes the fixture runs; aborts if the tree cannot train (nothing to fuzz then).
void MakeFixtures() {
  namespace fs = std::filesystem;
  const std::string dir = dgrr::fuzz::ScratchDir() + "/fixtures";
  fs::create_directories(dir);
  const std::string a = dir + "/run-a", b = dir + "/run-b", dumps = dir + "/dumps";
  const std::vector<std::string> common = {"--model", "tiny", "--steps", "3", "--ckpt-every", "1"};
  std::vector<std::string> train_a = {"train", "--out", a};
  std::vector<std::string> train_b = {"train", "--out", b, "--inject", "bitflip:step=1,rank=0,at=block0.mlp.fc.out,index=5,bit=20"};
  train_a.insert(train_a.end(), common.begin(), common.end());
  train_b.insert(train_b.end(), common.begin(), common.end());
  if (Run(train_a) != 0 || Run(train_b) != 0) {
    std::fprintf(stderr, "fuzz_cli: cannot make the fixture runs in %s\n", dir.c_str());
    std::abort();
  }
  Run({"replay", a, "--dump", "block0.mlp.fc.out@1:0", "--dump-dir", dumps + "/a"});
  Run({"replay", b, "--dump", "block0.mlp.fc.out@1:0", "--dump-dir", dumps + "/b"});
  auto& f = Fixtures();
  f["@RUN"] = a;
  f["@RUNB"] = b;
  f["@TRACE"] = a + "/rank0.trace";
  f["@TRACEB"] = b + "/rank0.trace";
  f["@CKPT"] = dgrr::fuzz::ScratchDir() + "/none.h5";
  for (const auto& e : fs::directory_iterator(a + "/ckpt")) f["@CKPT"] = e.path().string();
  for (const char* side : {"a", "b"}) {
    const std::string key = std::string("@DUMP") + (side[0] == 'b' ? "B" : "");
    f[key] = dumps + "/" + side + "/none.h5";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dumps + "/" + side, ec)) f[key] = e.path().string();
  }
  if (Silence::Verbose()) {
    for (const auto& [k, v] : f) std::fprintf(stderr, "fuzz_cli: %s = %s\n", k.c_str(), v.c_str());
  }
}

std::vector<std::string> SplitWords(std::string_view input) {
  std::vector<std::string> words;
  std::string word;
  for (char c : input) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\0') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  for (auto& w : words) {
    auto it = Fixtures().find(w);
    if (it != Fixtures().end()) w = it->second;
  }
  return words;
}

bool Allowed(const std::vector<std::string>& args) {
  static const std::set<std::string> kReadOnly = {"verify", "inspect",     "compare", "plan",    "env",
                                                  "diff-tensor", "help", "--help",  "--version"};
  if (args.empty()) return true;  // prints the help
  if (!kReadOnly.count(args[0])) return false;
  for (const auto& w : args) {
    // Boost accepts unambiguous prefixes of long options: --p, --pe, ... all mean --perfetto.
    if (w.rfind("--p", 0) == 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int saved_err = dup(2);
  __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(saved_err)));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  MakeFixtures();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> args = SplitWords(dgrr::fuzz::AsView(data, size));
  if (!Allowed(args)) return -1;
  const int code = Run(args);
  // Every command ends with a documented exit code (base/status.h), 0..5.
  if (code < 0 || code > 5) std::abort();
  return 0;
}
