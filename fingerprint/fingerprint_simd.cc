#include "fingerprint/fingerprint_simd.h"

#include "fingerprint/xxh3_core.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace dgrr::fingerprint_internal {
namespace {

#define DGRR_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

// The 8 XXH3 accumulator lanes (two vectors of four) and the running XOR of
// every 64-bit word read so far (also two vectors; all eight words of a stripe
// start at multiples of 8 bytes, so each sits in lane order).
struct Avx2State {
  __m256i acc_lo, acc_hi;
  __m256i xor_lo, xor_hi;
};

DGRR_AVX2_INLINE __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// XXH3's accumulate step on four lanes: acc[i] += data[i ^ 1] +
// lo32(data[i] ^ key[i]) * hi32(data[i] ^ key[i]).
DGRR_AVX2_INLINE void Accumulate4(__m256i& acc, const __m256i& data, const uint8_t* key) {
  const __m256i keyed = _mm256_xor_si256(data, Load(key));
  const __m256i keyed_hi = _mm256_shuffle_epi32(keyed, _MM_SHUFFLE(0, 3, 0, 1));
  const __m256i product = _mm256_mul_epu32(keyed, keyed_hi);
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  acc = _mm256_add_epi64(acc, _mm256_add_epi64(product, swapped));
}

// One 64-bit stripe into the hash and, when `also_xor`, into the XOR.
DGRR_AVX2_INLINE void Stripe(Avx2State& s, const uint8_t* stripe, const uint8_t* key,
                             bool also_xor) {
  const __m256i lo = Load(stripe);
  const __m256i hi = Load(stripe + 32);
  if (also_xor) {
    s.xor_lo = _mm256_xor_si256(s.xor_lo, lo);
    s.xor_hi = _mm256_xor_si256(s.xor_hi, hi);
  }
  Accumulate4(s.acc_lo, lo, key);
  Accumulate4(s.acc_hi, hi, key + 32);
}

// XXH3's end-of-block scramble on four lanes: acc = ((acc ^ acc >> 47) ^ key)
// * PRIME32_1, the 64x32-bit product built from two 32x32 products.
DGRR_AVX2_INLINE void Scramble4(__m256i& acc, const uint8_t* key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(xxh3::kPrime32_1));
  __m256i a = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  a = _mm256_xor_si256(a, Load(key));
  const __m256i a_hi = _mm256_shuffle_epi32(a, _MM_SHUFFLE(0, 3, 0, 1));
  acc = _mm256_add_epi64(_mm256_mul_epu32(a, prime),
                         _mm256_slli_epi64(_mm256_mul_epu32(a_hi, prime), 32));
}

DGRR_AVX2_INLINE uint64_t HorizontalXor(const __m256i& lo, const __m256i& hi) {
  alignas(32) uint64_t words[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(words), _mm256_xor_si256(lo, hi));
  return words[0] ^ words[1] ^ words[2] ^ words[3];
}

}  // namespace

bool HaveAvx2Path() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have;
}

__attribute__((target("avx2"))) Fingerprint FingerprintLongAvx2(const uint8_t* data, size_t n,
                                                                const uint8_t* secret) {
  Avx2State s;
  alignas(32) uint64_t initial[xxh3::kLanes];
  for (size_t lane = 0; lane < xxh3::kLanes; ++lane) initial[lane] = xxh3::InitialLane(lane);
  s.acc_lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(initial));
  s.acc_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(initial + 4));
  s.xor_lo = _mm256_setzero_si256();
  s.xor_hi = _mm256_setzero_si256();

  // No software prefetch: the hardware's sequential prefetcher keeps up, and
  // explicit prefetches 1-2 KiB ahead measured 10-15% slower.
  const size_t blocks = xxh3::FullBlocks(n);
  const uint8_t* scramble_key = secret + xxh3::kSecretSize - xxh3::kStripeLen;
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* block = data + b * xxh3::kBlockLen;
    for (size_t i = 0; i < xxh3::kStripesPerBlock; ++i) {
      const uint8_t* stripe = block + i * xxh3::kStripeLen;
      Stripe(s, stripe, secret + 8 * i, /*also_xor=*/true);
    }
    Scramble4(s.acc_lo, scramble_key);
    Scramble4(s.acc_hi, scramble_key + 32);
  }

  // The partial last block: its whole stripes (except a stripe that ends the
  // input exactly: XXH3 always keeps the last byte for the final stripe).
  const size_t tail_start = blocks * xxh3::kBlockLen;
  const size_t tail_stripes = (n - 1 - tail_start) / xxh3::kStripeLen;
  for (size_t i = 0; i < tail_stripes; ++i) {
    Stripe(s, data + tail_start + i * xxh3::kStripeLen, secret + 8 * i, /*also_xor=*/true);
  }
  // The final stripe is the last 64 bytes, overlapping bytes already XORed:
  // hash it, and XOR only the bytes no stripe has covered yet (offset is a
  // multiple of 64, so their lanes line up).
  const size_t unxored_start = tail_start + tail_stripes * xxh3::kStripeLen;
  constexpr size_t kLastStripeSecretOffset = xxh3::kSecretSize - xxh3::kStripeLen - 7;
  Stripe(s, data + n - xxh3::kStripeLen, secret + kLastStripeSecretOffset, /*also_xor=*/false);

  alignas(32) uint64_t acc[xxh3::kLanes];
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), s.acc_lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), s.acc_hi);
  Fingerprint result;
  result.xor64 = HorizontalXor(s.xor_lo, s.xor_hi) ^ Xor64(data + unxored_start, n - unxored_start);
  result.xxh3 = xxh3::MergeLanes(acc, n, secret);
  return result;
}

}  // namespace dgrr::fingerprint_internal

#else  // no AVX2 path in this build

namespace dgrr::fingerprint_internal {
bool HaveAvx2Path() { return false; }
Fingerprint FingerprintLongAvx2(const uint8_t*, size_t, const uint8_t*) { return {}; }
}  // namespace dgrr::fingerprint_internal

#endif
