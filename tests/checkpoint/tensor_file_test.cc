// Tensor dump files (docs/tensor-dump.md): round trip of every dtype, damage
// and truncation refused naming the file or dataset, no file left behind by a
// failed write.
#include "checkpoint/tensor_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "base/file.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::checkpoint {
namespace {

namespace fs = std::filesystem;

DumpedTensor MakeTensor(DType dtype, std::vector<int64_t> shape, uint64_t first, uint32_t count,
                        uint32_t seed) {
  DumpedTensor t;
  t.name = TensorDatasetName(first, count);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.example_first = first;
  t.example_count = count;
  t.phase = "forward";
  uint64_t elements = 1;
  for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
  t.data.resize(elements * std::max<size_t>(DTypeSize(dtype), 1));
  std::mt19937 gen(seed);
  for (uint8_t& b : t.data) b = static_cast<uint8_t>(gen());
  if (dtype == DType::kBool) {
    for (uint8_t& b : t.data) b &= 1;
  }
  t.recorded = FingerprintBytes(t.data.data(), t.data.size());
  return t;
}

TensorDump MakeDump() {
  TensorDump d;
  d.run_dir = "runs/a";
  d.boundary = "block0.mlp.fc.out";
  d.step = 7;
  d.rank = 1;
  return d;
}

class TensorFileTest : public ::dgrr::test_support::TempDirTest {
 protected:
  // Every name in the directory that is not `keep`.
  std::vector<std::string> Others(const std::string& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != keep) out.push_back(e.path().filename().string());
    }
    return out;
  }
};

TEST_F(TensorFileTest, RoundTripsEveryDTypeScalarsAndEmptyTensors) {
  TensorDump dump = MakeDump();
  uint32_t seed = 1;
  uint64_t first = 0;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI8, DType::kU8,
                      DType::kI32, DType::kU32, DType::kI64, DType::kU64, DType::kBool, DType::kUnknown}) {
    dump.tensors.push_back(MakeTensor(dtype, {3, 5, 2}, first++, 1, seed++));
  }
  dump.tensors.push_back(MakeTensor(DType::kF32, {}, first++, 1, seed++));         // the loss: a scalar
  dump.tensors.push_back(MakeTensor(DType::kF32, {0, 4}, first++, 1, seed++));     // no elements
  dump.tensors.push_back(MakeTensor(DType::kF32, {600, 1024}, 64, 16, seed++));  // several chunks
  dump.tensors.back().phase = "collective";
  const std::string path = Path("x@7.rank1.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());

  auto read = ReadTensorDump(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->path, path);
  EXPECT_EQ(read->run_dir, "runs/a");
  EXPECT_EQ(read->boundary, "block0.mlp.fc.out");
  EXPECT_EQ(read->step, 7u);
  EXPECT_EQ(read->rank, 1);
  EXPECT_FALSE(read->dgrr_version.empty());
  ASSERT_EQ(read->tensors.size(), dump.tensors.size());
  for (const DumpedTensor& want : dump.tensors) {
    const DumpedTensor* got = read->Find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->example_first, want.example_first);
    EXPECT_EQ(got->example_count, want.example_count);
    EXPECT_EQ(got->phase, want.phase);
    EXPECT_EQ(got->recorded, want.recorded);
    EXPECT_EQ(got->data, want.data) << want.name;
  }
  // Compressed: the many-zero tensor shrinks (random bytes do not, and are
  // stored raw through the optional filter).
  TensorDump zeros = MakeDump();
  zeros.tensors.push_back(MakeTensor(DType::kF32, {256, 1024}, 0, 1, 1));
  std::fill(zeros.tensors[0].data.begin(), zeros.tensors[0].data.end(), 0);
  zeros.tensors[0].recorded = FingerprintBytes(zeros.tensors[0].data.data(), zeros.tensors[0].data.size());
  ASSERT_TRUE(WriteTensorDump(Path("zeros.h5"), zeros).ok());
  EXPECT_LT(*FileSize(Path("zeros.h5")), 64u * 1024) << "1 MiB of zeros, zstd-compressed";
  EXPECT_TRUE(ReadTensorDump(Path("zeros.h5")).ok());
}

TEST_F(TensorFileTest, NamesPadTheExampleSoNameOrderIsExampleOrder) {
  EXPECT_EQ(TensorDatasetName(12, 1), "ex00000012_n1");
  EXPECT_EQ(TensorDatasetName(0, 16), "ex00000000_n16");
  EXPECT_LT(TensorDatasetName(9, 1), TensorDatasetName(10, 1));
  EXPECT_EQ(TensorDumpPath("out", "allreduce.dwte", 3, 2), "out/allreduce.dwte@3.rank2.h5");
}

TEST_F(TensorFileTest, DamagedDataIsRefusedNamingTheFileAndOffset) {
  TensorDump dump = MakeDump();
  dump.tensors.push_back(MakeTensor(DType::kF32, {16, 64}, 8, 1, 5));   // random: stored raw
  dump.tensors.push_back(MakeTensor(DType::kU8, {17}, 9, 1, 6));
  const std::string path = Path("d.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());
  const std::string good = ReadBytes(path);
  const std::vector<uint8_t>& payload = dump.tensors[0].data;
  const size_t at = good.find(std::string(payload.begin() + 100, payload.begin() + 132));
  ASSERT_NE(at, std::string::npos) << "the raw chunk is in the file";
  std::string bad = good;
  bad[at + 3] ^= 0x10;
  WriteBytes(path, bad);
  auto read = ReadTensorDump(path);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(read.status().IsCorruption()) << read.status().ToString();
  EXPECT_NE(read.status().message().find(path + ": offset 512: hash of bytes 512.."), std::string::npos)
      << read.status().ToString();
  EXPECT_NE(read.status().message().find("(file damaged)"), std::string::npos) << read.status().ToString();
}

// Past the whole-file hash, each dataset is checked on its own: bytes that
// are not the ones whose fingerprint was recorded are refused by name.
TEST_F(TensorFileTest, BytesThatAreNotTheRecordedOnesAreRefusedNamingTheDataset) {
  TensorDump dump = MakeDump();
  dump.tensors.push_back(MakeTensor(DType::kF32, {4, 4}, 3, 1, 5));
  dump.tensors.push_back(MakeTensor(DType::kF32, {4, 4}, 8, 1, 6));
  dump.tensors[1].recorded.xor64 ^= 1;
  const std::string path = Path("r.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());
  auto read = ReadTensorDump(path);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(read.status().IsCorruption()) << read.status().ToString();
  EXPECT_NE(read.status().message().find(path + ": dataset /tensors/ex00000008_n1: the bytes are not those"),
            std::string::npos)
      << read.status().ToString();
}

TEST_F(TensorFileTest, AFlipAnywhereIsRefusedBeforeLibhdf5SeesIt) {
  TensorDump dump = MakeDump();
  dump.tensors.push_back(MakeTensor(DType::kF32, {16, 64}, 8, 1, 5));
  DumpedTensor zeros = MakeTensor(DType::kF32, {16, 64}, 9, 1, 6);
  std::fill(zeros.data.begin(), zeros.data.end(), 0);  // compressed by zstd
  zeros.recorded = FingerprintBytes(zeros.data.data(), zeros.data.size());
  dump.tensors.push_back(zeros);
  const std::string path = Path("f.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());
  const std::string good = ReadBytes(path);
  // About 150 flips spread over the whole file: header, reserved bytes,
  // HDF5 metadata, free space and data alike. Every one is refused by the
  // header's checks, so libhdf5 never parses a damaged file.
  const size_t stride = good.size() / 150 | 1;
  for (size_t at = 0; at < good.size(); at += stride) {
    std::string bad = good;
    bad[at] ^= 0x5a;
    WriteBytes(path, bad);
    auto read = ReadTensorDump(path);
    ASSERT_FALSE(read.ok()) << "offset " << at;
    EXPECT_TRUE(read.status().IsCorruption()) << "offset " << at << ": " << read.status().ToString();
    EXPECT_EQ(read.status().message().rfind(path + ": offset ", 0), 0u) << read.status().ToString();
  }
  WriteBytes(path, good + "x");
  auto trailing = ReadTensorDump(path);
  EXPECT_NE(trailing.status().message().find("(trailing bytes)"), std::string::npos)
      << trailing.status().ToString();
}

TEST_F(TensorFileTest, TruncationIsRefusedNamingTheFile) {
  TensorDump dump = MakeDump();
  dump.tensors.push_back(MakeTensor(DType::kF32, {16, 64}, 8, 1, 5));
  const std::string path = Path("t.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());
  const std::string good = ReadBytes(path);
  for (size_t keep : {size_t{0}, size_t{7}, size_t{100}, good.size() / 3, good.size() / 2, good.size() - 1}) {
    WriteBytes(path, good.substr(0, keep));
    auto read = ReadTensorDump(path);
    ASSERT_FALSE(read.ok()) << "cut at " << keep;
    EXPECT_TRUE(read.status().IsCorruption()) << "cut at " << keep << ": " << read.status().ToString();
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().ToString();
    if (keep >= 512) {
      EXPECT_NE(read.status().message().find("(truncated)"), std::string::npos) << read.status().ToString();
    }
  }
  auto missing = ReadTensorDump(Path("nothing.h5"));
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
}

TEST_F(TensorFileTest, AFailedWriteLeavesNoFileAndKeepsTheOldOne) {
  TensorDump dump = MakeDump();
  dump.tensors.push_back(MakeTensor(DType::kF32, {4, 4}, 0, 1, 1));
  const std::string path = Path("keep.h5");
  ASSERT_TRUE(WriteTensorDump(path, dump).ok());
  const std::string before = ReadBytes(path);

  // Refused before anything is written: bytes that do not fit the shape,
  // and two tensors of one name.
  TensorDump wrong = dump;
  wrong.tensors[0].shape = {4, 5};
  EXPECT_TRUE(WriteTensorDump(path, wrong).IsInvalidArgument());
  TensorDump twice = dump;
  twice.tensors.push_back(dump.tensors[0]);
  EXPECT_TRUE(WriteTensorDump(path, twice).IsInvalidArgument());
  EXPECT_EQ(ReadBytes(path), before);

  // Failing at the very end: the rename cannot replace a directory. The
  // temporary file written before it must be gone.
  const std::string blocked = Path("blocked.h5");
  fs::create_directories(blocked + "/inside");
  EXPECT_FALSE(WriteTensorDump(blocked, dump).ok());
  EXPECT_TRUE(fs::is_directory(blocked + "/inside"));
  std::vector<std::string> others = Others("keep.h5");
  EXPECT_EQ(others, std::vector<std::string>{"blocked.h5"}) << "no temporary left beside the target";
}

}  // namespace
}  // namespace dgrr::checkpoint
