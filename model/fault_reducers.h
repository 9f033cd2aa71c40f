// The data-parallel faults as alternative sums of a batch's per-example
// gradients (docs/model.md, "Fault injection"): at the step they fire they
// replace the canonical all-reduce's result, or part of it, by a sum in an
// order of their own, as a real reduction bug would. Out of the trainer's
// step so that it only picks the reduction (issue 27: the faults as
// alternative reducers). Each is a collective: every rank calls it with its
// shard of the batch (equal shards, in rank order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/communicator.h"

namespace dgrr::model {

// `reduce-order`: out[0..n) = ((g0 + g1) + g2) + ... over the batch's
// `batch` examples in example order, on every rank alike: a valid sum, in
// another order than the canonical tree.
Status ReduceInExampleOrder(Communicator& comm, std::span<float* const> shard, size_t n, uint64_t batch,
                            float* out);

// `race`: *sum = the values [offset, offset + count) of the batch's examples
// summed by racing threads on rank 0, in the order they win a lock, each
// first "computing" for a few microseconds drawn from the OS entropy source
// (standing in for the uneven kernel times of a real race: on a quiet
// two-core machine the workers would otherwise tend to queue in the order
// they were started and the race would rarely show); every rank gets rank
// 0's sum. `threads` racers, at least two. It reads the examples' own
// values: call it before anything sums the shard in place (the canonical
// reduction does).
Status RacyReduceRange(Communicator& comm, std::span<float* const> shard, size_t offset, size_t count,
                       uint64_t batch, int threads, std::vector<float>* sum);

}  // namespace dgrr::model
