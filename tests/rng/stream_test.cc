// PhiloxStream addressing: skip-ahead equals sequential generation, bulk Fill
// (every SIMD kernel) equals NextU32, and stream identities never collide.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "base/coding.h"
#include "rng/distributions.h"
#include "rng/philox_fill.h"
#include "rng/philox_stream.h"
#include "rng/rng_streams.h"
#include "rng/stream_id.h"

namespace dgrr::rng {
namespace {

constexpr uint64_t kKey = 0x0123456789abcdefull;
constexpr uint64_t kSubsequence = 0xfedcba9876543210ull;

// Draw `position` computed from the definition, independent of PhiloxStream.
uint32_t ReferenceDraw(uint64_t key, uint64_t subsequence, uint64_t position) {
  return Philox4x32(CounterFor(position / 4, subsequence), KeyFromSeed(key)).word[position % 4];
}

std::vector<FillKernel> SupportedKernels() {
  std::vector<FillKernel> kernels;
  for (FillKernel k : {FillKernel::kScalar, FillKernel::kSse2, FillKernel::kAvx2, FillKernel::kAvx512}) {
    if (FillKernelSupported(k)) kernels.push_back(k);
  }
  return kernels;
}

TEST(PhiloxStream, SequentialMatchesDefinition) {
  PhiloxStream s(kKey, kSubsequence);
  for (uint64_t p = 0; p < 1000; ++p) {
    EXPECT_EQ(s.position(), p);
    ASSERT_EQ(s.NextU32(), ReferenceDraw(kKey, kSubsequence, p)) << "position " << p;
  }
}

TEST(PhiloxStream, SkipToEqualsSequentialAtManyPositions) {
  constexpr size_t kCount = 4099;
  std::vector<uint32_t> sequential(kCount);
  PhiloxStream s(kKey, kSubsequence);
  for (uint32_t& v : sequential) v = s.NextU32();
  PhiloxStream jumper(kKey, kSubsequence);
  // Forward, backward and block-boundary jumps, reusing one stream (cache!).
  for (uint64_t p : std::initializer_list<uint64_t>{0, 1, 2, 3, 4, 5, 7, 8, 4095, 4096, 4097, 3, 1023,
                     1024, 2, 4098, 0}) {
    jumper.SkipTo(p);
    EXPECT_EQ(jumper.position(), p);
    ASSERT_EQ(jumper.NextU32(), sequential[p]) << "position " << p;
  }
  for (uint64_t p = 0; p < kCount; p += 37) {
    PhiloxStream fresh(kKey, kSubsequence, p);
    ASSERT_EQ(fresh.NextU32(), sequential[p]) << "position " << p;
  }
}

// Around the places where the block index changes shape: the carry from
// counter word 0 into word 1 (position 2^34 = block 2^32), position 2^62 and
// a quarter of the way from the end: sequential draws across 300 positions
// equal SkipTo at each of them.
TEST(PhiloxStream, SkipToEqualsSequentialAtHugePositions) {
  for (uint64_t centre : std::initializer_list<uint64_t>{uint64_t{1} << 34, uint64_t{1} << 62,
                                                         (uint64_t{3} << 62) + 2}) {
    const uint64_t start = centre - 150;
    PhiloxStream sequential(kKey, kSubsequence, start);
    for (uint64_t p = start; p < start + 300; ++p) {
      PhiloxStream jump(kKey, kSubsequence);
      jump.SkipTo(p);
      const uint32_t expected = sequential.NextU32();
      ASSERT_EQ(jump.NextU32(), expected) << "position " << p;
      ASSERT_EQ(expected, ReferenceDraw(kKey, kSubsequence, p)) << "position " << p;
    }
  }
}

TEST(PhiloxStream, SkipAddsToPosition) {
  PhiloxStream a(kKey, kSubsequence, 10);
  a.Skip(1001);
  PhiloxStream b(kKey, kSubsequence);
  b.SkipTo(1011);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.NextU32(), b.NextU32());
}

TEST(PhiloxStream, HugePositionsNearTheEnd) {
  // The last 300 positions of the stream (block indices just below 2^62),
  // sequentially, by SkipTo, and by Fill from an unaligned start.
  const uint64_t start = ~uint64_t{0} - 299;  // 2^64 - 300
  PhiloxStream s(kKey, kSubsequence, start);
  std::vector<uint32_t> sequential(299);
  for (size_t i = 0; i < sequential.size(); ++i) {
    sequential[i] = s.NextU32();
    ASSERT_EQ(sequential[i], ReferenceDraw(kKey, kSubsequence, start + i)) << i;
  }
  for (size_t i = 0; i < sequential.size(); i += 7) {
    PhiloxStream jump(kKey, kSubsequence);
    jump.SkipTo(start + i);
    ASSERT_EQ(jump.NextU32(), sequential[i]) << i;
  }
  PhiloxStream bulk(kKey, kSubsequence, start + 3);
  std::vector<uint32_t> filled(290);
  bulk.Fill(filled.data(), filled.size());
  for (size_t i = 0; i < filled.size(); ++i) ASSERT_EQ(filled[i], sequential[i + 3]) << i;
  EXPECT_EQ(bulk.position(), start + 3 + 290);
}

TEST(PhiloxStream, FillWrapsAtTheEndLikeNextU32) {
  const uint64_t start = ~uint64_t{0} - 45;  // 46 draws before the wrap
  PhiloxStream scalar(kKey, kSubsequence, start);
  PhiloxStream bulk = scalar;
  std::vector<uint32_t> filled(200);
  bulk.Fill(filled.data(), filled.size());
  for (size_t i = 0; i < filled.size(); ++i) ASSERT_EQ(filled[i], scalar.NextU32()) << i;
  EXPECT_EQ(bulk.position(), 200u - 46u);
  EXPECT_EQ(filled[46], ReferenceDraw(kKey, kSubsequence, 0));
}

TEST(PhiloxStream, NextU64IsTwoDrawsLowFirst) {
  PhiloxStream a(kKey, kSubsequence, 3);  // straddles a block boundary
  PhiloxStream b = a;
  const uint64_t low = b.NextU32();
  const uint64_t high = b.NextU32();
  EXPECT_EQ(a.NextU64(), low | (high << 32));
  EXPECT_EQ(a, b);
}

TEST(PhiloxStream, FillEqualsNextU32ForAllOffsetsAndLengths) {
  for (uint64_t start : std::initializer_list<uint64_t>{0, 1, 2, 3, 4, 61, (uint64_t{1} << 34) - 130}) {
    for (size_t n : {0u, 1u, 3u, 4u, 5u, 31u, 64u, 127u, 128u, 129u, 257u, 1000u}) {
      PhiloxStream scalar(kKey, kSubsequence, start);
      PhiloxStream bulk = scalar;
      std::vector<uint32_t> filled(n);
      bulk.Fill(filled.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(filled[i], scalar.NextU32()) << "start " << start << " n " << n << " i " << i;
      }
      EXPECT_EQ(bulk.position(), start + n);
    }
  }
}

// Every kernel against the scalar definition, including groups whose block
// indices carry from counter word 0 into word 1 (around block 2^32).
TEST(PhiloxFill, EveryKernelMatchesScalar) {
  const std::vector<FillKernel> kernels = SupportedKernels();
  EXPECT_GE(kernels.size(), 2u);  // scalar and SSE2 at least on x86-64
  for (uint64_t first_block : std::initializer_list<uint64_t>{0, 5, (uint64_t{1} << 32) - 37, (uint64_t{1} << 62) - 200}) {
    for (size_t count : {0u, 1u, 7u, 8u, 15u, 16u, 31u, 32u, 33u, 64u, 100u, 200u}) {
      std::vector<uint32_t> expected(4 * count);
      for (size_t b = 0; b < count; ++b) {
        for (int lane = 0; lane < 4; ++lane) {
          expected[4 * b + lane] = ReferenceDraw(kKey, kSubsequence, 4 * (first_block + b) + lane);
        }
      }
      for (FillKernel kernel : kernels) {
        std::vector<uint32_t> got(4 * count + 1, 0xdeadbeef);
        PhiloxFillBlocksWith(kernel, kKey, kSubsequence, first_block, count, got.data());
        EXPECT_EQ(got.back(), 0xdeadbeefu) << FillKernelName(kernel) << ": wrote past the end";
        got.pop_back();
        ASSERT_EQ(got, expected) << FillKernelName(kernel) << " first_block " << first_block
                                 << " count " << count;
      }
    }
  }
}

TEST(PhiloxStream, EqualityIgnoresTheBlockCache) {
  PhiloxStream a(kKey, kSubsequence, 8);
  PhiloxStream b(kKey, kSubsequence, 7);
  b.NextU32();  // b now caches block 1
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == PhiloxStream(kKey, kSubsequence + 1, 8));
  EXPECT_FALSE(a == PhiloxStream(kKey + 1, kSubsequence, 8));
}

// ---- Stream identity ---------------------------------------------------------

TEST(StreamId, MatchesTheWorkedExampleInTheSpec) {
  // docs/rng.md, "Worked example"; values printed by tests/rng/rng_v1_model.py.
  const RngStreams rng(20240601);
  PhiloxStream s = rng.Stream(Purpose::kDropout, {3, 17, 2, 1});
  EXPECT_EQ(s.key(), 0x566346a651400c26ull);
  EXPECT_EQ(s.subsequence(), 0xf60b2ae9e15aa57eull);
  const uint32_t expected[8] = {0x9575174b, 0xfb6010dc, 0x6f460004, 0x965622fc,
                                0x7980bedd, 0xb4eda881, 0x4683ee2a, 0x7f496ba1};
  for (uint32_t e : expected) EXPECT_EQ(s.NextU32(), e);
  PhiloxStream again = rng.Stream(Purpose::kDropout, {3, 17, 2, 1});
  EXPECT_EQ(FloatBits(UniformFloat(again)), 0x3f157517u);  // 0.5838179
  again.SkipTo(0);
  const DoublePair z = NormalPairFrom(again);
  // glibc's log/cos/sin via Python's math module; allow an ulp or two.
  EXPECT_NEAR(z.first, -0.16296531606367842, 1e-15);
  EXPECT_NEAR(z.second, -0.09951608656902243, 1e-15);
  const std::vector<uint32_t> order = *RngStreams(1234).EpochPermutation(7, 10);
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 7, 1, 3, 9, 5, 6, 4, 2, 8}));
}

TEST(StreamId, ChainsUseDocumentedMixers) {
  // One step of each chain by hand, so a change to a constant shows up here
  // and not only as a different golden value.
  EXPECT_EQ(MixSplitMix64(0), 0u);
  EXPECT_EQ(MixMurmur3(0), 0u);
  // SplitMix64 seeded with 0 first outputs MixSplitMix64(golden gamma).
  EXPECT_EQ(MixSplitMix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
  EXPECT_EQ(MixSplitMix64(1), 0x5692161d100b05e5ull);
  EXPECT_EQ(MixMurmur3(1), 0xb456bcfc34c2cb2cull);
}

TEST(StreamId, CoordinateCountPurposeAndSeedAllMatter) {
  const RngStreams rng(7);
  const uint64_t zero[1] = {0};
  std::vector<StreamId> ids = {
      rng.Stream(Purpose::kInit).id(),
      rng.Stream(Purpose::kInit, zero).id(),
      rng.Stream(Purpose::kInit, {0, 0}).id(),
      rng.Stream(Purpose::kInit, {0, 0, 0}).id(),
      rng.Stream(Purpose::kInit, {0, 0, 0, 0}).id(),
      rng.Stream(Purpose::kDropout).id(),
      rng.Stream(Purpose::kShuffle).id(),
      rng.Stream(Purpose::kAugment).id(),
      rng.Stream(Purpose::kNoise).id(),
      rng.Stream(UserPurpose(0)).id(),
      rng.Stream(UserPurpose(1)).id(),
      RngStreams(8).Stream(Purpose::kInit).id(),
      rng.Stream(Purpose::kInit, {1, 2}).id(),
      rng.Stream(Purpose::kInit, {2, 1}).id(),  // order matters: no sums or XORs of coordinates
      rng.Stream(Purpose::kInit, {3, 0}).id(),
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size(); ++j) {
      EXPECT_NE(ids[i].key, ids[j].key) << i << " vs " << j;
      EXPECT_NE(ids[i].subsequence, ids[j].subsequence) << i << " vs " << j;
    }
  }
}

TEST(StreamId, RuntimeCoordinatesMatchCompileTimeOnes) {
  const RngStreams rng(99);
  const std::array<uint64_t, 3> coords = {4, 5, 6};
  StatusOr<PhiloxStream> s = rng.StreamFor(Purpose::kAugment, coords);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, rng.Stream(Purpose::kAugment, {4, 5, 6}));
  const std::array<uint64_t, 5> too_many = {1, 2, 3, 4, 5};
  StatusOr<PhiloxStream> bad = rng.StreamFor(Purpose::kAugment, too_many);
  EXPECT_TRUE(bad.status().IsInvalidArgument());
}

// 10^6 dropout streams (step, example, layer, site) plus every short tuple of
// small coordinates for every purpose: the first 64 bits drawn from each are
// pairwise distinct.
TEST(StreamId, NoCollisionsOfFirstOutputsInAMillionStreams) {
  const RngStreams rng(0x5eed);
  std::vector<uint64_t> first;
  first.reserve(1100000);
  for (uint64_t step = 0; step < 10; ++step)
    for (uint64_t example = 0; example < 1000; ++example)
      for (uint64_t layer = 0; layer < 10; ++layer)
        for (uint64_t site = 0; site < 10; ++site) {
          PhiloxStream s = rng.Stream(Purpose::kDropout, {step, example, layer, site});
          first.push_back(s.NextU64());
        }
  for (Purpose p : {Purpose::kInit, Purpose::kDropout, Purpose::kShuffle, Purpose::kAugment,
                    Purpose::kNoise, UserPurpose(0), UserPurpose(77)}) {
    first.push_back(rng.Stream(p).NextU64());
    for (uint64_t a = 0; a < 20; ++a) {
      first.push_back(rng.Stream(p, {a}).NextU64());
      for (uint64_t b = 0; b < 20; ++b) {
        first.push_back(rng.Stream(p, {a, b}).NextU64());
        for (uint64_t c = 0; c < 20; ++c) first.push_back(rng.Stream(p, {a, b, c}).NextU64());
      }
    }
  }
  const size_t total = first.size();
  EXPECT_GT(total, 1000000u);
  std::sort(first.begin(), first.end());
  const auto duplicate = std::adjacent_find(first.begin(), first.end());
  EXPECT_TRUE(duplicate == first.end()) << "two of " << total << " streams start with "
                                        << std::hex << *duplicate;
}

}  // namespace
}  // namespace dgrr::rng
