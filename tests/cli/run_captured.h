// Running dgrr command lines in-process with their output captured, for the
// CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"

namespace dgrr::cli {

// Runs `f` with stdout and stderr captured; returns {stdout, stderr}.
inline std::pair<std::string, std::string> CaptureOutput(const std::function<void()>& f) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  f();
  std::string out = ::testing::internal::GetCapturedStdout();
  return {std::move(out), ::testing::internal::GetCapturedStderr()};
}

struct CommandOutput {
  int rc = -1;
  std::string out, err;
};

// Runs the dgrr command line `args` (without the program name).
inline CommandOutput RunCaptured(const std::vector<std::string>& args) {
  CommandOutput r;
  std::tie(r.out, r.err) = CaptureOutput([&] { r.rc = RunDgrr(args); });
  return r;
}

// A fixture mix-in: RunCommand() keeps the last command's output in out_ and err_.
class CapturedCommands {
 protected:
  int RunCommand(const std::vector<std::string>& args) {
    CommandOutput r = RunCaptured(args);
    out_ = std::move(r.out);
    err_ = std::move(r.err);
    return r.rc;
  }
  std::string out_, err_;
};

}  // namespace dgrr::cli
