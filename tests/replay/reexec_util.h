// Helpers for the re-execution tests: record runs of the toy program
// (tests/replay/toy_program.cc) as a user would, in processes of their own.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/exec_args.h"

namespace dgrr::test_support {

struct ToyResult {
  int rc = -1;  // exit code, or 128 + signal
  std::string output;
};

// Runs `program` (default: the toy program) with `args` in `cwd`, stdout and
// stderr to `log`.
inline ToyResult RunProgram(const std::vector<std::string>& args, const std::string& log,
                            const std::string& program = DGRR_TOY_PROGRAM,
                            const std::string& cwd = "") {
  test_support::ExecArgs argv(program, args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(100);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(102);
    ::execv(program.c_str(), argv.argv());
    ::_exit(101);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ToyResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(log, std::ios::binary);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

// `output` without the block a re-executing command prints before it starts
// the program ("dgrr CMD: starting the recorded program of ..." and its
// indented lines; docs/launch-record.md, Security).
inline std::string WithoutLaunchPreview(const std::string& output) {
  std::string out;
  size_t begin = 0;
  while (begin < output.size()) {
    size_t end = output.find('\n', begin);
    end = end == std::string::npos ? output.size() : end + 1;
    const std::string line = output.substr(begin, end - begin);
    begin = end;
    const size_t colon = line.rfind("dgrr ", 0) == 0 ? line.find(": ") : std::string::npos;
    if (colon != std::string::npos) {
      const std::string rest = line.substr(colon + 2);
      if (rest.rfind("starting the recorded program of ", 0) == 0 || rest.rfind("  ", 0) == 0) continue;
    }
    out += line;
  }
  return out;
}

// Records a toy run into `run_dir` (extra flags: --flip STEP, --forget-restore).
inline void RecordToyRun(const std::string& run_dir, const std::vector<std::string>& extra = {},
                         int steps = 6, const std::string& program = DGRR_TOY_PROGRAM) {
  std::vector<std::string> args = {"--out", run_dir, "--steps", std::to_string(steps)};
  args.insert(args.end(), extra.begin(), extra.end());
  const ToyResult r = RunProgram(args, run_dir + ".log", program);
  ASSERT_EQ(r.rc, 0) << r.output;
}

// Records a run with `copy`, a copy of the toy program, then appends a byte
// to the copy: its executable no longer has the digest launch.json holds.
inline void RecordThenChangeProgram(const std::string& copy, const std::string& run_dir) {
  std::filesystem::copy_file(DGRR_TOY_PROGRAM, copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  RecordToyRun(run_dir, {}, 6, copy);
  std::ofstream(copy, std::ios::binary | std::ios::app) << '\0';
}

}  // namespace dgrr::test_support
