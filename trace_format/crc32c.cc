#include "trace_format/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/cpu_isa.h"

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
__attribute__((target("sse4.2"))) inline uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t state = ~crc;
  while (n >= 8) {
    state = _mm_crc32_u64(state, LoadLittle64(p));
    p += 8;
    n -= 8;
  }
  auto state32 = static_cast<uint32_t>(state);
  if (n >= 4) {
    state32 = _mm_crc32_u32(state32, static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                                         static_cast<uint32_t>(p[2]) << 16 |
                                         static_cast<uint32_t>(p[3]) << 24);
    p += 4;
    n -= 4;
  }
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

// Blocks of kFoldMin..kFoldMax bytes (a trace record's 124) by carry-less
// multiplication: the CRC is linear, so each of the first six 16-byte lanes
// can be moved ("folded") onto the seventh, bytes [96, 112), by multiplying
// its two 64-bit halves by x^(8 d - 65) mod P, d being the half's distance in
// bytes from byte 112 (the 65: 64 for the half's own width and 1 because a
// reflected carry-less product comes out shifted by one bit). XORing the
// products into the seventh lane leaves a 16-byte message with the same CRC
// register as the first 112 bytes, which two crc32 instructions reduce; the
// remaining bytes follow as usual. The crc32 unit then sees four instructions
// a record instead of sixteen, and the multiplies run beside it.
constexpr size_t kFoldMin = 112;
constexpr size_t kFoldMax = 128;

// x^e mod P in reflected form (bit 31 - t holds the coefficient of x^t).
constexpr uint32_t XPowModP(int e) {
  uint32_t r = 0x80000000u;
  for (int i = 0; i < e; ++i) r = (r >> 1) ^ ((r & 1u) ? kReflectedPoly : 0u);
  return r;
}
// The multiplier of the 64-bit half at byte `offset`, placed where a
// reflected 64-bit operand keeps a polynomial of degree < 32.
constexpr uint64_t FoldMultiplier(size_t offset) {
  return static_cast<uint64_t>(XPowModP(8 * static_cast<int>(kFoldMin - offset) - 65)) << 32;
}
// Lane i's halves: kFold[2 i] for its low (earlier) 8 bytes, kFold[2 i + 1] for its high.
constexpr std::array<uint64_t, 12> MakeFoldMultipliers() {
  std::array<uint64_t, 12> k{};
  for (size_t half = 0; half < k.size(); ++half) k[half] = FoldMultiplier(8 * half);
  return k;
}
constexpr std::array<uint64_t, 12> kFold = MakeFoldMultipliers();

// The register after the 112-byte prefix, from the folded 16 bytes, then the
// rest of the block.
__attribute__((target("sse4.2"))) inline uint32_t FinishFold(__m128i folded, const uint8_t* p,
                                                             size_t length) {
  uint64_t state = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(folded)));
  state = _mm_crc32_u64(state, static_cast<uint64_t>(_mm_extract_epi64(folded, 1)));
  return ExtendSse42(~static_cast<uint32_t>(state), p + kFoldMin, length - kFoldMin);
}

// The initial register 0xffffffff is the same as a register of 0 with the
// block's first four bytes inverted: that is what the XOR with `invert` does.
// Each kernel ends with an explicit vzeroupper, whatever the compiler adds at
// its exits: legacy-SSE code run next would otherwise pay the SSE/AVX
// transition penalty (bench/README.md, runtime). An earlier form that left
// through a tail call had none.
//
// kLength, when not 0, is the block length known at compile time: a record's
// 124 bytes leave a 12-byte tail that then takes two crc32 instructions in
// line instead of ExtendSse42's loops (1.25x the blocks' rate on a 2-core AMD
// EPYC with AVX2, CPU time).
template <size_t kLength>
__attribute__((target("avx2,vpclmulqdq,sse4.2"))) void FoldBlocksAvx2Of(const uint8_t* base, size_t stride,
                                                                       size_t length, size_t count,
                                                                       uint32_t* out) {
  if constexpr (kLength != 0) length = kLength;
  const __m256i k01 = _mm256_setr_epi64x(kFold[0], kFold[1], kFold[2], kFold[3]);
  const __m256i k23 = _mm256_setr_epi64x(kFold[4], kFold[5], kFold[6], kFold[7]);
  const __m256i k45 = _mm256_setr_epi64x(kFold[8], kFold[9], kFold[10], kFold[11]);
  const __m256i invert = _mm256_setr_epi64x(0xffffffff, 0, 0, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = base + i * stride;
    const __m256i a = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), invert);
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64));
    __m256i sum = _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k01, 0x00),
                                   _mm256_clmulepi64_epi128(a, k01, 0x11));
    sum = _mm256_xor_si256(sum, _mm256_clmulepi64_epi128(b, k23, 0x00));
    sum = _mm256_xor_si256(sum, _mm256_clmulepi64_epi128(b, k23, 0x11));
    sum = _mm256_xor_si256(sum, _mm256_clmulepi64_epi128(c, k45, 0x00));
    sum = _mm256_xor_si256(sum, _mm256_clmulepi64_epi128(c, k45, 0x11));
    __m128i folded = _mm_xor_si128(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    folded = _mm_xor_si128(folded, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 96)));
    out[i] = FinishFold(folded, p, length);
  }
  _mm256_zeroupper();
}

constexpr size_t kRecordCovered = 124;  // a trace record's bytes before its CRC

void FoldBlocksAvx2(const uint8_t* base, size_t stride, size_t length, size_t count, uint32_t* out) {
  if (length == kRecordCovered) return FoldBlocksAvx2Of<kRecordCovered>(base, stride, length, count, out);
  FoldBlocksAvx2Of<0>(base, stride, length, count, out);
}

// With AVX-512 the whole block folds, tail included: the last 16 bytes,
// [length - 16, length), are the lane everything else is moved onto, and the
// bytes before them are read as two 64-byte vectors, the second masked so
// that nothing from the last lane on is counted twice. Only two crc32
// instructions are left per block. The multipliers depend on each half's
// distance d in bytes from the block's end: x^(8 d - 65) mod P (kFoldByDistance).
constexpr std::array<uint64_t, 129> MakeFoldByDistance() {
  std::array<uint64_t, 129> k{};
  for (int d = 9; d <= 128; ++d) k[static_cast<size_t>(d)] = static_cast<uint64_t>(XPowModP(8 * d - 65)) << 32;
  return k;
}
constexpr std::array<uint64_t, 129> kFoldByDistance = MakeFoldByDistance();

// (GCC 12's headers implement the 512-to-256-bit extracts with a
// self-initialised "undefined" operand, which -Wuninitialized reports; the
// operand is never read.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,sse4.2"))) void FoldBlocksAvx512(
    const uint8_t* base, size_t stride, size_t length, size_t count, uint32_t* out) {
  const size_t folded_bytes = length - 16;  // 96 to 112: all of the first vector, part of the second
  alignas(64) uint64_t first[8], second[8];
  for (size_t half = 0; half < 8; ++half) {
    first[half] = kFoldByDistance[length - 8 * half];
    const size_t offset = 64 + 8 * half;
    second[half] = offset < folded_bytes ? kFoldByDistance[length - offset] : 0;
  }
  const __m512i k_first = _mm512_load_si512(first), k_second = _mm512_load_si512(second);
  const __mmask64 second_bytes = (uint64_t{1} << (folded_bytes - 64)) - 1;
  const __m512i invert = _mm512_setr_epi64(0xffffffff, 0, 0, 0, 0, 0, 0, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = base + i * stride;
    const __m512i a = _mm512_xor_si512(_mm512_loadu_si512(p), invert);
    const __m512i b = _mm512_maskz_loadu_epi8(second_bytes, p + 64);
    __m512i sum = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k_first, 0x00),
                                            _mm512_clmulepi64_epi128(a, k_first, 0x11),
                                            _mm512_clmulepi64_epi128(b, k_second, 0x00), 0x96);
    sum = _mm512_xor_si512(sum, _mm512_clmulepi64_epi128(b, k_second, 0x11));
    const __m256i half = _mm256_xor_si256(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
    const __m128i folded = _mm_ternarylogic_epi64(
        _mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + folded_bytes)), 0x96);
    uint64_t state = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(folded)));
    state = _mm_crc32_u64(state, static_cast<uint64_t>(_mm_extract_epi64(folded, 1)));
    out[i] = ~static_cast<uint32_t>(state);
  }
  _mm256_zeroupper();
}
#pragma GCC diagnostic pop

using BlocksFn = void (*)(const uint8_t*, size_t, size_t, size_t, uint32_t*);

template <BlocksFn Fold>
void ValueOfBlocksFolded(const uint8_t* base, size_t stride, size_t length, size_t count, uint32_t* out) {
  if (length < kFoldMin || length > kFoldMax) {
    ValueOfBlocksSse42(base, stride, length, count, out);
  } else {
    Fold(base, stride, length, count, out);
  }
}

bool Supports(BlockKernel kernel) {
  __builtin_cpu_init();
  const bool sse42 = __builtin_cpu_supports("sse4.2");
  const bool clmul = sse42 && __builtin_cpu_supports("vpclmulqdq");
  switch (kernel) {
    case BlockKernel::kPortable: return true;
    case BlockKernel::kCrc32Chains: return sse42;
    case BlockKernel::kClmulAvx2: return clmul && IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2");
    case BlockKernel::kClmulAvx512:
      return clmul && IsaAllowed(IsaLevel::kAvx512) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw");
  }
  return false;
}

bool DetectSse42() { return Supports(BlockKernel::kCrc32Chains); }
#else
bool Supports(BlockKernel kernel) { return kernel == BlockKernel::kPortable; }
#endif

BlockKernel DetectBlockKernel() {
  for (BlockKernel k : {BlockKernel::kClmulAvx512, BlockKernel::kClmulAvx2, BlockKernel::kCrc32Chains}) {
    if (Supports(k)) return k;
  }
  return BlockKernel::kPortable;
}

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

bool BlockKernelAvailable(BlockKernel kernel) { return Supports(kernel); }

const char* BlockKernelName(BlockKernel kernel) {
  switch (kernel) {
    case BlockKernel::kPortable: return "portable";
    case BlockKernel::kCrc32Chains: return "crc32-chains";
    case BlockKernel::kClmulAvx2: return "clmul-avx2";
    case BlockKernel::kClmulAvx512: return "clmul-avx512";
  }
  return "unknown";
}

const char* BlockKernelNeeds(BlockKernel kernel) {
  switch (kernel) {
    case BlockKernel::kPortable: return "nothing";
    case BlockKernel::kCrc32Chains: return "an x86-64 CPU with SSE4.2";
    case BlockKernel::kClmulAvx2: return "an x86-64 CPU with SSE4.2, AVX2 and VPCLMULQDQ";
    case BlockKernel::kClmulAvx512: return "an x86-64 CPU with SSE4.2, AVX-512 F/VL/BW and VPCLMULQDQ";
  }
  return "unknown";
}

BlockKernel SelectedBlockKernel() {
  static const BlockKernel selected = DetectBlockKernel();
  return selected;
}

void ValueOfBlocksWith(BlockKernel kernel, const void* base, size_t stride, size_t length, size_t count,
                       uint32_t* out) {
  const auto* bytes = static_cast<const uint8_t*>(base);
  if (kernel != SelectedBlockKernel() && !Supports(kernel)) kernel = SelectedBlockKernel();
  switch (kernel) {
#if defined(__x86_64__)
    case BlockKernel::kClmulAvx512:
      return ValueOfBlocksFolded<FoldBlocksAvx512>(bytes, stride, length, count, out);
    case BlockKernel::kClmulAvx2:
      return ValueOfBlocksFolded<FoldBlocksAvx2>(bytes, stride, length, count, out);
    case BlockKernel::kCrc32Chains:
      return ValueOfBlocksSse42(bytes, stride, length, count, out);
#endif
    default:
      for (size_t i = 0; i < count; ++i) out[i] = ExtendPortable(0, bytes + i * stride, length);
  }
}

void ValueOfBlocks(const void* base, size_t stride, size_t length, size_t count, uint32_t* out) {
  ValueOfBlocksWith(SelectedBlockKernel(), base, stride, length, count, out);
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool use_hardware = HardwareAvailable();
  if (use_hardware) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace dgrr::crc32c
