#include "trace_format/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace dgrr::crc32c {
namespace {

constexpr uint32_t kReflectedPoly = 0x82f63b78u;

// Slicing-by-8 tables: table[k][b] is the CRC contribution of byte b followed
// by k zero bytes, so eight input bytes are folded per step.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kReflectedPoly : 0u);
    t[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
  return t;
}
constexpr Tables kTables = MakeTables();

// Written as one expression, not a loop: GCC 12 merges this form into a
// single 8-byte load but leaves the loop form as eight byte loads.
inline uint64_t LoadLittle64(const uint8_t* p) {
  return static_cast<uint64_t>(p[0]) | static_cast<uint64_t>(p[1]) << 8 |
         static_cast<uint64_t>(p[2]) << 16 | static_cast<uint64_t>(p[3]) << 24 |
         static_cast<uint64_t>(p[4]) << 32 | static_cast<uint64_t>(p[5]) << 40 |
         static_cast<uint64_t>(p[6]) << 48 | static_cast<uint64_t>(p[7]) << 56;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t state = ~crc;
  while (n >= 8) {
    state = _mm_crc32_u64(state, LoadLittle64(p));
    p += 8;
    n -= 8;
  }
  auto state32 = static_cast<uint32_t>(state);
  while (n > 0) {
    state32 = _mm_crc32_u8(state32, *p++);
    --n;
  }
  return ~state32;
}

// Four blocks at a time, one CRC chain per block: crc32q has a latency of
// about three cycles but a throughput of one per cycle.
__attribute__((target("sse4.2"))) void ValueOfBlocksSse42(const uint8_t* base, size_t stride,
                                                          size_t length, size_t count,
                                                          uint32_t* out) {
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const uint8_t* p[4] = {base + i * stride, base + (i + 1) * stride, base + (i + 2) * stride,
                           base + (i + 3) * stride};
    uint64_t s[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    size_t k = 0;
    for (; k + 8 <= length; k += 8) {
      for (int j = 0; j < 4; ++j) s[j] = _mm_crc32_u64(s[j], LoadLittle64(p[j] + k));
    }
    for (int j = 0; j < 4; ++j) {
      auto s32 = static_cast<uint32_t>(s[j]);
      for (size_t t = k; t < length; ++t) s32 = _mm_crc32_u8(s32, p[j][t]);
      out[i + j] = ~s32;
    }
  }
  for (; i < count; ++i) out[i] = ExtendSse42(0, base + i * stride, length);
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t state = ~crc;
  while (n >= 8) {
    uint64_t word = LoadLittle64(p) ^ state;
    state = kTables[7][word & 0xff] ^ kTables[6][(word >> 8) & 0xff] ^
            kTables[5][(word >> 16) & 0xff] ^ kTables[4][(word >> 24) & 0xff] ^
            kTables[3][(word >> 32) & 0xff] ^ kTables[2][(word >> 40) & 0xff] ^
            kTables[1][(word >> 48) & 0xff] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xff];
    --n;
  }
  return ~state;
}

bool HardwareAvailable() {
#if defined(__x86_64__)
  static const bool available = DetectSse42();
  return available;
#else
  return false;
#endif
}

uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HardwareAvailable()) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

void ValueOfBlocks(const void* base, size_t stride, size_t length, size_t count, uint32_t* out) {
  const auto* bytes = static_cast<const uint8_t*>(base);
#if defined(__x86_64__)
  if (HardwareAvailable()) {
    ValueOfBlocksSse42(bytes, stride, length, count, out);
    return;
  }
#endif
  for (size_t i = 0; i < count; ++i) out[i] = ExtendPortable(0, bytes + i * stride, length);
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool use_hardware = HardwareAvailable();
  if (use_hardware) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace dgrr::crc32c
