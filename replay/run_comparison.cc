#include "replay/run_comparison.h"

#include <utility>

#include "replay/compare.h"

namespace dgrr {
namespace {

ComparedBoundary Named(const replay::ReportedBoundary& r) {
  ComparedBoundary out;
  out.name = r.name;
  out.phase = trace::PhaseName(r.record.phase);
  out.step = r.record.step;
  out.rank = r.record.rank;
  out.first_example = r.record.first_example;
  out.example_count = r.record.example_count;
  out.trace = r.trace;
  out.record_index = r.record_index;
  return out;
}

std::vector<ComparedSetting> Settings(const std::vector<replay::KeyDifference>& differences) {
  std::vector<ComparedSetting> out;
  out.reserve(differences.size());
  for (const replay::KeyDifference& d : differences) out.push_back({d.key, d.a, d.b});
  return out;
}

}  // namespace

StatusOr<RunComparison> CompareRunDirectories(const std::string& a, const std::string& b,
                                              const RunComparisonOptions& options) {
  replay::CompareOptions o;
  o.ignore_globs = options.ignore_globs;
  o.band = options.band;
  o.context = options.context;
  DGRR_ASSIGN_OR_RETURN(replay::CompareResult r, replay::CompareRuns(a, b, o));
  RunComparison out;
  out.differs = r.found_difference();
  if (r.first_divergence) {
    out.first_a = Named(r.first_divergence->a);
    out.first_b = Named(r.first_divergence->b);
    out.difference = replay::DifferenceName(r.first_divergence->difference);
  }
  out.differing_pairs = r.certify.differing;
  out.pairs = r.certify.pairs;
  out.certified_pairs = r.certify.certified_pairs;
  out.certified_steps = r.certify.certified_steps;
  out.uncompared = r.coverage.uncompared();
  out.logical = r.logical;
  out.config_differences = Settings(r.config_differences);
  out.environment_differences = Settings(r.environment_differences);
  out.text = replay::CompareText(r);
  // Names are arbitrary bytes: invalid UTF-8 becomes U+FFFD, as in `dgrr compare --json`.
  out.json = replay::CompareJson(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  return out;
}

}  // namespace dgrr
