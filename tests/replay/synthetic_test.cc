#include "replay/synthetic.h"

#include <gtest/gtest.h>

#include <set>

namespace dgrr::replay {
namespace {

SyntheticOptions Busy() {
  SyntheticOptions options;
  options.length = 5000;
  options.boundaries_per_step = 100;
  options.reorder_fraction = 0.05;
  options.insert_fraction = 0.02;
  options.delete_fraction = 0.01;
  options.fusions = 10;
  options.divergence_at = 2500;
  options.seed = 3;
  return options;
}

TEST(SyntheticTest, SameSeedSamePair) {
  const SyntheticPair x = MakeSyntheticPair(Busy());
  const SyntheticPair y = MakeSyntheticPair(Busy());
  ASSERT_EQ(x.b.size(), y.b.size());
  for (size_t j = 0; j < x.b.size(); ++j) {
    EXPECT_EQ(x.origin_of_b[j], y.origin_of_b[j]);
    EXPECT_EQ(x.b[j].xor64, y.b[j].xor64);
    EXPECT_EQ(x.b[j].key.name_hash, y.b[j].key.name_hash);
  }
  SyntheticOptions other = Busy();
  other.seed = 4;
  EXPECT_NE(MakeSyntheticPair(other).origin_of_b, x.origin_of_b);
}

TEST(SyntheticTest, CountsAndOriginsAreConsistent) {
  const SyntheticPair pair = MakeSyntheticPair(Busy());
  EXPECT_EQ(pair.a.size(), 5000u);
  EXPECT_EQ(pair.b.size(), pair.a.size() - pair.deleted + pair.inserted);
  EXPECT_GT(pair.swaps, 100u);
  std::set<uint64_t> seen;
  uint64_t not_from_a = 0;
  for (size_t j = 0; j < pair.b.size(); ++j) {
    const uint64_t o = pair.origin_of_b[j];
    EXPECT_EQ(pair.b[j].record_index, j);
    if (o == kNotFromA) {
      ++not_from_a;
      continue;
    }
    EXPECT_TRUE(seen.insert(o).second) << "A " << o << " twice in B";
    EXPECT_EQ(pair.b[j].key.name_hash, pair.a[o].key.name_hash);
    const bool planted = o == 2500;
    EXPECT_EQ(pair.b[j].xxh3 != pair.a[o].xxh3, planted) << o;
  }
  EXPECT_EQ(not_from_a, pair.inserted);
  EXPECT_EQ(seen.size(), pair.a.size() - pair.deleted);
  ASSERT_TRUE(pair.divergence_b.has_value());
  EXPECT_EQ(pair.origin_of_b[*pair.divergence_b], 2500u);
}

TEST(SyntheticTest, KeysOfAAreUniqueUnlessAskedToRepeat) {
  SyntheticOptions options;
  options.length = 3000;
  options.boundaries_per_step = 300;
  std::set<uint64_t> digests;
  for (uint64_t i = 0; i < options.length; ++i) {
    digests.insert(KeyDigest(SyntheticBoundary(options, i).key, true));
  }
  EXPECT_EQ(digests.size(), options.length);
  options.repeated_key_every = 10;
  digests.clear();
  for (uint64_t i = 0; i < options.length; ++i) {
    digests.insert(KeyDigest(SyntheticBoundary(options, i).key, true));
  }
  // Per step: 270 unique keys plus the repeated one, once among the
  // forward and once among the backward boundaries (phase is in the key).
  EXPECT_EQ(digests.size(), 10u * (270 + 2));
}

}  // namespace
}  // namespace dgrr::replay
