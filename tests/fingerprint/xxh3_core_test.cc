// The host/device XXH3 model (fingerprint/xxh3_core.h) against libxxhash: the
// CUDA kernels run these same functions, so this is how the device hash is
// checked on machines without a GPU.
#include "fingerprint/xxh3_core.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "fingerprint/fingerprint.h"

namespace dgrr {
namespace {

const uint8_t* Secret() { return fingerprint_internal::DefaultXxh3Secret(); }

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// The kernels' arrangement: every (block, lane) delta computed independently
// (here in reverse order, to show order does not matter), stored block-major,
// then one sequential chain per lane, the tail delta, and the merge.
uint64_t HashLongAsKernels(const uint8_t* in, size_t len) {
  const size_t blocks = xxh3::FullBlocks(len);
  std::vector<uint64_t> deltas(blocks * xxh3::kLanes);
  for (size_t i = deltas.size(); i-- > 0;) {
    const size_t block = i / xxh3::kLanes, lane = i % xxh3::kLanes;
    deltas[i] =
        xxh3::BlockLaneDelta(in + block * xxh3::kBlockLen, xxh3::kStripesPerBlock, Secret(), lane);
  }
  uint64_t acc[xxh3::kLanes];
  for (size_t lane = 0; lane < xxh3::kLanes; ++lane) {
    acc[lane] = xxh3::ChainLane(deltas.data(), xxh3::kLanes, blocks, Secret(), lane) +
                xxh3::TailLaneDelta(in, len, Secret(), lane);
  }
  return xxh3::MergeLanes(acc, len, Secret());
}

TEST(Xxh3CoreTest, DefaultSecretIsTheBuiltInOne) {
  // First and last words of XXH3's published kSecret.
  EXPECT_EQ(xxh3::ReadLE64(Secret()), 0xbe4ba423396cfeb8ull);
  EXPECT_EQ(xxh3::ReadLE64(Secret() + 184), 0x7e404bbbcafbd7afull);
}

TEST(Xxh3CoreTest, EveryLengthUpTo2100MatchesLibxxhash) {
  const std::vector<uint8_t> buf = RandomBytes(2100, 21);
  for (size_t len = 0; len <= buf.size(); ++len) {
    ASSERT_EQ(xxh3::Hash(buf.data(), len, Secret()), Xxh3(buf.data(), len)) << "len=" << len;
  }
}

TEST(Xxh3CoreTest, KernelArrangementMatchesLibxxhash) {
  const std::vector<uint8_t> buf = RandomBytes((1 << 20) + 7, 22);
  std::vector<size_t> lengths = {241,  255,  256,  257,  1023, 1024, 1025,  1088,  1089,
                                 2047, 2048, 2049, 4095, 4096, 4097, 65536, 65537, buf.size()};
  for (size_t len = 241; len < 1200; len += 13) lengths.push_back(len);
  for (size_t len : lengths) {
    EXPECT_EQ(HashLongAsKernels(buf.data(), len), Xxh3(buf.data(), len)) << "len=" << len;
  }
}

TEST(Xxh3CoreTest, ShortPathsAtEveryBoundary) {
  const std::vector<uint8_t> buf = RandomBytes(256, 23);
  for (size_t len :
       {0, 1, 2, 3, 4, 8, 9, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 143, 144, 239, 240}) {
    EXPECT_EQ(xxh3::HashShort(buf.data(), len, Secret()), Xxh3(buf.data(), len)) << "len=" << len;
  }
}

TEST(Xxh3CoreTest, MisalignedInput) {
  const std::vector<uint8_t> data = RandomBytes(3000, 24);
  std::vector<uint8_t> storage(data.size() + 8);
  for (size_t shift = 1; shift < 8; ++shift) {
    std::copy(data.begin(), data.end(), storage.begin() + shift);
    EXPECT_EQ(xxh3::Hash(storage.data() + shift, data.size(), Secret()),
              Xxh3(data.data(), data.size()))
        << "shift=" << shift;
  }
}

}  // namespace
}  // namespace dgrr
