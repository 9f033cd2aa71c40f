// One side of a comparison as a sequence of items, and the logical view of a
// data-parallel run that lets runs of different world sizes be compared
// (docs/compare.md §6.3).
//
// A run of R ranks is, step by step, one logical run: each example's
// boundaries come from the rank that held it, and the replicated boundaries
// (all-reduced gradients, optimizer updates: example range = the whole
// batch) are one value that every rank recorded. LogicalRunSource merges the
// ranks' traces into that sequence: per step, the per-example boundaries of
// all ranks ordered by example (program order within an example), then rank
// 0's replicated boundaries, then any other rank-level boundary by rank. The
// sequence depends on the world size only through the per-shard boundaries,
// so a 1-rank and a 4-rank run of one config line up boundary for boundary.
// Every other rank's replicated boundaries are checked against rank 0's of
// the same step, keyed by (key, occurrence); one that differs, or exists on
// one of them only, is a RankDisagreement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replay/trace_items.h"

namespace dgrr::replay {

// What a comparison reads from one side, in comparison order.
class ItemSource {
 public:
  virtual ~ItemSource() = default;
  // Replaces *out with the next items: `max` of them, fewer only at the end
  // (empty: the end).
  virtual Status Read(size_t max, std::vector<BoundaryItem>* out) = 0;
  virtual uint64_t produced() const = 0;
  virtual uint64_t ignored() const = 0;
  virtual const NameTable& names() const = 0;
  virtual std::vector<std::string> warnings() const = 0;
};

// A BoundaryStream over the whole run in `order`.
StatusOr<std::unique_ptr<ItemSource>> OpenStreamSource(const RunInput& run, RankOrder order,
                                                       const ItemFilter& filter);

// Whether two sides are compared as logical runs: their world sizes differ
// and each is a whole run (a run directory, or the trace of a 1-rank run).
bool CompareAsLogicalRuns(const RunInput& a, const RunInput& b);

// A rank whose replicated boundary disagrees with its own run's rank 0.
struct RankDisagreement {
  enum class Kind : uint8_t {
    kDiffers,        // both recorded it; the fingerprints differ
    kMissingOnRank,  // rank 0 recorded it, this rank did not
    kOnlyOnRank,     // this rank recorded it, rank 0 did not
  };
  Kind kind = Kind::kDiffers;
  uint64_t step = 0;
  uint32_t rank = 0;  // the disagreeing rank (never 0)
  // Rank 0's copy (kDiffers, kMissingOnRank) and the rank's (kDiffers, kOnlyOnRank).
  BoundaryItem reference;
  BoundaryItem copy;
  // Where the logical sequence holds the boundary (rank 0's copy), or, when
  // rank 0 has none, where the step's replicated boundaries end: the
  // certified prefix of a comparison stops before it.
  uint64_t index = 0;
  // Steps of the logical sequence wholly before this one.
  uint64_t step_ordinal = 0;
};
std::string_view RankDisagreementKindName(RankDisagreement::Kind kind);
inline constexpr size_t kKeptDisagreements = 5;  // the first few are kept and reported

class LogicalRunSource : public ItemSource {
 public:
  static StatusOr<std::unique_ptr<LogicalRunSource>> Open(const RunInput& run,
                                                          const ItemFilter& filter);
  ~LogicalRunSource() override;

  Status Read(size_t max, std::vector<BoundaryItem>* out) override;
  uint64_t produced() const override { return produced_; }
  uint64_t ignored() const override;
  const NameTable& names() const override;
  std::vector<std::string> warnings() const override;

  // Replicated boundaries of ranks other than 0 checked against rank 0's.
  uint64_t replicas_checked() const { return replicas_checked_; }
  uint64_t disagreement_count() const { return disagreement_count_; }
  // The first kKeptDisagreements, in the order found (step by step).
  const std::vector<RankDisagreement>& disagreements() const { return disagreements_; }
  // Over every disagreement, not only the kept ones: the smallest logical
  // index, and the step ordinal of the first; nullopt when none.
  std::optional<uint64_t> first_disagreement_index() const { return first_index_; }
  uint64_t first_disagreement_step_ordinal() const { return first_step_ordinal_; }

 private:
  struct Rank;
  LogicalRunSource();
  Status LoadNextStep();
  // Rank `r`'s replicated boundaries of the step against rank 0's.
  void CheckReplicas(uint64_t step, uint32_t r, const std::vector<BoundaryItem>& reference,
                     const std::vector<uint64_t>& reference_index,
                     const std::vector<BoundaryItem>& copies, uint64_t block_end);
  void Note(RankDisagreement d);

  std::vector<std::unique_ptr<Rank>> ranks_;
  mutable NameTable names_;
  std::vector<BoundaryItem> step_items_;
  size_t step_pos_ = 0;
  uint64_t produced_ = 0;
  uint64_t loaded_ = 0;  // boundaries of the steps loaded so far
  uint64_t steps_loaded_ = 0;
  uint64_t replicas_checked_ = 0;
  uint64_t disagreement_count_ = 0;
  std::vector<RankDisagreement> disagreements_;
  std::optional<uint64_t> first_index_;
  uint64_t first_step_ordinal_ = 0;
};

}  // namespace dgrr::replay
