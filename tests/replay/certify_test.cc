#include "replay/certify.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "replay/mapper.h"
#include "replay/synthetic.h"

namespace dgrr::replay {
namespace {

SyntheticOptions Steps(uint64_t length, uint32_t per_step) {
  SyntheticOptions options;
  options.length = length;
  options.boundaries_per_step = per_step;
  return options;
}

// A and B identical, then B's fingerprints changed at `differing` positions.
struct Case {
  std::vector<BoundaryItem> a, b;
};
Case MakeCase(uint64_t length, uint32_t per_step, const std::vector<uint64_t>& differing) {
  Case c;
  const SyntheticOptions options = Steps(length, per_step);
  for (uint64_t i = 0; i < length; ++i) c.a.push_back(SyntheticBoundary(options, i));
  c.b = c.a;
  for (uint64_t i : differing) c.b[i].xxh3 ^= 1;  // one fingerprint differing suffices
  return c;
}

CertifyReport CertifyLockstep(const Case& c, const CertifyOptions& options) {
  return Certify(c.a, c.b, AlignLockstep(c.a, c.b), options);
}

void ExpectSameView(const PairView& x, const PairView& y) {
  EXPECT_EQ(x.ordinal, y.ordinal);
  EXPECT_EQ(x.index_a, y.index_a);
  EXPECT_EQ(x.index_b, y.index_b);
  EXPECT_EQ(x.status, y.status);
  EXPECT_EQ(x.a.xor64, y.a.xor64);
  EXPECT_EQ(x.b.xxh3, y.b.xxh3);
}

void ExpectSameReport(const CertifyReport& x, const CertifyReport& y) {
  EXPECT_EQ(x.pairs, y.pairs);
  EXPECT_EQ(x.certified_pairs, y.certified_pairs);
  EXPECT_EQ(x.certified_steps, y.certified_steps);
  EXPECT_EQ(x.later_differing, y.later_differing);
  EXPECT_EQ(x.differing, y.differing);
  EXPECT_EQ(x.kind, y.kind);
  ASSERT_EQ(x.first_divergence.has_value(), y.first_divergence.has_value());
  if (x.first_divergence) ExpectSameView(*x.first_divergence, *y.first_divergence);
  ASSERT_EQ(x.before.size(), y.before.size());
  for (size_t k = 0; k < x.before.size(); ++k) ExpectSameView(x.before[k], y.before[k]);
  ASSERT_EQ(x.after.size(), y.after.size());
  for (size_t k = 0; k < x.after.size(); ++k) ExpectSameView(x.after[k], y.after[k]);
}

TEST(CertifyTest, AgreeingRunsAreCertifiedWhole) {
  const Case c = MakeCase(40, 8, {});
  const CertifyReport report = CertifyLockstep(c, CertifyOptions{});
  EXPECT_EQ(report.pairs, 40u);
  EXPECT_EQ(report.certified_pairs, 40u);
  EXPECT_EQ(report.certified_steps, 5u);
  EXPECT_FALSE(report.first_divergence.has_value());
  EXPECT_EQ(report.kind, DivergenceKind::kNone);
  EXPECT_EQ(report.differing, 0u);
}

TEST(CertifyTest, FirstDivergenceWithContextAndSteps) {
  const Case c = MakeCase(40, 4, {10});
  CertifyOptions options;
  options.context = 3;
  const CertifyReport report = CertifyLockstep(c, options);
  EXPECT_EQ(report.certified_pairs, 10u);
  // Pair 10 is in step 2 (pairs 8..11): steps 0 and 1 are certified.
  EXPECT_EQ(report.certified_steps, 2u);
  ASSERT_TRUE(report.first_divergence.has_value());
  const PairView& d = *report.first_divergence;
  EXPECT_EQ(d.ordinal, 10u);
  EXPECT_EQ(d.index_a, 10u);
  EXPECT_EQ(d.index_b, 10u);
  EXPECT_EQ(d.a.step, 2u);
  EXPECT_EQ(d.status, PairStatus::kDiffers);
  EXPECT_EQ(d.a.xor64, d.b.xor64);  // only xxh3 differs, and that is enough
  EXPECT_NE(d.a.xxh3, d.b.xxh3);
  ASSERT_EQ(report.before.size(), 3u);
  EXPECT_EQ(report.before[0].ordinal, 7u);
  EXPECT_EQ(report.before[2].ordinal, 9u);
  ASSERT_EQ(report.after.size(), 3u);
  EXPECT_EQ(report.after[0].ordinal, 11u);
  for (const PairView& v : report.before) EXPECT_EQ(v.status, PairStatus::kEqual);
  for (const PairView& v : report.after) EXPECT_EQ(v.status, PairStatus::kEqual);
  EXPECT_EQ(report.kind, DivergenceKind::kIsolated);
  EXPECT_EQ(report.later_differing, 0u);
}

TEST(CertifyTest, DivergenceAtAStepStartKeepsTheEarlierSteps) {
  const Case c = MakeCase(40, 4, {8});
  const CertifyReport report = CertifyLockstep(c, CertifyOptions{});
  EXPECT_EQ(report.certified_pairs, 8u);
  EXPECT_EQ(report.certified_steps, 2u);
}

TEST(CertifyTest, DivergenceAtTheFirstPair) {
  const Case c = MakeCase(20, 4, {0});
  const CertifyReport report = CertifyLockstep(c, CertifyOptions{});
  EXPECT_EQ(report.certified_pairs, 0u);
  EXPECT_EQ(report.certified_steps, 0u);
  EXPECT_TRUE(report.before.empty());
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->ordinal, 0u);
}

TEST(CertifyTest, DivergenceAtTheLastPairIsUndetermined) {
  const Case c = MakeCase(20, 4, {19});
  const CertifyReport report = CertifyLockstep(c, CertifyOptions{});
  EXPECT_EQ(report.certified_pairs, 19u);
  EXPECT_TRUE(report.after.empty());
  EXPECT_EQ(report.kind, DivergenceKind::kUndetermined);
}

TEST(CertifyTest, IsolationDependsOnTheWindowAfterTheDivergence) {
  const Case c = MakeCase(40, 4, {10, 15});
  CertifyOptions wide;
  wide.isolation_window = 8;  // pairs 11..18 include the second divergence
  const CertifyReport propagates = CertifyLockstep(c, wide);
  EXPECT_EQ(propagates.kind, DivergenceKind::kPropagates);
  EXPECT_EQ(propagates.later_differing, 1u);
  EXPECT_EQ(propagates.differing, 2u);
  CertifyOptions narrow;
  narrow.isolation_window = 4;  // pairs 11..14 agree
  EXPECT_EQ(CertifyLockstep(c, narrow).kind, DivergenceKind::kIsolated);
}

TEST(CertifyTest, PropagatingDivergenceCountsEveryLaterPair) {
  SyntheticOptions options = Steps(1000, 50);
  options.divergence_at = 600;
  options.divergence_propagates = true;
  const SyntheticPair pair = MakeSyntheticPair(options);
  const CertifyReport report = Certify(pair.a, pair.b, Align(pair.a, pair.b, MapperOptions{}), {});
  EXPECT_EQ(report.certified_pairs, 600u);
  EXPECT_EQ(report.certified_steps, 12u);
  EXPECT_EQ(report.later_differing, 399u);
  EXPECT_EQ(report.kind, DivergenceKind::kPropagates);
}

TEST(CertifyTest, WalkFollowsTheOrderOfA) {
  // A pair list out of B order (as after a rescue): the walk goes by A.
  const Case c = MakeCase(6, 6, {});
  Case swapped = c;
  std::swap(swapped.b[2], swapped.b[3]);
  swapped.b[2].xor64 ^= 1;  // B[2] now holds A[3]'s boundary, with a changed fingerprint
  Alignment alignment;
  for (uint64_t i = 0; i < 6; ++i) {
    const uint64_t j = i == 2 ? 3 : i == 3 ? 2 : i;
    alignment.pairs.push_back({i, j, PairOrigin::kMoved});
  }
  const CertifyReport report = Certify(swapped.a, swapped.b, alignment, {});
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index_a, 3u);
  EXPECT_EQ(report.first_divergence->index_b, 2u);
  EXPECT_EQ(report.certified_pairs, 3u);
}

// A hand-made alignment: A and B are the same boundaries except that
// `only_a` (an index of A) has no counterpart in B, or `only_b` (an index of B)
// none in A. Every other boundary pairs with its copy, in order.
struct Uncompared {
  Case c;
  Alignment alignment;
};
Uncompared WithOneUncompared(uint64_t length, uint32_t per_step, std::optional<uint64_t> only_a,
                             std::optional<uint64_t> only_b, uint64_t only_b_step = 0) {
  Uncompared u;
  u.c = MakeCase(length, per_step, {});
  if (only_a) u.c.b.erase(u.c.b.begin() + static_cast<int64_t>(*only_a));
  if (only_b) {
    BoundaryItem extra = u.c.a[*only_b];
    extra.key.name_hash ^= 0x5555;  // a boundary A does not have
    extra.step = only_b_step;
    u.c.b.insert(u.c.b.begin() + static_cast<int64_t>(*only_b), extra);
  }
  for (uint64_t i = 0, j = 0; i < u.c.a.size(); ++i, ++j) {
    if (only_a && i == *only_a) {
      u.alignment.unmatched_a.push_back(i);
      u.alignment.why_a.push_back(Unpaired::kNoCounterpart);
      --j;
      continue;
    }
    if (only_b && j == *only_b) {
      u.alignment.unmatched_b.push_back(j);
      u.alignment.why_b.push_back(Unpaired::kNoCounterpart);
      ++j;
    }
    u.alignment.pairs.push_back({i, j, PairOrigin::kAnchor});
  }
  return u;
}

TEST(CertifyTest, UncomparedLastBoundaryOfAStepCutsThatStepNotTheNext) {
  // 4 boundaries a step; A's boundary 7 (the last of step 1) has no
  // counterpart. Step 1 is not fully compared even though the next pair,
  // the first of step 2, lies in another step.
  const Uncompared u = WithOneUncompared(24, 4, 7, std::nullopt);
  const CertifyReport report = Certify(u.c.a, u.c.b, u.alignment, {});
  EXPECT_TRUE(report.stopped_at_uncompared);
  EXPECT_EQ(report.certified_pairs, 7u);
  EXPECT_EQ(report.certified_steps, 1u);
  EXPECT_FALSE(report.first_divergence.has_value());
}

TEST(CertifyTest, UncomparedBoundaryOfBCutsTheStepItBelongsTo) {
  // B has an extra boundary at the end of step 1 (B index 8, before the
  // first boundary of step 2): step 1 is not certified.
  const Uncompared in_step_1 = WithOneUncompared(24, 4, std::nullopt, 8, /*only_b_step=*/1);
  const CertifyReport cut = Certify(in_step_1.c.a, in_step_1.c.b, in_step_1.alignment, {});
  EXPECT_TRUE(cut.stopped_at_uncompared);
  EXPECT_EQ(cut.certified_pairs, 8u);
  EXPECT_EQ(cut.certified_steps, 1u);
  // The same extra boundary at the start of step 2: steps 0 and 1 were
  // compared whole and stay certified.
  const Uncompared in_step_2 = WithOneUncompared(24, 4, std::nullopt, 8, /*only_b_step=*/2);
  const CertifyReport kept = Certify(in_step_2.c.a, in_step_2.c.b, in_step_2.alignment, {});
  EXPECT_TRUE(kept.stopped_at_uncompared);
  EXPECT_EQ(kept.certified_pairs, 8u);
  EXPECT_EQ(kept.certified_steps, 2u);
}

TEST(CertifyTest, TrailingUncomparedBoundariesCutOnlyTheirOwnStep) {
  // B is A's first 5 steps (a run cut after step 4): every pair is compared
  // and equal, and A's surplus starts a later step, so all 5 steps stand.
  Case prefix = MakeCase(40, 4, {});
  prefix.b.resize(20);
  const CertifyReport whole = Certify(prefix.a, prefix.b, AlignLockstep(prefix.a, prefix.b), {});
  EXPECT_TRUE(whole.stopped_at_uncompared);
  EXPECT_EQ(whole.certified_pairs, 20u);
  EXPECT_EQ(whole.certified_steps, 5u);
  // The same from B's side.
  const CertifyReport swapped = Certify(prefix.b, prefix.a, AlignLockstep(prefix.b, prefix.a), {});
  EXPECT_EQ(swapped.certified_steps, 5u);
  // Cut in the middle of step 4: its first half was compared, its second
  // half was not, so step 4 is not certified.
  Case half = prefix;
  half.b.resize(18);
  const CertifyReport cut = Certify(half.a, half.b, AlignLockstep(half.a, half.b), {});
  EXPECT_EQ(cut.certified_pairs, 18u);
  EXPECT_EQ(cut.certified_steps, 4u);
}

TEST(LockstepComparerTest, StreamingEqualsCertifyOverTheWholeSequence) {
  for (const std::vector<uint64_t>& differing :
       {std::vector<uint64_t>{}, {0}, {1}, {333}, {999}, {500, 503}, {100, 101, 102, 900}}) {
    const Case c = MakeCase(1000, 64, differing);
    CertifyOptions options;
    options.context = 4;
    options.isolation_window = 3;
    for (size_t chunk : {1u, 7u, 64u, 1000u}) {
      SCOPED_TRACE(::testing::Message() << "chunk " << chunk << " first "
                                        << (differing.empty() ? -1 : int64_t(differing[0])));
      LockstepComparer comparer(true, options);
      for (size_t start = 0; start < c.a.size(); start += chunk) {
        const size_t len = std::min(chunk, c.a.size() - start);
        ASSERT_TRUE(comparer.Feed(std::span(c.a).subspan(start, len), std::span(c.b).subspan(start, len)));
      }
      EXPECT_EQ(comparer.position(), c.a.size());
      ExpectSameReport(comparer.Finish(), CertifyLockstep(c, options));
    }
  }
}

TEST(LockstepComparerTest, StopsWhereTheKeysStopLiningUp) {
  Case c = MakeCase(100, 10, {20});
  c.b[57].key.name_hash ^= 1;
  LockstepComparer comparer(true, CertifyOptions{});
  EXPECT_FALSE(comparer.Feed(std::span(c.a).first(80), std::span(c.b).first(80)));
  EXPECT_FALSE(comparer.lines_up());
  EXPECT_EQ(comparer.position(), 57u);
  EXPECT_FALSE(comparer.Feed(std::span(c.a).subspan(80), std::span(c.b).subspan(80)));
  // What was compared before the mismatch is still reported.
  const CertifyReport report = comparer.Finish();
  EXPECT_EQ(report.pairs, 57u);
  ASSERT_TRUE(report.first_divergence.has_value());
  EXPECT_EQ(report.first_divergence->index_a, 20u);
}

TEST(LockstepComparerTest, UnequalChunksDoNotLineUp) {
  const Case c = MakeCase(10, 10, {});
  LockstepComparer comparer(true, CertifyOptions{});
  EXPECT_FALSE(comparer.Feed(std::span(c.a), std::span(c.b).first(9)));
  EXPECT_FALSE(comparer.lines_up());
  EXPECT_EQ(comparer.position(), 9u);
}

TEST(CertifyTest, KindNamesAreStable) {
  EXPECT_STREQ(DivergenceKindName(DivergenceKind::kNone), "none");
  EXPECT_STREQ(DivergenceKindName(DivergenceKind::kIsolated), "isolated");
  EXPECT_STREQ(DivergenceKindName(DivergenceKind::kPropagates), "propagates");
  EXPECT_STREQ(DivergenceKindName(DivergenceKind::kUndetermined), "undetermined");
}

}  // namespace
}  // namespace dgrr::replay
