// dgrr replay, in-process: a faithful run verifies; a resumed run that forgot
// to restore a state variable is caught at the first boundary that needs it.
// replay --dump writes the recorded bytes of a boundary, and diff-tensor finds
// an injected bit flip in them.
#include <gtest/gtest.h>

#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"
#include "tests/support/timeless_records.h"
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "base/file.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "runtime/session.h"
#include "trace_format/reader.h"

namespace dgrr::cli {
namespace {

namespace fs = std::filesystem;

class ReplayCommandTest : public ::dgrr::test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    run_ = Path("run");
    Quiet([&] {
      ASSERT_EQ(RunDgrr({"train", "--out", run_, "--steps", "12", "--ranks", "2", "--ckpt-every", "4",
                         "--quiet"}),
                0);
    });
  }
  static std::pair<std::string, std::string> Quiet(const std::function<void()>& f) { return CaptureOutput(f); }
  std::string run_;
};

TEST_F(ReplayCommandTest, AFaithfulRunVerifiesFromTheStartOrACheckpoint) {
  int rc = -1;
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--json"}); });
  ASSERT_EQ(rc, 0) << err;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("schema"), "dgrr.replay/1");
  EXPECT_EQ(j.at("result"), "verified");
  EXPECT_TRUE(j.at("from_checkpoint").is_null());
  EXPECT_EQ(j.at("steps_verified"), 24) << "12 step ends on each of 2 ranks";
  EXPECT_GT(j.at("boundaries_verified").get<uint64_t>(), 2000u);

  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "9", "--json"}); });
  ASSERT_EQ(rc, 0) << err;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("from_checkpoint"), 7) << "the newest checkpoint before step 9";
  EXPECT_EQ(j.at("first_step"), 8);
  EXPECT_EQ(j.at("steps_verified"), 8);
}

TEST_F(ReplayCommandTest, AForgottenRestoreIsCaughtAtTheFirstBoundaryThatNeedsIt) {
  // Resume from the checkpoint of step 3, forgetting AdamW's second moment.
  for (const auto& e : fs::directory_iterator(run_ + "/ckpt")) {
    // The checkpoint of step 3: its manifest and its shards.
    if (e.path().filename().string().rfind("step-00000003.", 0) != 0) fs::remove(e.path());
  }
  int rc = -1;
  Quiet([&] { rc = RunDgrr({"train", "--out", run_, "--resume", "--inject", "skip-restore:adamw.v", "--quiet"}); });
  ASSERT_EQ(rc, 0);
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "4"}); });
  EXPECT_EQ(rc, kExitReplayIntegrity);
  EXPECT_NE(err.find("step 4, rank 0, boundary wte"), std::string::npos) << err;
  EXPECT_NE(err.find("recorded xor64"), std::string::npos) << err;
}

TEST_F(ReplayCommandTest, ARunStoppedEarlyReplaysWhatEveryRankRecorded) {
  // Rolled back to step 6: the config still names 12 steps, the traces end at 6.
  int rc = -1;
  auto [out, err] = Quiet([&] { rc = RunDgrr({"rollback", run_, "--step", "6", "--quiet"}); });
  ASSERT_EQ(rc, 0) << err;
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_, "--json"}); });
  ASSERT_EQ(rc, 0) << err;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("result"), "verified");
  EXPECT_EQ(j.at("last_step"), 6);
  EXPECT_EQ(j.at("steps_verified"), 14) << "steps 0..6 on each of 2 ranks";
  // Asking for steps the traces never recorded is a usage error naming the limit.
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_, "--to", "9"}); });
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(err.find("--to <= 6"), std::string::npos) << err;
  EXPECT_NE(err.find("stopped early"), std::string::npos) << err;
}

TEST_F(ReplayCommandTest, BadInput) {
  int rc = -1;
  auto [out, err] = Quiet([&] { rc = RunDgrr({"replay", run_, "--from", "5", "--to", "3"}); });
  EXPECT_EQ(rc, kExitUsage);
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", (dir_ / "nothing").string()}); });
  EXPECT_EQ(rc, kExitIO);
  EXPECT_NE(err.find("not a dgrr run"), std::string::npos);
  // A damaged recorded trace is invalid data, named.
  auto bytes = ReadFileToString(run_ + "/rank1.trace");
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(run_ + "/rank1.trace", *bytes).ok());
  std::tie(out, err) = Quiet([&] { rc = RunDgrr({"replay", run_}); });
  EXPECT_EQ(rc, kExitInvalidData) << err;
  EXPECT_NE(err.find("rank1.trace"), std::string::npos) << err;
}

// ---------------------------------------------------------------------------
// replay --dump and diff-tensor end to end, on tiny two-rank runs.
// ---------------------------------------------------------------------------

constexpr const char* kFlip = "bitflip:step=1,rank=1,at=block0.mlp.fc.out,index=5,bit=20";

class DumpTest : public ::dgrr::test_support::TempDirTest, protected CapturedCommands {
 protected:
  // A 3-step run with 2 ranks of 4 examples each (batch 8).
  void Train(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train", "--out", Path(name), "--steps", "3", "--ranks", "2",
                                     "--threads", "2", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_EQ(RunCommand(args), 0) << err_;
  }
};

TEST_F(DumpTest, AnInjectedFlipIsFoundElementByElementAndTwinsAreIdentical) {
  Train("clean");
  Train("twin");
  Train("flipped", {"--inject", kFlip});
  for (const char* run : {"clean", "twin", "flipped"}) {
    ASSERT_EQ(RunCommand({"replay", Path(run), "--dump", "block0.mlp.fc.out@1:1", "--dump-dir", Path(std::string("d-") + run)}), 0)
        << err_;
  }
  const std::string file = "/block0.mlp.fc.out@1.rank1.h5";
  EXPECT_NE(out_.find("wrote " + Path("d-flipped") + file), std::string::npos) << out_;
  EXPECT_EQ(RunCommand({"diff-tensor", Path("d-clean") + file, Path("d-twin") + file}), 0) << out_ << err_;

  ASSERT_EQ(RunCommand({"diff-tensor", Path("d-clean") + file, Path("d-flipped") + file, "--json"}), kExitDivergence)
      << err_;
  auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("total").at("datasets_compared"), 4) << "rank 1's four examples";
  EXPECT_EQ(j.at("total").at("differing"), 1) << "exactly the flipped element";
  for (const auto& d : j.at("datasets")) {
    if (d.at("name") != "ex00000012_n1") {
      EXPECT_EQ(d.at("differing"), 0) << d.at("name");
      continue;
    }
    // Rank 1's first example at step 1 is example 8 + 4 = 12; element 5 of
    // its [16, 256] output is [0, 5]; a flip of mantissa bit 20 moves the
    // value by exactly 2^20 ULPs, and the abs difference follows from it.
    EXPECT_EQ(d.at("differing"), 1);
    EXPECT_EQ(d.at("max_ulp_diff"), 1 << 20);
    const auto& e = d.at("first_differences").at(0);
    EXPECT_EQ(e.at("index"), nlohmann::json({0, 5}));
    const uint32_t a_bits = std::stoul(e.at("a_bits").get<std::string>(), nullptr, 16);
    const uint32_t b_bits = std::stoul(e.at("b_bits").get<std::string>(), nullptr, 16);
    EXPECT_EQ(a_bits ^ b_bits, 1u << 20);
    const double abs = std::fabs(static_cast<double>(BitsToFloat(a_bits)) - BitsToFloat(b_bits));
    EXPECT_EQ(d.at("max_abs_diff").get<double>(), abs);
    EXPECT_EQ(abs, std::ldexp(1.0, static_cast<int>((a_bits >> 23) & 0xff) - 127 - 3))
        << "bit 20 of the mantissa is worth 2^(exponent - 3)";
  }
}

// The dump of each boundary kind holds exactly the bytes whose fingerprint
// the trace recorded: per-example (on the workers), tokens, the scalar loss,
// a collective and an optimizer output, and the flipped tensor itself.
TEST_F(DumpTest, DumpsHoldTheBytesTheTraceFingerprinted) {
  Train("flipped", {"--inject", kFlip});
  const std::vector<std::pair<std::string, size_t>> boundaries = {
      {"data.tokens", 4}, {"block0.mlp.fc.out", 4}, {"loss", 4}, {"lm_head.dinp", 4},
      {"allreduce.dwte", 1}, {"wte", 1}, {"adamw.v.wpe", 1}};
  std::vector<std::string> args = {"replay", Path("flipped"), "--dump-dir", Path("d"), "--json"};
  for (const auto& [name, count] : boundaries) args.insert(args.end(), {"--dump", name + "@1"});
  ASSERT_EQ(RunCommand(args), 0) << err_;
  auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("first_step"), 0);
  EXPECT_EQ(j.at("last_step"), 1) << "only the steps the dumps need";
  ASSERT_EQ(j.at("dumps").size(), 2 * boundaries.size()) << "every rank";
  for (const auto& d : j.at("dumps")) EXPECT_TRUE(d.at("written").get<bool>()) << d.dump();

  for (int rank = 0; rank < 2; ++rank) {
    auto trace = trace::ReadWholeTrace(TracePathFor(Path("flipped"), rank));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    for (const auto& [name, count] : boundaries) {
      auto dump = checkpoint::ReadTensorDump(checkpoint::TensorDumpPath(Path("d"), name, 1, rank));
      ASSERT_TRUE(dump.ok()) << dump.status().ToString();
      EXPECT_EQ(dump->boundary, name);
      EXPECT_EQ(dump->rank, rank);
      EXPECT_EQ(dump->run_dir, Path("flipped"));
      ASSERT_EQ(dump->tensors.size(), count) << name;
      for (const auto& t : dump->tensors) {
        const Fingerprint bytes = FingerprintBytes(t.data.data(), t.data.size());
        EXPECT_EQ(bytes, t.recorded) << name;
        int matches = 0;
        for (const auto& rec : trace->records) {
          const auto* b = std::get_if<trace::BoundaryRecord>(&rec.body);
          if (b == nullptr || b->step != 1 || trace->names[b->name_id] != name ||
              b->first_example != t.example_first || b->example_count != t.example_count) {
            continue;
          }
          ++matches;
          EXPECT_EQ(b->xor64, bytes.xor64) << name << " " << t.name;
          EXPECT_EQ(b->xxh3, bytes.xxh3) << name << " " << t.name;
          EXPECT_EQ(b->byte_count, t.data.size()) << name;
        }
        EXPECT_EQ(matches, 1) << name << " " << t.name;
      }
    }
  }
}

std::vector<trace::Record> TimelessRecords(const std::string& run_dir, int rank) {
  return test_support::TimelessRecords(TracePathFor(run_dir, rank));
}

TEST_F(DumpTest, DumpingChangesNothingRecordedAndBadRequestsAreRefused) {
  // Dumps are taken by a re-execution (dgrr train under a control file): it
  // verifies every record against the recording, and records exactly what a
  // re-execution without dumps records.
  ASSERT_EQ(RunCommand({"train", "--out", Path("run"), "--steps", "2", "--ranks", "2", "--threads", "2", "--inject",
                        "bitflip:step=1,rank=0,at=block0.attn.out,index=3,bit=22", "--quiet"}),
            0)
      << err_;
  std::vector<std::string> with = {"replay", Path("run"), "--to", "1", "--dump-dir", Path("d"), "--keep", Path("with")};
  for (const char* name : {"block0.attn.out", "data.tokens", "loss", "allreduce.dwpe", "adamw.m.wte"}) {
    with.insert(with.end(), {"--dump", std::string(name) + "@1"});
  }
  with.insert(with.end(), {"--dump", "lnf.out@0:1"});
  ASSERT_EQ(RunCommand(with), 0) << err_;
  size_t written = 0;
  for (size_t at = 0; (at = out_.find("\nwrote ", at)) != std::string::npos; ++at) ++written;
  EXPECT_EQ(written, 11u) << out_;
  ASSERT_EQ(RunCommand({"replay", Path("run"), "--to", "1", "--keep", Path("without")}), 0) << err_;
  for (int r = 0; r < 2; ++r) {
    const auto a = TimelessRecords(Path("with"), r), b = TimelessRecords(Path("without"), r);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 100u);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(a[i].body == b[i].body) << "rank " << r << " record " << i;
  }
  auto dump = checkpoint::ReadTensorDump(Path("d") + "/block0.attn.out@1.rank0.h5");
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  EXPECT_EQ(dump->tensors.size(), 4u);

  auto refused = [&](const std::string& request, const std::string& expect) {
    EXPECT_EQ(RunCommand({"replay", Path("run"), "--dump", request, "--dump-dir", Path("bad")}), kExitUsage)
        << request << ": " << err_;
    EXPECT_NE(err_.find(expect), std::string::npos) << err_;
  };
  refused("block0.mlp.fc.outt@1", "similar names: block0.mlp.fc.out");
  refused("loss@2", "--to <= 1");
  refused("loss@1:2", "rank 2 does not exist");
}

TEST_F(DumpTest, ADivergenceBeforeTheDumpStepSaysWhatWasNotWritten) {
  // A resume that forgets AdamW's second moment: the traces from step 2 on
  // are not what the run's state gives (as in the test above).
  ASSERT_EQ(RunCommand({"train", "--out", Path("run"), "--steps", "4", "--ckpt-every", "2", "--quiet"}), 0) << err_;
  std::filesystem::remove(Path("run") + "/ckpt/step-00000003.h5");
  ASSERT_EQ(RunCommand({"train", "--out", Path("run"), "--resume", "--inject", "skip-restore:adamw.v", "--quiet"}), 0)
      << err_;
  EXPECT_EQ(RunCommand({"replay", Path("run"), "--dump", "block0.mlp.fc.out@3", "--dump-dir", Path("d")}),
            kExitReplayIntegrity);
  const std::string path = Path("d") + "/block0.mlp.fc.out@3.rank0.h5";
  EXPECT_NE(err_.find("step 2, rank 0, boundary wte"), std::string::npos) << err_;
  EXPECT_NE(err_.find("not written (the replay stopped first): " + path), std::string::npos) << err_;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(RunCommand({"replay", Path("run"), "--dump", "block0.mlp.fc.out@3", "--dump-dir", Path("d"), "--json"}),
            kExitReplayIntegrity);
  auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("result"), "diverged");
  EXPECT_EQ(j.at("dumps").at(0).at("path"), path);
  EXPECT_FALSE(j.at("dumps").at(0).at("written").get<bool>());

  EXPECT_EQ(RunCommand({"replay", Path("run"), "--dump", "nonsense"}), kExitUsage);
  EXPECT_NE(err_.find("NAME@STEP[:RANK]"), std::string::npos) << err_;
  EXPECT_EQ(RunCommand({"replay", Path("run"), "--dump", "block0.mlp.fc.ou@1"}), kExitUsage);
  EXPECT_NE(err_.find("similar names: block0.mlp.fc.out"), std::string::npos) << err_;
}

}  // namespace
}  // namespace dgrr::cli
