// Thread-count independence: the dropout masks of 1024 examples, each from its
// own (dropout, step, example, layer, site) stream, are the same bytes whether
// 1, 2 or 8 threads fill them and whatever order the threads take examples in.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "rng/rng_streams.h"

namespace dgrr::rng {
namespace {

constexpr uint64_t kExamples = 1024;
constexpr uint64_t kLayers = 2;
constexpr size_t kMaskLength = 999;  // not a multiple of 4: partial blocks at both ends
constexpr uint64_t kStep = 42;
constexpr uint64_t kSite = 1;

size_t MaskOffset(uint64_t example, uint64_t layer) {
  return (example * kLayers + layer) * kMaskLength;
}

void FillExample(const RngStreams& rng, uint64_t threshold, uint64_t example,
                 std::vector<uint8_t>* masks) {
  for (uint64_t layer = 0; layer < kLayers; ++layer) {
    PhiloxStream s = rng.Stream(Purpose::kDropout, {kStep, example, layer, kSite});
    FillBernoulliMask(s, masks->data() + MaskOffset(example, layer), kMaskLength, threshold);
  }
}

// Thread t of `threads` handles the examples `order(t, threads)` lists.
using Schedule = std::function<std::vector<uint64_t>(int thread, int threads)>;

std::vector<uint8_t> FillAllMasks(int threads, const Schedule& schedule) {
  const RngStreams rng(0xfeedface);
  const uint64_t threshold = *BernoulliThreshold(0.8);
  std::vector<uint8_t> masks(kExamples * kLayers * kMaskLength, 0xAA);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t example : schedule(t, threads)) FillExample(rng, threshold, example, &masks);
    });
  }
  for (std::thread& w : workers) w.join();
  return masks;
}

std::vector<uint64_t> Strided(int thread, int threads) {
  std::vector<uint64_t> mine;
  for (uint64_t e = thread; e < kExamples; e += threads) mine.push_back(e);
  return mine;
}
std::vector<uint64_t> ReverseStrided(int thread, int threads) {
  std::vector<uint64_t> mine = Strided(thread, threads);
  return {mine.rbegin(), mine.rend()};
}
std::vector<uint64_t> ReverseBlocks(int thread, int threads) {
  // Thread 0 takes the last block of examples, backwards.
  const uint64_t per = kExamples / threads;
  std::vector<uint64_t> mine;
  const uint64_t begin = (threads - 1 - thread) * per;
  for (uint64_t e = begin + per; e-- > begin;) mine.push_back(e);
  return mine;
}

TEST(ThreadIndependence, DropoutMasksIdenticalFor1To8Threads) {
  const std::vector<uint8_t> reference = FillAllMasks(1, Strided);
  size_t kept = 0;
  for (uint8_t m : reference) {
    ASSERT_LE(m, 1) << "a mask byte was not written";
    kept += m;
  }
  EXPECT_GT(kept, reference.size() / 2);  // p_keep = 0.8
  EXPECT_EQ(FillAllMasks(1, ReverseStrided), reference);
  EXPECT_EQ(FillAllMasks(2, Strided), reference);
  EXPECT_EQ(FillAllMasks(2, ReverseBlocks), reference);
  EXPECT_EQ(FillAllMasks(8, ReverseStrided), reference);
  EXPECT_EQ(FillAllMasks(8, ReverseBlocks), reference);
}

TEST(ThreadIndependence, ExamplesGetDifferentMasks) {
  const std::vector<uint8_t> masks = FillAllMasks(1, Strided);
  const auto mask = [&](uint64_t example, uint64_t layer) {
    return std::vector<uint8_t>(masks.begin() + MaskOffset(example, layer),
                                masks.begin() + MaskOffset(example, layer) + kMaskLength);
  };
  EXPECT_NE(mask(0, 0), mask(1, 0));
  EXPECT_NE(mask(0, 0), mask(0, 1));
  EXPECT_NE(mask(1023, 1), mask(1022, 1));
}

}  // namespace
}  // namespace dgrr::rng
