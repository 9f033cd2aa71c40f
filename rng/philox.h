// Philox4x32-R: the counter-based block function of Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3" (SC'11), as used by Random123 and by
// cuRAND's curandStatePhilox4_32_10_t. A block maps a 128-bit counter and a
// 64-bit key to 128 random bits; nothing else is state, which is what makes
// every draw a pure function of (key, counter).
//
// The same source compiles for host and device: under nvcc DGRR_HD expands to
// __host__ __device__, so a CPU run and a GPU run compute identical blocks.
// Spec: docs/rng.md ("dgrr rng v1").
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace dgrr::rng {

// Round multipliers and Weyl key increments (Random123 philox.h; identical in
// cuRAND's curand_philox4x32_x.h).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
inline constexpr int kPhiloxDefaultRounds = 10;

// Word 0 first; word i is cuRAND's uint4 member .x/.y/.z/.w.
struct PhiloxCounter {
  uint32_t word[4];
};
struct PhiloxKey {
  uint32_t word[2];
};
struct PhiloxBlock {
  uint32_t word[4];
};

// High and low halves of the 64-bit product a*b.
DGRR_HD constexpr void MulHiLo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

// One Philox4x32 round: two multiplies feed a fixed word permutation, the key
// is XORed into the high halves.
DGRR_HD constexpr void PhiloxRound(uint32_t c[4], uint32_t k0, uint32_t k1) {
  uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
  MulHiLo32(kPhiloxM0, c[0], &hi0, &lo0);
  MulHiLo32(kPhiloxM1, c[2], &hi1, &lo1);
  const uint32_t next0 = hi1 ^ c[1] ^ k0;
  const uint32_t next2 = hi0 ^ c[3] ^ k1;
  c[0] = next0;
  c[1] = lo1;
  c[2] = next2;
  c[3] = lo0;
}

// Philox4x32 with `Rounds` rounds; the key is bumped by the Weyl constants
// before every round but the first.
template <int Rounds = kPhiloxDefaultRounds>
DGRR_HD constexpr PhiloxBlock Philox4x32(PhiloxCounter counter, PhiloxKey key) {
  uint32_t c[4] = {counter.word[0], counter.word[1], counter.word[2], counter.word[3]};
  uint32_t k0 = key.word[0], k1 = key.word[1];
  for (int round = 0; round < Rounds; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    PhiloxRound(c, k0, k1);
  }
  return PhiloxBlock{{c[0], c[1], c[2], c[3]}};
}

// The dgrr/cuRAND addressing of blocks: a 64-bit seed is the key (low word
// first), the subsequence fills counter words 2-3 and the block index (= draw
// position / 4) fills words 0-1. This is exactly the block cuRAND computes
// after curand_init(seed, subsequence, 4 * block_index).
DGRR_HD constexpr PhiloxKey KeyFromSeed(uint64_t seed) {
  return PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}
DGRR_HD constexpr PhiloxCounter CounterFor(uint64_t block_index, uint64_t subsequence) {
  return PhiloxCounter{{static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
                        static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32)}};
}

}  // namespace dgrr::rng
