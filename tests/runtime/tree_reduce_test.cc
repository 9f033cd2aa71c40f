#include "runtime/tree_reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "rng/stream_id.h"

namespace dgrr {
namespace {

TEST(TreeReduce, SplitIsLargestPowerOfTwoBelowSize) {
  EXPECT_EQ(TreeSplit(0, 2), 1u);
  EXPECT_EQ(TreeSplit(0, 3), 2u);
  EXPECT_EQ(TreeSplit(0, 4), 2u);
  EXPECT_EQ(TreeSplit(0, 5), 4u);
  EXPECT_EQ(TreeSplit(0, 8), 4u);
  EXPECT_EQ(TreeSplit(0, 9), 8u);
  EXPECT_EQ(TreeSplit(4, 7), 6u);
}

// The tree is not left-to-right: ((1 + 1e8) + (-1e8 + 1)) rounds to 0 in
// float, while the sequential sum gives 1.
TEST(TreeReduce, ScalarSumFollowsTheTree) {
  const std::vector<float> v = {1.0f, 1e8f, -1e8f, 1.0f};
  EXPECT_EQ(TreeSum(v), 0.0f);
  float sequential = 0;
  for (float x : v) sequential += x;
  EXPECT_EQ(sequential, 1.0f);
  // Three leaves: (a + b) + c.
  const std::vector<float> w = {1e8f, -1e8f, 1.0f};
  EXPECT_EQ(TreeSum(w), 1.0f);
  EXPECT_EQ(TreeSum(std::vector<float>{}), 0.0f);
}

// Every aligned power-of-two block inside [0, N) is a node of the canonical
// tree, and nothing misaligned is.
TEST(TreeReduce, AlignedPowerOfTwoBlocksAreCanonicalNodes) {
  for (size_t total = 1; total <= 40; ++total) {
    for (size_t size = 1; size <= total; size *= 2) {
      for (size_t lo = 0; lo + size <= total; lo += size) {
        EXPECT_TRUE(IsCanonicalNode(lo, lo + size, total)) << lo << "+" << size << " of " << total;
      }
    }
    if (total >= 4) {
      EXPECT_FALSE(IsCanonicalNode(1, 3, total)) << total;
    }
  }
  EXPECT_TRUE(IsCanonicalNode(0, 6, 6));
  EXPECT_TRUE(IsCanonicalNode(4, 6, 6));
}

std::vector<std::vector<float>> RandomBuffers(size_t count, size_t n, uint64_t seed) {
  uint64_t state = seed;
  std::vector<std::vector<float>> out(count, std::vector<float>(n));
  for (auto& b : out) {
    for (float& x : b) x = static_cast<float>(static_cast<int64_t>(rng::MixSplitMix64(state += 0x9e3779b97f4a7c15ULL) >> 40) - (1 << 23)) * 1e-3f;
  }
  return out;
}

std::vector<float*> Pointers(std::vector<std::vector<float>>& buffers) {
  std::vector<float*> p;
  for (auto& b : buffers) p.push_back(b.data());
  return p;
}

TEST(TreeReduce, ElementwiseMatchesScalarTreeForAnyThreadCount) {
  const size_t count = 7, n = 10000;  // more than one element block
  const auto original = RandomBuffers(count, n, 1);
  std::vector<float> expected(n);
  for (size_t e = 0; e < n; ++e) {
    std::vector<float> column;
    for (const auto& b : original) column.push_back(b[e]);
    expected[e] = TreeSum(column);
  }
  for (int threads : {1, 2, 3}) {
    auto buffers = original;
    TreeReduceInPlace(Pointers(buffers), n, threads);
    EXPECT_EQ(0, std::memcmp(buffers[0].data(), expected.data(), n * sizeof(float))) << threads;
  }
}

// R ranks each pre-reducing an aligned shard of S = 2^j examples, then the
// shard sums combined as leaves, give the same bits as one rank over R*S.
TEST(TreeReduce, ShardPreReductionComposes) {
  const size_t n = 33;
  for (size_t shard : {1, 2, 4}) {
    for (size_t ranks : {1, 2, 3, 5, 6}) {
      const auto original = RandomBuffers(ranks * shard, n, 100 + ranks * 10 + shard);
      auto whole = original;
      TreeReduceInPlace(Pointers(whole), n, 1);
      auto pieces = original;
      auto pointers = Pointers(pieces);
      std::vector<float*> partials;
      for (size_t r = 0; r < ranks; ++r) {
        std::span<float* const> block(pointers.data() + r * shard, shard);
        ASSERT_TRUE(TreeReduceAlignedBlock(block, r * shard, n, 1).ok());
        partials.push_back(pointers[r * shard]);
      }
      TreeReduceInPlace(partials, n, 1);
      EXPECT_EQ(0, std::memcmp(whole[0].data(), partials[0], n * sizeof(float)))
          << "ranks " << ranks << " shard " << shard;
    }
  }
}

// Pairs (2j, 2j + 1) summed beforehand (left + right into the left buffer,
// the right one then garbage) and flagged: the rest of the tree gives the
// bits of the whole tree, for any count, any subset of pairs and any thread
// count; the right buffer of a flagged pair is never read.
TEST(TreeReduce, PairsSummedBeforehandGiveTheWholeTreesBits) {
  const size_t n = 5000;
  for (size_t count = 2; count <= 11; ++count) {
    const auto original = RandomBuffers(count, n, 300 + count);
    auto whole = original;
    TreeReduceInPlace(Pointers(whole), n, 1);
    for (unsigned mask = 1; mask < (1u << (count / 2)); mask += 3) {
      auto pieces = original;
      std::vector<uint8_t> flags(count, 0);
      for (size_t j = 0; j < count / 2; ++j) {
        if ((mask >> j & 1) == 0) continue;
        for (size_t e = 0; e < n; ++e) pieces[2 * j][e] = pieces[2 * j][e] + pieces[2 * j + 1][e];
        std::fill(pieces[2 * j + 1].begin(), pieces[2 * j + 1].end(), NAN);  // never to be read
        flags[2 * j] = 1;
      }
      for (int threads : {1, 2}) {
        auto run = pieces;
        ASSERT_TRUE(TreeReduceInPlace(Pointers(run), n, threads, flags).ok());
        EXPECT_EQ(0, std::memcmp(whole[0].data(), run[0].data(), n * sizeof(float)))
            << "count " << count << " pairs " << mask << " threads " << threads;
      }
    }
  }
}

// A flag on a pair that is not a node of the tree ([1, 3) of 4; the last
// buffer of an odd count), or a flag list of the wrong length, is refused
// before anything is summed.
TEST(TreeReduce, PairFlagsOffTheTreeAreRefused) {
  auto buffers = RandomBuffers(4, 3, 11);
  const auto before = buffers;
  auto pointers = Pointers(buffers);
  const std::vector<uint8_t> off_tree = {0, 1, 0, 0};
  EXPECT_TRUE(TreeReduceInPlace(pointers, 3, 1, off_tree).IsInvalidArgument());
  EXPECT_EQ(buffers, before);
  std::span<float* const> three(pointers.data(), 3);
  const std::vector<uint8_t> last = {0, 0, 1};
  EXPECT_TRUE(TreeReduceInPlace(three, 3, 1, last).IsInvalidArgument());
  const std::vector<uint8_t> short_list = {1};
  EXPECT_TRUE(TreeReduceInPlace(pointers, 3, 1, short_list).IsInvalidArgument());
  EXPECT_EQ(buffers, before);
}

// block_done sees every element once, after its tree is summed: copying the
// blocks out as they come gives the final sum, whatever the thread count,
// and a single buffer is still handed over.
TEST(TreeReduce, BlockDoneSeesEveryFinishedElementOnce) {
  const size_t n = 10000;  // three blocks, the last one partial
  for (size_t count : {1, 5}) {
    const auto original = RandomBuffers(count, n, 700 + count);
    for (int threads : {1, 3}) {
      auto run = original;
      auto pointers = Pointers(run);
      std::vector<float> copied(n, NAN);
      std::vector<int> seen(n, 0);
      ASSERT_TRUE(TreeReduceInPlace(pointers, n, threads, {}, [&](size_t e0, size_t e1) {
                    for (size_t e = e0; e < e1; ++e) copied[e] = pointers[0][e], ++seen[e];
                  }).ok());
      EXPECT_EQ(0, std::memcmp(copied.data(), run[0].data(), n * sizeof(float))) << count << " " << threads;
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
    }
  }
}

TEST(TreeReduce, AlignedBlockRejectsMisalignedShards) {
  auto buffers = RandomBuffers(4, 3, 9);
  auto pointers = Pointers(buffers);
  EXPECT_TRUE(TreeReduceAlignedBlock(pointers, 2, 3, 1).IsInvalidArgument());
  std::span<float* const> three(pointers.data(), 3);
  EXPECT_TRUE(TreeReduceAlignedBlock(three, 0, 3, 1).IsInvalidArgument());
  EXPECT_TRUE(TreeReduceAlignedBlock(pointers, 8, 3, 1).ok());
}

}  // namespace
}  // namespace dgrr
