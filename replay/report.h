// The HTML report of a comparison (docs/report.md): one self-contained page,
// CSS, script and data inline, that a browser opens without network access.
// The script and CSS are replay/report_assets/, embedded at build time
// (replay/report_assets.h).
//
//   CompareOptions compare;  compare.keep_sequences = true;
//   auto result = CompareRuns("runs/a", "runs/b", compare);
//   if (result.ok()) status = WriteReport("report.html", *result, ReportOptions{});
//
// The page is built from compare's result, never from a second comparison:
// config and environment differences first, both runs' loss curves (rank 0's
// STEP records) with the first divergent step marked, the certified prefix,
// the first divergent pair with its context, and a map of boundaries by step
// showing where the fingerprints differ. Its size is bounded whatever the runs'
// length: steps beyond max_map_columns are bucketed, rows beyond max_map_rows
// merged and loss points beyond max_curve_points thinned, and the page says so.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replay/compare.h"

namespace dgrr::replay {

struct ReportOptions {
  uint32_t max_map_rows = 400;       // rows (boundary name x rank) before rows are merged
  uint32_t max_map_columns = 200;    // step columns before steps are bucketed
  uint32_t max_curve_points = 2000;  // loss points per run before the curve is thinned
};

// One STEP end record of a trace, as the loss curve uses it.
struct StepLoss {
  uint64_t step = 0;
  std::optional<double> loss;  // absent when the step recorded no loss
  uint64_t loss_bits = 0;
  uint64_t params_xor64 = 0, params_xxh3 = 0;
};
// Every STEP end record of `trace_path`, in trace order. Corruption names the
// trace as the reader does.
StatusOr<std::vector<StepLoss>> ReadStepLosses(const std::string& trace_path);

// The data the page embeds (schema dgrr.report/1, docs/report.md) and renders
// from. Requires a result computed with CompareOptions::keep_sequences
// (InvalidArgument otherwise); reads rank 0's trace of each side for the losses.
StatusOr<nlohmann::ordered_json> ReportData(const CompareResult& result,
                                            const ReportOptions& options = {});
// What a script reads of the report (schema dgrr.report-summary/1,
// docs/json/report.md): the verdict, the first divergence, the certified
// prefix and how many config and environment keys differ; `report_path` is
// the page written.
nlohmann::ordered_json ReportSummaryJson(const CompareResult& result, const std::string& report_path);
// The whole page.
StatusOr<std::string> ReportHtml(const CompareResult& result, const ReportOptions& options = {});
// Writes ReportHtml to `path` atomically (temporary file, fsync, rename).
Status WriteReport(const std::string& path, const CompareResult& result,
                   const ReportOptions& options = {});

}  // namespace dgrr::replay
