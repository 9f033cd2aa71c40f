// Bad input of every class, run as a user would: nesting that once overflowed
// the stack, values of the wrong type or range in a run's own files (exit 3,
// file and key named), out-of-range or non-finite command-line values (exit 1,
// option named), exceptions escaping a command (exit 2), and HDF5 failures on
// a thread that is not the one that initialised HDF5 (no library noise).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "checkpoint/hdf5_util.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "replay/compare.h"
#include "runtime/json_input.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

using nlohmann::json;

size_t Lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class BadInputTest : public test_support::TempDirTest {
 protected:
  // A finished two-step run, once per test.
  std::string TrainedRun() {
    const std::string run = Path("run");
    const CommandOutput r = RunCaptured({"train", "--out", run, "--steps", "2", "--quiet"});
    EXPECT_EQ(r.rc, 0) << r.err;
    return run;
  }
  // config.json of `run` with `edit` applied.
  void EditConfig(const std::string& run, const std::function<void(json&)>& edit) {
    json c = json::parse(ReadBytes(run + "/config.json"));
    edit(c);
    WriteBytes(run + "/config.json", c.dump(2));
  }
  // Expects exit 3 and one line naming config.json and `key`.
  void ExpectRunFileError(const CommandOutput& r, const std::string& key) {
    EXPECT_EQ(r.rc, 3) << r.err;
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'" + key + "'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  }
  CommandOutput Resume(const std::string& run) {
    return RunCaptured({"train", "--out", run, "--resume", "--quiet"});
  }
  // Expects exit 1 and one line naming `option`.
  static void ExpectUsageError(const CommandOutput& r, const std::string& option) {
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(option), std::string::npos) << r.err;
  }
};

TEST_F(BadInputTest, DeeplyNestedConfigIsExitThreeNotACrash) {
  const std::string run = TrainedRun();
  WriteBytes(run + "/config.json", Nested(100000));
  CommandOutput r = RunCaptured({"compare", run, run});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(run + "/config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nested deeper than 64"), std::string::npos) << r.err;
  r = Resume(run);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("nested deeper than 64"), std::string::npos) << r.err;
}

TEST_F(BadInputTest, DeeplyNestedEnvironmentIsExitThreeNotACrash) {
  const std::string run = TrainedRun();
  WriteBytes(run + "/rank0.env.json", "{\"host\": " + Nested(100000) + "}");
  const CommandOutput r = RunCaptured({"compare", run, run});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("rank0.env.json"), std::string::npos) << r.err;
}

TEST_F(BadInputTest, NestingUpToTheCapParsesAndOneMoreLevelDoesNot) {
  EXPECT_TRUE(ParseJson(Nested(kMaxJsonDepth), "x").ok());
  const auto deeper = ParseJson(Nested(kMaxJsonDepth + 1), "x");
  ASSERT_FALSE(deeper.ok());
  EXPECT_TRUE(deeper.status().IsCorruption());
  const auto broken = ParseJson("{\"a\": [1, 2", "cfg.json");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("cfg.json: not valid JSON"), std::string::npos);
  EXPECT_EQ(broken.status().message().find("json.exception"), std::string::npos);
}

TEST_F(BadInputTest, JsonDiffOfADeepDocumentDoesNotRecurse) {
  // DiffJson is public: a document built in memory is not depth-capped.
  // Built level by level, twice: copying it would recurse per level in
  // nlohmann's copy constructor (and overflow under ASan's larger frames).
  auto build = [] {
    json deep = json::array();
    json* inner = &deep;
    for (int i = 0; i < 100000; ++i) {
      inner->push_back(json::array());
      inner = &(*inner)[0];
    }
    inner->push_back(1);
    return deep;
  };
  json deep = build();
  json other = build();
  const auto d = replay::DiffJson(deep, other);
  EXPECT_TRUE(d.empty());
  // Tear down without the recursive destructor of older nlohmann releases.
  for (json* j : {&deep, &other}) {
    while (j->is_array() && !j->empty()) {
      json child = std::move((*j)[0]);
      *j = std::move(child);
    }
  }
}

TEST_F(BadInputTest, FloatWhereConfigHasAnIntegerIsExitThreeNamingKeyAndFile) {
  const std::string run = TrainedRun();
  EditConfig(run, [](json& c) { c["steps"] = 1e300; });
  ExpectRunFileError(Resume(run), "steps");
  ExpectRunFileError(RunCaptured({"replay", run}), "steps");
  EditConfig(run, [](json& c) { c["steps"] = "x"; });
  ExpectRunFileError(Resume(run), "steps");
  EditConfig(run, [](json& c) {
    c["steps"] = 2;
    c["model"]["layers"] = 2.5;
  });
  ExpectRunFileError(Resume(run), "model.layers");
}

TEST_F(BadInputTest, MissingOrOutOfRangeConfigValuesAreExitThree) {
  const std::string run = TrainedRun();
  EditConfig(run, [](json& c) { c.erase("ranks"); });
  ExpectRunFileError(Resume(run), "ranks");
  EditConfig(run, [](json& c) { c["ranks"] = 100000; });
  ExpectRunFileError(Resume(run), "ranks");
  EditConfig(run, [](json& c) {
    c["ranks"] = 1;
    c["optimizer"]["lr"] = nullptr;  // what `--lr inf` used to leave behind
  });
  ExpectRunFileError(Resume(run), "optimizer.lr");
  EditConfig(run, [](json& c) {
    c["optimizer"]["lr"] = 0.003;
    c["batch"] = 0;
  });
  ExpectRunFileError(RunCaptured({"plan", run}), "batch");
}

TEST_F(BadInputTest, ValuesTheRunsOwnConfigNamesAreTheFilesErrorNotAFlags) {
  const std::string run = TrainedRun();
  const std::string original = ReadBytes(run + "/config.json");
  // A fault target the model never records: refused by the same check as
  // --inject, but reported as config.json's key (exit 3), not as a flag.
  EditConfig(run, [](json& c) { c["inject"] = json::array({"bitflip:step=1,rank=0,at=nope"}); });
  ExpectRunFileError(RunCaptured({"replay", run}), "inject[0]");
  // A data file that is no corpus (a device), named by the file.
  WriteBytes(run + "/config.json", original);
  EditConfig(run, [](json& c) {
    c["data"]["source"] = "file";
    c["data"]["path"] = "/dev/zero";
  });
  ExpectRunFileError(RunCaptured({"replay", run}), "data.path");
  // Values written for information that the preset fixes: an edit is
  // refused instead of silently ignored.
  for (const auto& [section, key, value] :
       {std::tuple<std::string, std::string, double>{"model", "attn_dropout", 1.0},
        {"optimizer", "weight_decay", 0.5}, {"optimizer", "min_lr", 1.0}, {"optimizer", "warmup_steps", 3}}) {
    WriteBytes(run + "/config.json", original);
    EditConfig(run, [&, section = section, key = key, value = value](json& c) { c[section][key] = value; });
    ExpectRunFileError(RunCaptured({"replay", run}), section + "." + key);
  }
  WriteBytes(run + "/config.json", original);
  EXPECT_EQ(RunCaptured({"replay", run}).rc, 0);
}

TEST_F(BadInputTest, NonFiniteOrNonPositiveLearningRateIsRefused) {
  for (const std::string lr : {"inf", "nan", "-inf", "-1", "0", "1e30"}) {
    const CommandOutput r =
        RunCaptured({"train", "--out", Path("lr"), "--steps", "2", "--quiet", "--lr=" + lr});
    ExpectUsageError(r, "--lr");
    EXPECT_FALSE(std::filesystem::exists(Path("lr") + "/config.json")) << lr;
  }
}

TEST_F(BadInputTest, RanksAndThreadsBeyondTheLimitsAreRefusedUpFront) {
  ExpectUsageError(RunCaptured({"train", "--out", Path("r"), "--quiet", "--ranks", "100000"}), "--ranks");
  ExpectUsageError(RunCaptured({"train", "--out", Path("r"), "--quiet", "--threads", "100000"}),
                   "--threads");
  ExpectUsageError(RunCaptured({"train", "--out", Path("r"), "--quiet", "--batch", "100000000"}),
                   "--batch");
  ExpectUsageError(RunCaptured({"env", "--threads", "100000"}), "--threads");
}

TEST_F(BadInputTest, NegativeValuesOfUnsignedOptionsAreRefused) {
  ExpectUsageError(RunCaptured({"compare", "a", "b", "--context=-1"}), "--context");
  ExpectUsageError(RunCaptured({"compare", "a", "b", "--band=-1"}), "--band");
  ExpectUsageError(RunCaptured({"compare", "a", "b", "--band= -5"}), "--band");
  ExpectUsageError(RunCaptured({"bisect", "--good", "a", "--bad", "b", "--context=-3"}), "--context");
  ExpectUsageError(RunCaptured({"inspect", "t.trace", "--step=-1"}), "--step");
  ExpectUsageError(RunCaptured({"rollback", Path("none"), "--step=-1"}), "--step");
}

TEST_F(BadInputTest, DuplicateKeysInAnInjectSpecAreRefused) {
  const CommandOutput r = RunCaptured({"train", "--out", Path("dup"), "--steps", "4", "--quiet",
                                       "--inject", "bitflip:step=1,rank=0,at=wte,step=2"});
  ExpectUsageError(r, "step twice");
}

// Commands that exist only in this test binary, to throw past RunDgrr.
const bool kThrowers = [] {
  RegisterCommand({"test-throw-bad-alloc", "test only", [](const std::vector<std::string>&) -> int {
                     throw std::bad_alloc();
                   }, {}});
  RegisterCommand({"test-throw-system", "test only", [](const std::vector<std::string>&) -> int {
                     throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                             "thread");
                   }, {}});
  RegisterCommand({"test-throw-runtime", "test only", [](const std::vector<std::string>&) -> int {
                     throw std::runtime_error("boom");
                   }, {}});
  RegisterCommand({"test-throw-int", "test only", [](const std::vector<std::string>&) -> int { throw 42; }, {}});
  return true;
}();

TEST(EscapingExceptions, MapToExitTwoWithOneLine) {
  ASSERT_TRUE(kThrowers);
  const struct {
    const char* command;
    const char* says;
  } cases[] = {{"test-throw-bad-alloc", "out of memory"},
               {"test-throw-system", "system error"},
               {"test-throw-runtime", "unexpected error: boom"},
               {"test-throw-int", "unexpected error"}};
  for (const auto& c : cases) {
    const CommandOutput r = RunCaptured({c.command});
    EXPECT_EQ(r.rc, 2) << c.command;
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.err.rfind(std::string("dgrr ") + c.command + ": " + c.says, 0), 0u) << r.err;
  }
}

TEST_F(BadInputTest, Hdf5FailureOnAnotherThreadPrintsNothingAndNamesTheCause) {
  // HDF5 first used on this thread, as when the main thread reads a
  // checkpoint before the ranks write one.
  ASSERT_TRUE(checkpoint::InitHdf5().ok());
  checkpoint::TensorDump dump;
  dump.boundary = "b";
  // A name one byte under NAME_MAX: the temporary beside it is too long, so
  // libhdf5's own open() fails (the directory exists).
  const std::string path = Path(std::string(250, 'x') + ".h5");
  Status status;
  const auto [out, err] = CaptureOutput([&] {
    std::thread writer([&] { status = checkpoint::WriteTensorDump(path, dump); });
    writer.join();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(status.IsIOError()) << status.ToString();
  EXPECT_NE(status.message().find("File name too long"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::string(250, 'x')), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  EXPECT_EQ(err, "") << "libhdf5 printed its error stack";
}

}  // namespace
}  // namespace dgrr::cli
