#include "rng/philox_fill.h"

#include <initializer_list>

#include "base/cpu_isa.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DGRR_RNG_X86 1
#else
#define DGRR_RNG_X86 0
#endif

namespace dgrr::rng {
namespace {

void FillBlocksScalar(uint64_t key, uint64_t subsequence, uint64_t first_block,
                      size_t block_count, uint32_t* out) {
  const PhiloxKey philox_key = KeyFromSeed(key);
  for (size_t b = 0; b < block_count; ++b) {
    const PhiloxBlock block = Philox4x32(CounterFor(first_block + b, subsequence), philox_key);
    for (int lane = 0; lane < 4; ++lane) out[4 * b + lane] = block.word[lane];
  }
}

// Block indices of one SIMD group, split into counter words 0 (low) and 1
// (high). Computed in scalar code: a carry out of word 0 can happen mid-group.
template <int kLanes>
void GroupCounters(uint64_t first, uint32_t (&low)[kLanes], uint32_t (&high)[kLanes]) {
  for (int i = 0; i < kLanes; ++i) {
    low[i] = static_cast<uint32_t>(first + i);
    high[i] = static_cast<uint32_t>((first + i) >> 32);
  }
}

#if DGRR_RNG_X86

// ---- SSE2: 4 blocks per vector, kGroups vectors in flight ----------------

inline void MulHiLoSse2(__m128i a, __m128i m, __m128i* hi, __m128i* lo) {
  // pmuludq multiplies lanes 0 and 2; shifting by 32 brings lanes 1 and 3 down.
  const __m128i even = _mm_mul_epu32(a, m);                     // [lo0 hi0 lo2 hi2]
  const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), m);  // [lo1 hi1 lo3 hi3]
  const __m128i e = _mm_shuffle_epi32(even, _MM_SHUFFLE(3, 1, 2, 0));  // [lo0 lo2 hi0 hi2]
  const __m128i o = _mm_shuffle_epi32(odd, _MM_SHUFFLE(3, 1, 2, 0));   // [lo1 lo3 hi1 hi3]
  *lo = _mm_unpacklo_epi32(e, o);
  *hi = _mm_unpackhi_epi32(e, o);
}

template <int kGroups>
void FillBlocksSse2(uint64_t key, uint64_t subsequence, uint64_t first_block, size_t block_count,
                    uint32_t* out) {
  constexpr int kStep = 4 * kGroups;
  const __m128i m0 = _mm_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m128i m1 = _mm_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m128i sub_low = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence)));
  const __m128i sub_high = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence >> 32)));
  size_t b = 0;
  for (; b + kStep <= block_count; b += kStep) {
    __m128i c[kGroups][4];
    for (int g = 0; g < kGroups; ++g) {
      uint32_t low[4], high[4];
      GroupCounters<4>(first_block + b + 4 * g, low, high);
      c[g][0] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(low));
      c[g][1] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(high));
      c[g][2] = sub_low;
      c[g][3] = sub_high;
    }
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int round = 0; round < kPhiloxDefaultRounds; ++round) {
      if (round > 0) {
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
      }
      const __m128i vk0 = _mm_set1_epi32(static_cast<int>(k0));
      const __m128i vk1 = _mm_set1_epi32(static_cast<int>(k1));
      for (int g = 0; g < kGroups; ++g) {
        __m128i hi0, lo0, hi1, lo1;
        MulHiLoSse2(c[g][0], m0, &hi0, &lo0);
        MulHiLoSse2(c[g][2], m1, &hi1, &lo1);
        c[g][0] = _mm_xor_si128(_mm_xor_si128(hi1, c[g][1]), vk0);
        c[g][1] = lo1;
        c[g][2] = _mm_xor_si128(_mm_xor_si128(hi0, c[g][3]), vk1);
        c[g][3] = lo0;
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      // 4x4 transpose: lanes are blocks, vectors are words -> draw order.
      const __m128i t0 = _mm_unpacklo_epi32(c[g][0], c[g][1]);
      const __m128i t1 = _mm_unpackhi_epi32(c[g][0], c[g][1]);
      const __m128i t2 = _mm_unpacklo_epi32(c[g][2], c[g][3]);
      const __m128i t3 = _mm_unpackhi_epi32(c[g][2], c[g][3]);
      __m128i* dst = reinterpret_cast<__m128i*>(out + 4 * (b + 4 * g));
      _mm_storeu_si128(dst + 0, _mm_unpacklo_epi64(t0, t2));
      _mm_storeu_si128(dst + 1, _mm_unpackhi_epi64(t0, t2));
      _mm_storeu_si128(dst + 2, _mm_unpacklo_epi64(t1, t3));
      _mm_storeu_si128(dst + 3, _mm_unpackhi_epi64(t1, t3));
    }
  }
  FillBlocksScalar(key, subsequence, first_block + b, block_count - b, out + 4 * b);
}

// ---- AVX2: 8 blocks per vector ---------------------------------------------

__attribute__((target("avx2"))) inline void MulHiLoAvx2(__m256i a, __m256i m, __m256i* hi,
                                                        __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

template <int kGroups>
__attribute__((target("avx2"))) void FillBlocksAvx2(uint64_t key, uint64_t subsequence,
                                                     uint64_t first_block, size_t block_count,
                                                     uint32_t* out) {
  constexpr int kStep = 8 * kGroups;
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m256i sub_low = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence)));
  const __m256i sub_high =
      _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence >> 32)));
  size_t b = 0;
  for (; b + kStep <= block_count; b += kStep) {
    __m256i c[kGroups][4];
    for (int g = 0; g < kGroups; ++g) {
      uint32_t low[8], high[8];
      GroupCounters<8>(first_block + b + 8 * g, low, high);
      c[g][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low));
      c[g][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(high));
      c[g][2] = sub_low;
      c[g][3] = sub_high;
    }
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int round = 0; round < kPhiloxDefaultRounds; ++round) {
      if (round > 0) {
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
      }
      const __m256i vk0 = _mm256_set1_epi32(static_cast<int>(k0));
      const __m256i vk1 = _mm256_set1_epi32(static_cast<int>(k1));
      for (int g = 0; g < kGroups; ++g) {
        __m256i hi0, lo0, hi1, lo1;
        MulHiLoAvx2(c[g][0], m0, &hi0, &lo0);
        MulHiLoAvx2(c[g][2], m1, &hi1, &lo1);
        c[g][0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[g][1]), vk0);
        c[g][1] = lo1;
        c[g][2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[g][3]), vk1);
        c[g][3] = lo0;
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      // Per 128-bit half a 4x4 transpose gives blocks {0,4},{1,5},{2,6},{3,7};
      // permute2x128 pairs the halves back into block order.
      const __m256i t0 = _mm256_unpacklo_epi32(c[g][0], c[g][1]);
      const __m256i t1 = _mm256_unpackhi_epi32(c[g][0], c[g][1]);
      const __m256i t2 = _mm256_unpacklo_epi32(c[g][2], c[g][3]);
      const __m256i t3 = _mm256_unpackhi_epi32(c[g][2], c[g][3]);
      const __m256i u0 = _mm256_unpacklo_epi64(t0, t2);  // blocks 0 | 4
      const __m256i u1 = _mm256_unpackhi_epi64(t0, t2);  // blocks 1 | 5
      const __m256i u2 = _mm256_unpacklo_epi64(t1, t3);  // blocks 2 | 6
      const __m256i u3 = _mm256_unpackhi_epi64(t1, t3);  // blocks 3 | 7
      __m256i* dst = reinterpret_cast<__m256i*>(out + 4 * (b + 8 * g));
      _mm256_storeu_si256(dst + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
      _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
      _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
      _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
    }
  }
  FillBlocksScalar(key, subsequence, first_block + b, block_count - b, out + 4 * b);
}

// ---- AVX-512F: 16 blocks per vector ------------------------------------------
// GCC 12's avx512fintrin.h self-initialises its "undefined" operands, which
// trips -Wmaybe-uninitialized inside the intrinsics; the values are unused.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) inline void MulHiLoAvx512(__m512i a, __m512i m, __m512i* hi,
                                                             __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

template <int kGroups>
__attribute__((target("avx512f"))) void FillBlocksAvx512(uint64_t key, uint64_t subsequence,
                                                         uint64_t first_block, size_t block_count,
                                                         uint32_t* out) {
  constexpr int kStep = 16 * kGroups;
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m512i sub_low = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence)));
  const __m512i sub_high =
      _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(subsequence >> 32)));
  size_t b = 0;
  for (; b + kStep <= block_count; b += kStep) {
    __m512i c[kGroups][4];
    for (int g = 0; g < kGroups; ++g) {
      uint32_t low[16], high[16];
      GroupCounters<16>(first_block + b + 16 * g, low, high);
      c[g][0] = _mm512_loadu_si512(low);
      c[g][1] = _mm512_loadu_si512(high);
      c[g][2] = sub_low;
      c[g][3] = sub_high;
    }
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int round = 0; round < kPhiloxDefaultRounds; ++round) {
      if (round > 0) {
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
      }
      const __m512i vk0 = _mm512_set1_epi32(static_cast<int>(k0));
      const __m512i vk1 = _mm512_set1_epi32(static_cast<int>(k1));
      for (int g = 0; g < kGroups; ++g) {
        __m512i hi0, lo0, hi1, lo1;
        MulHiLoAvx512(c[g][0], m0, &hi0, &lo0);
        MulHiLoAvx512(c[g][2], m1, &hi1, &lo1);
        // 0x96 = a ^ b ^ c as a ternary-logic truth table.
        c[g][0] = _mm512_ternarylogic_epi32(hi1, c[g][1], vk0, 0x96);
        c[g][1] = lo1;
        c[g][2] = _mm512_ternarylogic_epi32(hi0, c[g][3], vk1, 0x96);
        c[g][3] = lo0;
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      // Per 128-bit quarter a 4x4 transpose: u_j holds blocks j, j+4, j+8, j+12.
      const __m512i t0 = _mm512_unpacklo_epi32(c[g][0], c[g][1]);
      const __m512i t1 = _mm512_unpackhi_epi32(c[g][0], c[g][1]);
      const __m512i t2 = _mm512_unpacklo_epi32(c[g][2], c[g][3]);
      const __m512i t3 = _mm512_unpackhi_epi32(c[g][2], c[g][3]);
      const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                            _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
      // Gather quarter q of u0..u3 (blocks 4q..4q+3) into one 512-bit store.
      const __m512i lo01 = _mm512_shuffle_i64x2(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0));  // 0 4 1 5
      const __m512i lo23 = _mm512_shuffle_i64x2(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0));  // 2 6 3 7
      const __m512i hi01 = _mm512_shuffle_i64x2(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2));  // 8 12 9 13
      const __m512i hi23 = _mm512_shuffle_i64x2(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2));  // 10 14 11 15
      uint32_t* dst = out + 4 * (b + 16 * g);
      _mm512_storeu_si512(dst + 0, _mm512_shuffle_i64x2(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)));
      _mm512_storeu_si512(dst + 16, _mm512_shuffle_i64x2(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1)));
      _mm512_storeu_si512(dst + 32, _mm512_shuffle_i64x2(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0)));
      _mm512_storeu_si512(dst + 48, _mm512_shuffle_i64x2(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1)));
    }
  }
  FillBlocksScalar(key, subsequence, first_block + b, block_count - b, out + 4 * b);
}

#pragma GCC diagnostic pop

#endif  // DGRR_RNG_X86

}  // namespace

const char* FillKernelName(FillKernel kernel) {
  switch (kernel) {
    case FillKernel::kScalar: return "scalar";
    case FillKernel::kSse2: return "sse2";
    case FillKernel::kAvx2: return "avx2";
    case FillKernel::kAvx512: return "avx512f";
  }
  return "unknown";
}

bool FillKernelSupported(FillKernel kernel) {
  switch (kernel) {
    case FillKernel::kScalar: return true;
#if DGRR_RNG_X86
    case FillKernel::kSse2: return true;
    case FillKernel::kAvx2: return IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2");
    case FillKernel::kAvx512: return IsaAllowed(IsaLevel::kAvx512) && __builtin_cpu_supports("avx512f");
#else
    default: return false;
#endif
  }
  return false;
}

FillKernel BestFillKernel() {
  static const FillKernel best = [] {
    for (FillKernel k : {FillKernel::kAvx512, FillKernel::kAvx2, FillKernel::kSse2}) {
      if (FillKernelSupported(k)) return k;
    }
    return FillKernel::kScalar;
  }();
  return best;
}

void PhiloxFillBlocksWith(FillKernel kernel, uint64_t key, uint64_t subsequence,
                          uint64_t first_block, size_t block_count, uint32_t* out) {
  switch (kernel) {
#if DGRR_RNG_X86
    case FillKernel::kSse2:
      return FillBlocksSse2<4>(key, subsequence, first_block, block_count, out);
    case FillKernel::kAvx2:
      return FillBlocksAvx2<4>(key, subsequence, first_block, block_count, out);
    case FillKernel::kAvx512:
      return FillBlocksAvx512<2>(key, subsequence, first_block, block_count, out);
#endif
    default:
      return FillBlocksScalar(key, subsequence, first_block, block_count, out);
  }
}

void PhiloxFillBlocks(uint64_t key, uint64_t subsequence, uint64_t first_block,
                      size_t block_count, uint32_t* out) {
  PhiloxFillBlocksWith(BestFillKernel(), key, subsequence, first_block, block_count, out);
}

}  // namespace dgrr::rng
