// Stream identity: the map (seed, purpose, coordinates) -> (Philox key,
// cuRAND subsequence). Every random number dgrr draws is addressed by this
// identity plus a position, so no draw depends on thread, rank or order.
//
// The tuple is absorbed as eight 64-bit words
//   [kStreamDomainTag, seed, purpose, ncoords, c0, c1, c2, c3]
// (unused coordinates are 0; ncoords tells {} from {0}) by two independent
// chains of bijective 64-bit mixers, giving 128 bits of identity:
//   key         = chain with SplitMix64's finalizer  (Philox key, 64 bits)
//   subsequence = chain with MurmurHash3's fmix64     (counter words 2-3)
// Coordinates are never added or XORed together. Because each chain step
// h' = mix(h ^ w) is a bijection of h for fixed w, two tuples that differ in a
// single word always get different keys AND different subsequences; tuples
// that differ in several words collide only by chance (about 2^-128 per pair
// if the chains behave as independent random functions). Exact constants and
// a worked example: docs/rng.md, section "Stream identity".
#pragma once

#include <cstdint>

#include "rng/philox.h"

namespace dgrr::rng {

// What a stream is for. Values are part of the spec (they enter the hash);
// user-defined purposes live at 2^32 and above (see UserPurpose).
enum class Purpose : uint64_t {
  kInit = 1,     // parameter initialisation
  kDropout = 2,  // dropout / Bernoulli masks
  kShuffle = 3,  // data-order permutations
  kAugment = 4,  // data augmentation noise
  kNoise = 5,    // other model-level noise (e.g. noisy activations)
};
DGRR_HD constexpr Purpose UserPurpose(uint32_t id) {
  return static_cast<Purpose>((uint64_t{1} << 32) + id);
}

inline constexpr int kMaxStreamCoords = 4;

// "dgrr-rng" + version 1: changing the derivation changes this tag.
inline constexpr uint64_t kStreamDomainTag = 0x646772722d726e01ull;
inline constexpr uint64_t kKeyChainIv = 0x646772722d6b6579ull;          // "dgrr-key"
inline constexpr uint64_t kSubsequenceChainIv = 0x646772722d736571ull;  // "dgrr-seq"

// SplitMix64's output finalizer (Steele, Lea, Flood 2014; Stafford "Mix13").
DGRR_HD constexpr uint64_t MixSplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// MurmurHash3's 64-bit finalizer fmix64 (Appleby).
DGRR_HD constexpr uint64_t MixMurmur3(uint64_t z) {
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return z ^ (z >> 33);
}

struct StreamId {
  uint64_t key;          // Philox key: k0 = low 32 bits, k1 = high 32 bits
  uint64_t subsequence;  // Philox counter words 2 (low) and 3 (high)

  DGRR_HD constexpr bool operator==(const StreamId& other) const {
    return key == other.key && subsequence == other.subsequence;
  }
};

// Derives the identity of stream (seed, purpose, coords[0..ncoords)).
// ncoords must be at most kMaxStreamCoords (callers check; see RngStreams).
DGRR_HD constexpr StreamId DeriveStreamId(uint64_t seed, Purpose purpose, const uint64_t* coords,
                                          int ncoords) {
  const uint64_t words[8] = {kStreamDomainTag,
                             seed,
                             static_cast<uint64_t>(purpose),
                             static_cast<uint64_t>(ncoords),
                             ncoords > 0 ? coords[0] : 0,
                             ncoords > 1 ? coords[1] : 0,
                             ncoords > 2 ? coords[2] : 0,
                             ncoords > 3 ? coords[3] : 0};
  uint64_t key = kKeyChainIv;
  uint64_t subsequence = kSubsequenceChainIv;
  for (uint64_t word : words) {
    key = MixSplitMix64(key ^ word);
    subsequence = MixMurmur3(subsequence ^ word);
  }
  // One blank round so the last word is as well diffused as the others.
  return StreamId{MixSplitMix64(key), MixMurmur3(subsequence)};
}

}  // namespace dgrr::rng
