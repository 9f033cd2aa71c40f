// Helpers shared by the replay tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "replay/mapper.h"
#include "replay/synthetic.h"

namespace dgrr::replay::testing {

// Under the sanitizers everything runs ~10x slower: scale big cases down.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// The structural promises of every Alignment: each index on each side is in
// exactly one pair or in the unmatched list, pairs are sorted by A, paired
// boundaries are pairable, anchors are strictly increasing on both sides.
inline void ExpectWellFormed(const std::vector<BoundaryItem>& a, const std::vector<BoundaryItem>& b,
                             const Alignment& alignment, bool compare_rank = true) {
  std::vector<int> seen_a(a.size(), 0), seen_b(b.size(), 0);
  for (size_t k = 0; k < alignment.pairs.size(); ++k) {
    const AlignedPair& p = alignment.pairs[k];
    ASSERT_LT(p.index_a, a.size());
    ASSERT_LT(p.index_b, b.size());
    ++seen_a[p.index_a];
    ++seen_b[p.index_b];
    EXPECT_TRUE(Pairable(a[p.index_a].key, b[p.index_b].key, compare_rank)) << "pair " << k;
    if (k > 0) {
      EXPECT_LT(alignment.pairs[k - 1].index_a, p.index_a) << "pairs not sorted by A at " << k;
    }
  }
  for (uint64_t i : alignment.unmatched_a) ++seen_a.at(i);
  for (uint64_t j : alignment.unmatched_b) ++seen_b.at(j);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(seen_a[i], 1) << "A index " << i;
  for (size_t j = 0; j < b.size(); ++j) ASSERT_EQ(seen_b[j], 1) << "B index " << j;
  for (size_t k = 1; k < alignment.anchors.size(); ++k) {
    EXPECT_LT(alignment.anchors[k - 1].first, alignment.anchors[k].first) << "anchor " << k;
    EXPECT_LT(alignment.anchors[k - 1].second, alignment.anchors[k].second) << "anchor " << k;
  }
  EXPECT_EQ(alignment.stats.length_a, a.size());
  EXPECT_EQ(alignment.stats.length_b, b.size());
  EXPECT_EQ(alignment.why_a.size(), alignment.unmatched_a.size());
  EXPECT_EQ(alignment.why_b.size(), alignment.unmatched_b.size());
}

// Every pair joins a B boundary to the A boundary it was made from.
inline uint64_t CountWrongPairs(const SyntheticPair& pair, const Alignment& alignment) {
  uint64_t wrong = 0;
  for (const AlignedPair& p : alignment.pairs) {
    if (pair.origin_of_b[p.index_b] != p.index_a) ++wrong;
  }
  return wrong;
}

// B boundaries that came from A: the number of pairs a perfect mapper finds.
inline uint64_t CountFromA(const SyntheticPair& pair) {
  uint64_t n = 0;
  for (uint64_t o : pair.origin_of_b) n += (o != kNotFromA);
  return n;
}

}  // namespace dgrr::replay::testing
