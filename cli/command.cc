#include "cli/command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <typeinfo>

#include "base/file.h"
#include "runtime/run_directory.h"

namespace dgrr::cli {

namespace {
std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}
bool IsUnsignedType(const std::type_info& t) {
  return t == typeid(unsigned char) || t == typeid(unsigned short) || t == typeid(unsigned int) ||
         t == typeid(unsigned long) || t == typeid(unsigned long long);
}

bool IsFloatType(const std::type_info& t) {
  return t == typeid(float) || t == typeid(double) || t == typeid(long double);
}

// Checks every option's tokens against its declared C++ type, for what
// boost's conversion lets through: it reads "-1" into an unsigned option as
// a huge number, and "inf" or "nan" into a floating-point one. Throws the
// po::error ParseCommandLine reports as a usage error (exit 1).
void CheckNumericTokens(const po::parsed_options& parsed, const po::options_description& options) {
  for (const po::option& opt : parsed.options) {
    if (opt.unregistered) continue;
    const po::option_description* d = options.find_nothrow(opt.string_key, false);
    if (d == nullptr) continue;
    const auto* typed = dynamic_cast<const po::typed_value_base*>(d->semantic().get());
    if (typed == nullptr) continue;
    const std::type_info& type = typed->value_type();
    for (const std::string& token : opt.value) {
      const size_t first = token.find_first_not_of(" \t\n\r\f\v");
      if (IsUnsignedType(type) && first != std::string::npos && token[first] == '-') {
        throw po::error("--" + opt.string_key + " must not be negative, got '" + token + "'");
      }
      if (IsFloatType(type) && !std::isfinite(std::strtod(token.c_str(), nullptr))) {
        throw po::error("--" + opt.string_key + " must be a finite number, got '" + token + "'");
      }
    }
  }
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

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Registry()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

namespace {

// What each exit code means, whichever command returns it (README.md's table).
const char* ExitCodeMeaning(int code) {
  switch (code) {
    case kExitOk: return "success";
    case kExitUsage: return "usage error (bad arguments or options, named)";
    case kExitIO:
      return "I/O or system error (a file could not be read or written; the run is in use by\n"
             "       another dgrr writer; out of memory; the system refused a thread; any failure\n"
             "       the command did not expect)";
    case kExitInvalidData: return "invalid trace, checkpoint or run file (validation failed; file and key named)";
    case kExitDivergence: return "divergence found";
    case kExitReplayIntegrity: return "replay integrity failure (a replay did not reproduce the record)";
    case kExitInterrupted:
      return "stopped by Ctrl-C (SIGINT) after the step in flight; the --resume command is printed";
    case kExitTerminated: return "stopped by SIGTERM after the step in flight, likewise";
  }
  return "undocumented";
}

}  // namespace

std::string ExitCodeHelp(const std::vector<int>& codes) {
  std::string text = "Exit codes:\n";
  for (int code : codes) {
    std::string number = std::to_string(code);
    number.resize(std::max<size_t>(number.size() + 2, 5), ' ');
    text += "  " + number + ExitCodeMeaning(code) + "\n";
  }
  return text;
}

std::vector<int> AllExitCodes() {
  std::vector<int> all;
  for (const Command& c : Registry()) all.insert(all.end(), c.exit_codes.begin(), c.exit_codes.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

namespace {

// Parses, checks and stores `args`; throws po::error. Returns whether --help was asked.
bool ParseInto(const std::vector<std::string>& args, const po::options_description& options,
               const po::positional_options_description& positional, po::variables_map& vm) {
  const po::parsed_options parsed = po::command_line_parser(args).options(options).positional(positional).run();
  CheckNumericTokens(parsed, options);
  po::store(parsed, vm);
  if (vm.count("help")) return true;
  po::notify(vm);
  return false;
}

// The text of a parse error. Boost builds it by substituting the offending
// token into a template of %placeholders% until none is left, so a token
// that holds a placeholder itself ("--x%value%") never ends (found by
// fuzz_cli: every command hung on it, its memory growing). The same arguments
// with each '%' shown as U+FF05 parse to the same error and print safely.
std::string ParseErrorText(const po::error& error, const std::vector<std::string>& args,
                           const po::options_description& options,
                           const po::positional_options_description& positional) {
  const bool has_percent = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.find('%') != std::string::npos;
  });
  if (!has_percent) return error.what();
  std::vector<std::string> shown;
  for (const std::string& a : args) {
    std::string s;
    for (char c : a) s += c == '%' ? std::string("\xef\xbc\x85") : std::string(1, c);
    shown.push_back(std::move(s));
  }
  try {
    po::variables_map unused;
    ParseInto(shown, options, positional, unused);
  } catch (const po::error& e) {
    return e.what();
  }
  return "invalid arguments";
}

// "missing run B: a trace file or a run directory" for a positional argument
// (its description, less the "(positional)" note); boost's own text for a
// required option the user names with dashes.
std::string MissingArgumentText(const po::required_option& error, const po::options_description& options,
                                const po::positional_options_description& positional) {
  std::string option = error.get_option_name();
  option.erase(0, option.find_first_not_of('-'));
  bool is_positional = false;
  for (unsigned i = 0; i < positional.max_total_count() && i < 64; ++i) {
    is_positional = is_positional || positional.name_for_position(i) == option;
  }
  const po::option_description* described = options.find_nothrow(option, false);
  if (!is_positional || described == nullptr) return error.what();
  std::string what = described->description();
  const size_t note = what.find(" (positional)");
  if (note != std::string::npos) what.erase(note, std::string(" (positional)").size());
  return "missing " + what;
}

// The codes `name`'s --help lists: its declared ones; every code for a name
// that is not registered (a caller outside the registry).
std::vector<int> ExitCodesOf(const std::string& name) {
  const Command* command = FindCommand(name);
  return command != nullptr ? command->exit_codes : AllExitCodes();
}

}  // namespace

int ParseCommandLine(const std::string& name, const std::string& usage,
                     const std::string& description, po::options_description& options,
                     const po::positional_options_description& positional,
                     const std::vector<std::string>& args, po::variables_map& vm) {
  options.add_options()("help,h", "show this help and exit");
  try {
    if (ParseInto(args, options, positional, vm)) {
      std::cout << "usage: " << usage << "\n\n" << description << "\n\n"
                << options << "\n" << ExitCodeHelp(ExitCodesOf(name));
      return kExitOk;
    }
  } catch (const po::required_option& e) {
    // A missing positional argument: boost names it as an option ("--b")
    // the user never saw; say what is missing instead.
    std::cerr << "dgrr " << name << ": " << MissingArgumentText(e, options, positional) << " (see 'dgrr "
              << name << " --help')\n";
    return kExitUsage;
  } catch (const po::error& e) {
    std::cerr << "dgrr " << name << ": " << ParseErrorText(e, args, options, positional) << " (see 'dgrr "
              << name << " --help')\n";
    return kExitUsage;
  }
  return -1;
}

StatusOr<std::vector<std::string>> TracesOf(const std::string& path) {
  if (!IsDirectory(path)) return std::vector<std::string>{path};
  std::vector<std::string> traces;
  for (int rank = 0; PathExists(TracePathFor(path, rank)); ++rank) traces.push_back(TracePathFor(path, rank));
  if (traces.empty()) return Status::NotFound(path + ": a directory with no rank0.trace (not a run directory)");
  return traces;
}

int ReportError(const std::string& name, const Status& status) {
  std::cerr << "dgrr " << name << ": " << status.message() << "\n";
  return ExitCodeFor(status);
}

void ReportWarning(const std::string& name, const std::string& message) {
  std::cerr << "dgrr " << name << ": warning: " << message << "\n";
}

}  // namespace dgrr::cli
