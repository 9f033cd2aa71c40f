#include "runtime/tree_reduce.h"

#include <algorithm>
#include <string>

#include "base/parallel.h"

namespace dgrr {
namespace {

// Sum of buffers[lo..hi) over elements [e0, e1), left in buffers[lo]; a
// two-leaf node flagged in pair_summed (empty: none) is already summed.
void ReduceRange(std::span<float* const> buffers, size_t lo, size_t hi, size_t e0, size_t e1,
                 std::span<const uint8_t> pair_summed) {
  if (hi - lo == 1) return;
  if (hi - lo == 2 && !pair_summed.empty() && pair_summed[lo] != 0) return;
  const size_t mid = TreeSplit(lo, hi);
  ReduceRange(buffers, lo, mid, e0, e1, pair_summed);
  ReduceRange(buffers, mid, hi, e0, e1, pair_summed);
  float* left = buffers[lo];
  const float* right = buffers[mid];
  for (size_t e = e0; e < e1; ++e) left[e] += right[e];
}

template <typename S>
S ScalarTree(std::span<const S> v, size_t lo, size_t hi) {
  if (hi - lo == 1) return v[lo];
  const size_t mid = TreeSplit(lo, hi);
  return ScalarTree(v, lo, mid) + ScalarTree(v, mid, hi);
}

}  // namespace

bool IsCanonicalNode(size_t lo, size_t hi, size_t total) {
  size_t node_lo = 0, node_hi = total;
  while (node_lo < node_hi) {
    if (node_lo == lo && node_hi == hi) return true;
    if (node_hi - node_lo == 1) return false;
    const size_t mid = TreeSplit(node_lo, node_hi);
    if (hi <= mid) {
      node_hi = mid;
    } else if (lo >= mid) {
      node_lo = mid;
    } else {
      return false;
    }
  }
  return false;
}

void TreeReduceInPlace(std::span<float* const> buffers, size_t n, int num_threads) {
  (void)TreeReduceInPlace(buffers, n, num_threads, {});
}

Status TreeReduceInPlace(std::span<float* const> buffers, size_t n, int num_threads,
                         std::span<const uint8_t> pair_summed, const TreeBlockDone& block_done) {
  if (!pair_summed.empty()) {
    if (pair_summed.size() != buffers.size()) {
      return Status::InvalidArgument("tree reduce: " + std::to_string(pair_summed.size()) +
                                     " pair flags for " + std::to_string(buffers.size()) + " buffers");
    }
    for (size_t i = 0; i < pair_summed.size(); ++i) {
      if (pair_summed[i] != 0 && !IsCanonicalNode(i, i + 2, buffers.size())) {
        return Status::InvalidArgument("tree reduce: buffers [" + std::to_string(i) + ", " +
                                       std::to_string(i + 2) + ") were summed as a pair but are not a node of the tree over " +
                                       std::to_string(buffers.size()));
      }
    }
  }
  if (buffers.empty() || n == 0) return Status::OK();
  // Blocks of elements small enough that one block of every buffer stays in cache.
  constexpr size_t kBlock = 4096;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  if (buffers.size() == 1 && !block_done) return Status::OK();
  ParallelFor(blocks, num_threads, [&](size_t b, int) {
    const size_t e0 = b * kBlock, e1 = std::min(n, (b + 1) * kBlock);
    ReduceRange(buffers, 0, buffers.size(), e0, e1, pair_summed);
    if (block_done) block_done(e0, e1);
  });
  return Status::OK();
}

Status TreeReduceAlignedBlock(std::span<float* const> buffers, uint64_t first_index, size_t n,
                              int num_threads) {
  const size_t size = buffers.size();
  if (size == 0 || (size & (size - 1)) != 0 || first_index % size != 0) {
    return Status::InvalidArgument("tree reduce: block [" + std::to_string(first_index) + ", " +
                                   std::to_string(first_index + size) +
                                   ") is not an aligned power-of-two block of examples");
  }
  TreeReduceInPlace(buffers, n, num_threads);
  return Status::OK();
}

float TreeSum(std::span<const float> values) {
  return values.empty() ? 0.0f : ScalarTree(values, 0, values.size());
}
double TreeSum(std::span<const double> values) {
  return values.empty() ? 0.0 : ScalarTree(values, 0, values.size());
}

}  // namespace dgrr
