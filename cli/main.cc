// dgrr: entry point. Dispatches to the subcommand named by the first argument.
#include <iostream>
#include <string>
#include <vector>

#include "base/version.h"
#include "cli/command.h"

namespace {

void PrintTopLevelHelp() {
  std::cout << "dgrr " << DGRR_VERSION_STRING
            << ": record, replay and compare deep-learning training runs bit for bit\n\n"
               "usage: dgrr [--help | --version] COMMAND [ARGS...]\n\n"
               "Commands:\n";
  for (const auto& c : dgrr::cli::AllCommands()) {
    std::string padded = c.name;
    padded.resize(std::max<size_t>(padded.size() + 2, 12), ' ');
    std::cout << "  " << padded << c.summary << "\n";
  }
  std::cout << "\nRun 'dgrr COMMAND --help' for a command's options.\n\n"
            << dgrr::cli::ExitCodeHelp();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintTopLevelHelp();
    return dgrr::kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") {
    PrintTopLevelHelp();
    return dgrr::kExitOk;
  }
  if (first == "--version" || first == "-V") {
    std::cout << "dgrr " << DGRR_VERSION_STRING << " (commit " << DGRR_GIT_COMMIT << ", "
              << DGRR_COMPILER << ", " << (DGRR_HAVE_CUDA_BUILD ? "CUDA" : "CPU-only") << ")\n";
    return dgrr::kExitOk;
  }
  for (const auto& c : dgrr::cli::AllCommands()) {
    if (c.name == first) {
      return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
    }
  }
  std::cerr << "dgrr: unknown command '" << first << "' (see 'dgrr --help')\n";
  return dgrr::kExitUsage;
}
