// Example-level parallelism with static partitioning.
//
// ParallelFor(n, T, fn) calls fn(i, worker) once for every i in [0, n); worker
// w (0 <= w < T) handles the contiguous block [w*n/T, (w+1)*n/T) in ascending
// order, worker 0 on the calling thread. Each index is handled whole by one
// worker, so anything computed per index is independent of T by construction;
// callers combine per-index results in an order keyed by index, never by
// completion time. Workers are kept across calls (one pool per calling
// thread), so a call costs a wake-up, not a thread start.
#pragma once

#include <cstddef>
#include <functional>

namespace dgrr {

void ParallelFor(size_t n, int num_threads, const std::function<void(size_t index, int worker)>& fn);

// The block of indices worker `worker` of `num_threads` handles.
struct IndexRange {
  size_t begin, end;
};
IndexRange StaticPartition(size_t n, int num_threads, int worker);

}  // namespace dgrr
