// Prefix certification (docs/compare.md, "Certification"): walk the aligned
// pairs in order of their index in A; the certified prefix is the longest
// leading run of pairs whose dtype, shape and two fingerprints (xor64 and
// xxh3) are all equal. The first pair that breaks the run is the first
// divergence (of values, dtype or shape: Difference); the
// report places it in context and says whether it is isolated (the pairs
// right after it agree again) or propagates.
//
// Two ways in, with identical reports: Certify() over an Alignment held in
// memory, and LockstepComparer, which streams two sequences chunk by chunk in
// one pass when they line up (the lockstep fast path).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "replay/mapper.h"

namespace dgrr::replay {

enum class PairStatus : uint8_t { kEqual, kDiffers };

// One aligned pair as the report shows it.
struct PairView {
  uint64_t ordinal = 0;  // position in the certification walk
  uint64_t index_a = 0;  // position in each input sequence
  uint64_t index_b = 0;
  BoundaryItem a;
  BoundaryItem b;
  PairStatus status = PairStatus::kEqual;
  Difference difference = Difference::kNone;  // kNone exactly when status is kEqual
};

enum class DivergenceKind : uint8_t {
  kNone,          // every pair agrees
  kIsolated,      // the isolation_window pairs after the first divergence all agree
  kPropagates,    // at least one of them differs
  kUndetermined,  // the first divergence is the last pair: nothing after it to judge by
};
const char* DivergenceKindName(DivergenceKind kind);

struct CertifyOptions {
  uint32_t context = 5;           // pairs shown before and after the first divergence
  uint32_t isolation_window = 8;  // pairs after it that must agree for "isolated" (>= 1)
};

struct CertifyReport {
  uint64_t pairs = 0;             // aligned pairs walked
  // Length of the certified prefix: the leading pairs that agree, up to the
  // first divergence or to the first boundary that could not be compared,
  // whichever comes first.
  uint64_t certified_pairs = 0;
  // The prefix stops at an uncompared boundary (before any divergence).
  bool stopped_at_uncompared = false;
  // Steps certified whole: the number of runs of equal A step among the
  // prefix, less the last run when the boundary that ends the prefix belongs
  // to it (the first divergence, the first uncompared boundary, or a pair of
  // that step past the prefix).
  uint64_t certified_steps = 0;
  std::optional<PairView> first_divergence;
  std::vector<PairView> before;   // up to `context` pairs before it, in walk order
  std::vector<PairView> after;    // up to `context` pairs after it
  uint64_t later_differing = 0;   // pairs after the first divergence that differ
  uint64_t differing = 0;         // all differing pairs (first included)
  DivergenceKind kind = DivergenceKind::kNone;
};

// The first boundary of one side that was never compared: where it sits in
// that side's sequence, and its step, which decides whether it cuts the last
// step of the prefix.
struct FirstUncompared {
  uint64_t index = 0;
  uint64_t step = 0;
};

// The certification walk as a state machine: Add() each aligned pair in walk
// order, then Finish(). Holds only the context pairs, so it can follow a
// stream of any length.
class CertifyWalker {
 public:
  explicit CertifyWalker(const CertifyOptions& options);

  // The first boundary of A (of B) that was never compared: the certified
  // prefix ends before the first pair past it on either side, and the step
  // it belongs to is not certified.
  void StopPrefixAt(std::optional<FirstUncompared> first_a,
                    std::optional<FirstUncompared> first_b);

  void Add(uint64_t index_a, uint64_t index_b, const BoundaryItem& a, const BoundaryItem& b);
  // Same as Add() for each k of a run of lockstep pairs (index first + k on
  // both sides) whose fingerprints the caller found equal; touches only the
  // steps and the last `context` pairs, which keeps the fast path fast.
  void AddEqualLockstepRun(uint64_t first, std::span<const BoundaryItem> a,
                           std::span<const BoundaryItem> b);
  CertifyReport Finish();

 private:
  CertifyOptions options_;
  CertifyReport report_;
  bool diverged_ = false;
  bool prefix_closed_ = false;    // an uncompared boundary ended the prefix
  // Does the boundary that ends the prefix belong to its last run of steps?
  bool StopCutsLastRun(bool past_a, bool past_b, uint64_t next_step) const;

  std::optional<FirstUncompared> stop_a_, stop_b_;
  uint64_t step_runs_ = 0;        // runs of equal A step in the prefix so far
  uint64_t last_step_ = 0;
  std::deque<PairView> recent_;   // the last `context` pairs of the prefix
  uint64_t judged_after_ = 0;     // pairs after the divergence judged for isolation
  bool judged_differs_ = false;
};

// Certifies `alignment` of a and b. The walk follows alignment.pairs, which
// the mapper sorts by index in A; the prefix stops at the first uncompared
// boundary (CoverageOf(alignment)).
CertifyReport Certify(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                      const Alignment& alignment, const CertifyOptions& options);

// The lockstep fast path, streaming: feed chunks of A and B of equal length,
// in order; the comparer checks that the keys line up and certifies as it
// goes. Finish() yields the same report as
// Certify(a, b, AlignLockstep(a, b), options) over the whole sequences.
class LockstepComparer {
 public:
  LockstepComparer(bool compare_rank, const CertifyOptions& options);
  LockstepComparer(const LockstepComparer&) = delete;
  LockstepComparer& operator=(const LockstepComparer&) = delete;

  // Compares the next chunk pair. Returns false, and stops consuming, at the
  // first position whose keys are not pairable or when the chunks differ in
  // length: the sequences do not line up and the tolerant mapper must take
  // over. Once false, later calls return false.
  bool Feed(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b);

  bool lines_up() const { return lines_up_; }
  // Pairs compared; when !lines_up(), also the position of the first mismatch.
  uint64_t position() const { return position_; }

  // Builds the report over the pairs compared.
  CertifyReport Finish() { return walker_.Finish(); }

 private:
  bool compare_rank_;
  bool lines_up_ = true;
  uint64_t position_ = 0;
  CertifyWalker walker_;
};

}  // namespace dgrr::replay
