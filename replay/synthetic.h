// Synthetic pairs of boundary sequences for the mapper's tests and benchmark.
//
// A is a model-like run: steps of `boundaries_per_step` boundaries, each with
// its own name, shape and the step's example range, so most keys are unique.
// B is A transformed the way a different schedule would transform it: local
// reordering, deleted and inserted boundaries, fusions (two boundaries of A
// replaced by one of a new name), and optionally a planted divergence (a
// changed fingerprint). Each B boundary remembers which A boundary it came
// from, so tests can check a pairing exactly. Fully deterministic in `seed`.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "replay/mapper.h"

namespace dgrr::replay {

struct SyntheticOptions {
  uint64_t length = 10000;            // boundaries in A
  uint32_t boundaries_per_step = 256;
  uint32_t examples_per_step = 32;
  uint32_t rank = 0;                  // rank of every boundary of A
  // Every repeated_key_every-th boundary of a step shares one name and shape
  // (think of a repeated activation), so its key repeats inside the step;
  // 0 disables.
  uint32_t repeated_key_every = 0;
  // More repeated keys, one per entry: the d-th entry's key sits at every
  // position k of a step with k % d == d - 1 not already taken by an earlier
  // entry (or by repeated_key_every), so its occurrences are at least d apart.
  std::vector<uint32_t> repeat_distances;
  double reorder_fraction = 0.0;      // fraction of positions swapped with a nearby one
  uint32_t reorder_distance = 3;      // how far ahead a swap reaches (min..distance)
  uint32_t reorder_min_distance = 1;  // the shortest swap (moves of exactly d: min = max = d)
  // Each boundary takes part in at most one swap, so none moves farther than
  // reorder_distance (overlapping swaps can carry one boundary farther).
  bool disjoint_swaps = false;
  double insert_fraction = 0.0;       // new boundaries inserted in B, per A boundary
  double delete_fraction = 0.0;       // A boundaries missing from B
  uint32_t fusions = 0;               // pairs of consecutive A boundaries fused into one in B
  std::optional<uint64_t> divergence_at;  // A index whose fingerprints B changes
  bool divergence_propagates = false;     // and every later one too
  uint64_t seed = 1;
};

inline constexpr uint64_t kNotFromA = ~uint64_t{0};

struct SyntheticPair {
  std::vector<BoundaryItem> a;
  std::vector<BoundaryItem> b;
  std::vector<uint64_t> origin_of_b;  // A index each B boundary came from, or kNotFromA
  std::optional<uint64_t> divergence_b;  // B index of the planted divergence
  uint64_t swaps = 0;                 // local reorderings applied (each moves two boundaries)
  uint64_t inserted = 0;
  uint64_t deleted = 0;               // includes the two sides of each fusion
};

SyntheticPair MakeSyntheticPair(const SyntheticOptions& options);

// The boundary A would hold at position i (exposed so tests can build
// hand-made sequences from the same vocabulary).
BoundaryItem SyntheticBoundary(const SyntheticOptions& options, uint64_t i);

}  // namespace dgrr::replay
