// The boundary mapper: pairs the model-level operator boundaries of two runs
// so that their fingerprints can be compared (docs/compare.md, "Alignment").
//
// Input is an abstract in-memory sequence of boundaries per run, in the order
// the runs recorded them; the trace reader feeds it. When both sequences line
// up (same keys, same order) the pairing is the identity and is found in one
// streaming pass (lockstep). Otherwise the schedule-tolerant mapper pairs
// them: locally unique anchors kept in monotone order cut the sequences into
// windows, a banded monotone dynamic program pairs each window, and a
// conservative rescue pass pairs leftovers that moved slightly. Boundaries
// left unpaired are insertions (only in B) or deletions (only in A), never
// divergences. Pairing never looks at fingerprints: which pairs exist depends
// only on the keys, so a divergence cannot hide itself by changing the pairing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace dgrr::replay {

// What must agree for two boundaries to be pairable. Names are compared
// through a 64-bit hash of the boundary's name string, because name ids are
// private to each trace; the caller maps names to hashes.
struct BoundaryKey {
  uint64_t name_hash = 0;
  uint64_t shape_digest = 0;   // digest of the tensor's dimensions
  uint64_t first_example = 0;  // the example range [first_example, first_example + example_count)
  uint32_t example_count = 0;
  uint32_t rank = 0;
  uint8_t phase = 0;      // forward, backward, optimizer, ... (trace-format values)
  uint8_t direction = 0;  // input or output of the operator
  uint8_t dtype = 0;      // dgrr::DType value
};

// One boundary as the mapper and certification see it.
struct BoundaryItem {
  BoundaryKey key;
  uint64_t step = 0;
  uint64_t record_index = 0;  // where the record sits in its trace file
  uint64_t xor64 = 0;         // the two fingerprints of the tensor
  uint64_t xxh3 = 0;
};

// Ranks are comparable when both runs have the same world size: then a
// boundary of rank r pairs only with rank r. With different world sizes the
// same example is processed by different ranks, so rank is left out of the
// key and the example range identifies the boundary instead.
inline bool RanksComparable(uint32_t world_size_a, uint32_t world_size_b) {
  return world_size_a == world_size_b;
}

// Are a and b pairable? All key fields equal; rank only if compare_rank.
inline bool Pairable(const BoundaryKey& a, const BoundaryKey& b, bool compare_rank) {
  return a.name_hash == b.name_hash && a.shape_digest == b.shape_digest &&
         a.first_example == b.first_example && a.example_count == b.example_count &&
         a.phase == b.phase && a.direction == b.direction && a.dtype == b.dtype &&
         (!compare_rank || a.rank == b.rank);
}

// A 64-bit digest of the pairable part of a key: equal keys give equal
// digests (the converse is checked field by field where it matters).
uint64_t KeyDigest(const BoundaryKey& key, bool compare_rank);

struct MapperOptions {
  bool compare_rank = true;       // see RanksComparable
  uint32_t band = 32;             // half-width of the DP band around a window's diagonal (--band)
  int32_t match_score = 2;        // DP score of a pair
  int32_t gap_penalty = 1;        // DP cost of leaving one boundary unpaired
  uint32_t anchor_radius = 64;    // an anchor's key is unique within +-radius in both sequences
  uint32_t rescue_radius = 64;    // how far (in B positions) a leftover may have moved
  uint64_t max_window_cells = uint64_t{1} << 27;  // larger windows are cut along their diagonal
};

// How a pair was found.
enum class PairOrigin : uint8_t { kLockstep, kAnchor, kWindow, kRescue };

struct AlignedPair {
  uint64_t index_a;
  uint64_t index_b;
  PairOrigin origin;
};

struct AlignmentStats {
  uint64_t length_a = 0;
  uint64_t length_b = 0;
  double length_ratio = 0;        // length_b / length_a (0 when A is empty)
  double unmatched_fraction = 0;  // (unmatched_a + unmatched_b) / (length_a + length_b)
  uint64_t anchors = 0;
  double anchor_density = 0;      // anchors / max(length_a, length_b)
  uint64_t windows = 0;
  uint64_t largest_window = 0;    // max over windows of max(A part, B part)
  uint64_t window_pairs = 0;      // pairs found by the DP
  uint64_t rescued_pairs = 0;     // pairs found by the rescue pass
  bool lockstep = false;          // the sequences lined up and took the fast path
};

// The pairing of A and B. `pairs` is sorted by index_a (the order in which
// certification walks them); index_b is increasing too except around rescued
// pairs. Every index of A (of B) appears in exactly one of pairs and
// unmatched_a (pairs and unmatched_b).
struct Alignment {
  std::vector<AlignedPair> pairs;
  std::vector<std::pair<uint64_t, uint64_t>> anchors;  // strictly increasing in both
  std::vector<uint64_t> unmatched_a;  // deletions: present only in A, ascending
  std::vector<uint64_t> unmatched_b;  // insertions: present only in B, ascending
  AlignmentStats stats;
};

// Do a and b line up: same length and pairwise pairable keys?
bool LinesUp(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
             bool compare_rank);

// The identity pairing; only meaningful when LinesUp(a, b).
Alignment AlignLockstep(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b);

// The schedule-tolerant mapper (anchors, banded DP per window, rescue).
Alignment AlignTolerant(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                        const MapperOptions& options);

// Lockstep when the sequences line up, the tolerant mapper otherwise.
Alignment Align(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                const MapperOptions& options);

}  // namespace dgrr::replay
