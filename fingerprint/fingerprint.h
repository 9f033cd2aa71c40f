// Tensor fingerprints: two 64-bit summaries of a byte range, computed in one
// pass over memory (docs/fingerprint.md is the normative definition).
//
//   xor64  XOR of the bytes read as little-endian 64-bit words, the last
//          partial word zero-padded. Linear and order-insensitive within a
//          lane: cheap, exact on any device in any reduction order, but blind
//          to swapped rows and to corruptions that cancel in pairs.
//   xxh3   XXH3-64 with seed 0 (libxxhash) of the same bytes: order-sensitive,
//          covers what xor64 cannot see.
//
// Only the bytes are fingerprinted; dtype and shape are recorded beside the
// fingerprint by the trace, not mixed into it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

struct XXH3_state_s;  // libxxhash's streaming state, kept out of this header

namespace dgrr {

struct Fingerprint {
  uint64_t xor64 = 0;
  uint64_t xxh3 = 0;
  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
};

// XOR of little-endian 64-bit words; byte i of the range lands in lane i % 8.
uint64_t Xor64(const void* data, size_t n);
// XXH3_64bits(data, n), seed 0.
uint64_t Xxh3(const void* data, size_t n);
// Both at once, reading the memory once. On CPUs with AVX2 each 64-byte stripe
// feeds the XOR and XXH3's accumulator from one load (fingerprint_simd.h);
// elsewhere cache-sized chunks are XORed and then hashed by libxxhash while
// still in cache. Same result either way.
Fingerprint FingerprintBytes(const void* data, size_t n);

// The 32-bit XOR signature of OpGuard (XOR of little-endian 32-bit words, the
// last partial word zero-padded) is the XOR of xor64's two halves.
inline uint32_t XorSignature32(uint64_t xor64) {
  return static_cast<uint32_t>(xor64) ^ static_cast<uint32_t>(xor64 >> 32);
}

// Streaming fingerprint over several buffers. After Reset, any sequence of
// Update calls gives the Digest that FingerprintBytes gives for the
// concatenation of their bytes, whatever the split (lengths need not be
// multiples of 8). Digest does not change the state. Not thread-safe; one
// Fingerprinter per thread. A moved-from Fingerprinter may only be assigned
// to or destroyed.
class Fingerprinter {
 public:
  Fingerprinter();  // ready to use: starts Reset
  ~Fingerprinter();
  Fingerprinter(const Fingerprinter& other);
  Fingerprinter& operator=(const Fingerprinter& other);
  Fingerprinter(Fingerprinter&&) noexcept;
  Fingerprinter& operator=(Fingerprinter&&) noexcept;

  void Reset();
  void Update(const void* data, size_t n);
  Fingerprint Digest() const;
  // Bytes fed since the last Reset.
  uint64_t bytes() const { return total_bytes_; }

 private:
  struct StateDeleter {
    void operator()(XXH3_state_s* state) const;
  };
  uint64_t xor64_ = 0;
  uint64_t total_bytes_ = 0;
  std::unique_ptr<XXH3_state_s, StateDeleter> xxh3_state_;
};

namespace fingerprint_internal {
// The libxxhash route of FingerprintBytes (also Fingerprinter::Update's) with
// an explicit chunk size (rounded down to a multiple of 8, at least 8), exposed
// so tests cover it on AVX2 machines and the benchmark compares chunk sizes.
inline constexpr size_t kFusedChunkBytes = 128 * 1024;
Fingerprint FingerprintBytesChunked(const void* data, size_t n, size_t chunk_bytes);
// XXH3's 192-byte default secret, read from libxxhash (what seed 0 uses);
// the CUDA path and its CPU model need it.
const uint8_t* DefaultXxh3Secret();
}  // namespace fingerprint_internal

}  // namespace dgrr
