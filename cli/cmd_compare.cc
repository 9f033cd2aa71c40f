// dgrr compare A B: where two runs provably agree and where they first differ
// (docs/compare.md; JSON schema dgrr.compare/4, docs/json/compare.md).
#include <iostream>

#include "cli/command.h"
#include "model/run_config.h"
#include "replay/compare.h"
#include "replay/perfetto.h"

namespace dgrr::cli {
namespace {

constexpr const char* kName = "compare";

int RunCompare(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()
      ("a", po::value<std::string>()->required(), "run A: a trace file or a run directory")
      ("b", po::value<std::string>()->required(), "run B: a trace file or a run directory")
      ("json", po::bool_switch(), "print the dgrr.compare/4 JSON document instead of the report")
      ("context", po::value<uint32_t>()->default_value(3), "aligned pairs shown before and after "
                                                           "the first divergence")
      ("ignore", po::value<std::vector<std::string>>()->composing(),
       "drop boundaries whose name matches GLOB from both runs (repeatable)")
      ("band", po::value<uint32_t>()->default_value(64), "reach of the tolerant mapper: how far a repeated key's counterpart is searched")
      ("perfetto", po::value<std::string>(), "also write a Chrome trace-event JSON view to OUT.json "
                                             "(open it in ui.perfetto.dev; its time axis is boundary "
                                             "order, not time)")
      ("perfetto-max-pairs", po::value<uint64_t>()->default_value(replay::kDefaultPerfettoMaxPairs),
       "aligned pairs the Perfetto view draws, centred on the first divergence (0: all)")
      ("quiet,q", po::bool_switch(), "print nothing on stdout; the exit code says whether the runs "
                                     "differ (errors and warnings still go to stderr; --json still prints)");
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  po::variables_map vm;
  int parsed = ParseCommandLine(
      kName,
      "dgrr compare A B [--json] [--context N] [--ignore GLOB]... [--band W] [--perfetto OUT.json]\n"
      "                  [--perfetto-max-pairs N] [--quiet]",
      "Compares two runs boundary by boundary. A and B are trace files or run\n"
      "directories (all ranks). Differences between the runs' config.json and\n"
      "environment fingerprints are listed first, as the likely explanation when the\n"
      "runs diverge (\"none changed a recorded value\" when they do not), except\n"
      "settings that never change results (the thread count), marked as such. The\n"
      "boundaries are paired in one streaming pass when they line up, by the\n"
      "schedule-tolerant mapper otherwise (extra, missing or fused boundaries, local\n"
      "reordering, different rank counts); then the longest agreeing prefix is\n"
      "certified and the first divergent pair reported with its context. Exit 0 when\n"
      "no pair differs, 4 when one does.",
      options, positional, args, vm);
  if (parsed >= 0) return parsed;

  replay::CompareOptions compare;
  compare.config_key_changes_results = model::RunConfigKeyChangesResults;
  if (vm.count("ignore")) compare.ignore_globs = vm["ignore"].as<std::vector<std::string>>();
  compare.context = vm["context"].as<uint32_t>();
  compare.band = vm["band"].as<uint32_t>();
  const bool perfetto = vm.count("perfetto") > 0;
  compare.keep_sequences = perfetto;

  auto result = replay::CompareRuns(vm["a"].as<std::string>(), vm["b"].as<std::string>(), compare);
  if (!result.ok()) return ReportError(kName, result.status());
  for (const auto* side : {&result->a, &result->b}) {
    for (const std::string& warning : side->warnings) ReportWarning(kName, warning);
  }
  const bool configs_differ = result->configs_available ? !result->config_differences.empty()
                                                        : result->config_digests_differ;
  if (configs_differ) {
    ReportWarning(kName, "the runs' configs differ (" +
                             (result->configs_available
                                  ? std::to_string(result->config_differences.size()) +
                                        (result->config_differences.size() == 1 ? " key" : " keys")
                                  : std::string("trace header digests")) +
                             "): they may be unrelated runs; comparing anyway");
  }
  if (perfetto) {
    replay::PerfettoOptions view;
    view.max_pairs = vm["perfetto-max-pairs"].as<uint64_t>();
    Status s = replay::WritePerfetto(vm["perfetto"].as<std::string>(), *result, view);
    if (!s.ok()) return ReportError(kName, s);
    const replay::PerfettoWindow window = replay::PerfettoWindowOf(*result, view);
    if (window.cut()) {
      ReportWarning(kName, "the Perfetto view draws pairs #" + std::to_string(window.first) + "..#" +
                               std::to_string(window.last - 1) + " of " + std::to_string(window.total) +
                               " (--perfetto-max-pairs " + std::to_string(view.max_pairs) +
                               "; 0 draws all)");
    }
  }
  if (vm["json"].as<bool>()) {
    // Names are arbitrary bytes: invalid UTF-8 becomes U+FFFD rather than an exception.
    std::cout << replay::CompareJson(*result).dump(2, ' ', false,
                                                   nlohmann::json::error_handler_t::replace)
              << "\n";
  } else if (!vm["quiet"].as<bool>()) {
    std::cout << replay::CompareText(*result);
  }
  std::cout.flush();
  return result->found_difference() ? kExitDivergence : kExitOk;
}

}  // namespace
}  // namespace dgrr::cli

DGRR_COMMAND(compare, "compare two runs: certified prefix, first divergence, context",
             dgrr::cli::RunCompare, kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence);
