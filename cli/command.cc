#include "cli/command.h"

#include <algorithm>
#include <iostream>

namespace dgrr::cli {

namespace {
std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

bool RegisterCommand(Command command) {
  auto& commands = Registry();
  commands.push_back(std::move(command));
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  return true;
}

const std::vector<Command>& AllCommands() { return Registry(); }

const char* ExitCodeHelp() {
  return "Exit codes:\n"
         "  0  success\n"
         "  1  usage error (bad arguments or options)\n"
         "  2  I/O error (a file could not be read or written), or the run is in use by another writer\n"
         "  3  invalid trace or checkpoint (validation failed)\n"
         "  4  divergence found\n"
         "  5  replay integrity failure (a replay did not reproduce the record)\n";
}

int ParseCommandLine(const std::string& name, const std::string& usage,
                     const std::string& description, po::options_description& options,
                     const po::positional_options_description& positional,
                     const std::vector<std::string>& args, po::variables_map& vm) {
  options.add_options()("help,h", "show this help and exit");
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage << "\n\n" << description << "\n\n"
                << options << "\n" << ExitCodeHelp();
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "dgrr " << name << ": " << e.what() << " (see 'dgrr " << name << " --help')\n";
    return kExitUsage;
  }
  return -1;
}

int ReportError(const std::string& name, const Status& status) {
  std::cerr << "dgrr " << name << ": " << status.message() << "\n";
  return ExitCodeFor(status);
}

void ReportWarning(const std::string& name, const std::string& message) {
  std::cerr << "dgrr " << name << ": warning: " << message << "\n";
}

}  // namespace dgrr::cli
