// CRC32C against the RFC 3720 vectors (tests/data/crc32c.txt), on both the
// hardware and the table path, one-shot, streamed and byte by byte, and
// through every block kernel that checksums records in batches.
#include "trace_format/crc32c.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/upper_vector_state.h"

namespace dgrr::crc32c {
namespace {

struct Vector {
  std::string label;
  std::string bytes;
  uint32_t crc;
  uint32_t masked;
};

std::string Field(const std::string& line, const std::string& key) {
  size_t at = line.find("|" + key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  return line.substr(at, line.find('|', at) - at);
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<Vector> LoadVectors() {
  std::ifstream in(std::string(DGRR_TEST_DATA_DIR) + "/crc32c.txt");
  EXPECT_TRUE(in.good()) << "missing tests/data/crc32c.txt";
  std::vector<Vector> vectors;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("OK |", 0) != 0) continue;
    Vector v;
    v.label = line.substr(4, line.find('|', 4) - 4);
    size_t length = std::stoul(Field(line, "len"));
    std::string hex = Field(line, "hex");
    if (hex.rfind("<", 0) == 0) {  // "<1048576 bytes>": byte i is i & 0xff
      for (size_t i = 0; i < length; ++i) v.bytes.push_back(static_cast<char>(i & 0xff));
    } else {
      v.bytes = FromHex(hex);
    }
    EXPECT_EQ(v.bytes.size(), length) << v.label;
    v.crc = static_cast<uint32_t>(std::stoul(Field(line, "crc32c"), nullptr, 16));
    v.masked = static_cast<uint32_t>(std::stoul(Field(line, "leveldb_mask"), nullptr, 16));
    vectors.push_back(std::move(v));
  }
  return vectors;
}

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

void CheckAllWays(ExtendFn extend, const Vector& v) {
  EXPECT_EQ(extend(0, v.bytes.data(), v.bytes.size()), v.crc) << v.label << " one-shot";
  // Split in two at a few points, and byte by byte for the short ones.
  for (size_t cut : {size_t{0}, size_t{1}, v.bytes.size() / 3, v.bytes.size() / 2, v.bytes.size()}) {
    if (cut > v.bytes.size()) continue;
    uint32_t crc = extend(0, v.bytes.data(), cut);
    crc = extend(crc, v.bytes.data() + cut, v.bytes.size() - cut);
    EXPECT_EQ(crc, v.crc) << v.label << " split at " << cut;
  }
  if (v.bytes.size() <= 4096) {
    uint32_t crc = 0;
    for (char c : v.bytes) crc = extend(crc, &c, 1);
    EXPECT_EQ(crc, v.crc) << v.label << " byte by byte";
  }
}

TEST(Crc32c, VectorsFileHasThePublishedValues) {
  auto vectors = LoadVectors();
  ASSERT_GE(vectors.size(), 12u);
  EXPECT_EQ(vectors[1].crc, 0xE3069283u);  // the catalogue check value of "123456789"
}

TEST(Crc32c, PortableMatchesVectors) {
  for (const auto& v : LoadVectors()) CheckAllWays(&ExtendPortable, v);
}

TEST(Crc32c, HardwareMatchesVectors) {
  if (!HardwareAvailable()) GTEST_SKIP() << "no SSE4.2 crc32 instruction on this CPU";
  for (const auto& v : LoadVectors()) CheckAllWays(&ExtendHardware, v);
}

TEST(Crc32c, DispatchedMatchesVectors) {
  for (const auto& v : LoadVectors()) CheckAllWays(&Extend, v);
}

TEST(Crc32c, PathsAgreeOnEveryLengthAndAlignment) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += 7) {
      ASSERT_EQ(ExtendPortable(0x12345678, data.data() + start, n),
                ExtendHardware(0x12345678, data.data() + start, n))
          << start << "+" << n;
    }
  }
}

// Every block kernel, one test instance each: those this CPU cannot run are
// skipped and say why; each one it can run is compared with the vectors and
// with the portable (table) path.
class BlockKernelTest : public ::testing::TestWithParam<BlockKernel> {
 protected:
  void SetUp() override {
    if (!BlockKernelAvailable(GetParam())) {
      GTEST_SKIP() << "block kernel " << BlockKernelName(GetParam()) << " needs "
                   << BlockKernelNeeds(GetParam()) << "; this CPU or build lacks it";
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Crc32c, BlockKernelTest,
                         ::testing::Values(BlockKernel::kPortable, BlockKernel::kCrc32Chains,
                                           BlockKernel::kClmulAvx2, BlockKernel::kClmulAvx512),
                         [](const ::testing::TestParamInfo<BlockKernel>& info) {
                           std::string name = BlockKernelName(info.param);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST_P(BlockKernelTest, MatchesVectors) {
  const BlockKernel kernel = GetParam();
  for (const auto& v : LoadVectors()) {
    if (v.bytes.size() > 4096) continue;
    // Five copies, 3 bytes apart, so every block starts at another alignment.
    const size_t stride = v.bytes.size() + 3;
    std::string blocks(5 * stride, '\x5a');
    for (size_t i = 0; i < 5; ++i) blocks.replace(i * stride, v.bytes.size(), v.bytes);
    uint32_t out[5] = {};
    ValueOfBlocksWith(kernel, blocks.data(), stride, v.bytes.size(), 5, out);
    for (uint32_t crc : out) EXPECT_EQ(crc, v.crc) << v.label;
  }
}

// The folding kernels take blocks of 112 to 128 bytes (a record's 124): every
// length around that range, at every alignment, with a count that leaves
// each remainder of the four-chain loop, against the table path.
TEST_P(BlockKernelTest, AgreesWithThePortablePathAroundRecordSizes) {
  const BlockKernel kernel = GetParam();
  std::mt19937_64 rng(3720);
  std::vector<uint8_t> data(64 * 1024);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t length = 96; length <= 144; ++length) {
    for (size_t align = 0; align < 16; ++align) {
      const size_t count = 1 + (length + align) % 9;
      const size_t stride = length + (align & 3) * 8;
      std::vector<uint32_t> out(count);
      ValueOfBlocksWith(kernel, data.data() + align, stride, length, count, out.data());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], ExtendPortable(0, data.data() + align + i * stride, length))
            << "length " << length << " align " << align << " block " << i;
      }
    }
  }
  // Records of all-zero and all-one bytes: the folded prefix must still see
  // the initial register.
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    std::vector<uint8_t> records(3 * 128, fill);
    uint32_t out[3] = {};
    ValueOfBlocksWith(kernel, records.data(), 128, 124, 3, out);
    for (uint32_t crc : out) EXPECT_EQ(crc, ExtendPortable(0, records.data(), 124)) << int{fill};
  }
}

TEST(Crc32c, TheSelectedBlockKernelIsTheBestAvailable) {
  const BlockKernel selected = SelectedBlockKernel();
  EXPECT_TRUE(BlockKernelAvailable(selected));
  for (BlockKernel better = static_cast<BlockKernel>(static_cast<int>(selected) + 1);
       static_cast<int>(better) <= static_cast<int>(BlockKernel::kClmulAvx512);
       better = static_cast<BlockKernel>(static_cast<int>(better) + 1)) {
    EXPECT_FALSE(BlockKernelAvailable(better)) << BlockKernelName(better) << " runs here but was not selected";
  }
  std::cout << "[ INFO     ] selected block kernel: " << BlockKernelName(selected) << "\n";
}

#if defined(DGRR_HAVE_XINUSE_CHECK)
// The folding kernels use YMM/ZMM registers; the writer's I/O thread and the
// reader run legacy-SSE code after them.
TEST_P(BlockKernelTest, LeavesTheUpperVectorStateClean) {
  if (!test_support::CpuReportsXinuse()) GTEST_SKIP() << "this CPU cannot report XINUSE";
  std::vector<uint8_t> records(64 * 128, 0x5a);
  std::vector<uint32_t> out(64);
  ValueOfBlocksWith(GetParam(), records.data(), 128, 124, 64, out.data());
  EXPECT_EQ(test_support::Xinuse() & test_support::kDirtyUpperState, 0u);
}
#endif

TEST(Crc32c, MaskAndUnmask) {
  for (const auto& v : LoadVectors()) {
    EXPECT_EQ(Mask(v.crc), v.masked) << v.label;
    EXPECT_EQ(Unmask(v.masked), v.crc) << v.label;
    EXPECT_NE(Mask(v.crc), v.crc) << v.label;
    EXPECT_NE(Mask(Mask(v.crc)), Mask(v.crc)) << v.label;
  }
}

TEST(Crc32c, ValuesDiffer) {
  EXPECT_NE(Value("a", 1), Value("foo", 3));
  EXPECT_EQ(Extend(Value("hello ", 6), "world", 5), Value("hello world", 11));
}

}  // namespace
}  // namespace dgrr::crc32c
