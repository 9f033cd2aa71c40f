// The first divergence must be the first (issue 26, item 2): a boundary whose
// dtype or shape changed pairs and is the divergence, named with that kind;
// and when boundaries before the first differing pair could not be compared,
// compare, report and bisect say so (divergence.earlier_uncompared) instead
// of presenting a later pair as the first. Traces are written with the trace
// writer; the three ways of the issue: (a) a layer recorded as bf16 from step
// K on, (b) repeated keys reordered beyond the mapper's guarantee, (c) any
// other boundary left uncompared before the first difference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/dtype.h"
#include "replay/bisect.h"
#include "replay/compare.h"
#include "replay/report.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/writer.h"

namespace dgrr::replay {
namespace {

using nlohmann::ordered_json;

struct Spec {
  std::string name;
  uint64_t step = 0;
  uint64_t first_example = 0;
  uint32_t example_count = 4;
  DType dtype = DType::kF32;
  std::vector<uint64_t> dims = {4, 8};
  uint64_t xor64 = 0;
  uint64_t xxh3 = 0;
};

// `steps` steps of `per_step` boundaries "block<k>.out", examples 4 per step,
// fingerprints from the position: two calls give equal runs.
std::vector<Spec> ModelLike(int steps, int per_step) {
  std::vector<Spec> out;
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < per_step; ++k) {
      Spec spec;
      spec.name = "block" + std::to_string(k) + ".out";
      spec.step = s;
      spec.first_example = s * 4;
      spec.xor64 = 0x1000 + s * 100 + k;
      spec.xxh3 = 0x9000 + s * 100 + k;
      out.push_back(spec);
    }
  }
  return out;
}

// What autocast does to a layer's output: bf16, half the bytes, other bits.
void ToBf16(Spec* s) {
  s->dtype = DType::kBF16;
  s->xor64 ^= 0xbf16;
  s->xxh3 ^= 0xbf16;
}

class FirstDivergenceTest : public test_support::TempDirTest {
 protected:
  static void WriteTrace(const std::string& path, const std::vector<Spec>& specs) {
    trace::TraceHeader header;
    header.seed = 7;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    uint64_t seq = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      auto id = (*writer)->InternName(s.name);
      ASSERT_TRUE(id.ok());
      trace::BoundaryRecord r;
      r.step = s.step;
      r.seq = seq++;
      r.name_id = *id;
      r.dtype = s.dtype;
      r.ndim = static_cast<uint8_t>(s.dims.size());
      uint64_t elements = 1;
      for (size_t d = 0; d < s.dims.size(); ++d) {
        r.dims[d] = s.dims[d];
        elements *= s.dims[d];
      }
      r.byte_count = elements * DTypeSize(s.dtype);
      r.first_example = s.first_example;
      r.example_count = s.example_count;
      r.xor64 = s.xor64;
      r.xxh3 = s.xxh3;
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
      if (i + 1 == specs.size() || specs[i + 1].step != s.step) {
        trace::StepRecord step;
        step.step = s.step;
        step.kind = trace::StepKind::kEnd;
        ASSERT_TRUE((*writer)->AppendStep(step).ok());
      }
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }

  // Compares A with B both ways the CLI does: streaming (lockstep when the
  // keys line up) and in memory (as report and --perfetto do); the two must
  // tell the same story.
  CompareResult Compare(const std::vector<Spec>& a, const std::vector<Spec>& b,
                        bool keep_sequences = false) {
    // A trace is never overwritten: each comparison writes its own pair.
    const std::string n = std::to_string(compared_++);
    const std::string pa = Path("a" + n + ".trace"), pb = Path("b" + n + ".trace");
    WriteTrace(pa, a);
    WriteTrace(pb, b);
    CompareOptions options;
    options.keep_sequences = keep_sequences;
    auto r = CompareRuns(pa, pb, options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    if (!keep_sequences) {
      CompareOptions in_memory = options;
      in_memory.keep_sequences = true;
      auto m = CompareRuns(pa, pb, in_memory);
      EXPECT_TRUE(m.ok());
      if (m.ok()) {
        EXPECT_EQ(m->diverged(), r->diverged());
        EXPECT_EQ(m->earlier_uncompared, r->earlier_uncompared);
        EXPECT_EQ(m->certify.certified_pairs, r->certify.certified_pairs);
        if (m->first_divergence && r->first_divergence) {
          EXPECT_EQ(m->first_divergence->ordinal, r->first_divergence->ordinal);
          EXPECT_EQ(m->first_divergence->difference, r->first_divergence->difference);
        }
      }
    }
    return std::move(r).value();
  }

 private:
  int compared_ = 0;
};

// ---- (a) dtype and shape: the boundary pairs and is the divergence ----------

TEST_F(FirstDivergenceTest, LayerRecordedAsBf16FromStepKIsTheFirstDivergence) {
  const std::vector<Spec> a = ModelLike(6, 8);
  std::vector<Spec> b = a;
  // block3 runs under bf16 autocast from step 2: its output is bf16 there on,
  // and the next layer's output differs in value from then on too.
  for (Spec& s : b) {
    if (s.step >= 2 && s.name == "block3.out") ToBf16(&s);
    if (s.step >= 2 && s.name == "block4.out") s.xxh3 ^= 1;
  }
  const CompareResult r = Compare(a, b);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_TRUE(r.lockstep);  // a dtype change does not break the lockstep pairing
  EXPECT_EQ(r.coverage.uncompared(), 0u);
  const ReportedPair& d = *r.first_divergence;
  EXPECT_EQ(d.a.name, "block3.out");  // not block4.out, the next layer
  EXPECT_EQ(d.a.record.step, 2u);
  EXPECT_EQ(d.ordinal, 2u * 8 + 3);
  EXPECT_EQ(d.difference, Difference::kDtype);
  EXPECT_EQ(d.a.record.dtype, DType::kF32);
  EXPECT_EQ(d.b.record.dtype, DType::kBF16);
  EXPECT_EQ(r.certify.certified_pairs, 2u * 8 + 3);
  EXPECT_EQ(r.certify.certified_steps, 2u);
  EXPECT_EQ(r.certify.differing, 4u * 2);  // block3 and block4 of steps 2..5
  EXPECT_EQ(r.earlier_uncompared, 0u);

  const std::string text = CompareText(r);
  EXPECT_NE(text.find("first divergence: pair #19 (dtype f32 -> bf16): step 2 rank 0 forward "
                      "output block3.out f32[4,8]"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("caution"), std::string::npos) << text;
  // The context names each pair's kind: the dtype change, the value change.
  EXPECT_NE(text.find("> #19 differs (dtype f32 -> bf16)"), std::string::npos) << text;
  EXPECT_NE(text.find("#20 differs  step 2"), std::string::npos) << text;

  const ordered_json j = CompareJson(r);
  EXPECT_EQ(j["schema"], "dgrr.compare/4");
  EXPECT_EQ(j["divergence"]["first"]["difference"], "dtype");
  EXPECT_EQ(j["divergence"]["first"]["a"]["dtype"], "f32");
  EXPECT_EQ(j["divergence"]["first"]["b"]["dtype"], "bf16");
  EXPECT_EQ(j["divergence"]["earlier_uncompared"], 0);
  EXPECT_TRUE(j["divergence"]["earlier_uncompared_first"].empty());
  EXPECT_TRUE(j["divergence"]["before"][0]["difference"].is_null());  // an equal pair
  EXPECT_EQ(j["divergence"]["after"][0]["difference"], "values");     // block4.out
  EXPECT_EQ(j["coverage"]["uncompared"], 0);
}

TEST_F(FirstDivergenceTest, EqualFingerprintsUnderAnotherDtypeStillDiffer) {
  const std::vector<Spec> a = ModelLike(3, 4);
  std::vector<Spec> b = a;
  b[5].dtype = DType::kF16;  // same bits reinterpreted: still another tensor
  const CompareResult r = Compare(a, b);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_EQ(r.first_divergence->ordinal, 5u);
  EXPECT_EQ(r.first_divergence->difference, Difference::kDtype);
  EXPECT_EQ(r.certify.kind, DivergenceKind::kIsolated);
}

TEST_F(FirstDivergenceTest, ShapeChangeIsNamedWithBothShapes) {
  const std::vector<Spec> a = ModelLike(4, 5);
  std::vector<Spec> b = a;
  b[7].dims = {4, 16};
  b[7].xxh3 ^= 5;
  const CompareResult r = Compare(a, b);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_EQ(r.first_divergence->ordinal, 7u);
  EXPECT_EQ(r.first_divergence->difference, Difference::kShape);
  EXPECT_EQ(r.coverage.uncompared(), 0u);
  EXPECT_NE(CompareText(r).find("(shape [4,8] -> [4,16])"), std::string::npos) << CompareText(r);
  EXPECT_EQ(CompareJson(r)["divergence"]["first"]["difference"], "shape");
}

TEST_F(FirstDivergenceTest, DtypeAndShapeTogether) {
  const std::vector<Spec> a = ModelLike(2, 4);
  std::vector<Spec> b = a;
  b[2].dtype = DType::kBF16;
  b[2].dims = {8};
  const CompareResult r = Compare(a, b);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_EQ(r.first_divergence->difference, Difference::kDtypeAndShape);
  EXPECT_EQ(DifferenceText(*r.first_divergence), "dtype f32 -> bf16, shape [4,8] -> [8]");
  EXPECT_EQ(CompareJson(r)["divergence"]["first"]["difference"], "dtype_and_shape");
}

// At the edges of the sequence: the very first and the very last boundary.
TEST_F(FirstDivergenceTest, DtypeOrShapeChangeAtTheFirstBoundary) {
  for (const bool shape : {false, true}) {
    SCOPED_TRACE(shape ? "shape" : "dtype");
    const std::vector<Spec> a = ModelLike(3, 4);
    std::vector<Spec> b = a;
    if (shape) {
      b[0].dims = {4, 7};
    } else {
      ToBf16(&b[0]);
    }
    const CompareResult r = Compare(a, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->ordinal, 0u);
    EXPECT_EQ(r.first_divergence->a.name, "block0.out");
    EXPECT_EQ(r.first_divergence->difference, shape ? Difference::kShape : Difference::kDtype);
    EXPECT_EQ(r.certify.certified_pairs, 0u);
    EXPECT_EQ(r.certify.certified_steps, 0u);
    EXPECT_EQ(r.earlier_uncompared, 0u);
    EXPECT_EQ(r.coverage.uncompared(), 0u);
    EXPECT_TRUE(r.before.empty());
  }
}

TEST_F(FirstDivergenceTest, DtypeOrShapeChangeAtTheLastBoundary) {
  for (const bool shape : {false, true}) {
    SCOPED_TRACE(shape ? "shape" : "dtype");
    const std::vector<Spec> a = ModelLike(3, 4);
    std::vector<Spec> b = a;
    if (shape) {
      b.back().dims = {2, 8};
    } else {
      ToBf16(&b.back());
    }
    const CompareResult r = Compare(a, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->ordinal, 11u);
    EXPECT_EQ(r.first_divergence->a.name, "block3.out");
    EXPECT_EQ(r.first_divergence->difference, shape ? Difference::kShape : Difference::kDtype);
    EXPECT_EQ(r.certify.kind, DivergenceKind::kUndetermined);
    EXPECT_EQ(r.certify.certified_pairs, 11u);
    EXPECT_EQ(r.certify.certified_steps, 2u);
    EXPECT_EQ(r.earlier_uncompared, 0u);
  }
}

// The tolerant mapper pairs across a changed dtype too: B has an extra
// boundary first (so the keys stop lining up) and block2 in bf16 later.
TEST_F(FirstDivergenceTest, TolerantMapperPairsAcrossADtypeChange) {
  const std::vector<Spec> a = ModelLike(5, 6);
  std::vector<Spec> b = a;
  for (Spec& s : b) {
    if (s.step >= 3 && s.name == "block2.out") ToBf16(&s);
  }
  Spec extra = b[20];
  extra.name = "debug.probe";
  b.insert(b.begin() + 20, extra);  // step 3, B only: uncompared, before the divergence
  const CompareResult r = Compare(a, b);
  EXPECT_FALSE(r.lockstep);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_EQ(r.first_divergence->a.name, "block2.out");
  EXPECT_EQ(r.first_divergence->a.record.step, 3u);
  EXPECT_EQ(r.first_divergence->difference, Difference::kDtype);
  EXPECT_EQ(r.coverage.uncompared(), 1u);
  EXPECT_EQ(r.earlier_uncompared, 1u);  // the probe sits before block2.out in B
  ASSERT_EQ(r.earlier_uncompared_listed.size(), 1u);
  EXPECT_EQ(r.earlier_uncompared_listed[0].side, 'B');
  EXPECT_EQ(r.earlier_uncompared_listed[0].boundary.name, "debug.probe");
}

// ---- (b) repeated keys reordered beyond the guarantee -----------------------

// Each step: p, X, X, Y, X, allreduce.grad in A; B reorders one X past Y
// (p, X, Y, X, X, allreduce.grad). A fault in the second X of step 2
// propagates: both later X and the all-reduce differ. The X occurrences after
// the reorder have two candidates each and no evidence (nothing identical), so
// they stay ambiguous; the first differing pair is the all-reduce.
std::vector<Spec> RepeatedKeysStep(int step, bool reordered, bool faulty) {
  std::vector<Spec> out;
  auto add = [&](const char* name, int k, bool differs) {
    Spec s;
    s.name = name;
    s.step = step;
    s.first_example = step * 4;
    s.xor64 = 0x1000 + step * 100 + k;
    s.xxh3 = 0x9000 + step * 100 + k + (differs ? 0x77 : 0);
    out.push_back(s);
  };
  add("p.out", 0, false);
  add("attn.x", 1, false);
  if (reordered) {
    add("y.out", 3, false);
    add("attn.x", 2, faulty);
    add("attn.x", 4, faulty);
  } else {
    add("attn.x", 2, faulty);
    add("y.out", 3, false);
    add("attn.x", 4, faulty);
  }
  add("allreduce.grad", 5, faulty);
  return out;
}

TEST_F(FirstDivergenceTest, RepeatedKeysReorderedLeaveEarlierBoundariesUncompared) {
  std::vector<Spec> a, b;
  for (int s = 0; s < 4; ++s) {
    for (const Spec& x : RepeatedKeysStep(s, false, false)) a.push_back(x);
    for (const Spec& x : RepeatedKeysStep(s, s >= 2, s == 2)) b.push_back(x);
  }
  const CompareResult r = Compare(a, b);
  ASSERT_TRUE(r.first_divergence.has_value());
  EXPECT_FALSE(r.lockstep);
  const ReportedPair& d = *r.first_divergence;
  EXPECT_EQ(d.a.name, "allreduce.grad");
  EXPECT_EQ(d.a.record.step, 2u);
  EXPECT_EQ(d.difference, Difference::kValues);
  EXPECT_EQ(r.coverage.ambiguous, 4u);
  // Two X of step 2 on each side could not be compared; they come before the
  // all-reduce on both sides, so it is only the first compared difference.
  EXPECT_EQ(r.earlier_uncompared, 4u);
  ASSERT_EQ(r.earlier_uncompared_listed.size(), 4u);
  for (const UncomparedBoundary& u : r.earlier_uncompared_listed) {
    EXPECT_EQ(u.boundary.name, "attn.x");
    EXPECT_EQ(u.why, Unpaired::kAmbiguous);
    EXPECT_EQ(u.boundary.record.step, 2u);
  }
  // The certified prefix stops before them, as it already did.
  EXPECT_TRUE(r.certify.stopped_at_uncompared);
  EXPECT_EQ(r.certify.certified_steps, 2u);

  const std::string text = CompareText(r);
  EXPECT_NE(text.find("first divergence: pair #"), std::string::npos) << text;
  EXPECT_NE(text.find("caution: 4 boundaries before this pair could not be compared: it is the "
                      "first compared difference, and the true first divergence may be among them"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    A #"), std::string::npos) << text;
  EXPECT_NE(text.find(" ambiguous  step 2 rank 0 forward output attn.x"), std::string::npos) << text;

  const ordered_json j = CompareJson(r);
  EXPECT_EQ(j["divergence"]["earlier_uncompared"], 4);
  ASSERT_EQ(j["divergence"]["earlier_uncompared_first"].size(), 4u);
  EXPECT_EQ(j["divergence"]["earlier_uncompared_first"][0]["reason"], "ambiguous");
  EXPECT_EQ(j["divergence"]["earlier_uncompared_first"][0]["boundary"]["name"], "attn.x");
}

// ---- (c) any other uncompared boundary, at the edges ------------------------

// A boundary of A missing from B (or one only B has) right before the first
// differing pair counts; one right after it does not.
TEST_F(FirstDivergenceTest, UncomparedRightBeforeOrRightAfterTheFirstDifference) {
  const std::vector<Spec> base = ModelLike(4, 6);
  const size_t d = 2 * 6 + 3;  // step 2, block3.out differs
  struct Case {
    const char* what;
    bool in_b;       // the uncompared boundary is one only B has (else one B lacks)
    bool before;     // right before the differing pair (else right after)
    uint64_t expected;
  };
  for (const Case& c : {Case{"A lacks in B, before", false, true, 1},
                        Case{"A lacks in B, after", false, false, 0},
                        Case{"B only, before", true, true, 1},
                        Case{"B only, after", true, false, 0}}) {
    SCOPED_TRACE(c.what);
    std::vector<Spec> a = base, b = base;
    b[d].xxh3 ^= 1;
    if (c.in_b) {
      Spec extra = b[d];
      extra.name = "debug.probe";
      b.insert(b.begin() + (c.before ? d : d + 1), extra);
    } else {
      b.erase(b.begin() + (c.before ? d - 1 : d + 1));
    }
    const CompareResult r = Compare(a, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->a.name, "block3.out");
    EXPECT_EQ(r.first_divergence->a.record.step, 2u);
    EXPECT_EQ(r.coverage.uncompared(), 1u);
    EXPECT_EQ(r.earlier_uncompared, c.expected);
    EXPECT_EQ(r.earlier_uncompared_listed.size(), c.expected);
    if (c.expected == 1) {
      EXPECT_EQ(r.earlier_uncompared_listed[0].side, c.in_b ? 'B' : 'A');
      EXPECT_EQ(r.earlier_uncompared_listed[0].boundary.name, c.in_b ? "debug.probe" : "block2.out");
    }
    const std::string text = CompareText(r);
    EXPECT_EQ(text.find("caution:") != std::string::npos, c.expected > 0) << text;
    EXPECT_EQ(CompareJson(r)["divergence"]["earlier_uncompared"], c.expected);
  }
}

// 0 exactly when nothing uncompared precedes: none at all, or all of them later.
TEST_F(FirstDivergenceTest, EarlierUncomparedIsZeroExactlyWhenNothingUncomparedPrecedes) {
  const std::vector<Spec> base = ModelLike(5, 4);
  {
    std::vector<Spec> b = base;
    b[9].xor64 ^= 1;
    const CompareResult r = Compare(base, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.coverage.uncompared(), 0u);
    EXPECT_EQ(r.earlier_uncompared, 0u);
  }
  {
    // Several uncompared boundaries, every one after the divergence.
    std::vector<Spec> b = base;
    b[9].xor64 ^= 1;
    b.erase(b.begin() + 17);
    b.erase(b.begin() + 12);
    const CompareResult r = Compare(base, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->ordinal, 9u);
    EXPECT_EQ(r.coverage.uncompared(), 2u);
    EXPECT_EQ(r.earlier_uncompared, 0u);
  }
  {
    // Many before: counted whole, the first few listed.
    std::vector<Spec> b = base;
    b[17].xor64 ^= 1;
    for (size_t at : {15, 13, 11, 9, 7, 5, 2}) b.erase(b.begin() + at);
    const CompareResult r = Compare(base, b);
    ASSERT_TRUE(r.first_divergence.has_value());
    EXPECT_EQ(r.first_divergence->a.name, "block1.out");
    EXPECT_EQ(r.first_divergence->a.record.step, 4u);
    EXPECT_EQ(r.earlier_uncompared, 7u);
    EXPECT_EQ(r.earlier_uncompared_listed.size(), kListedUncompared);
    EXPECT_NE(CompareText(r).find("    ... (2 more)"), std::string::npos) << CompareText(r);
    // A pair that differs in nothing but an uncompared neighbour is no divergence.
    EXPECT_EQ(r.certify.differing, 1u);
  }
  {
    // Uncompared boundaries and no divergence at all: nothing to qualify.
    std::vector<Spec> b = base;
    b.erase(b.begin() + 3);
    const CompareResult r = Compare(base, b);
    EXPECT_FALSE(r.first_divergence.has_value());
    EXPECT_EQ(r.earlier_uncompared, 0u);
    EXPECT_TRUE(CompareJson(r)["divergence"].is_null());
  }
}

// ---- report and bisect show the same -----------------------------------------

TEST_F(FirstDivergenceTest, ReportShowsTheKindAndTheEarlierUncompared) {
  std::vector<Spec> a, b;
  for (int s = 0; s < 4; ++s) {
    for (const Spec& x : RepeatedKeysStep(s, false, false)) a.push_back(x);
    for (const Spec& x : RepeatedKeysStep(s, s >= 2, s == 2)) b.push_back(x);
  }
  const CompareResult r = Compare(a, b, /*keep_sequences=*/true);
  ASSERT_TRUE(r.first_divergence.has_value());
  ASSERT_EQ(r.earlier_uncompared, 4u);
  const ordered_json summary = ReportSummaryJson(r, "report.html");
  EXPECT_EQ(summary["divergence"]["boundary"], "allreduce.grad");
  EXPECT_EQ(summary["divergence"]["difference"], "values");
  EXPECT_EQ(summary["divergence"]["earlier_uncompared"], 4);
  auto html = ReportHtml(r);
  ASSERT_TRUE(html.ok()) << html.status().ToString();
  EXPECT_NE(html->find("is the first compared pair whose fingerprints differ"), std::string::npos);
  EXPECT_NE(html->find("id=\"divergence-earlier\""), std::string::npos);
  EXPECT_NE(html->find("ambiguous: step 2, rank 0, forward output <code>attn.x</code>"), std::string::npos);

  // A dtype divergence with nothing uncompared before it.
  std::vector<Spec> c = ModelLike(3, 4), e = c;
  ToBf16(&e[6]);
  const CompareResult t = Compare(c, e, /*keep_sequences=*/true);
  ASSERT_TRUE(t.first_divergence.has_value());
  const ordered_json s2 = ReportSummaryJson(t, "report.html");
  EXPECT_EQ(s2["divergence"]["difference"], "dtype");
  EXPECT_EQ(s2["divergence"]["earlier_uncompared"], 0);
  auto html2 = ReportHtml(t);
  ASSERT_TRUE(html2.ok());
  EXPECT_NE(html2->find("that differs, in its tensor type (dtype f32 -&gt; bf16)"), std::string::npos);
  EXPECT_EQ(html2->find("id=\"divergence-earlier\""), std::string::npos);
  EXPECT_NE(html2->find("f32[4,8] &rarr; bf16[4,8]"), std::string::npos);
}

TEST_F(FirstDivergenceTest, BisectShowsTheEarlierUncompared) {
  std::vector<Spec> a, b;
  for (int s = 0; s < 4; ++s) {
    for (const Spec& x : RepeatedKeysStep(s, false, false)) a.push_back(x);
    for (const Spec& x : RepeatedKeysStep(s, s >= 2, s == 2)) b.push_back(x);
  }
  BisectResult result;
  result.good = "runs/good";
  result.bad = "runs/bad";
  result.verdict = BisectVerdict::kDiverged;
  result.ranks_compared = 1;
  result.steps_compared = 3;
  result.last_agreeing_step = 1;
  result.first_differing_step = 2;
  result.last_common_step = 3;
  BisectReplay replay;
  replay.from_checkpoint = 1;
  replay.first_step = 2;
  replay.last_step = 2;
  result.replay = replay;
  result.compare = Compare(a, b);
  ASSERT_TRUE(result.compare->first_divergence.has_value());
  const ordered_json j = BisectJson(result);
  EXPECT_EQ(j["divergence"]["a"]["name"], "allreduce.grad");
  EXPECT_EQ(j["divergence"]["difference"], "values");
  EXPECT_EQ(j["earlier_uncompared"], 4);
  EXPECT_EQ(j["compare"]["divergence"]["earlier_uncompared"], 4);
  EXPECT_NE(BisectText(result).find("caution: 4 boundaries before this pair could not be compared"),
            std::string::npos);

  // Agreeing runs: nothing to qualify.
  BisectResult agree;
  agree.verdict = BisectVerdict::kAgree;
  EXPECT_TRUE(BisectJson(agree)["earlier_uncompared"].is_null());
}

}  // namespace
}  // namespace dgrr::replay
