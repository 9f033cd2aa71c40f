// dgrr verify TRACE...: validates trace files (docs/trace-format.md).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "trace_format/reader.h"

namespace dgrr::cli {
namespace {

constexpr const char* kName = "verify";

std::string SummaryLine(const trace::VerifySummary& s) {
  std::string line = s.path + ": ok records=" + std::to_string(s.records) +
                     " boundaries=" + std::to_string(s.boundaries) +
                     " steps=" + std::to_string(s.steps) + " events=" + std::to_string(s.events) +
                     " names=" + std::to_string(s.names) + " last_step=" +
                     (s.has_step ? std::to_string(s.last_step) : std::string("none"));
  if (s.torn_tail_bytes > 0) line += " torn_tail_bytes=" + std::to_string(s.torn_tail_bytes);
  return line;
}

nlohmann::ordered_json SummaryJson(const trace::VerifySummary& s) {
  return {{"path", s.path},
          {"ok", true},
          {"records", s.records},
          {"boundaries", s.boundaries},
          {"steps", s.steps},
          {"events", s.events},
          {"names", s.names},
          {"last_step", s.has_step ? nlohmann::ordered_json(s.last_step) : nlohmann::ordered_json(nullptr)},
          {"torn_tail_bytes", s.torn_tail_bytes},
          {"torn_tail_offset", s.torn_tail_bytes > 0 ? nlohmann::ordered_json(s.torn_tail_offset)
                                                     : nlohmann::ordered_json(nullptr)},
          {"warning", s.warning.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.warning)},
          {"error", nullptr}};
}

int RunVerify(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()("trace", po::value<std::vector<std::string>>()->required(),
                        "trace files or run directories (every rank<R>.trace) to verify")(
      "json", po::bool_switch(), "print one JSON object (schema dgrr.verify/1, docs/json/verify.md)")(
      "quiet,q", po::bool_switch(),
      "print nothing for valid traces: the exit code says (errors and torn-tail warnings still go to stderr; "
      "--json still prints its object)");
  po::positional_options_description positional;
  positional.add("trace", -1);
  po::variables_map vm;
  int parsed = ParseCommandLine(
      kName, "dgrr verify TRACE|RUN_DIR... [--json] [-q]",
      "Validates each trace (a run directory: each of its rank<R>.trace files): the header, then every record's CRC, type and fields, and\n"
      "the order rules (names defined before use, sequence numbers increasing). Prints\n"
      "one summary line per valid file on stdout. A torn tail (a partial record, or\n"
      "zero-filled records, at the end of the file: a writer that died mid-write) is a\n"
      "clean end: a warning on stderr names the file, the offset and the bytes ignored,\n"
      "and the exit code stays 0. Corruption prints one line on stderr naming the file,\n"
      "the record index and byte offset (or the header) and the reason. All files are\n"
      "checked; the exit code is the highest of theirs. --json prints one object with a\n"
      "result per file (errors included) on stdout instead.",
      options, positional, args, vm);
  if (parsed >= 0) return parsed;

  const bool json = vm["json"].as<bool>();
  const bool quiet = vm["quiet"].as<bool>();
  nlohmann::ordered_json traces = nlohmann::ordered_json::array();
  int exit_code = kExitOk;
  std::vector<std::string> paths;
  for (const std::string& given : vm["trace"].as<std::vector<std::string>>()) {
    auto expanded = TracesOf(given);
    if (!expanded.ok()) {
      exit_code = std::max(exit_code, ReportError(kName, expanded.status()));
      if (json) {
        traces.push_back({{"path", given}, {"ok", false}, {"exit_code", ExitCodeFor(expanded.status())},
                          {"error", expanded.status().message()}});
      }
      continue;
    }
    paths.insert(paths.end(), expanded->begin(), expanded->end());
  }
  for (const std::string& path : paths) {
    trace::VerifySummary summary;
    Status s = trace::VerifyTrace(path, &summary);
    if (!s.ok()) {
      exit_code = std::max(exit_code, ReportError(kName, s));
      if (json) {
        traces.push_back({{"path", path}, {"ok", false}, {"exit_code", ExitCodeFor(s)}, {"error", s.message()}});
      }
      continue;
    }
    if (!summary.warning.empty()) ReportWarning(kName, summary.warning);
    if (json) {
      traces.push_back(SummaryJson(summary));
    } else if (!quiet) {
      std::cout << SummaryLine(summary) << "\n";
    }
  }
  if (json) {
    const nlohmann::ordered_json out = {{"schema", "dgrr.verify/1"}, {"ok", exit_code == kExitOk}, {"traces", traces}};
    std::cout << out.dump() << "\n";
  }
  std::cout.flush();
  return exit_code;
}

}  // namespace
}  // namespace dgrr::cli

DGRR_COMMAND(verify, "validate trace files (CRCs, record order, torn tails)",
             dgrr::cli::RunVerify, kExitOk, kExitUsage, kExitIO, kExitInvalidData);
