// The fingerprint of a byte stream that lies in several buffers (segments),
// read through a small segment table: the pieces the CUDA kernels compose
// (fingerprint_cuda_kernels.cu, FingerprintSegmentsDeviceAsync), written for
// host and device alike so that the CPU tests run the very same functions
// against FingerprintBytes of the concatenated bytes.
//
// The logical stream is cut into XXH3's 1024-byte blocks as if it were one
// buffer (xxh3_core.h). A block inside one segment is read in place; a block
// that straddles segments (at most one per segment boundary) is read word by
// word through the table. The xor64 of the stream is the XOR of every logical
// 8-byte word, and each (block, lane) reads its lane's own words anyway, so
// the blocks' pass yields both summaries; the tail (the bytes after the last
// full block, within the stream's last 1024 bytes) is gathered once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fingerprint/xxh3_core.h"

namespace dgrr::xxh3 {

// `count` non-empty segments: segment k holds logical bytes
// [starts[k], starts[k + 1]) at address `addresses[k]`; starts[0] = 0 and
// starts[count] is the stream's length. (The caller drops empty segments.)
struct SegmentTable {
  const uint64_t* starts = nullptr;     // count + 1 offsets
  const uint64_t* addresses = nullptr;  // count addresses
  uint32_t count = 0;

  DGRR_HOST_DEVICE uint64_t total() const { return starts[count]; }
  DGRR_HOST_DEVICE const uint8_t* At(uint32_t k, uint64_t offset) const {
    return reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(addresses[k])) + (offset - starts[k]);
  }
};

// The segment holding logical byte `offset` (< total()), by binary search on
// the invariant starts[lo] <= offset < starts[hi]; never an empty segment.
DGRR_HOST_DEVICE inline uint32_t FindSegment(const SegmentTable& t, uint64_t offset) {
  uint32_t lo = 0, hi = t.count;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (t.starts[mid] <= offset) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Copies logical bytes [offset, offset + n) to `out`, byte by byte across
// segment boundaries (only straddling words and the tail come this way).
DGRR_HOST_DEVICE inline void GatherBytes(const SegmentTable& t, uint64_t offset, size_t n, uint8_t* out) {
  if (n == 0) return;
  uint32_t k = FindSegment(t, offset);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t at = offset + i;
    while (at >= t.starts[k + 1]) ++k;
    out[i] = *t.At(k, at);
  }
}

DGRR_HOST_DEVICE inline uint64_t GatherWord(const SegmentTable& t, uint64_t offset) {
  uint8_t word[8];
  GatherBytes(t, offset, 8, word);
  return ReadLE64(word);
}

// XOR of `n` bytes that start at logical offset `offset` (byte i lands in
// 64-bit lane (offset + i) % 8, as in xor64).
DGRR_HOST_DEVICE inline uint64_t XorOfBytesAt(const uint8_t* bytes, size_t n, uint64_t offset) {
  uint64_t x = 0;
  for (size_t i = 0; i < n; ++i) x ^= static_cast<uint64_t>(bytes[i]) << (8 * ((offset + i) % 8));
  return x;
}

// What one full block gives lane `lane`: its delta (BlockLaneDelta) and the
// XOR of the lane's own words (the block starts at a multiple of 8, so they
// are xor64's words as they stand).
struct BlockLaneResult {
  uint64_t delta = 0;
  uint64_t xor64 = 0;
};

template <class Reader>
DGRR_HOST_DEVICE inline BlockLaneResult BlockLaneInPlace(const uint8_t* block, const uint8_t* secret, size_t lane) {
  BlockLaneResult r;
  for (size_t s = 0; s < kStripesPerBlock; ++s) {
    const uint8_t* stripe = block + s * kStripeLen;
    const uint64_t own = Reader::Read64(stripe + 8 * lane);
    r.delta += StripeLaneTerm(own, Reader::Read64(stripe + 8 * (lane ^ 1)), Reader::Read64(secret + 8 * s + 8 * lane));
    r.xor64 ^= own;
  }
  return r;
}

DGRR_HOST_DEVICE inline BlockLaneResult BlockLaneGathered(const SegmentTable& t, uint64_t begin, const uint8_t* secret,
                                                          size_t lane) {
  BlockLaneResult r;
  for (size_t s = 0; s < kStripesPerBlock; ++s) {
    const uint64_t stripe = begin + s * kStripeLen;
    const uint64_t own = GatherWord(t, stripe + 8 * lane);
    r.delta += StripeLaneTerm(own, GatherWord(t, stripe + 8 * (lane ^ 1)), ReadLE64(secret + 8 * s + 8 * lane));
    r.xor64 ^= own;
  }
  return r;
}

// Block `block` of the stream for lane `lane`. `AlignedReader` reads a word
// (input and secret) known to be 8-byte aligned; the secret must be.
template <class AlignedReader>
DGRR_HOST_DEVICE inline BlockLaneResult SegmentedBlockLane(const SegmentTable& t, uint64_t block, const uint8_t* secret,
                                                           size_t lane) {
  const uint64_t begin = block * kBlockLen;
  const uint32_t k = FindSegment(t, begin);
  if (begin + kBlockLen > t.starts[k + 1]) return BlockLaneGathered(t, begin, secret, lane);
  const uint8_t* in = t.At(k, begin);
  if (reinterpret_cast<uintptr_t>(in) % 8 == 0) return BlockLaneInPlace<AlignedReader>(in, secret, lane);
  return BlockLaneInPlace<ByteReader>(in, secret, lane);
}

// The stream's last min(len, kBlockLen) bytes: the tail's window.
DGRR_HOST_DEVICE inline size_t TailWindowBytes(uint64_t len) {
  return static_cast<size_t>(len < kBlockLen ? len : kBlockLen);
}

// Lane `lane`'s final accumulator, given the chained full blocks' deltas and
// the gathered tail window (len > kMidSizeMax).
DGRR_HOST_DEVICE inline uint64_t SegmentedLaneAccumulator(const uint64_t* deltas, uint64_t blocks,
                                                          const uint8_t* window, uint64_t len,
                                                          const uint8_t* secret, size_t lane) {
  return ChainLane(deltas, kLanes, blocks, secret, lane) +
         TailLaneDeltaFromWindow(window, TailWindowBytes(len), len, secret, lane);
}

// What the tail bytes (after the full blocks) add to xor64, from the window.
DGRR_HOST_DEVICE inline uint64_t TailXor(const uint8_t* window, uint64_t len, size_t first, size_t step) {
  const uint64_t window_start = len - TailWindowBytes(len);
  const uint64_t tail_start = FullBlocks(len) * kBlockLen;
  uint64_t x = 0;
  for (uint64_t at = tail_start + first; at < len; at += step) {
    x ^= static_cast<uint64_t>(window[at - window_start]) << (8 * (at % 8));
  }
  return x;
}

}  // namespace dgrr::xxh3
