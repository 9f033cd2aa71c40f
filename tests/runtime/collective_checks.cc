#include "tests/runtime/collective_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "runtime/canonical_reduce.h"
#include "runtime/tree_reduce.h"

namespace dgrr::testing_collectives {
namespace {

// A byte that names (sender, receiver, position).
uint8_t Byte(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i * 3 + 1); }

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string Where(const Communicator& c) { return "rank " + std::to_string(c.rank()) + ": "; }

}  // namespace

Status CheckBroadcast(Communicator& c) {
  for (int root = 0; root < c.size(); ++root) {
    std::vector<uint8_t> data(37);
    for (size_t i = 0; i < data.size(); ++i) data[i] = Byte(c.rank(), 0, i);
    DGRR_RETURN_IF_ERROR(c.Broadcast(data.data(), data.size(), root));
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != Byte(root, 0, i)) return Status::Internal(Where(c) + "Broadcast byte " + std::to_string(i));
    }
  }
  return Status::OK();
}

Status CheckAllGathers(Communicator& c) {
  const int size = c.size();
  std::vector<uint8_t> mine(16);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = Byte(c.rank(), 0, i);
  std::vector<uint8_t> all(16 * static_cast<size_t>(size));
  DGRR_RETURN_IF_ERROR(c.AllGather(mine.data(), mine.size(), all.data()));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < 16; ++i) {
      if (all[static_cast<size_t>(r) * 16 + i] != Byte(r, 0, i)) return Status::Internal(Where(c) + "AllGather");
    }
  }
  // Rank r contributes 3r bytes (rank 0 none).
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) counts[static_cast<size_t>(r)] = 3 * static_cast<size_t>(r);
  std::vector<uint8_t> v(counts[static_cast<size_t>(c.rank())]);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Byte(c.rank(), 1, i);
  std::vector<uint8_t> gathered(std::accumulate(counts.begin(), counts.end(), size_t{0}));
  DGRR_RETURN_IF_ERROR(c.AllGatherV(v.data(), counts, gathered.data()));
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
      if (gathered[at++] != Byte(r, 1, i)) return Status::Internal(Where(c) + "AllGatherV");
    }
  }
  return Status::OK();
}

Status CheckAllToAllV(Communicator& c) {
  const int size = c.size(), me = c.rank();
  // Rank s sends (s + d) % 3 + 1 bytes to rank d; layouts in reverse rank
  // order with gaps, so offsets matter.
  auto count = [](int s, int d) { return static_cast<size_t>((s + d) % 3 + 1); };
  const size_t n = static_cast<size_t>(size);
  std::vector<size_t> send_counts(n), send_offsets(n), recv_counts(n), recv_offsets(n);
  size_t send_bytes = 0, recv_bytes = 0;
  for (int d = size - 1; d >= 0; --d) {
    const size_t u = static_cast<size_t>(d);
    send_counts[u] = count(me, d);
    send_offsets[u] = send_bytes + 1;
    send_bytes += count(me, d) + 1;
    recv_counts[u] = count(d, me);
    recv_offsets[u] = recv_bytes + 2;
    recv_bytes += count(d, me) + 2;
  }
  std::vector<uint8_t> send(send_bytes, 0), recv(recv_bytes, 0xEE);
  for (int d = 0; d < size; ++d) {
    for (size_t i = 0; i < count(me, d); ++i) send[send_offsets[static_cast<size_t>(d)] + i] = Byte(me, d, i);
  }
  DGRR_RETURN_IF_ERROR(c.AllToAllV(send.data(), send_counts, send_offsets, recv.data(), recv_counts, recv_offsets));
  for (int s = 0; s < size; ++s) {
    const size_t at = recv_offsets[static_cast<size_t>(s)];
    for (size_t i = 0; i < count(s, me); ++i) {
      if (recv[at + i] != Byte(s, me, i)) return Status::Internal(Where(c) + "AllToAllV from rank " + std::to_string(s));
    }
    if (recv[at - 1] != 0xEE) return Status::Internal(Where(c) + "AllToAllV wrote outside the receive span");
  }
  return Status::OK();
}

Status CheckRepeatedRounds(Communicator& c) {
  const int size = c.size();
  for (uint32_t round = 0; round < 200; ++round) {
    const uint32_t mine = round * 100 + static_cast<uint32_t>(c.rank());
    std::vector<uint32_t> all(static_cast<size_t>(size));
    DGRR_RETURN_IF_ERROR(c.AllGather(&mine, sizeof mine, all.data()));
    for (int r = 0; r < size; ++r) {
      if (all[static_cast<size_t>(r)] != round * 100 + static_cast<uint32_t>(r)) {
        return Status::Internal(Where(c) + "round " + std::to_string(round));
      }
    }
  }
  return c.Barrier();
}

std::vector<uint64_t> ShardCounts(uint64_t total, int ranks, Cut cut) {
  const size_t r = static_cast<size_t>(ranks);
  std::vector<uint64_t> counts(r, 0);
  switch (cut) {
    case Cut::kEven:
      for (size_t i = 0; i < r; ++i) counts[i] = total / r + (i < total % r ? 1 : 0);
      break;
    case Cut::kAllOnLastRank:
      counts[r - 1] = total;
      break;
    case Cut::kFirstRankOne:
      counts[0] = std::min<uint64_t>(total, 1);
      for (size_t i = 1; i < r; ++i) counts[i] = (total - counts[0]) / (r - 1) + (i == 1 ? (total - counts[0]) % (r - 1) : 0);
      if (r == 1) counts[0] = total;
      break;
    case Cut::kUneven: {
      // Random cut points (some equal: empty shards), the same on every rank.
      std::vector<uint64_t> cuts(r + 1, 0);
      cuts[r] = total;
      for (size_t i = 1; i < r; ++i) cuts[i] = Mix(total * 131 + r * 17 + i) % (total + 1);
      std::sort(cuts.begin() + 1, cuts.end() - 1);
      for (size_t i = 0; i < r; ++i) counts[i] = cuts[i + 1] - cuts[i];
      break;
    }
  }
  return counts;
}

float ExampleValue(uint64_t example, size_t element) {
  const uint64_t h = Mix(example * 1000003 + element);
  const float mantissa = 1.0f + static_cast<float>(h & 0xFFFFF) / static_cast<float>(1 << 20);
  const int exponent = static_cast<int>((h >> 20) % 49) - 24;
  const float sign = (h >> 40) & 1 ? -1.0f : 1.0f;
  return sign * std::ldexp(mantissa, exponent);
}

namespace {

struct Shard {
  uint64_t first = 0, count = 0;
};
Shard MyShard(const Communicator& c, uint64_t total, Cut cut) {
  const auto counts = ShardCounts(total, c.size(), cut);
  Shard s;
  for (int r = 0; r < c.rank(); ++r) s.first += counts[static_cast<size_t>(r)];
  s.count = counts[static_cast<size_t>(c.rank())];
  return s;
}

std::string Case(const Communicator& c, uint64_t total, Cut cut, size_t n, int threads) {
  return Where(c) + "total " + std::to_string(total) + ", cut " + std::to_string(static_cast<int>(cut)) + ", n " +
         std::to_string(n) + ", threads " + std::to_string(threads) + ": ";
}

}  // namespace

Status CheckCanonicalAllReduce(Communicator& c, uint64_t total, Cut cut, size_t n, int threads,
                               bool node_reducer) {
  // What one process gives over the whole batch.
  std::vector<std::vector<float>> all(total, std::vector<float>(n));
  std::vector<float*> all_ptrs;
  for (uint64_t i = 0; i < total; ++i) {
    for (size_t e = 0; e < n; ++e) all[i][e] = ExampleValue(i, e);
    all_ptrs.push_back(all[i].data());
  }
  TreeReduceInPlace(all_ptrs, n, 1);
  const std::vector<float> expected = total > 0 ? all[0] : std::vector<float>(n, 0.0f);

  const Shard shard = MyShard(c, total, cut);
  std::vector<std::vector<float>> mine(shard.count, std::vector<float>(n));
  std::vector<float*> mine_ptrs;
  for (uint64_t i = 0; i < shard.count; ++i) {
    for (size_t e = 0; e < n; ++e) mine[i][e] = ExampleValue(shard.first + i, e);
    mine_ptrs.push_back(mine[i].data());
  }
  std::vector<float> out(n, std::nanf(""));
  // The reducer's own sums, and the nodes it was asked for.
  std::vector<std::vector<float>> sums;
  std::vector<ShardNode> asked;
  NodeReducer reducer;
  if (node_reducer) {
    sums.reserve(shard.count);
    reducer = [&](size_t begin, size_t count) -> StatusOr<const float*> {
      asked.push_back({shard.first + begin, shard.first + begin + count, c.rank()});
      std::vector<std::vector<float>> copy(mine.begin() + static_cast<std::ptrdiff_t>(begin),
                                           mine.begin() + static_cast<std::ptrdiff_t>(begin + count));
      std::vector<float*> ptrs;
      for (auto& b : copy) ptrs.push_back(b.data());
      TreeReduceInPlace(ptrs, n, 1);
      sums.push_back(copy[0]);
      return static_cast<const float*>(sums.back().data());
    };
  }
  DGRR_RETURN_IF_ERROR(CanonicalAllReduce(c, mine_ptrs, shard.first, total, n, out.data(), threads, reducer));
  if (node_reducer) {
    const auto counts = ShardCounts(total, c.size(), cut);
    std::vector<uint64_t> starts;
    uint64_t at = 0;
    for (uint64_t count : counts) starts.push_back(std::exchange(at, at + count));
    std::vector<ShardNode> want;
    for (const ShardNode& node : MaximalShardNodes(starts, counts, total)) {
      if (node.rank == c.rank()) want.push_back(node);
    }
    bool same = want.size() == asked.size();
    for (size_t k = 0; same && k < want.size(); ++k) same = want[k].lo == asked[k].lo && want[k].hi == asked[k].hi;
    if (!same) {
      return Status::Internal(Case(c, total, cut, n, threads) + "the reducer was asked for " +
                              std::to_string(asked.size()) + " nodes, this rank has " + std::to_string(want.size()));
    }
    for (uint64_t i = 0; i < shard.count; ++i) {
      for (size_t e = 0; e < n; ++e) {
        const float original = ExampleValue(shard.first + i, e);
        if (std::memcmp(&mine[i][e], &original, sizeof(float)) != 0) {
          return Status::Internal(Case(c, total, cut, n, threads) + "example " + std::to_string(shard.first + i) +
                                  "'s buffer was written although a reducer was given");
        }
      }
    }
  }
  if (std::memcmp(out.data(), expected.data(), n * sizeof(float)) != 0) {
    for (size_t e = 0; e < n; ++e) {
      if (std::memcmp(&out[e], &expected[e], sizeof(float)) != 0) {
        return Status::Internal(Case(c, total, cut, n, threads) + "element " + std::to_string(e) + " is " +
                                std::to_string(out[e]) + ", the one-process tree gives " +
                                std::to_string(expected[e]));
      }
    }
  }
  return Status::OK();
}

Status CheckGatherExampleScalars(Communicator& c, uint64_t total, Cut cut) {
  const Shard shard = MyShard(c, total, cut);
  std::vector<float> mine(shard.count);
  for (uint64_t i = 0; i < shard.count; ++i) mine[i] = ExampleValue(shard.first + i, 0);
  std::vector<float> all;
  DGRR_RETURN_IF_ERROR(GatherExampleScalars(c, mine, shard.first, total, &all));
  if (all.size() != total) return Status::Internal(Case(c, total, cut, 1, 1) + "wrong size");
  for (uint64_t i = 0; i < total; ++i) {
    if (all[i] != ExampleValue(i, 0)) return Status::Internal(Case(c, total, cut, 1, 1) + "example " + std::to_string(i));
  }
  return Status::OK();
}

Status CheckBadShardsRefused(Communicator& c) {
  const size_t n = 5;
  const uint64_t total = 4 * static_cast<uint64_t>(c.size());
  std::vector<std::vector<float>> mine(4, std::vector<float>(n, 1.0f));
  std::vector<float*> ptrs;
  for (auto& b : mine) ptrs.push_back(b.data());
  std::vector<float> out(n);
  // Rank 1 claims rank 0's examples: an overlap, and a gap at the end.
  const uint64_t first = c.rank() == 1 ? 0 : 4 * static_cast<uint64_t>(c.rank());
  Status s = CanonicalAllReduce(c, ptrs, first, total, n, out.data(), 1);
  if (s.code() != StatusCode::kInvalidArgument || s.message().find("rank 1") == std::string::npos) {
    return Status::Internal(Where(c) + "overlapping shards gave: " + s.ToString());
  }
  // The ranks disagree on the batch size.
  s = CanonicalAllReduce(c, ptrs, 4 * static_cast<uint64_t>(c.rank()), total + (c.rank() == 1 ? 1 : 0), n,
                         out.data(), 1);
  if (s.code() != StatusCode::kInvalidArgument) {
    return Status::Internal(Where(c) + "disagreeing totals gave: " + s.ToString());
  }
  // Shards that do not reach the end of the batch.
  std::vector<float> scalars(4, 0.0f), all;
  s = GatherExampleScalars(c, scalars, 4 * static_cast<uint64_t>(c.rank()), total + 1, &all);
  if (s.code() != StatusCode::kInvalidArgument) {
    return Status::Internal(Where(c) + "a gap at the end gave: " + s.ToString());
  }
  // The communicator is still usable afterwards: a refusal is not an abort.
  return c.Barrier();
}

}  // namespace dgrr::testing_collectives
