// dgrr inspect, run in-process: text listing, filters, the JSON schema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/trace_format/sample_trace.h"

namespace dgrr::cli {
namespace {

using trace::testing::kLongName;
using trace::testing::kShortName;

class InspectCommandTest : public trace::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    path_ = Path("rank1.trace");
    trace::testing::WriteSampleTrace(path_);
  }
  int Inspect(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    args.insert(args.begin(), "inspect");
    CommandOutput r = RunCaptured(args);
    *out = std::move(r.out);
    if (err) *err = std::move(r.err);
    return r.rc;
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  std::string path_;
};

TEST_F(InspectCommandTest, HelpAnswers) {
  std::string out;
  EXPECT_EQ(Inspect({"--help"}, &out), 0);
  EXPECT_NE(out.find("usage: dgrr inspect TRACE|RUN_DIR [--rank R] [--step S] [--name GLOB] [--json]"), std::string::npos);
  EXPECT_NE(out.find("--json"), std::string::npos);
  EXPECT_NE(out.find("Exit codes"), std::string::npos);
}

TEST_F(InspectCommandTest, TextListsHeaderAndEveryRecord) {
  std::string out;
  ASSERT_EQ(Inspect({path_}, &out), 0);
  EXPECT_NE(out.find("rank             1 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("run_id           a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"), std::string::npos);
  EXPECT_NE(out.find("#0 @128 name     id=0 bytes 0..19 of 19 \"" + kShortName + "\""),
            std::string::npos);
  EXPECT_NE(out.find("#4 @640 boundary step=0 seq=0 forward output " + kShortName +
                     " f32[2,3] bytes=24 examples=0+2 xor64=0x0123456789abcdef"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("#7 @1024 step     step=0 end t=6 loss=2.5 (f32 bits 0x0000000040200000)"),
            std::string::npos);
  EXPECT_NE(out.find("#8 @1152 event    step=0 checkpoint t=7 payload=\"ckpt/step-0\""),
            std::string::npos);
  EXPECT_EQ(Count(out, "\n#"), 12u);
  EXPECT_NE(out.find("records 12 (names 2, boundaries 4, steps 4, events 1)"), std::string::npos);
}

TEST_F(InspectCommandTest, FiltersByStepAndNameGlob) {
  std::string out;
  ASSERT_EQ(Inspect({path_, "--step", "1"}, &out), 0);
  EXPECT_EQ(Count(out, "\n#"), 3u) << out;
  EXPECT_NE(out.find("#9 @"), std::string::npos);
  EXPECT_NE(out.find("#11 @"), std::string::npos);
  ASSERT_EQ(Inspect({path_, "--name", "block?.attn.*"}, &out), 0);
  EXPECT_EQ(Count(out, " boundary "), 3u) << out;
  EXPECT_EQ(Count(out, "\n#"), 3u);
  ASSERT_EQ(Inspect({path_, "--name", "model.*", "--step", "0"}, &out), 0);
  EXPECT_EQ(Count(out, "\n#"), 1u);
  EXPECT_NE(out.find("#5 @"), std::string::npos);
}

TEST_F(InspectCommandTest, JsonFollowsSchema) {
  std::string out;
  ASSERT_EQ(Inspect({path_, "--json"}, &out), 0);
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["schema"], "dgrr.inspect/1");
  EXPECT_EQ(j["path"], path_);
  EXPECT_EQ(j["header"]["format_version"], 1);
  EXPECT_EQ(j["header"]["rank"], 1);
  EXPECT_EQ(j["header"]["world_size"], 2);
  EXPECT_EQ(j["header"]["seed"], "0x00000000000004d2");
  EXPECT_EQ(j["header"]["config_digest"], "0x1122334455667788");
  EXPECT_EQ(j["names"], nlohmann::json({kShortName, kLongName}));
  EXPECT_EQ(j["summary"]["records"], 12);
  EXPECT_EQ(j["summary"]["boundaries"], 4);
  EXPECT_TRUE(j["summary"]["warning"].is_null());
  EXPECT_TRUE(j["filter"]["step"].is_null());
  ASSERT_EQ(j["records"].size(), 12u);
  const auto& b = j["records"][5];
  EXPECT_EQ(b["index"], 5);
  EXPECT_EQ(b["offset"], 768);
  EXPECT_EQ(b["type"], "boundary");
  EXPECT_EQ(b["name"], kLongName);
  EXPECT_EQ(b["phase"], "backward");
  EXPECT_EQ(b["dims"], nlohmann::json({2, 3}));
  EXPECT_TRUE(b["shape_digest"].is_null());
  EXPECT_EQ(b["xxh3"], "0xfedcba9876543211");
  const auto& step = j["records"][7];
  EXPECT_EQ(step["kind"], "end");
  EXPECT_EQ(step["loss"], 2.5);
  EXPECT_EQ(j["records"][8]["payload_text"], "ckpt/step-0");
  EXPECT_EQ(j["records"][1]["chunk_offset"], 0);
  EXPECT_EQ(j["records"][2]["chunk_offset"], 108);

  ASSERT_EQ(Inspect({path_, "--json", "--name", "*qkv*", "--step", "1"}, &out), 0);
  j = nlohmann::json::parse(out);
  ASSERT_EQ(j["records"].size(), 1u);
  EXPECT_EQ(j["records"][0]["seq"], 3);
  EXPECT_EQ(j["filter"]["step"], 1);
  EXPECT_EQ(j["filter"]["name"], "*qkv*");
}

TEST_F(InspectCommandTest, CorruptionAndMissingFilesGiveTheirExitCodes) {
  std::string out, err;
  std::string bytes = ReadBytes(path_);
  bytes[trace::RecordOffset(6) + 3] ^= 0x40;
  WriteBytes(path_, bytes);
  EXPECT_EQ(Inspect({path_, "--json"}, &out, &err), 3);
  EXPECT_EQ(out, "");
  EXPECT_NE(err.find("record 6 at offset 896: CRC mismatch"), std::string::npos) << err;
  EXPECT_EQ(Inspect({path_}, &out, &err), 3);
  EXPECT_NE(out.find("#5 @768"), std::string::npos);  // what precedes the damage
  EXPECT_EQ(out.find("#6 @"), std::string::npos);
  EXPECT_EQ(Inspect({Path("missing.trace")}, &out, &err), 2);
  WriteBytes(path_, bytes.substr(0, 40));
  EXPECT_EQ(Inspect({path_}, &out, &err), 3);
  EXPECT_NE(err.find("truncated header"), std::string::npos);
}

TEST_F(InspectCommandTest, TornTailWarnsInTextAndJson) {
  WriteBytes(path_, ReadBytes(path_) + "partial");
  std::string out, err;
  ASSERT_EQ(Inspect({path_, "--json"}, &out, &err), 0);
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["summary"]["torn_tail_bytes"], 7);
  EXPECT_NE(j["summary"]["warning"].get<std::string>().find("torn tail at offset 1664"),
            std::string::npos);
  EXPECT_NE(err.find("dgrr inspect: warning: "), std::string::npos);
}

}  // namespace
}  // namespace dgrr::cli
