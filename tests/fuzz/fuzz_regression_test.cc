// Replays tests/data/fuzz-regressions/<kind>/* through the entry points the
// fuzz target of that kind drives (fuzz/README.md), in the normal build. An
// input there once crashed, hung or leaked in a reader, or stands for a class
// of inputs the fuzzers explore; each must now give one clean Status: OK, or
// an error whose message is one line naming the file it read. An input whose
// name contains ".invalid" must be refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/fast_forward.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "replay/compare.h"
#include "tests/support/temp_dir_test.h"
#include "trace_format/reader.h"

namespace dgrr {
namespace {

namespace fs = std::filesystem;

struct Input {
  std::string kind;  // the folder: trace, checkpoint, tensor_dump, config_json, compare_json, cli
  std::string path;
};

// What gtest prints for a parameter (the default dumps the object's bytes).
void PrintTo(const Input& in, std::ostream* os) { *os << in.kind << "/" << fs::path(in.path).filename().string(); }

std::vector<Input> AllInputs() {
  std::vector<Input> inputs;
  const fs::path root = fs::path(DGRR_TEST_DATA_DIR) / "fuzz-regressions";
  std::error_code ec;
  for (const auto& kind : fs::directory_iterator(root, ec)) {
    if (!kind.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(kind.path())) {
      if (file.is_regular_file()) inputs.push_back({kind.path().filename(), file.path()});
    }
  }
  std::sort(inputs.begin(), inputs.end(), [](const Input& a, const Input& b) { return a.path < b.path; });
  return inputs;
}

std::string TestName(const ::testing::TestParamInfo<Input>& info) {
  std::string name = info.param.kind + "_" + fs::path(info.param.path).filename().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class FuzzRegression : public test_support::TempDirTest,
                       public ::testing::WithParamInterface<Input> {
 protected:
  // The input copied into the test's directory under `name` (readers are
  // given a path, as the fuzz targets give them one).
  std::string Place(const std::string& name) {
    const std::string path = Path(name);
    WriteBytes(path, ReadBytes(GetParam().path));
    return path;
  }
};

// An input whose name contains ".invalid" is one the reader must refuse.
bool MustBeRefused() {
  return fs::path(::testing::TestWithParam<Input>::GetParam().path).filename().string().find(".invalid") !=
         std::string::npos;
}

// OK, or one line that names `file`.
void ExpectClean(const Status& s, const std::string& file) {
  if (s.ok()) return;
  const std::string message = s.ToString();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(file), std::string::npos) << message;
}

Status ScanTrace(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(path));
  trace::Record record;
  for (bool done = false; !done;) DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
  DGRR_ASSIGN_OR_RETURN(uint64_t count, reader->CountRecordsInFile());
  if (count > 0) {
    Status at = reader->ReadRecordAt(count - 1, &record);
    if (!at.ok() && at.ToString().find(path) == std::string::npos) return Status::Internal("unnamed: " + at.ToString());
  }
  return Status::OK();
}

void CheckTrace(const std::string& path) {
  const Status scan = ScanTrace(path);
  ExpectClean(scan, path);
  trace::VerifySummary summary;
  const Status verified = trace::VerifyTrace(path, &summary);
  ExpectClean(verified, path);
  EXPECT_EQ(verified.ok(), scan.ok()) << verified.ToString() << " vs " << scan.ToString();
  auto whole = trace::ReadWholeTrace(path);
  ExpectClean(whole.status(), path);
  EXPECT_EQ(whole.ok(), scan.ok());
  if (MustBeRefused()) {
    EXPECT_FALSE(scan.ok());
  }
}

void CheckCompareJson(const std::string& bytes) {
  using nlohmann::json;
  const size_t nul = bytes.find('\0');
  const std::string a_text = nul == std::string::npos ? bytes : bytes.substr(0, nul);
  const std::string b_text = nul == std::string::npos ? bytes : bytes.substr(nul + 1);
  const json a = json::parse(a_text, nullptr, /*allow_exceptions=*/false);
  const json b = json::parse(b_text, nullptr, /*allow_exceptions=*/false);
  if (a.is_discarded() || b.is_discarded()) return;  // compare refuses these with a Status
  std::vector<replay::KeyDifference> diffs;
  EXPECT_NO_THROW(diffs = replay::DiffJson(a, b));
  if (nul == std::string::npos) {
    EXPECT_TRUE(diffs.empty());
  }
  EXPECT_NO_THROW(replay::DiffJson(replay::EnvironmentForDiff(a), replay::EnvironmentForDiff(b)));
}

void CheckCommandLine(const std::string& text) {
  std::vector<std::string> args;
  std::string word;
  for (char c : text + " ") {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\0') {
      if (!word.empty()) args.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = cli::RunDgrr(args);
  ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(rc, 0);
  EXPECT_LE(rc, 5) << err;
  if (rc != 0) {
    EXPECT_FALSE(err.empty());
  }
}

TEST_P(FuzzRegression, EndsInACleanStatus) {
  const Input& in = GetParam();
  if (in.kind == "trace") {
    CheckTrace(Place("rank0.trace"));
  } else if (in.kind == "checkpoint") {
    const std::string path = Place("step-00000001.h5");
    ExpectClean(checkpoint::ReadCheckpointHeader(path).status(), path);
    auto ckpt = checkpoint::ReadCheckpoint(path);
    ExpectClean(ckpt.status(), path);
    if (MustBeRefused()) {
      EXPECT_FALSE(ckpt.ok());
    }
  } else if (in.kind == "tensor_dump") {
    const std::string path = Place("dump.rank0.h5");
    auto dump = checkpoint::ReadTensorDump(path);
    ExpectClean(dump.status(), path);
    if (MustBeRefused()) {
      EXPECT_FALSE(dump.ok());
    }
  } else if (in.kind == "config_json") {
    const std::string path = Place("config.json");
    auto options = model::TrainOptionsFromRun(dir_.string());
    ExpectClean(options.status(), path);
    if (MustBeRefused()) {
      EXPECT_FALSE(options.ok()) << "steps " << options->steps;
    }
    ExpectClean(checkpoint::PlansFromJson(ReadBytes(path), "plan.json").status(), "plan.json");
  } else if (in.kind == "compare_json") {
    CheckCompareJson(ReadBytes(in.path));
  } else if (in.kind == "cli") {
    CheckCommandLine(ReadBytes(in.path));
  } else {
    FAIL() << "unknown kind of fuzz regression: " << in.kind << " (" << in.path << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, FuzzRegression, ::testing::ValuesIn(AllInputs()), TestName);

// The folder must hold inputs: an empty or missing one would pass vacuously.
TEST(FuzzRegressionData, IsPresent) { EXPECT_FALSE(AllInputs().empty()); }

}  // namespace
}  // namespace dgrr
