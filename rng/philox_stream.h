// PhiloxStream: a small value type naming one sequence of 32-bit draws,
// identical to cuRAND's Philox sequence after curand_init(key, subsequence,
// position). Draw i of the stream is word (i % 4) of
//   Philox4x32_10(counter = {lo(i/4), hi(i/4), lo(subsequence), hi(subsequence)},
//                 key     = {lo(key), hi(key)}),
// so skipping to any position is O(1) and a checkpoint only needs position().
//
// Positions are 64-bit: a stream holds 2^64 draws (cuRAND's subsequence holds
// 2^66; the top quarter is not addressable here). Drawing past position
// 2^64 - 1 wraps to 0 (584 years at 10^9 draws/s; not guarded).
//
// The stream caches the last Philox block it computed so scalar draws cost a
// quarter of a block each; the cache is invisible (operator== ignores it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rng/philox.h"
#include "rng/stream_id.h"

namespace dgrr::rng {

class PhiloxStream {
 public:
  DGRR_HD constexpr PhiloxStream() = default;
  DGRR_HD constexpr PhiloxStream(uint64_t key, uint64_t subsequence, uint64_t position = 0)
      : key_(key), subsequence_(subsequence), position_(position) {}
  DGRR_HD constexpr explicit PhiloxStream(StreamId id, uint64_t position = 0)
      : PhiloxStream(id.key, id.subsequence, position) {}

  DGRR_HD constexpr uint64_t key() const { return key_; }
  DGRR_HD constexpr uint64_t subsequence() const { return subsequence_; }
  DGRR_HD constexpr StreamId id() const { return StreamId{key_, subsequence_}; }
  // Number of 32-bit draws taken since position 0: what a checkpoint saves.
  DGRR_HD constexpr uint64_t position() const { return position_; }

  DGRR_HD constexpr void SkipTo(uint64_t position) { position_ = position; }
  DGRR_HD constexpr void Skip(uint64_t draws) { position_ += draws; }

  DGRR_HD constexpr uint32_t NextU32() {
    const uint64_t block_index = position_ >> 2;
    if (block_index != cached_block_index_) {
      cached_block_ = Philox4x32(CounterFor(block_index, subsequence_), KeyFromSeed(key_));
      cached_block_index_ = block_index;
    }
    const uint32_t value = cached_block_.word[position_ & 3];
    ++position_;
    return value;
  }

  // Two consecutive draws, the first in the low half.
  DGRR_HD constexpr uint64_t NextU64() {
    const uint64_t low = NextU32();
    const uint64_t high = NextU32();
    return low | (high << 32);
  }

  // out[i] = the next n draws, in order. On the host whole blocks go through
  // the SIMD kernels of rng/philox_fill.h (bit-identical to NextU32).
  DGRR_HD void Fill(uint32_t* out, size_t n) {
#if defined(__CUDA_ARCH__)
    for (size_t i = 0; i < n; ++i) out[i] = NextU32();
#else
    FillOnHost(out, n);
#endif
  }

  // Same stream and position (the block cache is not part of the value).
  DGRR_HD constexpr bool operator==(const PhiloxStream& other) const {
    return key_ == other.key_ && subsequence_ == other.subsequence_ &&
           position_ == other.position_;
  }

 private:
  void FillOnHost(uint32_t* out, size_t n);

  // Block indices are < 2^62, so all-ones never names a real block.
  static constexpr uint64_t kNoCachedBlock = ~uint64_t{0};

  uint64_t key_ = 0;
  uint64_t subsequence_ = 0;
  uint64_t position_ = 0;
  uint64_t cached_block_index_ = kNoCachedBlock;
  PhiloxBlock cached_block_ = {};
};

}  // namespace dgrr::rng
