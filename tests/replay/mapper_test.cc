#include "replay/mapper.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "replay/certify.h"
#include "replay/synthetic.h"
#include "tests/replay/replay_test_util.h"

namespace dgrr::replay {
namespace {

using testing::CountFromA;
using testing::CountWrongPairs;
using testing::ExpectWellFormed;

SyntheticOptions Small(uint64_t length = 20000) {
  SyntheticOptions options;
  options.length = length;
  options.boundaries_per_step = 200;
  options.seed = 7;
  return options;
}

TEST(MapperTest, IdenticalSequencesTakeTheLockstepPath) {
  const SyntheticPair pair = MakeSyntheticPair(Small(5000));
  ASSERT_EQ(pair.a.size(), pair.b.size());
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  EXPECT_TRUE(alignment.stats.lockstep);
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  EXPECT_DOUBLE_EQ(alignment.stats.unmatched_fraction, 0.0);
  EXPECT_DOUBLE_EQ(alignment.stats.length_ratio, 1.0);
}

TEST(MapperTest, TolerantMapperAlsoPairsIdenticalSequencesExactly) {
  const SyntheticPair pair = MakeSyntheticPair(Small(5000));
  const Alignment alignment = AlignTolerant(pair.a, pair.b, MapperOptions{});
  EXPECT_FALSE(alignment.stats.lockstep);
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  EXPECT_EQ(alignment.stats.anchors, pair.a.size());  // every key is unique: all are anchors
}

TEST(MapperTest, PureReorderingWithinTheBandPairsEverything) {
  SyntheticOptions options = Small();
  options.reorder_fraction = 0.05;
  options.reorder_distance = 3;
  const SyntheticPair pair = MakeSyntheticPair(options);
  ASSERT_GT(pair.swaps, 500u);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  EXPECT_FALSE(alignment.stats.lockstep);
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_TRUE(alignment.unmatched_a.empty());
  EXPECT_TRUE(alignment.unmatched_b.empty());
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  EXPECT_GT(alignment.stats.moved_pairs, 0u);  // a swap leaves its two out of the monotone chain
}

TEST(MapperTest, InsertionsAreUnmatchedInB) {
  SyntheticOptions options = Small();
  options.insert_fraction = 0.05;
  const SyntheticPair pair = MakeSyntheticPair(options);
  ASSERT_GT(pair.inserted, 500u);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  ASSERT_EQ(alignment.unmatched_b.size(), pair.inserted);
  for (uint64_t j : alignment.unmatched_b) EXPECT_EQ(pair.origin_of_b[j], kNotFromA);
  EXPECT_NEAR(alignment.stats.length_ratio,
              static_cast<double>(pair.b.size()) / static_cast<double>(pair.a.size()), 1e-12);
}

TEST(MapperTest, DeletionsAreUnmatchedInA) {
  SyntheticOptions options = Small();
  options.delete_fraction = 0.05;
  const SyntheticPair pair = MakeSyntheticPair(options);
  ASSERT_GT(pair.deleted, 500u);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(alignment.pairs.size(), pair.b.size());
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  EXPECT_EQ(alignment.unmatched_a.size(), pair.deleted);
  EXPECT_TRUE(alignment.unmatched_b.empty());
}

TEST(MapperTest, FusedBoundariesAreUnmatchedOnBothSidesNotADivergence) {
  const SyntheticOptions options = Small(400);
  std::vector<BoundaryItem> a, b;
  for (uint64_t i = 0; i < options.length; ++i) a.push_back(SyntheticBoundary(options, i));
  // B replaces A[200] and A[201] by one boundary of another name.
  b = a;
  BoundaryItem fused = a[200];
  fused.key.name_hash ^= 0x5555;
  fused.xor64 = 1;  // its own fingerprint, unlike either side
  b.erase(b.begin() + 200, b.begin() + 202);
  b.insert(b.begin() + 200, fused);

  const Alignment alignment = Align(a, b, MapperOptions{});
  ExpectWellFormed(a, b, alignment);
  EXPECT_EQ(alignment.unmatched_a, (std::vector<uint64_t>{200, 201}));
  EXPECT_EQ(alignment.unmatched_b, (std::vector<uint64_t>{200}));
  EXPECT_EQ(alignment.pairs.size(), a.size() - 2);

  const CertifyReport report = Certify(a, b, alignment, CertifyOptions{});
  EXPECT_EQ(report.kind, DivergenceKind::kNone);
  EXPECT_FALSE(report.first_divergence.has_value());
  // The fused boundaries were never compared: the certified prefix ends
  // before them, and says why.
  EXPECT_EQ(report.certified_pairs, 200u);
  EXPECT_TRUE(report.stopped_at_uncompared);
  const Coverage coverage = CoverageOf(alignment);
  EXPECT_EQ(coverage.no_counterpart, 3u);
  EXPECT_EQ(coverage.first_a, std::optional<uint64_t>(200));
  EXPECT_EQ(coverage.first_b, std::optional<uint64_t>(200));
}

TEST(MapperTest, SyntheticFusionsAreNeverPaired) {
  SyntheticOptions options = Small();
  options.fusions = 30;
  options.reorder_fraction = 0.02;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  EXPECT_EQ(alignment.pairs.size(), CountFromA(pair));
  EXPECT_EQ(alignment.unmatched_a.size(), 60u);
  EXPECT_EQ(alignment.unmatched_b.size(), 30u);
}

TEST(MapperTest, AnchorsNeverCross) {
  SyntheticOptions options = Small(30000);
  options.reorder_fraction = 0.08;
  options.reorder_distance = 6;
  options.insert_fraction = 0.03;
  options.delete_fraction = 0.03;
  options.repeated_key_every = 5;
  options.seed = 99;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ASSERT_GT(alignment.anchors.size(), 1000u);
  ExpectWellFormed(pair.a, pair.b, alignment);  // checks strict monotonicity of anchors
  for (const auto& [i, j] : alignment.anchors) {
    EXPECT_EQ(pair.origin_of_b[j], i) << "anchor (" << i << ", " << j << ")";
  }
  EXPECT_GT(alignment.stats.anchor_density, 0.5);
}

TEST(MapperTest, RepeatedKeysArePairedByTheirOwnEvidence) {
  SyntheticOptions options = Small();
  // One key in 8 repeats every 8 positions: never an anchor. Its repeats
  // are closer than twice the reach, so fingerprints settle most pairs; the
  // moves stay within reach, so every pair is right.
  options.repeated_key_every = 8;
  options.reorder_fraction = 0.03;
  options.reorder_distance = 3;
  options.insert_fraction = 0.02;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_GT(alignment.stats.repeat_key_pairs + alignment.stats.fingerprint_pairs, pair.a.size() / 10);
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_EQ(alignment.unmatched_b.size(), pair.inserted);
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
}

TEST(MapperTest, RepeatsCloserThanTheReorderingStayWellFormed) {
  // Repeats every 3 positions with swaps reaching 3: two equal keys can trade
  // places, which no key-based mapper can see. Pairs stay pairable and
  // almost everything pairs.
  SyntheticOptions options = Small();
  options.repeated_key_every = 3;
  options.reorder_fraction = 0.03;
  options.reorder_distance = 3;
  options.insert_fraction = 0.02;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_GE(alignment.pairs.size(), pair.a.size() - pair.a.size() / 1000);
}

TEST(MapperTest, AUniqueKeyMovedPastItsNeighboursPairs) {
  const SyntheticOptions options = Small(300);
  std::vector<BoundaryItem> a;
  for (uint64_t i = 0; i < options.length; ++i) a.push_back(SyntheticBoundary(options, i));
  // B moves A[100] three places later, past the anchors at 101..103.
  std::vector<BoundaryItem> b = a;
  std::rotate(b.begin() + 100, b.begin() + 101, b.begin() + 104);
  ASSERT_EQ(b[103].key.name_hash, a[100].key.name_hash);

  const Alignment alignment = AlignTolerant(a, b, MapperOptions{});
  ExpectWellFormed(a, b, alignment);
  EXPECT_EQ(alignment.pairs.size(), a.size());
  const auto moved = std::find_if(alignment.pairs.begin(), alignment.pairs.end(),
                                  [](const AlignedPair& p) { return p.index_a == 100; });
  ASSERT_NE(moved, alignment.pairs.end());
  EXPECT_EQ(moved->index_b, 103u);
  EXPECT_EQ(moved->origin, PairOrigin::kMoved);
  EXPECT_EQ(alignment.stats.moved_pairs, 1u);
}

TEST(MapperTest, AUniqueKeyPairsHoweverFarItMoved) {
  const SyntheticOptions options = Small(2000);
  std::vector<BoundaryItem> a;
  for (uint64_t i = 0; i < options.length; ++i) a.push_back(SyntheticBoundary(options, i));
  // A[100] moves 1000 places, far beyond the reach: its key occurs once on
  // each side, so no other pairing is consistent.
  std::vector<BoundaryItem> b = a;
  std::rotate(b.begin() + 100, b.begin() + 101, b.begin() + 1101);
  const Alignment alignment = AlignTolerant(a, b, MapperOptions{});
  ExpectWellFormed(a, b, alignment);
  EXPECT_TRUE(alignment.unmatched_a.empty());
  EXPECT_TRUE(alignment.unmatched_b.empty());
  EXPECT_EQ(alignment.stats.moved_pairs, 1u);
  EXPECT_EQ(alignment.pairs[100].index_b, 1100u);
}

TEST(MapperTest, DivergenceAtARepeatedKeyAfterAnAnchorIsFoundExactly) {
  SyntheticOptions options = Small();
  options.repeated_key_every = 16;  // repeated keys are never anchors
  options.reorder_fraction = 0.05;
  options.insert_fraction = 0.02;
  const SyntheticPair clean = MakeSyntheticPair(options);
  const Alignment clean_alignment = Align(clean.a, clean.b, MapperOptions{});
  // An anchor followed by a boundary of the repeated key.
  uint64_t border = 0;
  bool found = false;
  for (size_t k = 0; k + 1 < clean_alignment.pairs.size(); ++k) {
    const AlignedPair& p = clean_alignment.pairs[k];
    const AlignedPair& next = clean_alignment.pairs[k + 1];
    if (p.index_a > clean.a.size() / 2 && p.origin == PairOrigin::kAnchor &&
        (next.origin == PairOrigin::kRepeatKey || next.origin == PairOrigin::kFingerprint) &&
        next.index_a == p.index_a + 1) {
      border = p.index_a;
      found = true;
      break;
    }
  }
  ASSERT_TRUE(found) << "no anchor followed by a repeated-key pair";

  options.divergence_at = border + 1;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  // The divergent boundary loses its fingerprint evidence but pairs by
  // elimination: the same pairs as without the divergence.
  ASSERT_EQ(alignment.pairs.size(), clean_alignment.pairs.size());
  for (size_t k = 0; k < alignment.pairs.size(); ++k) {
    ASSERT_EQ(alignment.pairs[k].index_a, clean_alignment.pairs[k].index_a);
    ASSERT_EQ(alignment.pairs[k].index_b, clean_alignment.pairs[k].index_b);
  }
  const CertifyReport report = Certify(pair.a, pair.b, alignment, CertifyOptions{});
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index_a, border + 1);
  EXPECT_EQ(report.first_divergence->index_b, *pair.divergence_b);
  EXPECT_EQ(report.kind, DivergenceKind::kIsolated);
  EXPECT_EQ(report.later_differing, 0u);
}

TEST(MapperTest, PlantedDivergenceFoundExactlyAtScale) {
  SyntheticOptions options;
  options.length = testing::kSanitized ? 200000 : 1000000;
  options.boundaries_per_step = 512;
  options.reorder_fraction = 0.05;
  options.insert_fraction = 0.02;
  options.divergence_at = options.length / 2 + 12345;
  options.seed = 2024;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  EXPECT_EQ(alignment.pairs.size(), pair.a.size());
  EXPECT_EQ(alignment.unmatched_b.size(), pair.inserted);
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  const CertifyReport report = Certify(pair.a, pair.b, alignment, CertifyOptions{});
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index_a, *options.divergence_at);
  EXPECT_EQ(report.first_divergence->index_b, *pair.divergence_b);
  EXPECT_EQ(report.kind, DivergenceKind::kIsolated);
  EXPECT_EQ(report.differing, 1u);
  // The first inserted boundary was never compared: the certified prefix
  // ends at the first pair past it.
  const uint64_t first_inserted = static_cast<uint64_t>(
      std::find(pair.origin_of_b.begin(), pair.origin_of_b.end(), kNotFromA) - pair.origin_of_b.begin());
  ASSERT_LT(first_inserted, *options.divergence_at);
  uint64_t expected_prefix = 0;
  while (alignment.pairs[expected_prefix].index_b < first_inserted) ++expected_prefix;
  EXPECT_TRUE(report.stopped_at_uncompared);
  EXPECT_EQ(report.certified_pairs, expected_prefix);
  EXPECT_EQ(CoverageOf(alignment).no_counterpart, pair.inserted);
}

TEST(MapperTest, DifferentWorldSizesPairPerExampleBoundariesByExample) {
  // Per-example boundaries: run A on 2 ranks, run B on 4; example e is
  // processed by rank e % world.
  std::vector<BoundaryItem> a, b;
  for (uint64_t e = 0; e < 64; ++e) {
    for (uint64_t op = 0; op < 3; ++op) {
      BoundaryItem item;
      item.key.name_hash = 1000 + op;
      item.shape_digest = 77;
      item.key.first_example = e;
      item.key.example_count = 1;
      item.key.rank = static_cast<uint32_t>(e % 2);
      item.xor64 = e * 10 + op;
      a.push_back(item);
      item.key.rank = static_cast<uint32_t>(e % 4);
      b.push_back(item);
    }
  }
  MapperOptions mapper;
  mapper.compare_rank = RanksComparable(2, 4);
  EXPECT_FALSE(mapper.compare_rank);
  const Alignment by_example = Align(a, b, mapper);
  ExpectWellFormed(a, b, by_example, mapper.compare_rank);
  EXPECT_TRUE(by_example.stats.lockstep);
  EXPECT_EQ(by_example.pairs.size(), a.size());

  // Were rank part of the key, examples with e % 4 in {2, 3} could not pair.
  mapper.compare_rank = true;
  const Alignment by_rank = Align(a, b, mapper);
  ExpectWellFormed(a, b, by_rank, true);
  EXPECT_EQ(by_rank.pairs.size(), a.size() / 2);
  for (const AlignedPair& p : by_rank.pairs) EXPECT_EQ(a[p.index_a].key.rank, b[p.index_b].key.rank);
}

TEST(MapperTest, OneKeyEverywhereWithoutAnchorsIsAmbiguousNotDivergent) {
  // Every key identical and every fingerprint different: no anchors, every
  // boundary has many candidates within reach and none is identical.
  // Nothing may be paired, and nothing is a divergence: all ambiguous.
  BoundaryItem item;
  item.key.name_hash = 5;
  std::vector<BoundaryItem> a(500, item), b(520, item);
  for (uint64_t i = 0; i < a.size(); ++i) a[i].xor64 = i;
  for (uint64_t j = 0; j < b.size(); ++j) b[j].xor64 = 1000 + j;
  const Alignment alignment = AlignTolerant(a, b, MapperOptions{});
  ExpectWellFormed(a, b, alignment);
  EXPECT_EQ(alignment.stats.anchors, 0u);
  EXPECT_TRUE(alignment.pairs.empty());
  for (Unpaired why : alignment.why_a) EXPECT_EQ(why, Unpaired::kAmbiguous);
  const CertifyReport report = Certify(a, b, alignment, CertifyOptions{});
  EXPECT_FALSE(report.first_divergence.has_value());
  EXPECT_EQ(report.certified_pairs, 0u);
  EXPECT_EQ(CoverageOf(alignment).ambiguous, a.size() + b.size());
}

TEST(MapperTest, BandIsTheReachOfARepeatedKey) {
  // A repeated key every 300 positions; B moves one occurrence 40 places.
  // With a reach of 64 it pairs by key evidence; with a reach of 16 it is
  // outside reach, and so is the boundary that took its place: both
  // reported, neither a divergence.
  SyntheticOptions options = Small(1200);
  options.boundaries_per_step = 1200;
  options.repeated_key_every = 300;
  std::vector<BoundaryItem> a;
  for (uint64_t i = 0; i < options.length; ++i) a.push_back(SyntheticBoundary(options, i));
  std::vector<BoundaryItem> b = a;
  ASSERT_EQ(a[599].key.name_hash, a[299].key.name_hash);
  std::rotate(b.begin() + 599, b.begin() + 600, b.begin() + 640);  // A[599] now at B 639
  MapperOptions mapper;
  const Alignment wide = AlignTolerant(a, b, mapper);
  ExpectWellFormed(a, b, wide);
  EXPECT_TRUE(wide.unmatched_a.empty());
  EXPECT_EQ(wide.pairs[599].index_b, 639u);
  EXPECT_EQ(wide.pairs[599].origin, PairOrigin::kRepeatKey);
  mapper.band = 16;
  const Alignment narrow = AlignTolerant(a, b, mapper);
  ExpectWellFormed(a, b, narrow);
  EXPECT_EQ(narrow.unmatched_a, (std::vector<uint64_t>{599}));
  EXPECT_EQ(narrow.why_a, (std::vector<Unpaired>{Unpaired::kOutsideReach}));
  EXPECT_EQ(narrow.unmatched_b, (std::vector<uint64_t>{639}));
  const CertifyReport report = Certify(a, b, narrow, CertifyOptions{});
  EXPECT_FALSE(report.first_divergence.has_value());
  EXPECT_TRUE(report.stopped_at_uncompared);
  EXPECT_EQ(report.certified_pairs, 599u);
}

// One key at every 4th position of a long step, 50,000 times in A; B keeps
// only the occurrences in A's first half. The kept ones pair with their own
// copies; the 25,000 dropped ones stay unpaired with no counterpart (every
// occurrence of B is paired), each said so (the reason is found without a
// scan of the other side per occurrence: bench BM_AlignLongRepeatedKey).
// With one more occurrence of the key at the end of B, unpaired, the dropped
// ones have an unpaired occurrence to point at: out of reach or ambiguous.
TEST(MapperTest, AKeyRepeated50000TimesHalfDroppedIsSaidToHaveNoCounterpart) {
  SyntheticOptions options;
  options.length = 200'000;
  options.boundaries_per_step = 200'000;
  options.repeated_key_every = 4;
  std::vector<BoundaryItem> a, b;
  for (uint64_t i = 0; i < options.length; ++i) a.push_back(SyntheticBoundary(options, i));
  // The generator varies phase and dtype along the step: make the repeated
  // name one key everywhere.
  const BoundaryKey repeated = a[3].key;
  for (BoundaryItem& item : a) {
    if (item.key.name_hash == repeated.name_hash) item.key = repeated;
  }
  std::vector<uint64_t> dropped;
  for (uint64_t i = 0; i < a.size(); ++i) {
    if (i >= a.size() / 2 && a[i].key.name_hash == repeated.name_hash) {
      dropped.push_back(i);
    } else {
      b.push_back(a[i]);
    }
  }
  ASSERT_EQ(dropped.size(), 25'000u);
  const Alignment alignment = Align(a, b, MapperOptions{});
  ExpectWellFormed(a, b, alignment);
  for (const AlignedPair& p : alignment.pairs) {
    ASSERT_EQ(a[p.index_a].xor64, b[p.index_b].xor64) << p.index_a;  // each with its own copy
  }
  EXPECT_EQ(alignment.unmatched_a, dropped);
  EXPECT_TRUE(alignment.unmatched_b.empty());
  const Coverage coverage = CoverageOf(alignment);
  EXPECT_EQ(coverage.no_counterpart, 25'000u);
  EXPECT_EQ(coverage.uncompared(), 25'000u);

  BoundaryItem extra = a[3];
  extra.xor64 ^= 1;
  b.push_back(extra);
  const Alignment with_extra = Align(a, b, MapperOptions{});
  ExpectWellFormed(a, b, with_extra);
  EXPECT_EQ(with_extra.unmatched_a, dropped);
  ASSERT_EQ(with_extra.unmatched_b.size(), 1u);
  EXPECT_EQ(with_extra.unmatched_b[0], b.size() - 1);
  const Coverage extra_coverage = CoverageOf(with_extra);
  EXPECT_EQ(extra_coverage.no_counterpart, 0u);
  EXPECT_EQ(extra_coverage.outside_reach + extra_coverage.ambiguous, 25'001u);
}

TEST(MapperTest, EmptySequences) {
  const SyntheticPair pair = MakeSyntheticPair(Small(50));
  const std::vector<BoundaryItem> empty;
  const Alignment only_b = Align(empty, pair.b, MapperOptions{});
  ExpectWellFormed(empty, pair.b, only_b);
  EXPECT_EQ(only_b.unmatched_b.size(), pair.b.size());
  EXPECT_DOUBLE_EQ(only_b.stats.unmatched_fraction, 1.0);
  const Alignment none = Align(empty, empty, MapperOptions{});
  EXPECT_TRUE(none.pairs.empty());
}

TEST(MapperTest, KeyDigestSeparatesEveryField) {
  BoundaryKey base;
  base.name_hash = 1;
  base.first_example = 3;
  base.example_count = 4;
  base.rank = 5;
  base.phase = 1;
  base.direction = 1;
  std::vector<BoundaryKey> variants(6, base);
  variants[0].name_hash++;
  variants[1].first_example++;
  variants[2].example_count++;
  variants[3].rank++;
  variants[4].phase++;
  variants[5].direction--;
  for (size_t v = 0; v < variants.size(); ++v) {
    EXPECT_FALSE(Pairable(base, variants[v], true)) << v;
    EXPECT_NE(KeyDigest(base, true), KeyDigest(variants[v], true)) << v;
  }
  EXPECT_TRUE(Pairable(base, variants[3], false));
  EXPECT_EQ(KeyDigest(base, false), KeyDigest(variants[3], false));
}

// Dtype and shape are what a boundary holds, not which boundary it is: they
// are compared once paired, each difference named.
TEST(MapperTest, DtypeAndShapeAreComparedNotPairedOn) {
  BoundaryItem x;
  x.key.name_hash = 1;
  x.dtype = 1;
  x.shape_digest = 2;
  x.xor64 = 3;
  x.xxh3 = 4;
  BoundaryItem y = x;
  EXPECT_EQ(DifferenceOf(x, y), Difference::kNone);
  EXPECT_TRUE(SameContent(x, y));
  y.xxh3++;
  EXPECT_EQ(DifferenceOf(x, y), Difference::kValues);
  y = x;
  y.dtype++;
  EXPECT_EQ(DifferenceOf(x, y), Difference::kDtype);
  EXPECT_FALSE(SameContent(x, y));
  y.shape_digest++;
  EXPECT_EQ(DifferenceOf(x, y), Difference::kDtypeAndShape);
  y.dtype = x.dtype;
  EXPECT_EQ(DifferenceOf(x, y), Difference::kShape);
  EXPECT_FALSE(SameContent(x, y));
  EXPECT_TRUE(Pairable(x.key, y.key, true));
  EXPECT_STREQ(DifferenceName(Difference::kDtypeAndShape), "dtype_and_shape");
  // A lined-up pair whose dtype changed stays on the identity pairing.
  const std::vector<BoundaryItem> a = {x, x}, b = {x, y};
  EXPECT_TRUE(LinesUp(a, b, true));
}

}  // namespace
}  // namespace dgrr::replay
