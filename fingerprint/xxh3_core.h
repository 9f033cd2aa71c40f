// A plain, host-and-device implementation of XXH3-64 with seed 0 and the
// default 192-byte secret, written from the algorithm's description (xxHash
// v0.8 "XXH3" spec). It exists for the CUDA path: the same functions run in
// the kernels and, in the CPU tests, against libxxhash for every length, so
// the device result is checked on machines without a GPU.
//
// Long inputs (> 240 bytes) are split the way the kernels split them:
//   * the input is a sequence of 1024-byte blocks (16 stripes of 64 bytes),
//     the last block partial, and a final 64-byte stripe ending at the end;
//   * within a block, each of the 8 accumulator lanes receives a SUM of
//     per-stripe terms (BlockLaneDelta): independent of order, so stripes and
//     lanes are computed in parallel;
//   * after each full block every lane is scrambled (ScrambleLane), a
//     nonlinear step: blocks are chained sequentially, lane by lane.
// No seed, no custom secret: dgrr needs only XXH3_64bits().
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define DGRR_HOST_DEVICE __host__ __device__
#else
#define DGRR_HOST_DEVICE
#endif

namespace dgrr::xxh3 {

// Sizes of the long-input layout (default secret).
inline constexpr size_t kSecretSize = 192;
inline constexpr size_t kStripeLen = 64;
inline constexpr size_t kLanes = 8;
inline constexpr size_t kStripesPerBlock = (kSecretSize - kStripeLen) / 8;  // 16
inline constexpr size_t kBlockLen = kStripeLen * kStripesPerBlock;          // 1024
inline constexpr size_t kMidSizeMax = 240;  // longest input hashed without blocks

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77u;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ull;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ull;
inline constexpr uint64_t kPrimeMx1 = 0x165667919E3779F9ull;
inline constexpr uint64_t kPrimeMx2 = 0x9FB21C651E98DF25ull;

// Byte-wise little-endian reads: valid at any alignment, host or device.
DGRR_HOST_DEVICE inline uint64_t ReadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
DGRR_HOST_DEVICE inline uint32_t ReadLE32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

DGRR_HOST_DEVICE inline uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
DGRR_HOST_DEVICE inline uint64_t Swap64(uint64_t x) {
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r = (r << 8) | ((x >> (8 * i)) & 0xFF);
  return r;
}

// Low 64 bits XOR high 64 bits of the 128-bit product.
DGRR_HOST_DEVICE inline uint64_t Mul128Fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  __extension__ using U128 = unsigned __int128;
  const U128 product = static_cast<U128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
#endif
}

DGRR_HOST_DEVICE inline uint64_t Xxh64Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}
DGRR_HOST_DEVICE inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= kPrimeMx1;
  h ^= h >> 32;
  return h;
}
DGRR_HOST_DEVICE inline uint64_t Rrmxmx(uint64_t h, uint64_t len) {
  h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
  h *= kPrimeMx2;
  h ^= (h >> 35) + len;
  h *= kPrimeMx2;
  h ^= h >> 28;
  return h;
}

DGRR_HOST_DEVICE inline uint64_t Mix16B(const uint8_t* in, const uint8_t* secret) {
  return Mul128Fold64(ReadLE64(in) ^ ReadLE64(secret), ReadLE64(in + 8) ^ ReadLE64(secret + 8));
}

// ---- inputs of 0..240 bytes -------------------------------------------------

DGRR_HOST_DEVICE inline uint64_t Hash0To16(const uint8_t* in, size_t len, const uint8_t* secret) {
  if (len > 8) {
    const uint64_t bitflip1 = ReadLE64(secret + 24) ^ ReadLE64(secret + 32);
    const uint64_t bitflip2 = ReadLE64(secret + 40) ^ ReadLE64(secret + 48);
    const uint64_t lo = ReadLE64(in) ^ bitflip1;
    const uint64_t hi = ReadLE64(in + len - 8) ^ bitflip2;
    return Avalanche(len + Swap64(lo) + hi + Mul128Fold64(lo, hi));
  }
  if (len >= 4) {
    const uint64_t first = ReadLE32(in);
    const uint64_t last = ReadLE32(in + len - 4);
    const uint64_t bitflip = ReadLE64(secret + 8) ^ ReadLE64(secret + 16);
    return Rrmxmx((last + (first << 32)) ^ bitflip, len);
  }
  if (len > 0) {
    const uint32_t combined =
        (static_cast<uint32_t>(in[0]) << 16) | (static_cast<uint32_t>(in[len >> 1]) << 24) |
        static_cast<uint32_t>(in[len - 1]) | (static_cast<uint32_t>(len) << 8);
    const uint64_t bitflip = ReadLE32(secret) ^ ReadLE32(secret + 4);
    return Xxh64Avalanche(combined ^ bitflip);
  }
  return Xxh64Avalanche(ReadLE64(secret + 56) ^ ReadLE64(secret + 64));
}

DGRR_HOST_DEVICE inline uint64_t Hash17To128(const uint8_t* in, size_t len, const uint8_t* secret) {
  uint64_t acc = len * kPrime64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc += Mix16B(in + 48, secret + 96);
        acc += Mix16B(in + len - 64, secret + 112);
      }
      acc += Mix16B(in + 32, secret + 64);
      acc += Mix16B(in + len - 48, secret + 80);
    }
    acc += Mix16B(in + 16, secret + 32);
    acc += Mix16B(in + len - 32, secret + 48);
  }
  acc += Mix16B(in, secret);
  acc += Mix16B(in + len - 16, secret + 16);
  return Avalanche(acc);
}

DGRR_HOST_DEVICE inline uint64_t Hash129To240(const uint8_t* in, size_t len,
                                              const uint8_t* secret) {
  constexpr size_t kStartOffset = 3;  // secret offset of rounds 8.. of the mid-size loop
  constexpr size_t kLastOffset = 17;  // the last 16 bytes use secret + 136 - 17
  constexpr size_t kSecretSizeMin = 136;
  uint64_t acc = len * kPrime64_1;
  const size_t rounds = len / 16;
  for (size_t i = 0; i < 8; ++i) acc += Mix16B(in + 16 * i, secret + 16 * i);
  acc = Avalanche(acc);
  for (size_t i = 8; i < rounds; ++i) {
    acc += Mix16B(in + 16 * i, secret + 16 * (i - 8) + kStartOffset);
  }
  acc += Mix16B(in + len - 16, secret + kSecretSizeMin - kLastOffset);
  return Avalanche(acc);
}

DGRR_HOST_DEVICE inline uint64_t HashShort(const uint8_t* in, size_t len, const uint8_t* secret) {
  if (len <= 16) return Hash0To16(in, len, secret);
  if (len <= 128) return Hash17To128(in, len, secret);
  return Hash129To240(in, len, secret);
}

// ---- inputs of more than 240 bytes: lanes, stripes, blocks ------------------

DGRR_HOST_DEVICE inline uint64_t InitialLane(size_t lane) {
  switch (lane) {
    case 0:
      return kPrime32_3;
    case 1:
      return kPrime64_1;
    case 2:
      return kPrime64_2;
    case 3:
      return kPrime64_3;
    case 4:
      return kPrime64_4;
    case 5:
      return kPrime32_2;
    case 6:
      return kPrime64_5;
    default:
      return kPrime32_1;
  }
}

// How the long-input functions read 8-byte words of input and secret. The
// default reads bytes (any alignment); the kernels substitute a single aligned
// load where they know the alignment.
struct ByteReader {
  DGRR_HOST_DEVICE static uint64_t Read64(const uint8_t* p) { return ReadLE64(p); }
};

// What one 64-byte stripe adds to accumulator `lane`, from the lane's own
// input word, the neighbouring lane's (lane ^ 1) and the lane's secret word:
// the neighbour plus the 32x32-bit product of the two halves of the keyed word.
DGRR_HOST_DEVICE inline uint64_t StripeLaneTerm(uint64_t own, uint64_t neighbour, uint64_t key) {
  const uint64_t keyed = own ^ key;
  return neighbour + (keyed & 0xFFFFFFFFu) * (keyed >> 32);
}

// StripeLaneTerm of the stripe at `stripe`; `secret_at` is its secret position.
template <class Reader = ByteReader>
DGRR_HOST_DEVICE inline uint64_t StripeLaneDelta(const uint8_t* stripe, const uint8_t* secret_at,
                                                 size_t lane) {
  return StripeLaneTerm(Reader::Read64(stripe + 8 * lane), Reader::Read64(stripe + 8 * (lane ^ 1)),
                        Reader::Read64(secret_at + 8 * lane));
}

// Sum of StripeLaneDelta over the first `stripes` stripes of a block; stripe s
// uses secret + 8*s. Addition modulo 2^64: any order gives the same sum.
template <class Reader = ByteReader>
DGRR_HOST_DEVICE inline uint64_t BlockLaneDelta(const uint8_t* block, size_t stripes,
                                                const uint8_t* secret, size_t lane) {
  uint64_t sum = 0;
  for (size_t s = 0; s < stripes; ++s) {
    sum += StripeLaneDelta<Reader>(block + s * kStripeLen, secret + 8 * s, lane);
  }
  return sum;
}

// The end-of-block scramble of one lane.
DGRR_HOST_DEVICE inline uint64_t ScrambleLane(uint64_t acc, const uint8_t* secret, size_t lane) {
  const uint64_t key = ReadLE64(secret + kSecretSize - kStripeLen + 8 * lane);
  acc ^= acc >> 47;
  acc ^= key;
  return acc * kPrime32_1;
}

// One lane through the full blocks, given each block's delta for this lane
// (deltas[b * stride + lane]): add, scramble, next block. The only sequential
// part. The lane is indexed here, not added to `deltas` by callers: with no
// full block, deltas may be null (an empty vector's data()), and null plus
// an offset is undefined behaviour (clang's UBSan reports it).
DGRR_HOST_DEVICE inline uint64_t ChainLane(const uint64_t* deltas, size_t stride, size_t blocks,
                                           const uint8_t* secret, size_t lane) {
  uint64_t acc = InitialLane(lane);
  for (size_t b = 0; b < blocks; ++b) acc = ScrambleLane(acc + deltas[b * stride + lane], secret, lane);
  return acc;
}

// Full 1024-byte blocks before the tail: everything but the last byte is
// covered by whole blocks, so an input of exactly k*1024 bytes has k-1.
DGRR_HOST_DEVICE inline size_t FullBlocks(size_t len) { return (len - 1) / kBlockLen; }

// What the tail adds to `lane` after the last scramble: the whole stripes of
// the partial last block, then the final stripe (the last 64 bytes, which may
// overlap), keyed at secret + 192 - 64 - 7. Both lie in the input's last
// min(len, kBlockLen) bytes, so this needs only a window of them: `window`
// holds the input's last `window_len` bytes (window_len >= min(len, kBlockLen)).
DGRR_HOST_DEVICE inline uint64_t TailLaneDeltaFromWindow(const uint8_t* window, size_t window_len, size_t len,
                                                         const uint8_t* secret, size_t lane) {
  constexpr size_t kLastStripeSecretOffset = kSecretSize - kStripeLen - 7;
  const size_t window_start = len - window_len;
  const size_t tail_start = FullBlocks(len) * kBlockLen;
  const size_t stripes = (len - 1 - tail_start) / kStripeLen;
  return BlockLaneDelta(window + (tail_start - window_start), stripes, secret, lane) +
         StripeLaneDelta(window + window_len - kStripeLen, secret + kLastStripeSecretOffset, lane);
}

DGRR_HOST_DEVICE inline uint64_t TailLaneDelta(const uint8_t* in, size_t len, const uint8_t* secret,
                                               size_t lane) {
  return TailLaneDeltaFromWindow(in, len, len, secret, lane);
}

// The final mix of the 8 lanes.
DGRR_HOST_DEVICE inline uint64_t MergeLanes(const uint64_t acc[kLanes], size_t len,
                                            const uint8_t* secret) {
  constexpr size_t kMergeSecretOffset = 11;
  uint64_t result = len * kPrime64_1;
  for (size_t i = 0; i < 4; ++i) {
    const uint8_t* key = secret + kMergeSecretOffset + 16 * i;
    result += Mul128Fold64(acc[2 * i] ^ ReadLE64(key), acc[2 * i + 1] ^ ReadLE64(key + 8));
  }
  return Avalanche(result);
}

// The whole long hash, serially (the CPU model of the kernels' arithmetic).
DGRR_HOST_DEVICE inline uint64_t HashLong(const uint8_t* in, size_t len, const uint8_t* secret) {
  uint64_t acc[kLanes];
  const size_t blocks = FullBlocks(len);
  for (size_t lane = 0; lane < kLanes; ++lane) {
    uint64_t a = InitialLane(lane);
    for (size_t b = 0; b < blocks; ++b) {
      a += BlockLaneDelta(in + b * kBlockLen, kStripesPerBlock, secret, lane);
      a = ScrambleLane(a, secret, lane);
    }
    acc[lane] = a + TailLaneDelta(in, len, secret, lane);
  }
  return MergeLanes(acc, len, secret);
}

// XXH3_64bits(in, len) given the default secret.
DGRR_HOST_DEVICE inline uint64_t Hash(const uint8_t* in, size_t len, const uint8_t* secret) {
  return len <= kMidSizeMax ? HashShort(in, len, secret) : HashLong(in, len, secret);
}

}  // namespace dgrr::xxh3
