// The canonical reduction over in-process ranks: bitwise the one-process
// tree for 1 to 5 ranks, batches of 1 to 40 examples cut evenly, unevenly,
// with empty shards, on 1 and 3 threads; shards that do not tile the batch
// are refused on every rank.
#include "runtime/canonical_reduce.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/inprocess_communicator.h"
#include "runtime/tree_reduce.h"
#include "tests/runtime/collective_checks.h"

namespace dgrr {
namespace {

using namespace testing_collectives;

// The values are such that the order matters: summed left to right, a batch
// gives other bits than the canonical tree, so a reduction that merely
// "adds everything" would fail the checks below.
TEST(CanonicalReduce, TheTestValuesDependOnSummationOrder) {
  const size_t n = 64;
  int differing_batches = 0;
  // (Three leaves are summed (a + b) + c by both, so batches start at 4.)
  for (uint64_t total = 4; total <= 40; ++total) {
    std::vector<std::vector<float>> bufs(total, std::vector<float>(n));
    std::vector<float*> ptrs;
    for (uint64_t i = 0; i < total; ++i) {
      for (size_t e = 0; e < n; ++e) bufs[i][e] = ExampleValue(i, e);
      ptrs.push_back(bufs[i].data());
    }
    std::vector<float> sequential(n, 0.0f);
    for (uint64_t i = 0; i < total; ++i) {
      for (size_t e = 0; e < n; ++e) sequential[e] += bufs[i][e];
    }
    TreeReduceInPlace(ptrs, n, 1);
    if (std::memcmp(sequential.data(), bufs[0].data(), n * sizeof(float)) != 0) ++differing_batches;
  }
  EXPECT_EQ(differing_batches, 40 - 4 + 1);
}

TEST(CanonicalReduce, MaximalNodesAreCanonicalAndTileTheBatch) {
  for (uint64_t total = 1; total <= 40; ++total) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      for (Cut cut : kAllCuts) {
        const auto counts = ShardCounts(total, ranks, cut);
        std::vector<uint64_t> starts;
        uint64_t at = 0;
        for (uint64_t c : counts) {
          starts.push_back(at);
          at += c;
        }
        ASSERT_EQ(at, total);
        uint64_t cursor = 0;
        for (const ShardNode& node : MaximalShardNodes(starts, counts, total)) {
          EXPECT_EQ(node.lo, cursor);
          EXPECT_TRUE(IsCanonicalNode(node.lo, node.hi, total)) << node.lo << ".." << node.hi << " of " << total;
          const size_t r = static_cast<size_t>(node.rank);
          EXPECT_GE(node.lo, starts[r]);
          EXPECT_LE(node.hi, starts[r] + counts[r]);
          cursor = node.hi;
        }
        EXPECT_EQ(cursor, total);
      }
    }
  }
}

class CanonicalReduceRanks : public ::testing::TestWithParam<int> {};

TEST_P(CanonicalReduceRanks, BitwiseTheOneProcessTree) {
  const int ranks = GetParam();
  for (int threads : {1, 3}) {
    for (size_t n : {size_t{3}, size_t{37}, size_t{9000}}) {
      for (uint64_t total = 1; total <= 40; ++total) {
        if (n == 9000 && total % 7 != 0) continue;  // the large case crosses the 4096-element blocks
        for (Cut cut : kAllCuts) {
          auto results = OnEveryRank(ranks, [&](Communicator& c) { return CheckCanonicalAllReduce(c, total, cut, n, threads); });
          for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();
        }
      }
    }
  }
}

// A device sums its nodes itself (model::BatchGradients::ReduceNode): the
// library asks for each of the rank's maximal nodes once, uses the sums it is
// handed, and leaves the shard's buffers alone.
TEST_P(CanonicalReduceRanks, ANodeReducerIsAskedForEachNodeOnceAndItsSumsAreUsed) {
  const int ranks = GetParam();
  for (size_t n : {size_t{3}, size_t{37}}) {
    for (uint64_t total = 1; total <= 40; ++total) {
      for (Cut cut : kAllCuts) {
        auto results = OnEveryRank(ranks, [&](Communicator& c) {
          return CheckCanonicalAllReduce(c, total, cut, n, /*threads=*/2, /*node_reducer=*/true);
        });
        for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();
      }
    }
  }
}

TEST_P(CanonicalReduceRanks, GatherExampleScalarsInExampleOrder) {
  const int ranks = GetParam();
  for (uint64_t total = 1; total <= 40; ++total) {
    for (Cut cut : kAllCuts) {
      auto results = OnEveryRank(ranks, [&](Communicator& c) { return CheckGatherExampleScalars(c, total, cut); });
      for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CanonicalReduceRanks, ::testing::Values(1, 2, 3, 4, 5));

TEST(CanonicalReduce, ShardsThatDoNotTileAreRefusedOnEveryRank) {
  for (int ranks : {2, 3}) {
    auto results = OnEveryRank(ranks, CheckBadShardsRefused);
    for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

}  // namespace
}  // namespace dgrr
