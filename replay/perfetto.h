// Chrome trace-event JSON of a comparison, for ui.perfetto.dev (docs/compare.md,
// "Perfetto view"): run A is process 1 and run B process 2, each rank a
// thread; every boundary of the shown window is a uniform "X" slice at its
// position in the compared sequence (ts = position, dur = 1): the time axis is
// LOGICAL ORDER, one unit per boundary, not microseconds, and the file says so
// (process names, otherData.time_axis, each slice's args.position). Slices
// whose pair differs are named "DIFF <name>" with category boundary.differs
// (Perfetto colours by name, so they stand apart from the equal ones);
// aligned pairs are joined by flow events; the first divergence is an
// instant event on both sides.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "replay/compare.h"

namespace dgrr::replay {

inline constexpr uint64_t kDefaultPerfettoMaxPairs = 10'000;

struct PerfettoOptions {
  // At most this many aligned pairs are drawn (slices and flows), centred on
  // the first divergence (from the start when there is none); 0 draws all.
  // The cap keeps the file loadable (~700 bytes a pair): `dgrr compare
  // --perfetto-max-pairs N` raises it.
  uint64_t max_pairs = kDefaultPerfettoMaxPairs;
};

// The aligned pairs [first, last) of `total` that the view draws.
struct PerfettoWindow {
  uint64_t first = 0, last = 0, total = 0;
  bool cut() const { return last - first < total; }
};
PerfettoWindow PerfettoWindowOf(const CompareResult& result, const PerfettoOptions& options = {});

// The trace-event document. Requires a result computed with
// CompareOptions::keep_sequences (InvalidArgument otherwise).
StatusOr<nlohmann::ordered_json> PerfettoJson(const CompareResult& result,
                                              const PerfettoOptions& options = {});
// Writes PerfettoJson to `path` atomically (temporary file, fsync, rename).
Status WritePerfetto(const std::string& path, const CompareResult& result,
                     const PerfettoOptions& options = {});

}  // namespace dgrr::replay
