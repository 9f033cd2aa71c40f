// The canonical reduction tree over examples.
//
// Gradients and losses of a batch are summed in ONE binary tree keyed by the
// global example index, whatever the number of ranks and threads:
//
//   Sum([lo, hi)) = x[lo]                              if hi - lo == 1
//                 = Sum([lo, mid)) + Sum([mid, hi))     otherwise, elementwise,
//   mid = lo + (largest power of two strictly less than hi - lo).
//
// Every aligned power-of-two block [k*2^j, (k+1)*2^j) inside [0, N) is a node
// of that tree, so a rank whose shard is such a block may pre-reduce it with
// TreeReduceAlignedBlock and the combination of the shards' partial sums with
// TreeReduceInPlace (the shards as leaves) reproduces the same bits, because
// the largest power of two below R*2^j is 2^j times the largest below R.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"

namespace dgrr {

// mid for the range [lo, hi), hi - lo >= 2.
inline size_t TreeSplit(size_t lo, size_t hi) {
  size_t half = 1;
  while (half * 2 < hi - lo) half *= 2;
  return lo + half;
}

// True when [lo, hi) is a node of the canonical tree over [0, total).
bool IsCanonicalNode(size_t lo, size_t hi, size_t total);

// Elementwise canonical tree sum of buffers[0..count) (each `n` floats); the
// result lands in buffers[0], the other buffers are clobbered. Elements are
// split over `num_threads` in blocks; each element's tree is the same whatever
// the split, so the result does not depend on num_threads.
void TreeReduceInPlace(std::span<float* const> buffers, size_t n, int num_threads);

// Called for each block of elements [e0, e1) of the sum as soon as its tree
// is summed into buffers[0], while the block is still in cache, on the
// thread that summed it (blocks of different threads concurrently): a pass
// over the sum (the mean's division) without reading it back from memory.
using TreeBlockDone = std::function<void(size_t e0, size_t e1)>;

// The same sum where some two-leaf nodes were summed beforehand: a nonzero
// pair_summed[i] says buffers[i] already holds buffers[i] + buffers[i + 1]
// (left + right, the node's bits) and buffers[i + 1] is not read. Every such
// [i, i + 2) must be a node of the tree over [0, buffers.size()); the tree's
// other nodes are summed as above. pair_summed has buffers.size() entries,
// or none (nothing summed beforehand). `block_done`, when given, sees each
// finished block (above). Returns InvalidArgument, summing nothing, if a
// flagged pair is not such a node.
Status TreeReduceInPlace(std::span<float* const> buffers, size_t n, int num_threads,
                         std::span<const uint8_t> pair_summed,
                         const TreeBlockDone& block_done = nullptr);

// The same tree for the aligned block of examples [first_index, first_index +
// buffers.size()): refuses (InvalidArgument) unless the size is a power of two
// and first_index a multiple of it, i.e. unless the block is a canonical node
// of any batch that contains it.
Status TreeReduceAlignedBlock(std::span<float* const> buffers, uint64_t first_index, size_t n,
                              int num_threads);

// Canonical tree sum of scalars (per-example losses).
float TreeSum(std::span<const float> values);
double TreeSum(std::span<const double> values);

}  // namespace dgrr
