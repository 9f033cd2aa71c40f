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

inline uint64_t LoadLittle64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
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

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool use_hardware = HardwareAvailable();
  if (use_hardware) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace dgrr::crc32c
