// dgrr: entry point. Everything lives in the dgrr_cli object library so tests
// can run the same command lines in-process (cli/command.h: RunDgrr).
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli/command.h"
#include "model/launch.h"

int main(int argc, char** argv) {
  // The launch record of `dgrr train` names this executable (model/launch.h).
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dgrr::model::SetDgrrExecutable(self.string());
  return dgrr::cli::RunDgrr(std::vector<std::string>(argv + 1, argv + argc));
}
