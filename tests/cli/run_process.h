// Runs the real dgrr binary in a process of its own, for what an in-process
// run (run_captured.h) cannot show: a kill, a signal, a file-size limit, a
// fault injected through the environment, a setting read once a process.
// stderr goes to a file whose text comes back; stdout to /dev/null, or to a
// second file (err_file + ".out") whose text comes back too when asked.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>
#include "tests/support/exec_args.h"

namespace dgrr::cli {

struct ProcessResult {
  bool exited = false;  // false: it ended on a signal
  int rc = -1;          // the exit code, or -signal
  std::string err;
  std::string out;  // stdout, when ProcessOptions::capture_out
};

struct ProcessOptions {
  std::map<std::string, std::string> env;  // set in the child, e.g. DGRR_TEST_KILL_AT
  rlim_t max_file_bytes = RLIM_INFINITY;   // RLIMIT_FSIZE, with SIGXFSZ ignored
  bool capture_out = false;                // stdout into err_file + ".out", returned
};

inline ProcessResult RunDgrrProcess(const std::vector<std::string>& args, const ProcessOptions& options,
                                    const std::string& err_file) {
  const std::string dgrr = std::string(DGRR_BINARY_DIR) + "/cli/dgrr";
  ProcessResult result;
  if (!std::filesystem::exists(dgrr)) {
    ADD_FAILURE() << dgrr << " must be built before cli_test runs";
    return result;
  }
  test_support::ExecArgs argv(dgrr, args);
  const std::string out_file = options.capture_out ? err_file + ".out" : "/dev/null";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err_fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int out_fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err_fd < 0 || out_fd < 0) ::_exit(100);
    ::dup2(err_fd, 2);
    ::dup2(out_fd, 1);
    for (const auto& [name, value] : options.env) ::setenv(name.c_str(), value.c_str(), 1);
    if (options.max_file_bytes != RLIM_INFINITY) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit limit;
      ::getrlimit(RLIMIT_FSIZE, &limit);
      limit.rlim_cur = options.max_file_bytes;
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execv(dgrr.c_str(), argv.argv());
    ::_exit(101);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exited = WIFEXITED(status);
  result.rc = result.exited ? WEXITSTATUS(status) : -WTERMSIG(status);
  std::ifstream in(err_file, std::ios::binary);
  result.err.assign(std::istreambuf_iterator<char>(in), {});
  if (options.capture_out) {
    std::ifstream out(out_file, std::ios::binary);
    result.out.assign(std::istreambuf_iterator<char>(out), {});
  }
  return result;
}

}  // namespace dgrr::cli
