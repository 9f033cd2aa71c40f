// The canonical reduction across ranks, built from data movement only.
//
// Each rank holds the per-example buffers of a contiguous shard of the batch.
// CanonicalAllReduce produces, on every rank, exactly the bits that
// TreeReduceInPlace (runtime/tree_reduce.h) gives over all the batch's
// buffers in one process, for any number of ranks and threads and whatever
// algorithm or protocol the collective library picks:
//
//  1. Each rank cuts its shard into the maximal nodes of the canonical tree
//     over [0, total) that lie inside it and reduces each node locally (a
//     node's subtree is the canonical tree over the node's buffers).
//  2. The parameters are cut into size() contiguous slices; ONE AllToAllV
//     sends every node's slice d to rank d (a reduce-scatter whose "reduce"
//     is done by nobody: the library only moves bytes).
//  3. Each rank evaluates the canonical tree over [0, total) on its slice,
//     with the received node sums as leaves, in the tree's own order.
//  4. One AllGatherV hands every rank the whole result.
//
// The library never adds a recorded value, so its ring/tree algorithm,
// chunking or protocol cannot change a bit (docs/communicator.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/communicator.h"

namespace dgrr {

// This rank holds per-example buffers (n floats each, clobbered) of its
// contiguous shard [first, first + shard.size()) of a batch of `total`
// examples; the ranks' shards, in rank order, tile [0, total) (a shard may be
// empty; an empty shard's `first` is not looked at). On return, on every
// rank, out[0..n) is the canonical tree sum over all `total` examples:
// bitwise what TreeReduceInPlace over all `total` buffers in one process
// gives. Every rank must call it (it is a collective). Shards that do not
// tile [0, total), a zero total, or ranks that disagree on `total` or `n`
// give InvalidArgument on every rank, before any gradient byte moves.
//
// `reduce_node`, when given, does step 1 instead of the host: called once for
// each of this rank's maximal nodes, in example order, with the node's
// buffers as shard[begin, begin + count), it must leave in host memory, and
// return, the canonical tree sum of those buffers (TreeReduceInPlace's bits:
// a device's tree-sum kernel, with only the node's sum copied back). The
// shard's pointers are then only checked for null and handed to it.
using NodeReducer = std::function<StatusOr<const float*>(size_t begin, size_t count)>;
Status CanonicalAllReduce(Communicator& comm, std::span<float* const> shard, uint64_t first, uint64_t total,
                          size_t n, float* out, int num_threads, const NodeReducer& reduce_node = nullptr);

// Every example's scalar (a per-example loss) in example order on every rank:
// `all` gets `total` floats. The ranks' shards tile [0, total) as above.
Status GatherExampleScalars(Communicator& comm, std::span<const float> shard, uint64_t first, uint64_t total,
                            std::vector<float>* all);

// A node of the canonical tree over [0, total) that lies in one rank's shard.
struct ShardNode {
  uint64_t lo = 0, hi = 0;
  int rank = 0;
};

// The maximal canonical nodes lying inside one shard, in example order, for
// shards given as [starts[r], starts[r] + counts[r]) that tile [0, total).
// Exposed for tests and for the docs' worked examples.
std::vector<ShardNode> MaximalShardNodes(std::span<const uint64_t> starts, std::span<const uint64_t> counts,
                                         uint64_t total);

}  // namespace dgrr
