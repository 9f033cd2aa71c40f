// Hard pairs for the schedule-tolerant mapper (docs/compare.md §3.3): keys
// that repeat at several distances, boundaries moved up to and past the
// reach, insertions, deletions and planted divergences, isolated and
// propagating. Within the guarantee the result must be exact (no false
// divergence, the planted one named exactly, the certified prefix exact,
// every boundary with a counterpart compared); past it, honest (what could
// not be compared is counted, never a false divergence). Fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>

#include "replay/certify.h"
#include "replay/mapper.h"
#include "replay/synthetic.h"
#include "tests/replay/replay_test_util.h"

namespace dgrr::replay {
namespace {

using testing::CountWrongPairs;
using testing::ExpectWellFormed;

constexpr uint32_t kReach = 64;  // MapperOptions{}.band

SyntheticOptions Hard(uint64_t seed) {
  SyntheticOptions options;
  options.length = 20000;
  options.boundaries_per_step = 1000;
  options.seed = seed;
  options.reorder_fraction = 0.03;
  options.disjoint_swaps = true;
  options.insert_fraction = 0.01;
  return options;
}

// Pairs whose two boundaries did not come from each other and differ: what
// would show as a false divergence.
uint64_t CountFalseDifferences(const SyntheticPair& pair, const Alignment& alignment) {
  uint64_t n = 0;
  for (const AlignedPair& p : alignment.pairs) {
    const BoundaryItem& x = pair.a[p.index_a];
    const BoundaryItem& y = pair.b[p.index_b];
    const bool differs = x.xor64 != y.xor64 || x.xxh3 != y.xxh3;
    if (differs && pair.origin_of_b[p.index_b] != p.index_a) ++n;
  }
  return n;
}

// Boundaries that no pair of `alignment` uses, told apart by the generator's
// ground truth: those with a true counterpart on the other side (every A
// boundary when nothing is deleted, every B boundary copied from A) and the
// B boundaries it inserted.
struct NeverPaired {
  uint64_t with_counterpart = 0;
  uint64_t inserted = 0;
};
NeverPaired CountNeverPaired(const SyntheticPair& pair, const Alignment& alignment) {
  std::vector<bool> paired_a(pair.a.size()), paired_b(pair.b.size());
  for (const AlignedPair& p : alignment.pairs) {
    paired_a[p.index_a] = true;
    paired_b[p.index_b] = true;
  }
  NeverPaired n;
  n.with_counterpart = static_cast<uint64_t>(std::count(paired_a.begin(), paired_a.end(), false));
  for (uint64_t j = 0; j < pair.b.size(); ++j) {
    if (paired_b[j]) continue;
    ++(pair.origin_of_b[j] == kNotFromA ? n.inserted : n.with_counterpart);
  }
  return n;
}

// A position of A holding the repeated key of `distance`, moved by a swap,
// near the middle (so that it has neighbours on both sides).
uint64_t MovedRepeatedBoundary(const SyntheticPair& pair, uint64_t repeated_name) {
  std::vector<uint64_t> b_of_a(pair.a.size(), kNotFromA);
  for (uint64_t j = 0; j < pair.b.size(); ++j) {
    if (pair.origin_of_b[j] != kNotFromA) b_of_a[pair.origin_of_b[j]] = j;
  }
  for (uint64_t i = pair.a.size() / 2; i < pair.a.size(); ++i) {
    if (pair.a[i].key.name_hash != repeated_name || b_of_a[i] == kNotFromA) continue;
    const int64_t moved = static_cast<int64_t>(b_of_a[i]) - static_cast<int64_t>(i);
    if (moved > 8 || moved < -8) return i;  // the insertions before it shift it by a few
  }
  return kNotFromA;
}

// A hand-built pair at a chosen point of the guarantee: one step of
// `length` boundaries of A with a repeated key; B moves every second
// occurrence later, so that its displacement (docs/compare.md §3.3: from A,
// d - 1 places past the prediction; from B, d places, because the boundaries
// it passes shift back by one) is `displacement` and occurrences of the key
// are `spacing` apart in B at the closest (spacing + displacement - 1 in A).
SyntheticPair EdgePair(uint32_t spacing, uint32_t displacement, uint64_t length = 4000) {
  const uint32_t spacing_a = spacing + displacement - 1;
  SyntheticOptions options;
  options.length = length;
  options.boundaries_per_step = static_cast<uint32_t>(length);
  options.repeat_distances = {spacing_a};
  SyntheticPair pair;
  for (uint64_t i = 0; i < length; ++i) pair.a.push_back(SyntheticBoundary(options, i));
  std::vector<uint64_t> order(length);
  for (uint64_t i = 0; i < length; ++i) order[i] = i;
  const uint64_t name = pair.a[spacing_a - 1].key.name_hash;
  uint64_t occurrence = 0;
  for (uint64_t i = 0; i + displacement < length; ++i) {
    if (pair.a[i].key.name_hash != name || occurrence++ % 2 == 0) continue;
    const auto at = std::find(order.begin(), order.end(), i);
    std::rotate(at, at + 1, at + displacement);
    ++pair.swaps;
  }
  for (uint64_t j = 0; j < length; ++j) {
    pair.b.push_back(pair.a[order[j]]);
    pair.b.back().record_index = j;
    pair.origin_of_b.push_back(order[j]);
  }
  return pair;
}

// Plants a divergence at A index `at` of an EdgePair (and every later one).
void Plant(SyntheticPair* pair, uint64_t at, bool propagates) {
  for (uint64_t j = 0; j < pair->b.size(); ++j) {
    const uint64_t o = pair->origin_of_b[j];
    if (o == at) pair->divergence_b = j;
    if (o == at || (propagates && o > at)) pair->b[j].xxh3 ^= 1;
  }
}

// The first moved boundary past the middle of A.
uint64_t MovedOccurrence(const SyntheticPair& pair) {
  for (uint64_t j = 0; j < pair.b.size(); ++j) {
    const uint64_t i = pair.origin_of_b[j];
    if (i > pair.a.size() / 2 && j > i) return i;
  }
  return kNotFromA;
}

// --- At the edge: displacement exactly the reach, repeats 3 * reach + 1
// apart in B. Every pair by key evidence, every
// divergence named exactly, every boundary compared.
TEST(HardPairsTest, AtTheEdgeOfTheGuaranteeEverythingIsExact) {
  SyntheticPair clean = EdgePair(3 * kReach + 1, kReach);
  ASSERT_GT(clean.swaps, 5u);
  const Alignment alignment = Align(clean.a, clean.b, MapperOptions{});
  ExpectWellFormed(clean.a, clean.b, alignment);
  EXPECT_EQ(CountWrongPairs(clean, alignment), 0u);
  EXPECT_EQ(alignment.pairs.size(), clean.a.size());
  EXPECT_EQ(alignment.stats.fingerprint_pairs, 0u);  // keys alone suffice
  EXPECT_EQ(alignment.stats.repeat_key_pairs, clean.a.size() / (4 * kReach));
  EXPECT_EQ(CoverageOf(alignment).uncompared(), 0u);

  const uint64_t at = MovedOccurrence(clean);
  ASSERT_NE(at, kNotFromA);
  for (bool propagates : {false, true}) {
    SyntheticPair pair = clean;
    Plant(&pair, at, propagates);
    const Alignment planted = Align(pair.a, pair.b, MapperOptions{});
    EXPECT_EQ(CountWrongPairs(pair, planted), 0u);
    EXPECT_EQ(CoverageOf(planted).uncompared(), 0u);
    const CertifyReport r = Certify(pair.a, pair.b, planted, CertifyOptions{});
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->index_a, at);
    EXPECT_EQ(r.first_divergence->index_b, *pair.divergence_b);
    EXPECT_EQ(r.certified_pairs, at);  // pairs are walked in A order, nothing uncompared
    EXPECT_EQ(r.kind, propagates ? DivergenceKind::kPropagates : DivergenceKind::kIsolated);
  }
}

// --- Just past it, each way: repeats 3 * reach apart in B, or a
// displacement of reach + 1. Honest reporting: nothing misplaced, what
// could not be settled counted, the prefix never past the divergence.
TEST(HardPairsTest, JustPastTheRepeatEdgeAPropagatingDivergenceIsNamedOrAmbiguous) {
  SyntheticPair clean = EdgePair(3 * kReach, kReach);
  const Alignment alignment = Align(clean.a, clean.b, MapperOptions{});
  EXPECT_EQ(CountWrongPairs(clean, alignment), 0u);  // identical ones still pair
  EXPECT_EQ(CoverageOf(alignment).uncompared(), 0u);

  const uint64_t at = MovedOccurrence(clean);
  ASSERT_NE(at, kNotFromA);
  SyntheticPair pair = clean;
  Plant(&pair, at, true);
  const Alignment planted = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, planted);
  const CertifyReport r = Certify(pair.a, pair.b, planted, CertifyOptions{});
  EXPECT_LE(r.certified_pairs, at);
  if (r.first_divergence.has_value()) {
    EXPECT_GE(r.first_divergence->index_a, at);
  }
  const bool named = r.first_divergence.has_value() && r.first_divergence->index_a == at &&
                     r.first_divergence->index_b == *pair.divergence_b;
  const Coverage coverage = CoverageOf(planted);
  const bool said_ambiguous = coverage.ambiguous > 0 && coverage.first_a.has_value() &&
                              *coverage.first_a <= at && r.stopped_at_uncompared;
  EXPECT_TRUE(named || said_ambiguous);
}

TEST(HardPairsTest, JustPastTheReachIsOutsideReachNotADivergence) {
  SyntheticPair clean = EdgePair(3 * kReach + 1, kReach + 1);
  const uint64_t at = MovedOccurrence(clean);
  ASSERT_NE(at, kNotFromA);
  SyntheticPair pair = clean;
  Plant(&pair, at, false);
  const Alignment alignment = Align(pair.a, pair.b, MapperOptions{});
  ExpectWellFormed(pair.a, pair.b, alignment);
  EXPECT_EQ(CountWrongPairs(pair, alignment), 0u);
  // Every moved occurrence is out of reach: counted, on both sides.
  const Coverage coverage = CoverageOf(alignment);
  EXPECT_EQ(coverage.outside_reach, 2 * pair.swaps);
  const CertifyReport r = Certify(pair.a, pair.b, alignment, CertifyOptions{});
  EXPECT_FALSE(r.first_divergence.has_value());
  EXPECT_TRUE(r.stopped_at_uncompared);
  EXPECT_LT(r.certified_pairs, at);
}

// --- Random hard pairs well within the guarantee: insertions, deletions,
// moves of up to half the reach, repeats 4 * reach apart and farther.
TEST(HardPairsTest, WithinTheGuaranteeRandomPairsAreExact) {
  for (uint64_t seed : {1, 2, 3}) {
    SyntheticOptions options = Hard(seed);
    options.repeat_distances = {4 * kReach + 1, 300, 500};
    options.reorder_distance = kReach / 2;
    options.delete_fraction = 0.002;
    const SyntheticPair clean = MakeSyntheticPair(options);
    const Alignment alignment = Align(clean.a, clean.b, MapperOptions{});
    ExpectWellFormed(clean.a, clean.b, alignment);
    EXPECT_EQ(CountWrongPairs(clean, alignment), 0u) << seed;
    const Coverage coverage = CoverageOf(alignment);
    EXPECT_EQ(coverage.ambiguous + coverage.outside_reach, 0u) << seed;
    EXPECT_EQ(coverage.no_counterpart, clean.inserted + clean.deleted) << seed;

    const uint64_t at = MovedRepeatedBoundary(clean, clean.a[4 * kReach].key.name_hash);
    ASSERT_NE(at, kNotFromA) << seed;
    for (bool propagates : {false, true}) {
      options.divergence_at = at;
      options.divergence_propagates = propagates;
      const SyntheticPair pair = MakeSyntheticPair(options);
      const Alignment planted = Align(pair.a, pair.b, MapperOptions{});
      EXPECT_EQ(CountWrongPairs(pair, planted), 0u) << seed;
      const CertifyReport r = Certify(pair.a, pair.b, planted, CertifyOptions{});
      ASSERT_TRUE(r.first_divergence.has_value()) << seed;
      EXPECT_EQ(r.first_divergence->index_a, at) << seed;
      EXPECT_EQ(r.first_divergence->index_b, *pair.divergence_b) << seed;
      EXPECT_EQ(r.kind, propagates ? DivergenceKind::kPropagates : DivergenceKind::kIsolated);
    }
  }
}

// --- The case: repeats 54 apart (closer than 2 * reach), moves of
// 32 to 64. Keys alone cannot tell the occurrences apart; fingerprints settle
// them, so nothing is wrong, and a planted isolated divergence is named.
TEST(HardPairsTest, RepeatsCloserThanTwiceTheReachNeverGiveAFalseDivergence) {
  uint64_t fingerprint_pairs = 0;
  for (uint64_t seed = 10; seed < 22; ++seed) {
    SyntheticOptions options = Hard(seed);
    options.repeat_distances = {54, 90};
    options.reorder_min_distance = 32;
    options.reorder_distance = kReach - 2;
    const SyntheticPair clean = MakeSyntheticPair(options);
    const Alignment alignment = Align(clean.a, clean.b, MapperOptions{});
    ExpectWellFormed(clean.a, clean.b, alignment);
    EXPECT_EQ(CountFalseDifferences(clean, alignment), 0u) << seed;
    const CertifyReport report = Certify(clean.a, clean.b, alignment, CertifyOptions{});
    EXPECT_FALSE(report.first_divergence.has_value()) << seed;
    EXPECT_EQ(CoverageOf(alignment).ambiguous, 0u) << seed;
    fingerprint_pairs += alignment.stats.fingerprint_pairs;

    if (seed % 4 == 0) {
      const uint64_t at = MovedRepeatedBoundary(clean, clean.a[53].key.name_hash);
      ASSERT_NE(at, kNotFromA);
      options.divergence_at = at;
      const SyntheticPair pair = MakeSyntheticPair(options);
      const Alignment planted = Align(pair.a, pair.b, MapperOptions{});
      EXPECT_EQ(CountFalseDifferences(pair, planted), 0u) << seed;
      const CertifyReport r = Certify(pair.a, pair.b, planted, CertifyOptions{});
      ASSERT_TRUE(r.first_divergence.has_value()) << seed;
      EXPECT_EQ(r.first_divergence->index_a, at) << seed;
      EXPECT_EQ(r.first_divergence->index_b, *pair.divergence_b) << seed;
      EXPECT_EQ(r.kind, DivergenceKind::kIsolated) << seed;
    }
  }
  EXPECT_GT(fingerprint_pairs, 0u);  // the evidence was needed
}

// --- Past the reach, up to twice it: moves of 65 to 128. Moved boundaries
// of repeated keys may find no counterpart within reach: they are counted as
// uncompared, never paired with another occurrence into a false divergence.
TEST(HardPairsTest, MovesPastTheReachAreCountedNeverFalseDivergences) {
  uint64_t uncompared = 0;
  for (uint64_t seed : {30, 31, 32, 33}) {
    SyntheticOptions options = Hard(seed);
    options.repeat_distances = {54, 2 * kReach + 1, 400};
    options.reorder_min_distance = kReach + 1;
    options.reorder_distance = 2 * kReach - 4;  // the insertions before a swap add a few
    const SyntheticPair clean = MakeSyntheticPair(options);
    const Alignment alignment = Align(clean.a, clean.b, MapperOptions{});
    ExpectWellFormed(clean.a, clean.b, alignment);
    EXPECT_EQ(CountFalseDifferences(clean, alignment), 0u) << seed;
    const CertifyReport report = Certify(clean.a, clean.b, alignment, CertifyOptions{});
    EXPECT_FALSE(report.first_divergence.has_value()) << seed;
    const Coverage coverage = CoverageOf(alignment);
    uncompared += coverage.outside_reach + coverage.ambiguous;
    // Against the generator's ground truth, from the pairs alone: nothing is
    // deleted, so every boundary of A and every B boundary copied from A has a
    // counterpart, and one left out of every pair was moved out of reach (or
    // made ambiguous); the inserted ones have none. A single rank makes no
    // replicas.
    const NeverPaired never = CountNeverPaired(clean, alignment);
    EXPECT_EQ(never.inserted, clean.inserted) << seed;
    EXPECT_EQ(coverage.no_counterpart, clean.inserted) << seed;
    EXPECT_EQ(coverage.outside_reach + coverage.ambiguous, never.with_counterpart) << seed;
    EXPECT_EQ(coverage.replicas, 0u) << seed;
  }
  EXPECT_GT(uncompared, 0u);  // the far moves were seen and said
}

TEST(HardPairsTest, GeneratorPlacesRepeatsAtTheirDistances) {
  SyntheticOptions options = Hard(1);
  options.repeat_distances = {54, 129};
  options.reorder_fraction = 0;
  options.insert_fraction = 0;
  const SyntheticPair pair = MakeSyntheticPair(options);
  // Within a step, the key of distance d sits at k = d-1, 2d-1, ...
  EXPECT_EQ(pair.a[53].key.name_hash, pair.a[107].key.name_hash);
  EXPECT_EQ(pair.a[128].key.name_hash, pair.a[257].key.name_hash);
  EXPECT_NE(pair.a[53].key.name_hash, pair.a[128].key.name_hash);
  // 54 * 12 - 1 = 647 belongs to 54; 129 * 5 - 1 = 644 to 129.
  EXPECT_EQ(pair.a[647].key.name_hash, pair.a[53].key.name_hash);
  EXPECT_EQ(pair.a[644].key.name_hash, pair.a[128].key.name_hash);
}

}  // namespace
}  // namespace dgrr::replay
