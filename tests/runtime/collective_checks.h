// Checks of a Communicator and of the canonical reduction that run on every
// rank of any backend: the in-process tests call them on threads, the MPI
// test program (tests/runtime/mpi/) on processes. Each returns OK on every
// rank or an error naming what differed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/status.h"
#include "runtime/communicator.h"
#include "runtime/inprocess_communicator.h"

namespace dgrr::testing_collectives {

// Runs body(comm) on one thread per rank of an in-process group of `size`
// ranks; each rank's status, by rank.
inline std::vector<Status> OnEveryRank(int size, const std::function<Status(Communicator&)>& body) {
  InProcessGroup group(size);
  std::vector<Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = body(*group.ranks[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

Status CheckBroadcast(Communicator& c);
Status CheckAllGathers(Communicator& c);
Status CheckAllToAllV(Communicator& c);
Status CheckRepeatedRounds(Communicator& c);

// How a batch of `total` examples is cut into shards over `ranks` ranks.
enum class Cut : int { kEven, kAllOnLastRank, kUneven, kFirstRankOne };
constexpr Cut kAllCuts[] = {Cut::kEven, Cut::kAllOnLastRank, Cut::kUneven, Cut::kFirstRankOne};
// counts[r] of examples of rank r; they sum to total (some may be 0).
std::vector<uint64_t> ShardCounts(uint64_t total, int ranks, Cut cut);

// Per-example value of element e of example i: signs and exponents spread
// over 2^-24..2^24 so that any other summation order changes bits.
float ExampleValue(uint64_t example, size_t element);

// This rank's shard of a batch of `total` examples of n values each, cut by
// `cut`, reduced with CanonicalAllReduce on `threads` threads, must equal
// bitwise TreeReduceInPlace over all the batch's buffers in one process.
// With `node_reducer`, the nodes are summed by a reducer of the test's own
// (into storage of its own, leaving the shard's buffers untouched, which is
// checked), called exactly once per maximal node of this rank, in order.
Status CheckCanonicalAllReduce(Communicator& c, uint64_t total, Cut cut, size_t n, int threads,
                               bool node_reducer = false);
// GatherExampleScalars returns every example's value in example order.
Status CheckGatherExampleScalars(Communicator& c, uint64_t total, Cut cut);
// Shards that overlap or leave a gap are refused with InvalidArgument on
// every rank (needs size() >= 2).
Status CheckBadShardsRefused(Communicator& c);

}  // namespace dgrr::testing_collectives
