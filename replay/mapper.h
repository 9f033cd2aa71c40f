// The boundary mapper: pairs the model-level operator boundaries of two runs
// so that their fingerprints can be compared (docs/compare.md, "Alignment").
//
// Input is an abstract in-memory sequence of boundaries per run, in the order
// the runs recorded them; the trace reader feeds it. When both sequences line
// up (same keys, same order) the pairing is the identity and is found in one
// streaming pass (lockstep). Otherwise the schedule-tolerant mapper pairs
// them. A key that occurs once on each side is paired, wherever
// it is (the unique consistent choice); those in one monotone chain are the
// anchors, which predict where any other boundary should sit on the other
// side. A boundary of a repeated key pairs only with the unique consistent
// candidate within reach (`band`) of its prediction, seen from both sides;
// when several remain, identical contents (dtype, shape and fingerprints) are
// the only other evidence accepted. Whatever stays unpaired is reported with its reason (no
// counterpart, outside reach, ambiguous), never as a divergence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace dgrr::replay {

// What must agree for two boundaries to be pairable: which boundary it is,
// not what it holds. Names are compared through a 64-bit hash of the
// boundary's name string, because name ids are private to each trace; the
// caller maps names to hashes. The tensor's dtype and shape are not part of
// the key: a boundary recorded as bf16 in one run and f32 in the other (or
// with another shape) is the same boundary holding a different tensor, so it
// pairs and is reported as a divergence of that kind (docs/compare.md §1).
struct BoundaryKey {
  uint64_t name_hash = 0;
  uint64_t first_example = 0;  // the example range [first_example, first_example + example_count)
  uint32_t example_count = 0;
  uint32_t rank = 0;
  uint8_t phase = 0;      // forward, backward, optimizer, ... (trace-format values)
  uint8_t direction = 0;  // input or output of the operator
};

// One boundary as the mapper and certification see it: its key, and what is
// compared once it is paired (dtype, shape, the two fingerprints).
struct BoundaryItem {
  BoundaryKey key;
  uint64_t step = 0;
  uint64_t record_index = 0;  // where the record sits in its trace file
  uint64_t shape_digest = 0;  // digest of the tensor's dimensions
  uint64_t xor64 = 0;         // the two fingerprints of the tensor
  uint64_t xxh3 = 0;
  uint8_t dtype = 0;          // dgrr::DType value
};

// What a pair of boundaries differs in. A dtype or shape difference is
// reported as such (the fingerprints of tensors of different types say
// nothing more); kValues: same dtype and shape, fingerprints differ.
enum class Difference : uint8_t { kNone, kValues, kDtype, kShape, kDtypeAndShape };
// "none", "values", "dtype", "shape", "dtype_and_shape".
const char* DifferenceName(Difference difference);

inline Difference DifferenceOf(const BoundaryItem& a, const BoundaryItem& b) {
  const bool dtype = a.dtype != b.dtype;
  const bool shape = a.shape_digest != b.shape_digest;
  if (dtype && shape) return Difference::kDtypeAndShape;
  if (dtype) return Difference::kDtype;
  if (shape) return Difference::kShape;
  return a.xor64 == b.xor64 && a.xxh3 == b.xxh3 ? Difference::kNone : Difference::kValues;
}

// Same dtype, shape and fingerprints: a paired boundary that agrees, or an
// identical copy (the mapper's fingerprint evidence, replicas).
// (One test of or-ed xors: the lockstep loop asks this of every record.)
inline bool SameContent(const BoundaryItem& a, const BoundaryItem& b) {
  return ((a.xor64 ^ b.xor64) | (a.xxh3 ^ b.xxh3) | (a.shape_digest ^ b.shape_digest) |
          uint64_t{static_cast<uint8_t>(a.dtype ^ b.dtype)}) == 0;
}

// Ranks are comparable when both runs have the same world size: then a
// boundary of rank r pairs only with rank r. With different world sizes the
// same example is processed by different ranks, so rank is left out of the
// key and the example range identifies the boundary instead.
inline bool RanksComparable(uint32_t world_size_a, uint32_t world_size_b) {
  return world_size_a == world_size_b;
}

// Are a and b pairable? All key fields equal; rank only if compare_rank.
inline bool Pairable(const BoundaryKey& a, const BoundaryKey& b, bool compare_rank) {
  return a.name_hash == b.name_hash && a.first_example == b.first_example &&
         a.example_count == b.example_count && a.phase == b.phase &&
         a.direction == b.direction && (!compare_rank || a.rank == b.rank);
}

// A 64-bit digest of the pairable part of a key: equal keys give equal
// digests (the converse is checked field by field where it matters).
uint64_t KeyDigest(const BoundaryKey& key, bool compare_rank);

struct MapperOptions {
  bool compare_rank = true;  // see RanksComparable
  // The reach (--band): how far, in boundaries, from its predicted position a
  // boundary of a repeated key looks for its counterpart (docs/compare.md §3.3
  // states the guarantee in terms of it).
  uint32_t band = 64;
};

// How a pair was found.
enum class PairOrigin : uint8_t {
  kLockstep,     // the sequences lined up
  kAnchor,       // a key that occurs once on each side, in the monotone chain
  kMoved,        // a key that occurs once on each side, out of the chain (moved)
  kRepeatKey,    // a repeated key: the only candidate within reach, seen from both sides
  kFingerprint,  // a repeated key: several candidates, the only one with identical fingerprints
};
const char* PairOriginName(PairOrigin origin);

// Why a boundary is in unmatched_a / unmatched_b.
enum class Unpaired : uint8_t {
  kNoCounterpart,  // its key has no unpaired occurrence on the other side
  kOutsideReach,   // it has, but none within reach of its predicted position
  kAmbiguous,      // several candidates within reach and no evidence picks one
  kReplica,        // an extra copy with the fingerprints of an occurrence of its key
                   // within reach on the other side: compared, equal (rank replicas)
};
const char* UnpairedName(Unpaired why);

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
  uint64_t moved_pairs = 0;       // once-once keys out of the monotone chain
  uint64_t repeat_key_pairs = 0;  // repeated keys paired on key evidence
  uint64_t fingerprint_pairs = 0; // repeated keys settled by identical fingerprints
  bool lockstep = false;          // the sequences lined up and took the fast path
};

// The pairing of A and B. `pairs` is sorted by index_a (the order in which
// certification walks them); index_b is increasing too except around moved
// and repeated-key pairs. Every index of A (of B) appears in exactly one of
// pairs and unmatched_a (pairs and unmatched_b); why_a[k] (why_b[k]) says why
// unmatched_a[k] (unmatched_b[k]) is unpaired.
struct Alignment {
  std::vector<AlignedPair> pairs;
  std::vector<std::pair<uint64_t, uint64_t>> anchors;  // strictly increasing in both
  std::vector<uint64_t> unmatched_a;  // present only in A (or not pairable), ascending
  std::vector<uint64_t> unmatched_b;  // present only in B (or not pairable), ascending
  std::vector<Unpaired> why_a;
  std::vector<Unpaired> why_b;
  AlignmentStats stats;
};

// Boundaries that were never compared: unpaired for any reason but kReplica.
struct Coverage {
  uint64_t no_counterpart = 0;  // both sides together
  uint64_t outside_reach = 0;
  uint64_t ambiguous = 0;
  uint64_t replicas = 0;        // compared as replicas: not counted in uncompared()
  // The first uncompared boundary of each side, if any (index in the sequence).
  std::optional<uint64_t> first_a, first_b;
  uint64_t uncompared() const { return no_counterpart + outside_reach + ambiguous; }
};
Coverage CoverageOf(const Alignment& alignment);

// Do a and b line up: same length and pairwise pairable keys?
bool LinesUp(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
             bool compare_rank);

// The identity pairing; only meaningful when LinesUp(a, b).
Alignment AlignLockstep(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b);

// The schedule-tolerant mapper (docs/compare.md §3).
Alignment AlignTolerant(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                        const MapperOptions& options);

// Lockstep when the sequences line up, the tolerant mapper otherwise.
Alignment Align(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                const MapperOptions& options);

}  // namespace dgrr::replay
