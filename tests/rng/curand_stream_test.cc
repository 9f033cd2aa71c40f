// cuRAND compatibility: PhiloxStream(seed, subsequence, offset) must return
// exactly what curand_init(seed, subsequence, offset) followed by curand(),
// curand_uniform(), curand_uniform_double() and curand_uniform2_double() give
// (tests/data/curand_philox_stream.txt, copied unchanged from /work/shared/vectors).
#include <gtest/gtest.h>

#include <cstring>
#include <cstdio>

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

bool StartsWith(const std::string& line, const char* prefix) {
  return line.rfind(prefix, 0) == 0;
}

// The file's line shapes (see its header); sscanf instead of std::regex keeps
// GCC 12's -Wmaybe-uninitialized noise out of the sanitizer build.
std::vector<CurandVector> ReadCurandVectors() {
  std::vector<CurandVector> vectors;
  for (const std::string& line : testing::ReadLines("curand_philox_stream.txt")) {
    if (StartsWith(line, "[vector ")) {
      vectors.emplace_back();
      vectors.back().name = line;
      continue;
    }
    if (vectors.empty()) continue;
    CurandVector& v = vectors.back();
    unsigned long long a = 0, b = 0, c = 0;
    unsigned k[2], ctr[4], state = 0;
    const char* text = line.c_str();
    if (std::sscanf(text, "seed=0x%llx subsequence=0x%llx offset=0x%llx", &a, &b, &c) == 3) {
      v.seed = a;
      v.subsequence = b;
      v.offset = c;
      ++v.fields;
    } else if (std::sscanf(text, "state_after_init: key=(%x,%x) ctr=(%x,%x,%x,%x) STATE=%u", &k[0],
                           &k[1], &ctr[0], &ctr[1], &ctr[2], &ctr[3], &state) == 7) {
      v.key[0] = k[0];
      v.key[1] = k[1];
      for (int i = 0; i < 4; ++i) v.counter[i] = ctr[i];
      v.state = state;
      ++v.fields;
    } else if (StartsWith(line, "curand_u32[0..7]: ")) {
      v.u32 = HexWords(line.substr(std::strlen("curand_u32[0..7]: ")));
      ++v.fields;
    } else if (StartsWith(line, "curand_uniform_bits[0..7]: ")) {
      v.uniform_bits = HexWords(line.substr(std::strlen("curand_uniform_bits[0..7]: ")));
      ++v.fields;
    } else if (std::sscanf(text, "curand_uniform_double_first: %llx", &a) == 1) {
      v.uniform_double_bits = a;
      ++v.fields;
    } else if (std::sscanf(text, "curand_uniform2_double_first: x=%llx %*s y=%llx", &a, &b) == 2) {
      v.uniform2_double_bits[0] = a;
      v.uniform2_double_bits[1] = b;
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
