// Comparing two runs from a program: what `dgrr compare` finds, as plain
// values (docs/api.md, "Comparing runs"). Installed: this header includes no
// third-party header and none of the comparison's machinery (the mapper, the
// trace readers, the JSON writer stay inside libdgrr_replay).
//
//   auto c = dgrr::CompareRunDirectories("runs/a", "runs/b");
//   if (!c.ok()) { /* c.status(): a missing file (kIOError/kNotFound) or an invalid one (kCorruption) */ }
//   else if (c->differs) std::cerr << c->text;       // the report `dgrr compare` prints
//   else std::cout << c->certified_steps << " steps certified\n";
//
// Each argument is a run directory or one trace file, as for `dgrr compare`;
// runs of different world sizes are compared as logical runs. One difference
// from the command: every config.json key that differs is taken as one that
// may change results (`dgrr compare` knows which keys of `dgrr train`'s runs
// never do, the thread count say, and says so in its report).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dgrr {

struct RunComparisonOptions {
  std::vector<std::string> ignore_globs;  // boundaries dropped from both sides first (fnmatch)
  uint32_t band = 64;                     // the schedule-tolerant mapper's reach (compare.md §3.3)
  uint32_t context = 3;                   // pairs shown around the divergence in `text` and `json`
};

// One boundary record of a run, as the comparison names it.
struct ComparedBoundary {
  std::string name;
  std::string phase;  // "data", "forward", "backward", "collective", "optimizer"
  uint64_t step = 0;
  uint32_t rank = 0;
  uint64_t first_example = 0;  // the record's examples [first, first + count)
  uint32_t example_count = 0;
  std::string trace;           // the trace file holding it
  uint64_t record_index = 0;   // its index in that file
};

// A key of config.json or of the environment fingerprint whose values
// differ (compact JSON text; absent where the key is missing).
struct ComparedSetting {
  std::string key;
  std::optional<std::string> a, b;
};

struct RunComparison {
  // Anything differs: a pair of boundaries, or a rank with its own run's
  // rank 0.
  bool differs = false;
  // What `dgrr compare` exits with: 4 when anything differs, else 0.
  int exit_code() const { return differs ? 4 : 0; }
  // The first pair that differs, when one does, and in what: "values",
  // "dtype", "shape" or "dtype_and_shape".
  std::optional<ComparedBoundary> first_a, first_b;
  std::string difference;
  uint64_t differing_pairs = 0;
  // The certified prefix: pairs and whole steps bitwise equal before the
  // first divergence or the first boundary that could not be compared.
  uint64_t pairs = 0;
  uint64_t certified_pairs = 0;
  uint64_t certified_steps = 0;
  uint64_t uncompared = 0;      // boundaries never compared, both sides
  bool logical = false;         // world sizes differ: compared as logical runs
  std::vector<ComparedSetting> config_differences;
  std::vector<ComparedSetting> environment_differences;
  std::string text;  // the report `dgrr compare` prints
  std::string json;  // `dgrr compare --json` (docs/json/compare.md)
};

// Compares run (or trace) `a` with `b`. A divergence is a successful result;
// the Status is an error only when the runs cannot be read: NotFound or
// IOError for a missing or unreadable file, Corruption for an invalid trace
// or JSON file, each naming the file.
StatusOr<RunComparison> CompareRunDirectories(const std::string& a, const std::string& b,
                                              const RunComparisonOptions& options = {});

}  // namespace dgrr
