// The segmented fingerprint (fingerprint/segmented_core.h) against the host's
// fingerprint of the concatenated bytes: the CUDA kernels behind
// FingerprintSegmentsDeviceAsync compose these same functions in this same
// arrangement, so this is how the device's parameter fingerprint is checked on
// machines without a GPU (fingerprint_cuda_test.cc runs the kernels).
#include "fingerprint/segmented_core.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "fingerprint/fingerprint.h"

namespace dgrr {
namespace {

using xxh3::SegmentTable;

// The kernels' aligned load, on the host (x86 is little-endian too).
struct WordLoad {
  static uint64_t Read64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

// Segments cut one after another out of one byte pool, each starting
// `gap` bytes after the previous one ends, so their addresses have every
// alignment and their concatenation is not the pool.
struct Segmented {
  std::vector<uint8_t> pool;
  std::vector<MemorySegment> segments;
  std::vector<uint8_t> concatenated;
};

Segmented Cut(const std::vector<size_t>& lengths, size_t gap, uint64_t seed) {
  Segmented s;
  size_t total = 0;
  for (size_t n : lengths) total += n + gap;
  s.pool.resize(total + 1);
  std::mt19937_64 rng(seed);
  for (auto& b : s.pool) b = static_cast<uint8_t>(rng());
  size_t at = gap;
  for (size_t n : lengths) {
    s.segments.push_back({s.pool.data() + at, n});
    s.concatenated.insert(s.concatenated.end(), s.pool.begin() + at, s.pool.begin() + at + n);
    at += n + gap;
  }
  return s;
}

// What FingerprintSegmentsDeviceAsync builds and its kernels compute, step by
// step: the table without empty segments; <= 240 bytes gathered and hashed;
// otherwise every (block, lane) independently (here in reverse order: no
// order is assumed), the lanes chained, the tail window gathered, the XOR
// partials and tail bytes combined.
Fingerprint AsTheKernels(const std::vector<MemorySegment>& segments) {
  std::vector<uint64_t> starts = {0}, addresses;
  for (const MemorySegment& seg : segments) {
    if (seg.bytes == 0) continue;
    starts.push_back(starts.back() + seg.bytes);
    addresses.push_back(reinterpret_cast<uintptr_t>(seg.data));
  }
  SegmentTable table;
  table.starts = starts.data();
  table.addresses = addresses.data();
  table.count = static_cast<uint32_t>(addresses.size());
  const uint8_t* secret = fingerprint_internal::DefaultXxh3Secret();
  const uint64_t len = table.total();
  Fingerprint result;
  if (len <= xxh3::kMidSizeMax) {
    uint8_t bytes[xxh3::kMidSizeMax];
    xxh3::GatherBytes(table, 0, len, bytes);
    result.xor64 = xxh3::XorOfBytesAt(bytes, len, 0);
    result.xxh3 = xxh3::HashShort(bytes, len, secret);
    return result;
  }
  const uint64_t blocks = xxh3::FullBlocks(len);
  std::vector<uint64_t> deltas(blocks * xxh3::kLanes);
  uint64_t x = 0;
  for (size_t i = deltas.size(); i-- > 0;) {
    const xxh3::BlockLaneResult r = xxh3::SegmentedBlockLane<WordLoad>(table, i / xxh3::kLanes, secret, i % xxh3::kLanes);
    deltas[i] = r.delta;
    x ^= r.xor64;
  }
  std::vector<uint8_t> window(xxh3::TailWindowBytes(len));
  xxh3::GatherBytes(table, len - window.size(), window.size(), window.data());
  uint64_t acc[xxh3::kLanes];
  for (size_t lane = 0; lane < xxh3::kLanes; ++lane) {
    acc[lane] = xxh3::SegmentedLaneAccumulator(deltas.data(), blocks, window.data(), len, secret, lane);
  }
  // The finishing warp's 32 threads each XOR every 32nd tail byte.
  for (size_t t = 0; t < 32; ++t) x ^= xxh3::TailXor(window.data(), len, t, 32);
  result.xor64 = x;
  result.xxh3 = xxh3::MergeLanes(acc, len, secret);
  return result;
}

void ExpectLikeTheHost(const std::vector<size_t>& lengths, size_t gap, uint64_t seed) {
  const Segmented s = Cut(lengths, gap, seed);
  const Fingerprint expected = FingerprintBytes(s.concatenated.data(), s.concatenated.size());
  std::string what = "gap " + std::to_string(gap) + ", lengths";
  for (size_t n : lengths) what += " " + std::to_string(n);
  EXPECT_EQ(AsTheKernels(s.segments), expected) << what;
  EXPECT_EQ(FingerprintSegments(s.segments.data(), s.segments.size()), expected) << what;
}

TEST(SegmentedFingerprint, AwkwardSingleSegmentsAtEveryAlignment) {
  for (size_t gap : {0, 1, 3, 8}) {
    for (size_t n : {0, 1, 7, 8, 240, 241, 1023, 1024, 1025, 2048, 65536 + 7}) ExpectLikeTheHost({n}, gap, n + gap);
  }
}

TEST(SegmentedFingerprint, MixedSegmentsCrossingBlocksAndTheTail) {
  const std::vector<std::vector<size_t>> cases = {
      {0, 1, 1023, 1024, 1025, 65536 + 7, 0, 3},
      {1023, 1},           // the stream is exactly one block
      {1024, 1},           // one block and a one-byte tail
      {100, 100, 41},      // 241 bytes: the shortest long input, three segments
      {120, 0, 120},       // 240 bytes: the longest short input
      {5, 1019, 5, 1019},  // block boundaries inside segments, segment boundaries inside blocks
      {2047, 2, 63, 1},    // the last stripe overlaps the segment before the tail's
      {0, 0, 0},
  };
  for (const auto& lengths : cases) {
    for (size_t gap : {0, 5}) ExpectLikeTheHost(lengths, gap, lengths.size() * 31 + gap);
  }
}

TEST(SegmentedFingerprint, ManySmallSegmentsOfEveryLength) {
  std::vector<size_t> lengths;
  for (size_t i = 0; i < 400; ++i) lengths.push_back(i % 17);
  ExpectLikeTheHost(lengths, 1, 99);
  // Every total length up to 300 split into three uneven pieces.
  for (size_t total = 0; total <= 300; ++total) {
    ExpectLikeTheHost({total / 3, total - total / 3 - total / 5, total / 5}, 2, total);
  }
}

}  // namespace
}  // namespace dgrr
