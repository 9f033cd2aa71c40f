// dgrr report A B -o report.html: compare's result as one self-contained HTML
// page (docs/report.md). The comparison is compare's own (replay/compare.h);
// this command only chooses its options and renders the result.
#include <iostream>

#include "cli/command.h"
#include "model/run_config.h"
#include "replay/compare.h"
#include "replay/report.h"

namespace dgrr::cli {
namespace {

constexpr const char* kName = "report";

int RunReport(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()
      ("a", po::value<std::string>()->required(), "run A: a trace file or a run directory")
      ("b", po::value<std::string>()->required(), "run B: a trace file or a run directory")
      ("output,o", po::value<std::string>(), "the HTML file to write (required; replaced atomically)")
      ("context", po::value<uint32_t>()->default_value(5), "aligned pairs shown before and after "
                                                           "the first divergence")
      ("ignore", po::value<std::vector<std::string>>()->composing(),
       "drop boundaries whose name matches GLOB from both runs (repeatable)")
      ("band", po::value<uint32_t>()->default_value(64), "reach of the tolerant mapper, as compare's --band")
      ("max-rows", po::value<uint32_t>()->default_value(400),
       "boundary rows the map shows before merging neighbouring rows")
      ("max-steps", po::value<uint32_t>()->default_value(200),
       "step columns the map shows before aggregating neighbouring steps")
      ("json", po::bool_switch(), "print the dgrr.report-summary/1 JSON summary (verdict, divergence, "
                                  "certified prefix) instead of the one-line summary")
      ("quiet,q", po::bool_switch(), "print nothing but errors (--json still prints)");
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  po::variables_map vm;
  int parsed = ParseCommandLine(
      kName,
      "dgrr report A B -o REPORT.html [--context N] [--ignore GLOB]... [--band W]\n"
      "                  [--max-rows R] [--max-steps S] [--json] [--quiet]",
      "Compares two runs as 'dgrr compare' does and writes what it found as one\n"
      "self-contained HTML page (no network access needed to view it): config and\n"
      "environment differences first, both runs' loss curves with the first divergent\n"
      "step marked, the certified prefix, the first divergent boundary with the pairs\n"
      "around it and both fingerprints, and a map of boundaries (rows, by layer and\n"
      "rank) by step (columns) showing where fingerprints differ and how the\n"
      "difference spreads. Runs with more steps or rows than the map shows are\n"
      "aggregated, and the page says so. A and B are trace files or run directories.\n"
      "Exit 0 when no pair differs, 4 when one does (the report is written either way).\n"
      "--json prints a summary a script can read (docs/json/report.md).",
      options, positional, args, vm);
  if (parsed >= 0) return parsed;

  if (!vm.count("output")) {
    std::cerr << "dgrr report: missing -o FILE, the HTML page to write (see 'dgrr report --help')\n";
    return kExitUsage;
  }
  replay::CompareOptions compare;
  compare.config_key_changes_results = model::RunConfigKeyChangesResults;
  if (vm.count("ignore")) compare.ignore_globs = vm["ignore"].as<std::vector<std::string>>();
  compare.context = vm["context"].as<uint32_t>();
  compare.band = vm["band"].as<uint32_t>();
  compare.keep_sequences = true;  // the map needs every pair
  replay::ReportOptions report;
  report.max_map_rows = vm["max-rows"].as<uint32_t>();
  report.max_map_columns = vm["max-steps"].as<uint32_t>();
  if (report.max_map_rows == 0 || report.max_map_columns == 0) {
    std::cerr << "dgrr report: --max-rows and --max-steps must be at least 1\n";
    return kExitUsage;
  }
  const bool quiet = vm["quiet"].as<bool>();

  auto result = replay::CompareRuns(vm["a"].as<std::string>(), vm["b"].as<std::string>(), compare);
  if (!result.ok()) return ReportError(kName, result.status());
  for (const auto* side : {&result->a, &result->b}) {
    for (const std::string& warning : side->warnings) ReportWarning(kName, warning);
  }
  const std::string out = vm["output"].as<std::string>();
  Status s = replay::WriteReport(out, *result, report);
  if (!s.ok()) return ReportError(kName, s);
  if (vm["json"].as<bool>()) {
    std::cout << replay::ReportSummaryJson(*result, out).dump(2, ' ', false,
                                                              nlohmann::json::error_handler_t::replace)
              << "\n";
  } else if (!quiet) {
    std::cout << "report: " << out << " ("
              << (result->diverged()
                      ? "divergence at step " + std::to_string(result->first_divergence->a.record.step) +
                            ": " + result->first_divergence->a.name
                      : std::string("no divergence"))
              << ")\n";
  }
  return result->diverged() ? kExitDivergence : kExitOk;
}

}  // namespace
}  // namespace dgrr::cli

DGRR_COMMAND(report, "write an HTML report of two runs: loss curves, divergence, boundary map",
             dgrr::cli::RunReport, kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence);
