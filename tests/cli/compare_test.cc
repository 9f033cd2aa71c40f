// dgrr compare, run in-process: exit codes, the text report, the JSON schema
// (dgrr.compare/4), --ignore, --perfetto, configs listed first, bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/file.h"
#include "runtime/session.h"
#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/trace_format/sample_trace.h"
#include "trace_format/writer.h"

namespace dgrr::cli {
namespace {

using nlohmann::json;

class CompareCommandTest : public trace::testing::TempDirTest {
 protected:
  // 3 steps x 6 boundaries "layer<k>.out"; `flip` changes one xxh3 bit;
  // layer2.out is bf16 (other bits) from step `bf16_from` on.
  void WriteTrace(const std::string& path, int flip = -1, int bf16_from = -1) {
    trace::TraceHeader header;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok());
    for (int k = 0; k < 18; ++k) {
      auto id = (*writer)->InternName("layer" + std::to_string(k % 6) + ".out");
      ASSERT_TRUE(id.ok());
      trace::BoundaryRecord r;
      r.step = k / 6;
      r.seq = k;
      r.name_id = *id;
      r.ndim = 1;
      r.dims[0] = 16;
      r.first_example = (k / 6) * 2;
      r.example_count = 2;
      r.xor64 = 0xabc0 + k;
      r.xxh3 = (0xdef0 + k) ^ (k == flip ? 0x100 : 0);
      if (bf16_from >= 0 && k % 6 == 2 && k / 6 >= bf16_from) {
        r.dtype = DType::kBF16;
        r.xxh3 ^= 0x200;
      }
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  // The same trace as WriteTrace, with an extra boundary "debug.probe"
  // before boundary `extra_before`, boundary `drop` left out and boundary
  // `flip`'s xxh3 changed.
  void WriteChangedTrace(const std::string& path, int extra_before, int drop, int flip = -1) {
    trace::TraceHeader header;
    auto writer = trace::TraceWriter::Create(path, header);
    ASSERT_TRUE(writer.ok());
    for (int k = 0; k < 18; ++k) {
      trace::BoundaryRecord r;
      r.step = k / 6;
      r.seq = 2 * k;
      r.ndim = 1;
      r.dims[0] = 16;
      r.first_example = (k / 6) * 2;
      r.example_count = 2;
      if (k == extra_before) {
        auto probe = (*writer)->InternName("debug.probe");
        ASSERT_TRUE(probe.ok());
        r.name_id = *probe;
        ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
      }
      if (k == drop) continue;
      auto id = (*writer)->InternName("layer" + std::to_string(k % 6) + ".out");
      ASSERT_TRUE(id.ok());
      r.seq = 2 * k + 1;
      r.name_id = *id;
      r.xor64 = 0xabc0 + k;
      r.xxh3 = (0xdef0 + k) ^ (k == flip ? 0x100 : 0);
      ASSERT_TRUE((*writer)->AppendBoundary(r).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  int Compare(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    args.insert(args.begin(), "compare");
    CommandOutput r = RunCaptured(args);
    *out = std::move(r.out);
    if (err) *err = std::move(r.err);
    return r.rc;
  }
};

TEST_F(CompareCommandTest, TraceWithItselfExitsZero) {
  const std::string a = Path("a.trace");
  WriteTrace(a);
  std::string out;
  EXPECT_EQ(Compare({a, a}, &out), 0);
  EXPECT_NE(out.find("alignment: lockstep, 18 pairs"), std::string::npos) << out;
  EXPECT_NE(out.find("certified prefix: 18 pairs, 3 steps"), std::string::npos);
  EXPECT_NE(out.find("result: no divergence"), std::string::npos);
}

TEST_F(CompareCommandTest, PlantedBitExitsFourNamingStepNameAndRecords) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteTrace(b, /*flip=*/9);
  std::string out;
  EXPECT_EQ(Compare({a, b, "--context", "2"}, &out), kExitDivergence);
  // Records: step 0 interleaves a NAME record before each boundary (12
  // records), then boundaries 6, 7, 8 and ours at record 15.
  EXPECT_NE(out.find("first divergence: pair #9: step 1 rank 0 forward output layer3.out f32[16]"
                     " examples 2+2"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("A xor64=0x000000000000abc9 xxh3=0x000000000000def9  record #15 of " + a),
            std::string::npos);
  EXPECT_NE(out.find("B xor64=0x000000000000abc9 xxh3=0x000000000000dff9  record #15 of " + b),
            std::string::npos);
  EXPECT_NE(out.find("#7 equal"), std::string::npos);
  EXPECT_NE(out.find("#11 equal"), std::string::npos);
  EXPECT_EQ(out.find("#6 equal"), std::string::npos);  // --context 2
  EXPECT_NE(out.find("an isolated divergence"), std::string::npos);
}

TEST_F(CompareCommandTest, IgnoreHidesTheDivergence) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteTrace(b, 9);
  std::string out;
  EXPECT_EQ(Compare({a, b, "--ignore", "layer3.*", "--ignore", "nothing*"}, &out), 0) << out;
  EXPECT_NE(out.find("ignored: 3 in A, 3 in B"), std::string::npos) << out;
}

TEST_F(CompareCommandTest, JsonFollowsTheSchema) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteTrace(b, 4);
  std::string out;
  ASSERT_EQ(Compare({a, b, "--json"}, &out), kExitDivergence);
  json doc = json::parse(out);
  EXPECT_EQ(doc["schema"], "dgrr.compare/4");
  EXPECT_EQ(doc["verdict"], "divergence");
  for (const char* side : {"a", "b"}) {
    const json& s = doc[side];
    EXPECT_TRUE(s["path"].is_string());
    EXPECT_TRUE(s["kind"] == "trace" || s["kind"] == "run_dir");
    EXPECT_TRUE(s["world_size"].is_number_unsigned());
    EXPECT_TRUE(s["traces"].is_array());
    EXPECT_TRUE(s["boundaries"].is_number_unsigned());
    EXPECT_TRUE(s["ignored"].is_number_unsigned());
    EXPECT_TRUE(s["warnings"].is_array());
  }
  EXPECT_TRUE(doc["ranks"] == "paired" || doc["ranks"] == "merged");
  for (const char* section : {"config", "environment"}) {
    EXPECT_TRUE(doc[section]["available"].is_boolean());
    EXPECT_TRUE(doc[section]["digests_differ"].is_boolean());
    EXPECT_TRUE(doc[section]["differences"].is_array());
  }
  const json& al = doc["alignment"];
  EXPECT_EQ(al["mode"], "lockstep");
  for (const char* key : {"lockstep_prefix", "length_a", "length_b", "unmatched_a", "unmatched_b",
                          "anchors", "moved_pairs", "repeat_key_pairs", "fingerprint_pairs"}) {
    EXPECT_TRUE(al[key].is_number_unsigned()) << key;
  }
  for (const char* key : {"length_ratio", "unmatched_fraction", "anchor_density"}) {
    EXPECT_TRUE(al[key].is_number()) << key;
  }
  const json& c = doc["certification"];
  EXPECT_EQ(c["pairs"], 18);
  EXPECT_EQ(c["certified_pairs"], 4);
  EXPECT_EQ(c["differing_pairs"], 1);
  EXPECT_EQ(c["later_differing_pairs"], 0);
  EXPECT_TRUE(c["certified_steps"].is_number_unsigned());
  EXPECT_EQ(c["prefix_ends_at"], "divergence");
  const json& cov = doc["coverage"];
  for (const char* key : {"uncompared", "no_counterpart", "outside_reach", "ambiguous", "replicas"}) {
    EXPECT_EQ(cov[key], 0) << key;
  }
  EXPECT_TRUE(cov["first"].is_array());
  const json& d = doc["divergence"];
  EXPECT_EQ(d["kind"], "isolated");
  EXPECT_EQ(d["before"].size(), 3u);
  EXPECT_EQ(d["after"].size(), 3u);
  const json& first = d["first"];
  EXPECT_EQ(first["status"], "differs");
  EXPECT_EQ(first["ordinal"], 4);
  for (const char* side : {"a", "b"}) {
    const json& x = first[side];
    EXPECT_EQ(x["name"], "layer4.out");
    EXPECT_EQ(x["step"], 0);
    EXPECT_EQ(x["rank"], 0);
    EXPECT_EQ(x["phase"], "forward");
    EXPECT_EQ(x["direction"], "output");
    EXPECT_EQ(x["dtype"], "f32");
    EXPECT_EQ(x["shape"], json::array({16}));
    EXPECT_EQ(x["record_index"], 2 * 4 + 1);  // each earlier boundary follows its NAME record
    EXPECT_TRUE(x["xor64"].is_string());
    EXPECT_EQ(x["xxh3"].get<std::string>().size(), 18u);
    EXPECT_TRUE(x["trace"].is_string());
  }
  EXPECT_EQ(d["before"][0]["status"], "equal");

  ASSERT_EQ(Compare({a, a, "--json"}, &out), 0);
  doc = json::parse(out);
  EXPECT_EQ(doc["verdict"], "no_divergence");
  EXPECT_TRUE(doc["divergence"].is_null());
}

TEST_F(CompareCommandTest, BoundariesNeverComparedAreCountedListedAndEndThePrefix) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteChangedTrace(b, 8, 13);  // debug.probe only in B (step 1), layer1.out of step 2 only in A
  std::string out;
  ASSERT_EQ(Compare({a, b, "--json"}, &out), 0);
  json doc = json::parse(out);
  EXPECT_EQ(doc["verdict"], "no_divergence");
  const json& cov = doc["coverage"];
  EXPECT_EQ(cov["uncompared"], 2);
  EXPECT_EQ(cov["no_counterpart"], 2);
  ASSERT_EQ(cov["first"].size(), 2u);
  EXPECT_EQ(cov["first"][0]["side"], "B");
  EXPECT_EQ(cov["first"][0]["reason"], "no_counterpart");
  EXPECT_EQ(cov["first"][0]["boundary"]["name"], "debug.probe");
  EXPECT_EQ(cov["first"][1]["side"], "A");
  EXPECT_EQ(cov["first"][1]["boundary"]["name"], "layer1.out");
  EXPECT_EQ(cov["first"][1]["boundary"]["index"], 13);
  // The prefix ends before the first pair past the extra boundary.
  EXPECT_EQ(doc["certification"]["certified_pairs"], 8);
  EXPECT_EQ(doc["certification"]["certified_steps"], 1);
  EXPECT_EQ(doc["certification"]["prefix_ends_at"], "uncompared");

  ASSERT_EQ(Compare({a, b}, &out), 0);
  EXPECT_NE(out.find("coverage: 2 boundaries never compared (2 without a counterpart"),
            std::string::npos) << out;
  EXPECT_NE(out.find("B #8 no_counterpart  step 1 rank 0 forward output debug.probe"),
            std::string::npos) << out;
  EXPECT_NE(out.find("certified prefix: 8 pairs, 1 steps (ends at the first uncompared boundary)"),
            std::string::npos) << out;

  // --ignore covers the extra boundary: the prefix runs on to the dropped one.
  ASSERT_EQ(Compare({a, b, "--json", "--ignore", "debug.*"}, &out), 0);
  doc = json::parse(out);
  EXPECT_EQ(doc["coverage"]["uncompared"], 1);
  EXPECT_EQ(doc["certification"]["certified_pairs"], 13);
}

// A layer recorded as bf16 from step 1 (autocast): that boundary is the
// divergence, named with its kind, not "never compared" with the next layer
// named instead (issue 26).
TEST_F(CompareCommandTest, ADtypeChangeIsTheDivergenceAtItsBoundary) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteTrace(b, /*flip=*/9, /*bf16_from=*/1);
  std::string out;
  EXPECT_EQ(Compare({a, b}, &out), kExitDivergence);
  EXPECT_NE(out.find("coverage: every boundary compared"), std::string::npos) << out;
  EXPECT_NE(out.find("first divergence: pair #8 (dtype f32 -> bf16): step 1 rank 0 forward output "
                     "layer2.out f32[16] examples 2+2"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("caution"), std::string::npos) << out;
  ASSERT_EQ(Compare({a, b, "--json"}, &out), kExitDivergence);
  const json doc = json::parse(out);
  EXPECT_EQ(doc["schema"], "dgrr.compare/4");
  EXPECT_EQ(doc["divergence"]["first"]["difference"], "dtype");
  EXPECT_EQ(doc["divergence"]["first"]["b"]["dtype"], "bf16");
  EXPECT_EQ(doc["divergence"]["earlier_uncompared"], 0);
  EXPECT_EQ(doc["divergence"]["after"][0]["difference"], "values");  // layer3.out, the planted bit
  EXPECT_EQ(doc["certification"]["differing_pairs"], 3);             // layer2 of steps 1, 2; layer3
}

// A boundary B lacks before the first differing pair: that pair is only the
// first compared difference, and compare says so.
TEST_F(CompareCommandTest, UncomparedBoundariesBeforeTheDivergenceAreCountedAndSaid) {
  const std::string a = Path("a.trace"), b = Path("b.trace");
  WriteTrace(a);
  WriteChangedTrace(b, /*extra_before=*/-1, /*drop=*/9, /*flip=*/10);
  std::string out;
  ASSERT_EQ(Compare({a, b}, &out), kExitDivergence);
  EXPECT_NE(out.find("first divergence: pair #9: step 1 rank 0 forward output layer4.out"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  caution: 1 boundary before this pair could not be compared: it is the first "
                     "compared difference, and the true first divergence may be that boundary:\n"
                     "    A #9 no_counterpart  step 1 rank 0 forward output layer3.out"),
            std::string::npos)
      << out;
  ASSERT_EQ(Compare({a, b, "--json"}, &out), kExitDivergence);
  const json doc = json::parse(out);
  EXPECT_EQ(doc["divergence"]["earlier_uncompared"], 1);
  ASSERT_EQ(doc["divergence"]["earlier_uncompared_first"].size(), 1u);
  EXPECT_EQ(doc["divergence"]["earlier_uncompared_first"][0]["side"], "A");
  EXPECT_EQ(doc["divergence"]["earlier_uncompared_first"][0]["boundary"]["name"], "layer3.out");
  // The same boundary dropped after the divergence: nothing precedes it.
  WriteChangedTrace(Path("c.trace"), -1, /*drop=*/11, /*flip=*/10);
  ASSERT_EQ(Compare({a, Path("c.trace"), "--json"}, &out), kExitDivergence);
  EXPECT_EQ(json::parse(out)["divergence"]["earlier_uncompared"], 0);
}

// A run and a copy rolled back to step 9: the copy's traces are the run's
// first 10 steps, so steps 0..9 were all compared and equal. The surplus of
// A begins step 10, so it ends the prefix without cutting step 9.
TEST_F(CompareCommandTest, ARunCutAfterAStepCertifiesEveryStepItKept) {
  const std::string full = Path("full"), cut = Path("cut");
  CommandOutput r = RunCaptured({"train", "--model", "tiny", "--steps", "20", "--out", full, "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::error_code ec;
  std::filesystem::copy(full, cut, std::filesystem::copy_options::recursive, ec);
  ASSERT_FALSE(ec) << ec.message();
  r = RunCaptured({"rollback", cut, "--step", "9", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string out;
  ASSERT_EQ(Compare({full, cut, "--json"}, &out), 0) << out;
  const json doc = json::parse(out);
  EXPECT_EQ(doc["coverage"]["ambiguous"], 0);
  EXPECT_EQ(doc["coverage"]["first"][0]["boundary"]["step"], 10);
  EXPECT_EQ(doc["certification"]["prefix_ends_at"], "uncompared");
  EXPECT_EQ(doc["certification"]["certified_pairs"], doc["certification"]["pairs"]);
  EXPECT_EQ(doc["certification"]["certified_steps"], 10);
  ASSERT_EQ(Compare({full, cut}, &out), 0);
  EXPECT_NE(out.find(" pairs, 10 steps (ends at the first uncompared boundary)"), std::string::npos)
      << out;
}

TEST_F(CompareCommandTest, ConfigDifferencesComeFirstWithAWarning) {
  ASSERT_TRUE(CreateDirectories(Path("ra")).ok());
  ASSERT_TRUE(CreateDirectories(Path("rb")).ok());
  WriteTrace(Path("ra/rank0.trace"));
  WriteTrace(Path("rb/rank0.trace"), 12);
  ASSERT_TRUE(WriteFileAtomically(Path("ra/config.json"), R"({"lr": 0.1, "seed": 3})").ok());
  ASSERT_TRUE(WriteFileAtomically(Path("rb/config.json"), R"({"lr": 0.3, "seed": 3})").ok());
  std::string out, err;
  EXPECT_EQ(Compare({Path("ra"), Path("rb")}, &out, &err), kExitDivergence);
  EXPECT_NE(err.find("dgrr compare: warning: the runs' configs differ (1 key)"), std::string::npos)
      << err;
  const size_t config = out.find("config: 1 difference");
  ASSERT_NE(config, std::string::npos) << out;
  EXPECT_NE(out.find("  lr: 0.1 | 0.3"), std::string::npos);
  EXPECT_LT(config, out.find("alignment:"));
  EXPECT_LT(config, out.find("first divergence"));
  EXPECT_NE(out.find("record #"), std::string::npos);
  EXPECT_NE(out.find(Path("rb/rank0.trace")), std::string::npos);
}

TEST_F(CompareCommandTest, PerfettoFileIsWrittenAndParses) {
  const std::string a = Path("a.trace"), b = Path("b.trace"), view = Path("view.json");
  WriteTrace(a);
  WriteTrace(b, 7);
  std::string out;
  EXPECT_EQ(Compare({a, b, "--perfetto", view}, &out), kExitDivergence);
  auto text = ReadFileToString(view);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text);
  size_t slices = 0, instants = 0;
  for (const json& e : doc["traceEvents"]) {
    slices += e["ph"] == "X";
    instants += e["ph"] == "i";
  }
  EXPECT_EQ(slices, 36u);
  EXPECT_EQ(instants, 2u);
  EXPECT_NE(out.find("first divergence: pair #7"), std::string::npos);
}

TEST_F(CompareCommandTest, PerfettoCapIsAnOptionAndACutIsSaidOnStderr) {
  const std::string a = Path("a.trace"), b = Path("b.trace"), view = Path("view.json");
  WriteTrace(a);
  WriteTrace(b, 7);
  std::string out, err;
  EXPECT_EQ(Compare({a, b, "--perfetto", view, "--perfetto-max-pairs", "4"}, &out, &err), kExitDivergence);
  EXPECT_NE(err.find("dgrr compare: warning: the Perfetto view draws pairs #5..#8 of 18 "
                     "(--perfetto-max-pairs 4; 0 draws all)"),
            std::string::npos)
      << err;
  auto text = ReadFileToString(view);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text);
  EXPECT_EQ(doc["otherData"]["truncated"], true);
  EXPECT_EQ(doc["otherData"]["pairs_shown"], 4);
  // Uncut: no warning.
  EXPECT_EQ(Compare({a, b, "--perfetto", view, "--perfetto-max-pairs", "0"}, &out, &err), kExitDivergence);
  EXPECT_EQ(err.find("Perfetto view draws"), std::string::npos) << err;
}

// A data-parallel run recorded through the Session API: per-example
// activations (example_count 1) and an all-reduced gradient on every rank.
void RecordRun(const std::string& dir, int world) {
  const RunId run_id = NewRunId();
  for (int rank = 0; rank < world; ++rank) {
    SessionOptions o;
    o.run_dir = dir;
    o.rank = rank;
    o.world_size = world;
    o.run_id = run_id;
    o.config_json = R"({"batch": 4, "lr": 0.5})";
    o.gpu = false;
    auto session = Session::Open(o);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    for (uint64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE((*session)->BeginStep(step).ok());
      for (int k = 0; k < 4 / world; ++k) {
        const uint64_t e = step * 4 + rank * (4 / world) + k;
        std::vector<double> act = {1.0 * e, 2.0 * e};
        auto t = MakeTensorRef(act.data(), DType::kF64, {2});
        ASSERT_TRUE((*session)->Record("embed.out", trace::Phase::kForward,
                                       trace::Direction::kOutput, *t, {e, 1}).ok());
      }
      std::vector<double> grad = {0.5 * step};
      auto g = MakeTensorRef(grad.data(), DType::kF64, {1});
      ASSERT_TRUE((*session)->Record("grad.allreduce", trace::Phase::kCollective,
                                     trace::Direction::kOutput, *g, {step * 4, 4}).ok());
      ASSERT_TRUE((*session)->EndStep(step, 0.25f).ok());
    }
    ASSERT_TRUE((*session)->Close().ok());
  }
}

TEST_F(CompareCommandTest, OneRankAndFourRankRunsOfTheSameConfigAgree) {
  RecordRun(Path("one"), 1);
  RecordRun(Path("four"), 4);
  std::string out, err;
  EXPECT_EQ(Compare({Path("one"), Path("four")}, &out, &err), 0) << out << err;
  EXPECT_NE(out.find("ranks: compared as logical runs (world sizes differ)"), std::string::npos) << out;
  EXPECT_NE(out.find("config: identical"), std::string::npos);
  // The 3 other ranks' all-reduce copies of each step are checked against
  // rank 0's, not left over: the whole run lines up and is certified.
  EXPECT_NE(out.find("(9 copies of other ranks checked against it)"), std::string::npos) << out;
  EXPECT_NE(out.find("alignment: lockstep, 15 pairs"), std::string::npos) << out;
  EXPECT_NE(out.find("certified prefix: 15 pairs, 3 steps"), std::string::npos) << out;
  EXPECT_EQ(err.find("configs differ"), std::string::npos);
  EXPECT_EQ(Compare({Path("four"), Path("four"), "--json"}, &out), 0);
  EXPECT_EQ(json::parse(out)["ranks"], "paired");
}

TEST_F(CompareCommandTest, MissingFileIsTwoCorruptTraceIsThree) {
  const std::string a = Path("a.trace"), bad = Path("bad.trace");
  WriteTrace(a);
  std::string out, err;
  EXPECT_EQ(Compare({a, Path("missing.trace")}, &out, &err), kExitIO);
  EXPECT_NE(err.find("missing.trace"), std::string::npos) << err;

  std::string bytes = ReadBytes(a);
  bytes[trace::RecordOffset(8) + 30] ^= 0x40;
  WriteBytes(bad, bytes);
  EXPECT_EQ(Compare({bad, a}, &out, &err), kExitInvalidData);
  EXPECT_NE(err.find("bad.trace"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);

  EXPECT_EQ(Compare({a}, &out, &err), kExitUsage);
}

}  // namespace
}  // namespace dgrr::cli
