// Loading trace files into the mapper's items (docs/compare.md, "Inputs").
//
// One side of a comparison is a trace file or a run directory (rank<R>.trace
// for every rank of the run). A BoundaryStream reads the side's BOUNDARY
// records in comparison order and turns each into a BoundaryItem, a chunk at a
// time, so the lockstep fast path never holds a whole trace in memory:
//   - one trace: the trace's own order;
//   - several ranks, ranks paired one to one (equal world sizes): step by step,
//     and within a step rank 0's boundaries, then rank 1's, ...;
//   - several ranks, world sizes differ: step by step, and within a step first
//     the per-example boundaries (example_count == 1) by example index, then
//     the rank-level boundaries by rank; program order breaks every tie.
// Bisect reuses OpenRunInput to find and validate the rank traces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "replay/mapper.h"
#include "trace_format/reader.h"
#include "trace_format/record.h"

namespace dgrr::replay {

// The 64-bit hash of a boundary name that BoundaryKey::name_hash holds
// (FNV-1a over the bytes, then a SplitMix64 finaliser).
uint64_t BoundaryNameHash(std::string_view name);
// A digest of a BOUNDARY record's shape (ndim and the six stored dim slots).
uint64_t BoundaryShapeDigest(const trace::BoundaryRecord& record);
// The mapper's view of one BOUNDARY record at `record_index`;
// shape_digest = BoundaryShapeDigest(record), passed in so callers can cache it.
BoundaryItem MakeBoundaryItem(const trace::BoundaryRecord& record, uint64_t name_hash,
                              uint64_t record_index, uint64_t shape_digest);

// name_hash -> name, for every boundary a stream has produced.
using NameTable = std::unordered_map<uint64_t, std::string>;

// One side of a comparison, resolved and its trace headers checked.
struct RunInput {
  std::string path;        // as given
  bool is_run_dir = false;
  uint32_t world_size = 1; // from the trace headers
  // Traces in rank order: every rank of a run directory, or the one file.
  std::vector<std::string> trace_paths;
  std::vector<trace::TraceHeader> headers;  // parallel to trace_paths
  std::string config_path;  // config.json beside the traces; empty when absent
  std::string env_path;     // the first trace's rank<R>.env.json; empty when absent

  // The trace holding `rank`'s records, empty when this side has none.
  std::string TracePathOfRank(uint32_t rank) const;
};

// Resolves `path`: a directory is a run directory (rank0.trace's header gives
// the world size; every rank<R>.trace must exist and agree on run id and world
// size), anything else a trace file. NotFound/IOError naming the missing or
// unreadable file; Corruption naming the file for a bad header.
StatusOr<RunInput> OpenRunInput(const std::string& path);

enum class RankOrder : uint8_t {
  kByRank,     // (step, rank, program order)
  kByExample,  // (step, per-example by example, rank-level by (stage, rank)): compare's
               // order; stage 0 the data, forward and backward phases, 1 collective and
               // optimizer
};

// Boundaries whose name matches any glob (fnmatch) are skipped.
struct ItemFilter {
  std::vector<std::string> ignore_globs;
  bool Ignored(const std::string& name) const;
};

class BoundaryStream {
 public:
  static StatusOr<std::unique_ptr<BoundaryStream>> Open(const RunInput& run, RankOrder order,
                                                        ItemFilter filter);
  ~BoundaryStream();
  BoundaryStream(const BoundaryStream&) = delete;
  BoundaryStream& operator=(const BoundaryStream&) = delete;

  // Replaces *out with the next items: `max` of them, fewer only at the end
  // (empty: the end). Corruption of a trace is returned as the reader names it.
  Status Read(size_t max, std::vector<BoundaryItem>* out);

  uint64_t produced() const { return produced_; }
  uint64_t ignored() const;
  const NameTable& names() const { return names_; }
  // Torn tails and incomplete names seen at the ends of the traces.
  std::vector<std::string> warnings() const;

 private:
  struct RankReader;
  BoundaryStream(RankOrder order, ItemFilter filter);
  // Next boundary of one rank, skipping ignored ones; false at its end.
  Status NextOfRank(RankReader& reader, BoundaryItem* item, bool* have);
  // Up to `max` next boundaries of one rank into out[0, *n).
  Status ReadOfRank(RankReader& reader, BoundaryItem* out, size_t max, size_t* n);
  size_t ItemsFromRun(RankReader& reader, BoundaryItem* out, size_t max);
  bool KeepName(RankReader& reader, uint32_t name_id);
  // Refills step_items_ with the next step of every rank, in stream order.
  Status LoadNextStep();

  RankOrder order_;
  ItemFilter filter_;
  std::vector<std::unique_ptr<RankReader>> ranks_;
  NameTable names_;
  std::vector<BoundaryItem> step_items_;
  size_t step_pos_ = 0;
  uint64_t produced_ = 0;
};

// Every remaining item of `stream`.
StatusOr<std::vector<BoundaryItem>> ReadAllItems(BoundaryStream& stream);

// A boundary as the report shows it: its record re-read from its trace.
struct BoundaryDetail {
  std::string trace_path;
  std::string name;
  trace::BoundaryRecord record;
};
StatusOr<BoundaryDetail> LoadBoundaryDetail(const RunInput& run, const NameTable& names,
                                            const BoundaryItem& item);

}  // namespace dgrr::replay
