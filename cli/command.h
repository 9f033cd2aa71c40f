// The dgrr command line: one source file per subcommand, each registering
// itself here with its name, a one-line summary and a run function that
// returns the process exit code (base/status.h: ExitCode), and the exit codes
// it can return, which its --help lists (the one place they are declared).
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dgrr::cli {

namespace po = boost::program_options;

// The shell's codes for a command that a signal stopped; `train` returns them
// after stopping cleanly at a step boundary (the rest: base/status.h).
constexpr int kExitInterrupted = 130;  // SIGINT (Ctrl-C)
constexpr int kExitTerminated = 143;   // SIGTERM

struct Command {
  std::string name;
  std::string summary;  // one line, shown by `dgrr --help`
  std::function<int(const std::vector<std::string>& args)> run;
  // Every code `run` can return, ascending. 0, 1 (a bad command line) and 2
  // (I/O, or an exception RunDgrr turns into one line) are always possible.
  std::vector<int> exit_codes;
};

// Registers a subcommand; called from a static initialiser in its file.
bool RegisterCommand(Command command);
const std::vector<Command>& AllCommands();
// The registered command called `name`, or null.
const Command* FindCommand(const std::string& name);

// Parses `args` for subcommand `name`. Prints help (exit 0) for --help, or one
// usage line (exit 1) for bad arguments; returns that exit code. Returns -1
// when parsing succeeded and the command should go on.
//   usage:       "dgrr verify TRACE..."   (first line of --help)
//   description: a paragraph after the usage line
int ParseCommandLine(const std::string& name, const std::string& usage,
                     const std::string& description, po::options_description& options,
                     const po::positional_options_description& positional,
                     const std::vector<std::string>& args, po::variables_map& vm);

// Runs the dgrr command line `args` (without the program name) and returns the
// exit code. main() is this; tests call it in-process.
int RunDgrr(const std::vector<std::string>& args);

// Prints "dgrr NAME: <message>" on stderr and returns the exit code for it.
int ReportError(const std::string& name, const Status& status);
// Prints "dgrr NAME: warning: <message>" on stderr.
void ReportWarning(const std::string& name, const std::string& message);

// The "Exit codes:" table of `codes`, one meaning per code, as --help prints it.
std::string ExitCodeHelp(const std::vector<int>& codes);
// Every code any command returns (for `dgrr --help`).
std::vector<int> AllExitCodes();

// What a command that reads traces does with PATH: a run directory stands
// for its rank<R>.trace files (R = 0, 1, ... while they exist), anything
// else for itself. NotFound for a directory holding no rank0.trace.
StatusOr<std::vector<std::string>> TracesOf(const std::string& path);

}  // namespace dgrr::cli

// DGRR_COMMAND(verify, "summary", RunVerify, kExitOk, kExitUsage, ...) in a
// subcommand's source file: name, summary, run function, its exit codes.
// The codes are read with dgrr and dgrr::cli in scope, wherever the line is.
#define DGRR_COMMAND(name, summary, fn, ...)                                      \
  static const bool dgrr_registered_##name = ::dgrr::cli::RegisterCommand(       \
      {#name, summary, fn, [] {                                                  \
         using namespace ::dgrr;                                                 \
         using namespace ::dgrr::cli;                                            \
         return std::vector<int>{__VA_ARGS__};                                   \
       }()})
