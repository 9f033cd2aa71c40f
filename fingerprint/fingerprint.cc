#include "fingerprint/fingerprint.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "base/cpu_isa.h"
#include "fingerprint/fingerprint_simd.h"
#include "fingerprint/xxh3_core.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value, XXH3_generateSecret_fromSeed
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
// libxxhash also exports entry points that pick SSE2/AVX2/AVX-512 at run time;
// every variant gives the same hash, so use them where they exist.
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#include <immintrin.h>
#define DGRR_XXH3_ONESHOT XXH3_64bits_dispatch
#define DGRR_XXH3_UPDATE XXH3_64bits_update_dispatch
#define DGRR_XXH3_DISPATCHED 1
#else
#define DGRR_XXH3_ONESHOT XXH3_64bits
#define DGRR_XXH3_UPDATE XXH3_64bits_update
#endif

namespace dgrr {
namespace {

#if defined(DGRR_XXH3_DISPATCHED) && defined(__GNUC__)
// libxxhash's AVX2/AVX-512 kernels return with the upper halves of the vector
// registers still in use (no vzeroupper). Whatever runs next compiled as
// legacy (non-VEX) SSE, the optimizer and the gradient clip among it, then
// pays the SSE/AVX transition penalty on every vector instruction: measured
// 4.5x slower AdamW on `tiny` in the cheap recording modes. Clearing the
// state right after each dispatched call costs a few cycles; it changes no
// value (the upper halves are dead once the call has returned).
__attribute__((target("avx"))) void ZeroUpperAvx() { _mm256_zeroupper(); }
inline void ClearUpperVectorState() {
  static const bool has_avx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  if (has_avx) ZeroUpperAvx();
}
#else
inline void ClearUpperVectorState() {}
#endif

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// XOR of `words` consecutive 64-bit words. Eight independent accumulators let
// the compiler keep several vector loads in flight (baseline SSE2 suffices to
// run at memory bandwidth); XOR is exact in any order, so the split does not
// change the result.
inline uint64_t XorWordsBody(const uint8_t* p, size_t words) {
  uint64_t lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    for (size_t k = 0; k < 8; ++k) lanes[k] ^= LoadLE64(p + 8 * (i + k));
  }
  uint64_t acc = 0;
  for (; i < words; ++i) acc ^= LoadLE64(p + 8 * i);
  for (uint64_t lane : lanes) acc ^= lane;
  return acc;
}

uint64_t XorWordsBaseline(const uint8_t* p, size_t words) { return XorWordsBody(p, words); }

#if defined(__x86_64__) && defined(__GNUC__)
// Same source compiled for AVX2: twice the bytes per instruction, which pays
// while the data sits in cache (measured 82 -> 114 GB/s at 32 KiB, 76 -> 88 at
// 1 MiB; equal from memory). Chosen at run time only; the result is identical.
__attribute__((target("avx2"))) uint64_t XorWordsAvx2(const uint8_t* p, size_t words) {
  return XorWordsBody(p, words);
}
using XorWordsFn = uint64_t (*)(const uint8_t*, size_t);
XorWordsFn PickXorWords() {
  __builtin_cpu_init();
  return IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2") ? XorWordsAvx2 : XorWordsBaseline;
}
uint64_t XorWords(const uint8_t* p, size_t words) {
  static const XorWordsFn impl = PickXorWords();
  return impl(p, words);
}
#else
uint64_t XorWords(const uint8_t* p, size_t words) { return XorWordsBaseline(p, words); }
#endif

// xor64 of a range whose first byte sits in lane 0.
uint64_t Xor64FromLane0(const uint8_t* p, size_t n) {
  if (n == 0) return 0;
  uint64_t acc = XorWords(p, n / 8);
  const size_t tail = n % 8;
  if (tail != 0) {
    uint8_t last[8] = {};
    std::memcpy(last, p + n - tail, tail);
    acc ^= LoadLE64(last);
  }
  return acc;
}

// One read of memory for both fingerprints through libxxhash: each chunk is
// XORed and then hashed while it is still in cache. Returns the xor64 of the
// range as if it started in lane 0; `state` has absorbed the bytes.
uint64_t FusedPass(const uint8_t* p, size_t n, size_t chunk_bytes, XXH3_state_t* state) {
  uint64_t acc = 0;
  for (size_t offset = 0; offset < n; offset += chunk_bytes) {
    const size_t len = std::min(chunk_bytes, n - offset);
    // Chunks start at multiples of 8, so each chunk's lanes line up with the
    // whole range's.
    acc ^= Xor64FromLane0(p + offset, len);
    DGRR_XXH3_UPDATE(state, p + offset, len);
  }
  ClearUpperVectorState();
  return acc;
}

size_t SinglePassMinBytes() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (fingerprint_internal::BestStripeConsumer() == fingerprint_internal::ConsumeStripesAvx512) {
    return 4 * 1024;
  }
#endif
  return 8 * 1024;
}

}  // namespace

uint64_t Xor64(const void* data, size_t n) {
  return Xor64FromLane0(static_cast<const uint8_t*>(data), n);
}

uint64_t Xxh3(const void* data, size_t n) {
  const uint64_t hash = DGRR_XXH3_ONESHOT(data, n);
  ClearUpperVectorState();
  return hash;
}

StatusOr<uint64_t> Xxh3OfFile(RandomAccessFile& file, uint64_t from, uint64_t* end) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<uint8_t> buffer(1 << 20);
  uint64_t offset = from;
  for (;;) {
    DGRR_ASSIGN_OR_RETURN(size_t n, file.Read(offset, buffer.size(), buffer.data()));
    if (n == 0) break;
    DGRR_XXH3_UPDATE(&state, buffer.data(), n);
    offset += n;
  }
  const uint64_t hash = XXH3_64bits_digest(&state);
  ClearUpperVectorState();
  if (end != nullptr) *end = offset;
  return hash;
}

namespace fingerprint_internal {

Fingerprint FingerprintBytesChunked(const void* data, size_t n, size_t chunk_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  chunk_bytes = std::max<size_t>(8, chunk_bytes / 8 * 8);
  // A range that fits one chunk is read once and then hashed from cache; the
  // one-shot hash avoids the streaming state's buffering.
  if (n <= chunk_bytes) return {Xor64FromLane0(p, n), Xxh3(p, n)};
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  Fingerprint result;
  result.xor64 = FusedPass(p, n, chunk_bytes, &state);
  result.xxh3 = XXH3_64bits_digest(&state);
  return result;
}

const uint8_t* DefaultXxh3Secret() {
  // Seed 0 derives exactly the built-in secret (the seed is added to and
  // subtracted from its words), so the library gives it to us without our
  // having to copy the table.
  static const auto* const secret = [] {
    static uint8_t bytes[XXH3_SECRET_DEFAULT_SIZE];
    XXH3_generateSecret_fromSeed(bytes, 0);
    return bytes;
  }();
  return secret;
}

}  // namespace fingerprint_internal

Fingerprint FingerprintBytes(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  // Small inputs sit in L1 after the XOR, and libxxhash's hash (AVX-512 where
  // present) then beats the single pass, whose fixed cost shows. With the
  // AVX-512 consumer (BM_Xor64ThenXxh3 vs BM_SinglePass, GB/s): 45 vs 20 at
  // 1 KiB, 45 vs 29 at 2 KiB, equal (46-48) at 4 KiB, 53 vs 77 at 8 KiB. With
  // the AVX2 one: 43 vs 36 at 4 KiB, equal at 8 KiB.
  static const size_t kSinglePassMinBytes = SinglePassMinBytes();
  if (n < kSinglePassMinBytes) return {Xor64FromLane0(p, n), Xxh3(p, n)};
  return fingerprint_internal::FingerprintLong(p, n, fingerprint_internal::BestStripeConsumer());
}

// ---------------------------------------------------------------------------
// Fingerprinter
// ---------------------------------------------------------------------------

void Fingerprinter::Reset() {
  state_ = fingerprint_internal::InitialStripeState();
  total_bytes_ = 0;
  buffered_ = 0;
}

void Fingerprinter::Update(const void* data, size_t n) {
  if (n == 0) return;
  const auto* p = static_cast<const uint8_t*>(data);
  total_bytes_ += n;
  // Until more than kBufferBytes are pending nothing is consumed, so a stream
  // of at most 240 bytes is still whole in the buffer at Digest.
  if (buffered_ + n <= kBufferBytes) {
    std::memcpy(buffer_ + buffered_, p, n);
    buffered_ += n;
    return;
  }
  const uint8_t* secret = fingerprint_internal::DefaultXxh3Secret();
  const fingerprint_internal::StripeConsumer consume = fingerprint_internal::BestStripeConsumer();
  if (buffered_ > 0) {
    // Complete the buffer and consume it whole: at least one byte follows.
    const size_t fill = kBufferBytes - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    p += fill;
    n -= fill;
    consume(&state_, buffer_, kBufferBytes / kStripeBytes, secret);
    std::memcpy(last_stripe_, buffer_ + kBufferBytes - kStripeBytes, kStripeBytes);
    buffered_ = 0;
  }
  // Consume the input in place, keeping 1..64 bytes: the stripe holding the
  // stream's last byte so far may be the final one, which XXH3 treats apart.
  const size_t stripes = (n - 1) / kStripeBytes;
  if (stripes > 0) {
    consume(&state_, p, stripes, secret);
    std::memcpy(last_stripe_, p + (stripes - 1) * kStripeBytes, kStripeBytes);
  }
  buffered_ = n - stripes * kStripeBytes;
  std::memcpy(buffer_, p + stripes * kStripeBytes, buffered_);
}

Fingerprint Fingerprinter::Digest() const {
  if (total_bytes_ <= xxh3::kMidSizeMax) {
    return {Xor64FromLane0(buffer_, buffered_), Xxh3(buffer_, buffered_)};
  }
  // Finish on a copy: Digest leaves the stream as it was.
  const uint8_t* secret = fingerprint_internal::DefaultXxh3Secret();
  fingerprint_internal::StripeState state = state_;
  const size_t stripes = (buffered_ - 1) / kStripeBytes;  // buffered_ >= 1 here
  fingerprint_internal::BestStripeConsumer()(&state, buffer_, stripes, secret);
  const size_t rest = stripes * kStripeBytes;  // consumed bytes: a multiple of 64
  Fingerprint result;
  result.xor64 = state.xor64 ^ Xor64FromLane0(buffer_ + rest, buffered_ - rest);
  // The final stripe is the stream's last 64 bytes, partly from the last
  // consumed stripe when fewer than 64 are buffered.
  uint8_t joined[kStripeBytes];
  const uint8_t* last = joined;
  if (buffered_ >= kStripeBytes) {
    last = buffer_ + buffered_ - kStripeBytes;
  } else {
    std::memcpy(joined, last_stripe_ + buffered_, kStripeBytes - buffered_);
    std::memcpy(joined + kStripeBytes - buffered_, buffer_, buffered_);
  }
  result.xxh3 = fingerprint_internal::FinishLong(state, last, total_bytes_, secret);
  return result;
}

Fingerprint FingerprintSegments(const MemorySegment* segments, size_t count) {
  Fingerprinter fp;
  for (size_t i = 0; i < count; ++i) fp.Update(segments[i].data, segments[i].bytes);
  return fp.Digest();
}

const char* FingerprintKernelName() { return fingerprint_internal::BestStripeConsumerName(); }

}  // namespace dgrr
