// cuRAND compatibility: PhiloxStream(seed, subsequence, offset) must return
// exactly what curand_init(seed, subsequence, offset) followed by curand(),
// curand_uniform(), curand_uniform_double() and curand_uniform2_double() give
// (tests/data/curand_philox_stream.txt, copied unchanged from /work/shared/vectors).
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "base/coding.h"
#include "rng/distributions.h"
#include "rng/philox_stream.h"
#include "tests/rng/test_util.h"

namespace dgrr::rng {
namespace {

struct CurandVector {
  std::string name;
  uint64_t seed = 0, subsequence = 0, offset = 0;
  uint32_t key[2] = {};
  uint32_t counter[4] = {};
  uint32_t state = 0;
  std::vector<uint32_t> u32;
  std::vector<uint32_t> uniform_bits;
  uint64_t uniform_double_bits = 0;
  uint64_t uniform2_double_bits[2] = {};
  int fields = 0;  // how many of the six lines were found
};

std::vector<uint32_t> HexWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<uint32_t> words;
  for (std::string w; in >> w;) words.push_back(static_cast<uint32_t>(testing::ParseHex(w)));
  return words;
}

std::vector<CurandVector> ReadCurandVectors() {
  const std::regex header(R"(^\[(vector \d+)\]$)");
  const std::regex init(R"(^seed=0x([0-9a-f]+) subsequence=0x([0-9a-f]+) offset=0x([0-9a-f]+)$)");
  const std::regex state(
      R"(^state_after_init: key=\(([0-9a-f]+),([0-9a-f]+)\) ctr=\(([0-9a-f]+),([0-9a-f]+),([0-9a-f]+),([0-9a-f]+)\) STATE=(\d+)$)");
  const std::regex u32(R"(^curand_u32\[0\.\.7\]: (.*)$)");
  const std::regex uniform(R"(^curand_uniform_bits\[0\.\.7\]: (.*)$)");
  const std::regex uniform_double(R"(^curand_uniform_double_first: ([0-9a-f]{16}) )");
  const std::regex uniform2_double(R"(^curand_uniform2_double_first: x=([0-9a-f]{16}) .* y=([0-9a-f]{16}) )");
  std::vector<CurandVector> vectors;
  std::smatch m;
  for (const std::string& line : testing::ReadLines("curand_philox_stream.txt")) {
    if (std::regex_match(line, m, header)) {
      vectors.emplace_back();
      vectors.back().name = m[1];
      continue;
    }
    if (vectors.empty()) continue;
    CurandVector& v = vectors.back();
    if (std::regex_match(line, m, init)) {
      v.seed = testing::ParseHex(m[1]);
      v.subsequence = testing::ParseHex(m[2]);
      v.offset = testing::ParseHex(m[3]);
      ++v.fields;
    } else if (std::regex_match(line, m, state)) {
      v.key[0] = static_cast<uint32_t>(testing::ParseHex(m[1]));
      v.key[1] = static_cast<uint32_t>(testing::ParseHex(m[2]));
      for (int i = 0; i < 4; ++i) v.counter[i] = static_cast<uint32_t>(testing::ParseHex(m[3 + i]));
      v.state = static_cast<uint32_t>(std::stoul(m[7]));
      ++v.fields;
    } else if (std::regex_match(line, m, u32)) {
      v.u32 = HexWords(m[1]);
      ++v.fields;
    } else if (std::regex_match(line, m, uniform)) {
      v.uniform_bits = HexWords(m[1]);
      ++v.fields;
    } else if (std::regex_search(line, m, uniform_double)) {
      v.uniform_double_bits = testing::ParseHex(m[1]);
      ++v.fields;
    } else if (std::regex_search(line, m, uniform2_double)) {
      v.uniform2_double_bits[0] = testing::ParseHex(m[1]);
      v.uniform2_double_bits[1] = testing::ParseHex(m[2]);
      ++v.fields;
    }
  }
  return vectors;
}

class CurandVectors : public ::testing::Test {
 protected:
  void SetUp() override {
    vectors_ = ReadCurandVectors();
    ASSERT_EQ(vectors_.size(), 6u) << "tests/data/curand_philox_stream.txt";
    for (const CurandVector& v : vectors_) {
      ASSERT_EQ(v.fields, 6) << v.name << ": not every line parsed";
      ASSERT_EQ(v.u32.size(), 8u) << v.name;
      ASSERT_EQ(v.uniform_bits.size(), 8u) << v.name;
    }
  }
  std::vector<CurandVector> vectors_;
};

TEST_F(CurandVectors, KeyAndCounterMapping) {
  for (const CurandVector& v : vectors_) {
    const PhiloxKey key = KeyFromSeed(v.seed);
    const PhiloxCounter counter = CounterFor(v.offset / 4, v.subsequence);
    EXPECT_EQ(key.word[0], v.key[0]) << v.name;
    EXPECT_EQ(key.word[1], v.key[1]) << v.name;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(counter.word[i], v.counter[i]) << v.name << " ctr " << i;
    EXPECT_EQ(v.offset % 4, v.state) << v.name;
  }
}

TEST_F(CurandVectors, U32FromNextU32AndFill) {
  for (const CurandVector& v : vectors_) {
    PhiloxStream scalar(v.seed, v.subsequence, v.offset);
    PhiloxStream bulk(v.seed, v.subsequence, v.offset);
    uint32_t filled[8];
    bulk.Fill(filled, 8);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(scalar.NextU32(), v.u32[i]) << v.name << " draw " << i;
      EXPECT_EQ(filled[i], v.u32[i]) << v.name << " filled draw " << i;
    }
    EXPECT_EQ(scalar.position(), v.offset + 8);
    EXPECT_EQ(bulk, scalar);
  }
}

TEST_F(CurandVectors, UniformFloatBits) {
  for (const CurandVector& v : vectors_) {
    PhiloxStream s(v.seed, v.subsequence, v.offset);
    PhiloxStream bulk = s;
    float filled[8];
    FillUniformFloat(bulk, filled, 8);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(FloatBits(UniformFloat(s)), v.uniform_bits[i]) << v.name << " draw " << i;
      EXPECT_EQ(FloatBits(filled[i]), v.uniform_bits[i]) << v.name << " filled draw " << i;
    }
  }
}

TEST_F(CurandVectors, UniformDoubleMappings) {
  for (const CurandVector& v : vectors_) {
    PhiloxStream one(v.seed, v.subsequence, v.offset);
    EXPECT_EQ(DoubleBits(UniformDoubleCurand(one)), v.uniform_double_bits) << v.name;
    PhiloxStream four(v.seed, v.subsequence, v.offset);
    const DoublePair pair = UniformDouble2Curand(four);
    EXPECT_EQ(DoubleBits(pair.first), v.uniform2_double_bits[0]) << v.name;
    EXPECT_EQ(DoubleBits(pair.second), v.uniform2_double_bits[1]) << v.name;
    EXPECT_EQ(four.position(), v.offset + 4);
  }
}

// Edge values of the float mapping quoted in the vector file's header.
TEST(CurandUniformFloat, RangeEnds) {
  EXPECT_EQ(FloatBits(UniformFloatFromBits(0)), 0x2f000000u);
  EXPECT_EQ(FloatBits(UniformFloatFromBits(1)), 0x2fc00000u);
  EXPECT_EQ(FloatBits(UniformFloatFromBits(0xFFFFFF7Fu)), 0x3f7fffffu);
  EXPECT_EQ(FloatBits(UniformFloatFromBits(0xFFFFFF80u)), 0x3f800000u);
  EXPECT_EQ(FloatBits(UniformFloatFromBits(0xFFFFFFFFu)), 0x3f800000u);
}

}  // namespace
}  // namespace dgrr::rng
