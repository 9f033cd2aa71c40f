#include "runtime/canonical_reduce.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/parallel.h"
#include "runtime/tree_reduce.h"

namespace dgrr {
namespace {

// What each rank says about its call before any payload moves, so that every
// rank reaches the same verdict from the same facts.
struct ShardClaim {
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t total = 0;
  uint64_t n = 0;
  uint64_t local_ok = 1;  // 0: this rank's own arguments are unusable
};
static_assert(sizeof(ShardClaim) == 40);

// The layout every rank agrees on once the claims check out.
struct Layout {
  std::vector<uint64_t> starts, counts;  // per rank
  uint64_t total = 0;
};

Status CheckClaims(const std::vector<ShardClaim>& claims, const char* what, Layout* layout) {
  const ShardClaim& first_claim = claims[0];
  uint64_t cursor = 0;
  for (size_t r = 0; r < claims.size(); ++r) {
    const ShardClaim& c = claims[r];
    const std::string who = std::string(what) + ": rank " + std::to_string(r);
    if (c.local_ok == 0) return Status::InvalidArgument(who + " was called with null buffers");
    if (c.total != first_claim.total || c.n != first_claim.n) {
      return Status::InvalidArgument(who + " has a batch of " + std::to_string(c.total) + " examples of " +
                                     std::to_string(c.n) + " values, rank 0 " + std::to_string(first_claim.total) +
                                     " of " + std::to_string(first_claim.n));
    }
    if (c.count > 0 && c.first != cursor) {
      return Status::InvalidArgument(who + " holds examples [" + std::to_string(c.first) + ", " +
                                     std::to_string(c.first + c.count) + "), expected its shard to start at " +
                                     std::to_string(cursor) + " (shards must tile the batch in rank order)");
    }
    if (c.count > first_claim.total - cursor) {
      return Status::InvalidArgument(who + "'s shard ends past the batch of " + std::to_string(first_claim.total) +
                                     " examples");
    }
    layout->starts.push_back(cursor);
    layout->counts.push_back(c.count);
    cursor += c.count;
  }
  if (first_claim.total == 0) return Status::InvalidArgument(std::string(what) + ": empty batch");
  if (cursor != first_claim.total) {
    return Status::InvalidArgument(std::string(what) + ": the shards cover " + std::to_string(cursor) +
                                   " of the batch's " + std::to_string(first_claim.total) + " examples");
  }
  layout->total = first_claim.total;
  return Status::OK();
}

Status ExchangeClaims(Communicator& comm, const ShardClaim& mine, const char* what, Layout* layout) {
  std::vector<ShardClaim> claims(static_cast<size_t>(comm.size()));
  DGRR_RETURN_IF_ERROR(comm.AllGather(&mine, sizeof(mine), claims.data()));
  return CheckClaims(claims, what, layout);
}

void CollectNodes(std::span<const uint64_t> starts, std::span<const uint64_t> counts, uint64_t lo, uint64_t hi,
                  std::vector<ShardNode>* nodes) {
  // The shard holding example lo: the last non-empty shard starting at or before it.
  int owner = -1;
  for (size_t r = 0; r < starts.size(); ++r) {
    if (counts[r] > 0 && starts[r] <= lo) owner = static_cast<int>(r);
  }
  const size_t o = static_cast<size_t>(owner);
  if (hi <= starts[o] + counts[o]) {
    nodes->push_back({lo, hi, owner});
    return;
  }
  const uint64_t mid = TreeSplit(lo, hi);
  CollectNodes(starts, counts, lo, mid, nodes);
  CollectNodes(starts, counts, mid, hi, nodes);
}

// Rank d's slice of n values: [SliceBegin(d), SliceBegin(d + 1)).
size_t SliceBegin(size_t n, size_t ranks, size_t d) { return (n / ranks) * d + std::min(d, n % ranks); }

// The canonical tree over [lo, hi) on elements [e0, e1), with the node sums
// as leaves; `next` walks the nodes in example order. The sum lands in the
// leftmost leaf, exactly as TreeReduceInPlace's ReduceRange leaves it.
float* CombineNodes(std::span<const ShardNode> nodes, std::span<float* const> sums, size_t* next, uint64_t lo,
                    uint64_t hi, size_t e0, size_t e1) {
  if (nodes[*next].lo == lo && nodes[*next].hi == hi) return sums[(*next)++];
  const uint64_t mid = TreeSplit(lo, hi);
  float* left = CombineNodes(nodes, sums, next, lo, mid, e0, e1);
  const float* right = CombineNodes(nodes, sums, next, mid, hi, e0, e1);
  for (size_t e = e0; e < e1; ++e) left[e] += right[e];
  return left;
}

}  // namespace

std::vector<ShardNode> MaximalShardNodes(std::span<const uint64_t> starts, std::span<const uint64_t> counts,
                                         uint64_t total) {
  std::vector<ShardNode> nodes;
  if (total > 0) CollectNodes(starts, counts, 0, total, &nodes);
  return nodes;
}

Status CanonicalAllReduce(Communicator& comm, std::span<float* const> shard, uint64_t first, uint64_t total,
                          size_t n, float* out, int num_threads, const NodeReducer& reduce_node) {
  ShardClaim mine{first, shard.size(), total, n, 1};
  if (n > 0 && (out == nullptr || std::any_of(shard.begin(), shard.end(), [](float* p) { return !p; }))) {
    mine.local_ok = 0;
  }
  Layout layout;
  DGRR_RETURN_IF_ERROR(ExchangeClaims(comm, mine, "CanonicalAllReduce", &layout));

  const std::vector<ShardNode> nodes = MaximalShardNodes(layout.starts, layout.counts, total);
  const size_t ranks = static_cast<size_t>(comm.size());
  const int me = comm.rank();
  std::vector<size_t> nodes_of(ranks, 0);
  for (const ShardNode& node : nodes) ++nodes_of[static_cast<size_t>(node.rank)];

  // One rank holds the whole batch, the tree's root: nothing to exchange, so
  // no packing and no second copy (the common single-rank training case).
  // A node's sum: the host tree, leaving it in the node's first buffer, or
  // the caller's reducer.
  auto reduce = [&](size_t begin, size_t count) -> StatusOr<const float*> {
    if (reduce_node) return reduce_node(begin, count);
    auto buffers = shard.subspan(begin, count);
    TreeReduceInPlace(buffers, n, num_threads);
    return static_cast<const float*>(buffers[0]);
  };
  if (comm.size() == 1) {
    if (n == 0) return Status::OK();
    DGRR_ASSIGN_OR_RETURN(const float* sum, reduce(0, shard.size()));
    std::memcpy(out, sum, n * sizeof(float));
    return Status::OK();
  }

  // 1. Each of my nodes, reduced locally.
  std::vector<const float*> my_sums;
  for (const ShardNode& node : nodes) {
    if (node.rank != me) continue;
    DGRR_ASSIGN_OR_RETURN(const float* sum, reduce(node.lo - first, node.hi - node.lo));
    my_sums.push_back(sum);
  }

  // 2. Rank d receives slice d of every node, in example order (ranks' shards
  // are in rank order, so concatenating by source keeps node order).
  auto slice_len = [&](size_t d) { return SliceBegin(n, ranks, d + 1) - SliceBegin(n, ranks, d); };
  std::vector<size_t> send_counts(ranks), send_offsets(ranks), recv_counts(ranks), recv_offsets(ranks);
  size_t send_bytes = 0, recv_bytes = 0;
  const size_t my_slice = slice_len(static_cast<size_t>(me));
  for (size_t d = 0; d < ranks; ++d) {
    send_offsets[d] = send_bytes;
    send_counts[d] = my_sums.size() * slice_len(d) * sizeof(float);
    send_bytes += send_counts[d];
    recv_offsets[d] = recv_bytes;
    recv_counts[d] = nodes_of[d] * my_slice * sizeof(float);
    recv_bytes += recv_counts[d];
  }
  std::vector<float> send(send_bytes / sizeof(float));
  for (size_t d = 0; d < ranks; ++d) {
    float* to = send.data() + send_offsets[d] / sizeof(float);
    const size_t begin = SliceBegin(n, ranks, d), len = slice_len(d);
    for (const float* sum : my_sums) {
      if (len > 0) std::memcpy(to, sum + begin, len * sizeof(float));
      to += len;
    }
  }
  std::vector<float> recv(recv_bytes / sizeof(float));
  DGRR_RETURN_IF_ERROR(
      comm.AllToAllV(send.data(), send_counts, send_offsets, recv.data(), recv_counts, recv_offsets));

  // 3. The tree over [0, total) on my slice, node sums as leaves.
  std::vector<float*> leaves(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) leaves[k] = recv.data() + k * my_slice;
  constexpr size_t kBlock = 4096;
  const size_t blocks = (my_slice + kBlock - 1) / kBlock;
  ParallelFor(blocks, num_threads, [&](size_t b, int) {
    size_t next = 0;
    CombineNodes(nodes, leaves, &next, 0, total, b * kBlock, std::min(my_slice, (b + 1) * kBlock));
  });

  // 4. Every rank's slice, concatenated in rank order, is the whole sum.
  std::vector<size_t> gather_counts(ranks);
  for (size_t d = 0; d < ranks; ++d) gather_counts[d] = slice_len(d) * sizeof(float);
  return comm.AllGatherV(leaves.empty() ? nullptr : leaves[0], gather_counts, out);
}

Status GatherExampleScalars(Communicator& comm, std::span<const float> shard, uint64_t first, uint64_t total,
                            std::vector<float>* all) {
  ShardClaim mine{first, shard.size(), total, 1, all != nullptr ? 1u : 0u};
  Layout layout;
  DGRR_RETURN_IF_ERROR(ExchangeClaims(comm, mine, "GatherExampleScalars", &layout));
  all->assign(total, 0.0f);
  std::vector<size_t> counts(layout.counts.size());
  for (size_t r = 0; r < counts.size(); ++r) counts[r] = layout.counts[r] * sizeof(float);
  return comm.AllGatherV(shard.data(), counts, all->data());
}

}  // namespace dgrr
