#include "fingerprint/fingerprint.h"

#include <algorithm>
#include <cstring>

#include "fingerprint/fingerprint_simd.h"
#include "fingerprint/xxh3_core.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value, XXH3_generateSecret_fromSeed
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
// libxxhash also exports entry points that pick SSE2/AVX2/AVX-512 at run time;
// every variant gives the same hash, so use them where they exist.
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define DGRR_XXH3_ONESHOT XXH3_64bits_dispatch
#define DGRR_XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define DGRR_XXH3_ONESHOT XXH3_64bits
#define DGRR_XXH3_UPDATE XXH3_64bits_update
#endif

namespace dgrr {
namespace {

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
// Same source compiled for AVX2: twice the bytes per instruction when the data
// sits in L1/L2. Chosen at run time only; the result is identical.
__attribute__((target("avx2"))) uint64_t XorWordsAvx2(const uint8_t* p, size_t words) {
  return XorWordsBody(p, words);
}
using XorWordsFn = uint64_t (*)(const uint8_t*, size_t);
XorWordsFn PickXorWords() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? XorWordsAvx2 : XorWordsBaseline;
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
  return acc;
}

}  // namespace

uint64_t Xor64(const void* data, size_t n) {
  return Xor64FromLane0(static_cast<const uint8_t*>(data), n);
}

uint64_t Xxh3(const void* data, size_t n) { return DGRR_XXH3_ONESHOT(data, n); }

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
  // Up to 240 bytes XXH3 has no block loop: nothing to fuse.
  if (n <= xxh3::kMidSizeMax) return {Xor64FromLane0(p, n), Xxh3(p, n)};
  if (fingerprint_internal::HaveAvx2Path()) {
    return fingerprint_internal::FingerprintLongAvx2(p, n,
                                                     fingerprint_internal::DefaultXxh3Secret());
  }
  return fingerprint_internal::FingerprintBytesChunked(p, n,
                                                       fingerprint_internal::kFusedChunkBytes);
}

// ---------------------------------------------------------------------------
// Fingerprinter
// ---------------------------------------------------------------------------

void Fingerprinter::StateDeleter::operator()(XXH3_state_s* state) const { XXH3_freeState(state); }

Fingerprinter::Fingerprinter() : xxh3_state_(XXH3_createState()) {
  if (xxh3_state_ == nullptr) throw std::bad_alloc();
  Reset();
}

Fingerprinter::~Fingerprinter() = default;

Fingerprinter::Fingerprinter(const Fingerprinter& other)
    : xor64_(other.xor64_), total_bytes_(other.total_bytes_), xxh3_state_(XXH3_createState()) {
  if (xxh3_state_ == nullptr) throw std::bad_alloc();
  XXH3_copyState(xxh3_state_.get(), other.xxh3_state_.get());
}

Fingerprinter& Fingerprinter::operator=(const Fingerprinter& other) {
  if (this != &other) {
    xor64_ = other.xor64_;
    total_bytes_ = other.total_bytes_;
    XXH3_copyState(xxh3_state_.get(), other.xxh3_state_.get());
  }
  return *this;
}

Fingerprinter::Fingerprinter(Fingerprinter&&) noexcept = default;
Fingerprinter& Fingerprinter::operator=(Fingerprinter&&) noexcept = default;

void Fingerprinter::Reset() {
  xor64_ = 0;
  total_bytes_ = 0;
  XXH3_64bits_reset(xxh3_state_.get());
}

void Fingerprinter::Update(const void* data, size_t n) {
  if (n == 0) return;
  const auto* p = static_cast<const uint8_t*>(data);
  const uint64_t lane0 = FusedPass(p, n, fingerprint_internal::kFusedChunkBytes, xxh3_state_.get());
  // This update's first byte sits in lane total_bytes_ % 8 of the whole
  // stream: moving every byte up that many lanes is a left rotation of the
  // little-endian word by 8 bits per lane.
  xor64_ ^= std::rotl(lane0, static_cast<int>(8 * (total_bytes_ % 8)));
  total_bytes_ += n;
}

Fingerprint Fingerprinter::Digest() const {
  return {xor64_, XXH3_64bits_digest(xxh3_state_.get())};
}

}  // namespace dgrr
