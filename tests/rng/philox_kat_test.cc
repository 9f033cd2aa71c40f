// Random123's known-answer vectors for Philox4x32 (tests/data/philox_kat.txt,
// copied unchanged from /work/shared/vectors): every "philox4x32 10" and
// "philox4x32 7" line, through the block function and every SIMD kernel.
#include <gtest/gtest.h>

#include <sstream>

#include "rng/philox.h"
#include "rng/philox_fill.h"
#include "tests/rng/test_util.h"

namespace dgrr::rng {
namespace {

struct KatLine {
  int rounds;
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxBlock expected;
  std::string text;
};

std::vector<KatLine> ReadPhilox4x32Kats() {
  std::vector<KatLine> kats;
  for (const std::string& line : testing::ReadLines("philox_kat.txt")) {
    std::istringstream in(line);
    std::string name;
    in >> name;
    if (name != "philox4x32") continue;
    KatLine kat{};
    kat.text = line;
    std::string word;
    in >> kat.rounds;
    for (uint32_t& c : kat.counter.word) { in >> word; c = static_cast<uint32_t>(testing::ParseHex(word)); }
    for (uint32_t& k : kat.key.word) { in >> word; k = static_cast<uint32_t>(testing::ParseHex(word)); }
    for (uint32_t& o : kat.expected.word) { in >> word; o = static_cast<uint32_t>(testing::ParseHex(word)); }
    EXPECT_FALSE(in.fail()) << "malformed KAT line: " << line;
    kats.push_back(kat);
  }
  return kats;
}

void ExpectBlock(const PhiloxBlock& got, const KatLine& kat) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got.word[i], kat.expected.word[i]) << "word " << i << " of: " << kat.text;
  }
}

TEST(PhiloxKat, AllTenRoundLines) {
  int checked = 0;
  for (const KatLine& kat : ReadPhilox4x32Kats()) {
    if (kat.rounds != 10) continue;
    ExpectBlock(Philox4x32<10>(kat.counter, kat.key), kat);
    ++checked;
  }
  EXPECT_EQ(checked, 55);  // 3 current + 52 old-set lines in the file
}

TEST(PhiloxKat, AllSevenRoundLines) {
  int checked = 0;
  for (const KatLine& kat : ReadPhilox4x32Kats()) {
    if (kat.rounds != 7) continue;
    ExpectBlock(Philox4x32<7>(kat.counter, kat.key), kat);
    ++checked;
  }
  EXPECT_EQ(checked, 55);
}

TEST(PhiloxKat, EvaluatesAtCompileTime) {
  constexpr PhiloxBlock block = Philox4x32(PhiloxCounter{{0, 0, 0, 0}}, PhiloxKey{{0, 0}});
  static_assert(block.word[0] == 0x6627e8d5u && block.word[3] == 0x9b00dbd8u);
  SUCCEED();
}

// The SIMD kernels read the counter as (block index, subsequence): a KAT line
// is block index c0|c1<<32 in subsequence c2|c3<<32. Put it at every lane of a
// SIMD group (and in the scalar tail) to catch lane or transpose mix-ups.
TEST(PhiloxKat, TenRoundLinesThroughEveryFillKernel) {
  int checked = 0;
  for (const KatLine& kat : ReadPhilox4x32Kats()) {
    if (kat.rounds != 10) continue;
    const uint64_t block = kat.counter.word[0] | (uint64_t{kat.counter.word[1]} << 32);
    const uint64_t subsequence = kat.counter.word[2] | (uint64_t{kat.counter.word[3]} << 32);
    const uint64_t key = kat.key.word[0] | (uint64_t{kat.key.word[1]} << 32);
    if (block >= (uint64_t{1} << 62)) continue;  // outside the addressable block range
    for (FillKernel kernel : {FillKernel::kScalar, FillKernel::kSse2, FillKernel::kAvx2,
                              FillKernel::kAvx512}) {
      if (!FillKernelSupported(kernel)) continue;
      constexpr int kBlocks = 40;  // > one 32-block AVX-512 step, plus a tail
      for (int lane : {0, 1, 5, 13, 31, 39}) {
        if (block < static_cast<uint64_t>(lane)) continue;
        uint32_t out[4 * kBlocks];
        PhiloxFillBlocksWith(kernel, key, subsequence, block - lane, kBlocks, out);
        for (int i = 0; i < 4; ++i) {
          ASSERT_EQ(out[4 * lane + i], kat.expected.word[i])
              << FillKernelName(kernel) << " lane " << lane << " word " << i << ": " << kat.text;
        }
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace dgrr::rng
