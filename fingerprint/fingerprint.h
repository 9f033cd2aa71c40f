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

#include <cstddef>
#include <cstdint>

#include "base/file_system.h"
#include "base/status.h"

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
// XXH3-64 (seed 0) of a file's bytes from `from` to its end, read in 1 MiB
// pieces (an executable, a checkpoint's payload: never whole in memory);
// `*end`, when given, receives the offset it stopped at.
StatusOr<uint64_t> Xxh3OfFile(RandomAccessFile& file, uint64_t from = 0, uint64_t* end = nullptr);
// Both at once, reading the memory once: from 4 KiB (8 KiB without AVX-512F)
// each 64-byte stripe feeds the XOR and XXH3's accumulator from one load
// (fingerprint_simd.h; AVX-512F or AVX2 where the CPU has it, else SSE2);
// smaller inputs are XORed and then hashed by libxxhash from L1. The xxh3
// value is XXH3_64bits' exactly (tested).
Fingerprint FingerprintBytes(const void* data, size_t n);

// One piece of a byte stream that lies in several buffers (a model's
// parameter tensors, say): the stream is the pieces' bytes concatenated in
// order. Whose memory `data` is, host or device, the caller says.
struct MemorySegment {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// The 32-bit XOR signature of OpGuard (XOR of little-endian 32-bit words, the
// last partial word zero-padded) is the XOR of xor64's two halves.
inline uint32_t XorSignature32(uint64_t xor64) {
  return static_cast<uint32_t>(xor64) ^ static_cast<uint32_t>(xor64 >> 32);
}

namespace fingerprint_internal {
// XXH3's 8 accumulator lanes, the position in the current 1024-byte block,
// and the XOR of every word consumed so far. Stripes are consumed at stream
// offsets that are multiples of 64, so the XOR needs no lane rotation.
// (fingerprint_simd.h has the functions that advance it.)
struct StripeState {
  uint64_t acc[8];
  uint64_t xor64;
  size_t stripes_in_block;  // 0..15
};
}  // namespace fingerprint_internal

// Streaming fingerprint over several buffers. After Reset, any sequence of
// Update calls gives the Digest that FingerprintBytes gives for the
// concatenation of their bytes, whatever the split (lengths need not be
// multiples of 8). Digest does not change the state. Runs the same single pass
// as FingerprintBytes on the bulk of each update; copies at most 256 bytes per
// update into its own buffer. A plain value: copyable, no heap. Not
// thread-safe; one Fingerprinter per thread.
class Fingerprinter {
 public:
  Fingerprinter() { Reset(); }

  void Reset();
  void Update(const void* data, size_t n);
  Fingerprint Digest() const;
  // Bytes fed since the last Reset.
  uint64_t bytes() const { return total_bytes_; }

 private:
  static constexpr size_t kBufferBytes = 256;  // > 240: short inputs stay whole
  static constexpr size_t kStripeBytes = 64;
  fingerprint_internal::StripeState state_;
  uint64_t total_bytes_ = 0;
  size_t buffered_ = 0;                // bytes in buffer_ not yet consumed
  uint8_t buffer_[kBufferBytes];       // the unconsumed end of the stream
  uint8_t last_stripe_[kStripeBytes];  // the last 64 bytes consumed
};

// FingerprintBytes of the concatenation of host segments, without copying
// them together (a Fingerprinter fed segment by segment).
Fingerprint FingerprintSegments(const MemorySegment* segments, size_t count);

// The vector kernel FingerprintBytes consumes stripes with on this CPU
// ("avx512", "avx2", "sse2" or "scalar"; every one gives the same bits;
// DGRR_MAX_ISA caps it, base/cpu_isa.h).
const char* FingerprintKernelName();

namespace fingerprint_internal {
// The alternative fused route, kept as an independent reference and for the
// benchmark: cache-sized chunks XORed and then fed to libxxhash's streaming
// XXH3 while in cache. `chunk_bytes` is rounded down to a multiple of 8 (at
// least 8). Same result as FingerprintBytes; slower (bench/README.md).
inline constexpr size_t kFusedChunkBytes = 128 * 1024;
Fingerprint FingerprintBytesChunked(const void* data, size_t n, size_t chunk_bytes);
// XXH3's 192-byte default secret, read from libxxhash (what seed 0 uses);
// the CUDA path and its CPU model need it.
const uint8_t* DefaultXxh3Secret();
}  // namespace fingerprint_internal

}  // namespace dgrr
