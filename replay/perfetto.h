// Chrome trace-event JSON of a comparison, for ui.perfetto.dev (docs/compare.md,
// "Perfetto view"): run A is process 1 and run B process 2, each rank a
// thread; every boundary of the shown window is a uniform "X" slice at its
// position in the compared sequence (ts = position, dur = 1); aligned pairs are
// joined by flow events; the first divergence is an instant event on both sides.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "replay/compare.h"

namespace dgrr::replay {

struct PerfettoOptions {
  // At most this many aligned pairs are drawn (slices and flows), centred on
  // the first divergence (from the start when there is none).
  uint64_t max_pairs = 10'000;
};

// The trace-event document. Requires a result computed with
// CompareOptions::keep_sequences (InvalidArgument otherwise).
StatusOr<nlohmann::ordered_json> PerfettoJson(const CompareResult& result,
                                              const PerfettoOptions& options = {});
// Writes PerfettoJson to `path` atomically (temporary file, fsync, rename).
Status WritePerfetto(const std::string& path, const CompareResult& result,
                     const PerfettoOptions& options = {});

}  // namespace dgrr::replay
