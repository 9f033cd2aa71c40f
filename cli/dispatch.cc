// Top-level dispatch: --help, --version, then the subcommand named by args[0].
#include <algorithm>
#include <iostream>

#include "base/version.h"
#include "cli/command.h"

namespace dgrr::cli {
namespace {

void PrintTopLevelHelp() {
  std::cout << "dgrr " << DGRR_VERSION_STRING
            << ": record, replay and compare deep-learning training runs bit for bit\n\n"
               "usage: dgrr [--help | --version] COMMAND [ARGS...]\n\n"
               "Commands:\n";
  for (const auto& c : AllCommands()) {
    std::string padded = c.name;
    padded.resize(std::max<size_t>(padded.size() + 2, 14), ' ');
    std::cout << "  " << padded << c.summary << "\n";
  }
  std::cout << "\nRun 'dgrr COMMAND --help' for a command's options.\n\n" << ExitCodeHelp();
}

}  // namespace

int RunDgrr(const std::vector<std::string>& args) {
  if (args.empty()) {
    PrintTopLevelHelp();
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") {
    PrintTopLevelHelp();
    return kExitOk;
  }
  if (first == "--version" || first == "-V") {
    std::cout << "dgrr " << DGRR_VERSION_STRING << " (commit " << DGRR_GIT_COMMIT << ", "
              << DGRR_COMPILER << ", " << (DGRR_HAVE_CUDA_BUILD ? "CUDA" : "CPU-only") << ")\n";
    return kExitOk;
  }
  for (const auto& c : AllCommands()) {
    if (c.name == first) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::cerr << "dgrr: unknown command '" << first << "' (see 'dgrr --help')\n";
  return kExitUsage;
}

}  // namespace dgrr::cli
