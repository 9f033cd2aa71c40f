// Top-level dispatch: --help, --version, then the subcommand named by args[0].
#include <algorithm>
#include <exception>
#include <iostream>
#include <new>
#include <system_error>

#include "base/cpu_isa.h"
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
  std::cout << "\nRun 'dgrr help COMMAND' (or 'dgrr COMMAND --help') for a command's options and the\n"
               "exit codes it returns.\n\n"
            << ExitCodeHelp(AllExitCodes());
}

// Runs one command so that nothing escapes it: library code returns Status,
// but allocation failure, the system refusing a thread or a bug can still
// throw, and an uncaught exception would end the process on SIGABRT. Each is
// one line and exit code 2 (every command declares it; see ExitCodeHelp and the README).
int RunGuarded(const Command& command, const std::vector<std::string>& args) {
  const std::string prefix = "dgrr " + command.name + ": ";
  try {
    return command.run(args);
  } catch (const std::bad_alloc&) {
    std::cerr << prefix << "out of memory\n";
  } catch (const std::system_error& e) {
    std::cerr << prefix << "system error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << prefix << "unexpected error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << prefix << "unexpected error of unknown type\n";
  }
  return kExitIO;
}

}  // namespace

int RunDgrr(const std::vector<std::string>& args) {
  if (args.empty()) {
    PrintTopLevelHelp();
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "help" && args.size() > 1) {
    // `dgrr help COMMAND` is `dgrr COMMAND --help`.
    for (const auto& c : AllCommands()) {
      if (c.name == args[1]) return RunGuarded(c, {"--help"});
    }
    std::cerr << "dgrr: unknown command '" << args[1] << "' (see 'dgrr --help')\n";
    return kExitUsage;
  }
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
    if (c.name != first) continue;
    // A cap on the kernels' instruction set that the library would ignore
    // is refused here, before any work (base/cpu_isa.h).
    if (Status isa = CheckMaxIsaEnvironment(); !isa.ok()) {
      std::cerr << "dgrr: " << isa.message() << "\n";
      return kExitUsage;
    }
    return RunGuarded(c, std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::cerr << "dgrr: unknown command '" << first << "' (see 'dgrr --help')\n";
  return kExitUsage;
}

}  // namespace dgrr::cli
