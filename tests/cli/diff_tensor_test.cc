// dgrr diff-tensor, in-process, on dumps and checkpoints written with the library: exit codes
// (0 identical, 4 different, 3 damaged, 2 missing, 1 usage), the text and the
// dgrr.diff-tensor/2 JSON report.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

checkpoint::DumpedTensor FloatTensor(uint64_t example, std::vector<float> values, std::vector<int64_t> shape) {
  checkpoint::DumpedTensor t;
  t.name = checkpoint::TensorDatasetName(example, 1);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.example_first = example;
  t.example_count = 1;
  t.phase = "forward";
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  t.recorded = FingerprintBytes(t.data.data(), t.data.size());
  return t;
}

class DiffTensorCommandTest : public ::dgrr::test_support::TempDirTest, protected CapturedCommands {
 protected:
  std::string Write(const std::string& name, std::vector<checkpoint::DumpedTensor> tensors) {
    checkpoint::TensorDump d;
    d.run_dir = "run";
    d.boundary = "block0.mlp.fc.out";
    d.step = 1;
    d.rank = 0;
    d.tensors = std::move(tensors);
    const std::string path = Path(name);
    EXPECT_TRUE(checkpoint::WriteTensorDump(path, d).ok());
    return path;
  }
};

TEST_F(DiffTensorCommandTest, QuietPrintsNothingAndTheExitCodeSays) {
  const auto a = Write("a.h5", {FloatTensor(0, {1, 2, 3, 4}, {2, 2})});
  const auto b = Write("b.h5", {FloatTensor(0, {1, 2, 3, 5}, {2, 2})});
  EXPECT_EQ(RunCommand({"diff-tensor", "-q", a, a}), 0) << err_;
  EXPECT_EQ(out_, "");
  EXPECT_EQ(RunCommand({"diff-tensor", "--quiet", a, b}), kExitDivergence) << err_;
  EXPECT_EQ(out_, "");
  EXPECT_EQ(RunCommand({"diff-tensor", a, b}), kExitDivergence);
  EXPECT_FALSE(out_.empty());
  EXPECT_EQ(RunCommand({"diff-tensor", "-q", a, Path("missing.h5")}), kExitIO);
  EXPECT_EQ(out_, "");
  EXPECT_NE(err_.find("missing.h5"), std::string::npos) << "errors still go to stderr";
}

TEST_F(DiffTensorCommandTest, IdenticalDumpsExitZero) {
  const auto a = Write("a.h5", {FloatTensor(0, {1, 2, 3, 4}, {2, 2}), FloatTensor(1, {5, 6}, {2})});
  const auto b = Write("b.h5", {FloatTensor(0, {1, 2, 3, 4}, {2, 2}), FloatTensor(1, {5, 6}, {2})});
  EXPECT_EQ(RunCommand({"diff-tensor", a, b}), 0) << err_;
  EXPECT_NE(out_.find("identical: 2 datasets, 6 elements"), std::string::npos) << out_;
  ASSERT_EQ(RunCommand({"diff-tensor", a, b, "--json"}), 0) << err_;
  auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("schema"), "dgrr.diff-tensor/2");
  EXPECT_EQ(j.at("result"), "identical");
  EXPECT_EQ(j.at("total").at("differing"), 0);
  EXPECT_EQ(j.at("total").at("max_ulp_diff"), 0);
}

TEST_F(DiffTensorCommandTest, DifferencesAreCountedMeasuredAndLocated) {
  const float x = 0.75f, y = BitsToFloat(FloatBits(0.75f) ^ (1u << 20));
  const auto a = Write("a.h5", {FloatTensor(0, {1, 2, 3, x, 5, 6}, {2, 3}), FloatTensor(1, {5, 6}, {2}),
                                FloatTensor(2, {1}, {1})});
  const auto b = Write("b.h5", {FloatTensor(0, {1, 2, 3, y, 5, 6}, {2, 3}), FloatTensor(1, {5, 6}, {1, 2}),
                                FloatTensor(3, {1}, {1})});
  EXPECT_EQ(RunCommand({"diff-tensor", a, b}), kExitDivergence) << err_;
  EXPECT_NE(out_.find("ex00000000_n1 (f32 [2, 3]): 1 of 6 elements differ"), std::string::npos) << out_;
  EXPECT_NE(out_.find("[1, 0]: 0.75 (0x3f400000)"), std::string::npos) << out_;
  EXPECT_NE(out_.find("ex00000002_n1: only in A"), std::string::npos) << out_;
  EXPECT_NE(out_.find("ex00000003_n1: only in B"), std::string::npos) << out_;
  EXPECT_NE(out_.find("ex00000001_n1: not compared, shape [2] vs [1, 2]"), std::string::npos) << out_;

  ASSERT_EQ(RunCommand({"diff-tensor", a, b, "--json", "--first", "3"}), kExitDivergence) << err_;
  auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("result"), "different");
  EXPECT_EQ(j.at("a").at("boundary"), "block0.mlp.fc.out");
  EXPECT_EQ(j.at("total").at("datasets_compared"), 1);
  EXPECT_EQ(j.at("total").at("elements"), 6);
  EXPECT_EQ(j.at("total").at("differing"), 1);
  const auto& d = j.at("datasets").at(0);
  EXPECT_EQ(d.at("name"), "ex00000000_n1");
  EXPECT_EQ(d.at("shape"), nlohmann::json({2, 3}));
  EXPECT_EQ(d.at("max_ulp_diff"), 1 << 20);
  EXPECT_EQ(d.at("max_abs_diff").get<double>(), std::fabs(static_cast<double>(x) - y));
  const auto& first = d.at("first_differences").at(0);
  EXPECT_EQ(first.at("index"), nlohmann::json({1, 0}));
  EXPECT_EQ(first.at("flat_index"), 3);
  EXPECT_EQ(first.at("a").get<double>(), 0.75);
  EXPECT_EQ(first.at("b").get<double>(), static_cast<double>(y));
  EXPECT_EQ(first.at("a_bits"), "0x3f400000");
  EXPECT_EQ(j.at("only_in_a"), nlohmann::json({"ex00000002_n1"}));
  EXPECT_EQ(j.at("only_in_b"), nlohmann::json({"ex00000003_n1"}));
  EXPECT_EQ(j.at("mismatched").at(0).at("reason"), "shape [2] vs [1, 2]");
}

TEST_F(DiffTensorCommandTest, NonFiniteValuesAreSpelledOutInJson) {
  const float inf = std::numeric_limits<float>::infinity();
  const auto a = Write("a.h5", {FloatTensor(0, {std::numeric_limits<float>::max(), std::nanf(""), 1}, {3})});
  const auto b = Write("b.h5", {FloatTensor(0, {inf, 1, 1}, {3})});
  ASSERT_EQ(RunCommand({"diff-tensor", a, b, "--json"}), kExitDivergence) << err_;
  auto j = nlohmann::json::parse(out_);
  const auto& d = j.at("datasets").at(0);
  EXPECT_EQ(d.at("differing"), 2);
  EXPECT_EQ(d.at("nan_pairs"), 1);
  EXPECT_EQ(d.at("max_abs_diff"), "inf");
  EXPECT_EQ(d.at("max_ulp_diff"), 1);
  EXPECT_EQ(d.at("first_differences").at(0).at("b"), "inf");
  EXPECT_EQ(d.at("first_differences").at(1).at("a"), "nan");
}

TEST_F(DiffTensorCommandTest, BadInputHasItsExitCode) {
  const auto a = Write("a.h5", {FloatTensor(0, {1, 2, 3, 4}, {4})});
  EXPECT_EQ(RunCommand({"diff-tensor", a, Path("missing.h5")}), kExitIO);
  EXPECT_NE(err_.find("missing.h5"), std::string::npos) << err_;
  EXPECT_EQ(RunCommand({"diff-tensor", a}), kExitUsage);
  EXPECT_EQ(RunCommand({"diff-tensor", a, a, "--first", "-1"}), kExitUsage);
  EXPECT_EQ(RunCommand({"diff-tensor", "--help"}), 0);
  EXPECT_NE(out_.find("dgrr diff-tensor A B"), std::string::npos) << out_;
  // A damaged dump: the raw chunk's bytes changed (random floats are stored
  // uncompressed, so the data can be found in the file); the header's hash
  // of the whole file catches it.
  std::vector<float> noise(256);
  std::mt19937 gen(7);
  for (float& f : noise) f = BitsToFloat(static_cast<uint32_t>(gen()) & 0x3fffffffu);  // finite
  const auto c = Write("c.h5", {FloatTensor(4, noise, {16, 16})});
  std::string bytes = ReadBytes(c);
  const std::string needle(reinterpret_cast<const char*>(noise.data()) + 64, 32);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 1;
  WriteBytes(c, bytes);
  EXPECT_EQ(RunCommand({"diff-tensor", a, c}), kExitInvalidData);
  EXPECT_NE(err_.find("c.h5: offset 512"), std::string::npos) << err_;
  EXPECT_NE(err_.find("file damaged"), std::string::npos) << err_;
  // Intact bytes that are not the recorded ones: named down to the dataset.
  auto d = FloatTensor(6, {1, 2}, {2});
  d.recorded.xxh3 ^= 1;
  const auto e = Write("e.h5", {d});
  EXPECT_EQ(RunCommand({"diff-tensor", e, a}), kExitInvalidData);
  EXPECT_NE(err_.find("e.h5: dataset /tensors/ex00000006_n1"), std::string::npos) << err_;
}

// A v1 single-file checkpoint of two ranks: replicated entries and each
// rank's own, one of them saved without a shape (compared as a vector).
TEST_F(DiffTensorCommandTest, CheckpointsPairTheirEntriesByPathInTheFile) {
  auto write = [&](const std::string& name, uint64_t rank1_cursor, bool with_extra) {
    std::vector<float> w = {1, 2, 3, 4};
    uint64_t cursors[2][2] = {{0, 8}, {rank1_cursor, 8}};
    float extra = 1;
    StateRegistry ranks[2];
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(ranks[r].Register({"w", w.data(), 16, DType::kF32, {2, 2}, StateRole::kParameter,
                                     RestorePolicy::kCheckpoint, true}).ok());
      EXPECT_TRUE(ranks[r].Register({"data.cursor", cursors[r], 16, DType::kU64, {}, StateRole::kCursor,
                                     RestorePolicy::kCheckpoint, false}).ok());
      if (with_extra) {
        EXPECT_TRUE(ranks[r].Register({"extra", &extra, 4, DType::kF32, {1}, StateRole::kOther,
                                       RestorePolicy::kCheckpoint, true}).ok());
      }
    }
    checkpoint::CheckpointMeta meta;
    meta.step = 3;
    meta.world_size = 2;
    const std::string path = Path(name);
    EXPECT_TRUE(checkpoint::WriteCheckpoint(path, meta, {{0, &ranks[0], 0}, {1, &ranks[1], 0}}).ok());
    return path;
  };
  const std::string a = write("a.h5", 5, true), same = write("same.h5", 5, true), b = write("b.h5", 6, false);
  EXPECT_EQ(RunCommand({"diff-tensor", a, same}), 0) << err_;
  EXPECT_NE(out_.find("(checkpoint of step 3, 2 ranks, 4 datasets)"), std::string::npos) << out_;
  ASSERT_EQ(RunCommand({"diff-tensor", a, b, "--json"}), kExitDivergence) << err_;
  const auto j = nlohmann::json::parse(out_);
  EXPECT_EQ(j.at("a").at("kind"), "checkpoint");
  EXPECT_TRUE(j.at("a").at("rank").is_null());
  EXPECT_TRUE(j.at("a").at("boundary").is_null());
  EXPECT_EQ(j.at("a").at("world_size"), 2);
  EXPECT_EQ(j.at("only_in_a"), nlohmann::json({"replicated/extra"}));
  ASSERT_EQ(j.at("datasets").size(), 3u);  // ranks/0/data.cursor, ranks/1/data.cursor, replicated/w
  const auto& cursor1 = j.at("datasets").at(1);
  EXPECT_EQ(cursor1.at("name"), "ranks/1/data.cursor");
  EXPECT_EQ(cursor1.at("shape"), nlohmann::json({2}));
  EXPECT_EQ(cursor1.at("differing"), 1);
  EXPECT_EQ(cursor1.at("first_differences").at(0).at("a"), 5);
  EXPECT_EQ(cursor1.at("first_differences").at(0).at("b"), 6);
  EXPECT_TRUE(cursor1.at("max_ulp_diff").is_null());
  EXPECT_EQ(j.at("datasets").at(2).at("differing"), 0);
}

}  // namespace
}  // namespace dgrr::cli
