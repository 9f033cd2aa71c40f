#include "fingerprint/fingerprint_simd.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/cpu_isa.h"
#include "fingerprint/xxh3_core.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace dgrr::fingerprint_internal {
namespace {

constexpr size_t kScrambleKeyOffset = xxh3::kSecretSize - xxh3::kStripeLen;  // 128
constexpr size_t kLastStripeKeyOffset = xxh3::kSecretSize - xxh3::kStripeLen - 7;

// The software prefetch of the streaming consumers (AVX2 and AVX-512) is
// tuned per vendor; either way the bits are the same.
//   - AMD (tuned on Zen 3 with AVX2, Zen 5 with AVX-512): into L1 (T0), near
//     (the AVX2 consumer 2 KiB ahead, each line; the AVX-512 pairs 6 KiB,
//     a pair's 32 lines at its start).
//   - Others (Intel; tuned on a 2-vCPU Xeon, family 6 model 167, 2026-11-30):
//     into L2 (T1), kFarPrefetchAhead ahead, one line per stripe of each
//     block in flight, issued with that stripe's work, in calls of
//     kFarPrefetchMinBytes or more. Streaming 256 MiB
//     from memory (bench/fingerprint/compare_torch.sh, CPU time, against
//     one-thread torch.sum on the same tensor, medians of paired ratios of
//     11 rounds, runs alternated): AVX-512 pairs 1.13-1.16x at 16 KiB
//     (8 KiB 1.12-1.14, 4 KiB 1.09-1.14) against 0.95-0.97x without
//     prefetch; the pairs' 32 T1 prefetches as a loop at their start
//     1.02-1.07x (8-32 KiB), T0 at 4 KiB 0.88-0.89x; the AVX2 consumer
//     1.12-1.15x at 16 KiB (4-32 KiB the same within the noise) against
//     0.91-0.94x with its T0 at 2 KiB. A T0 prefetch holds one of the
//     core's few L1 miss buffers until its line arrives; T1 leaves the
//     line in L2, where the next L1 miss finds it.
// PacedPrefetchToL2(line, v), in each consumer's section below: a prefetch
// into L2 of `line` that stays where the source puts it, tied to `v` (which
// the caller updates once a stripe), so the compiler can neither hoist the
// unrolled block's prefetches into one burst at its start (it did: 32
// prefetches ahead of the first stripe's work ran at the rate of no prefetch
// at all, 0.98-1.01x torch.sum against 1.16x paced) nor sink them. Defined
// with each section's target, so that the vector register's width is one
// the compiler (GCC or clang) allows there.

bool CpuIsAmd() {
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}
constexpr size_t kFarPrefetchAhead = 16 * 1024;
// Calls shorter than this take no far prefetch: their bytes are likely in
// cache (a boundary tensor its op just wrote), where the prefetches are
// instructions for nothing (1 MiB in L2: 7-8% slower with them, 256 KiB
// 2-4%), and from memory they gained little (pieces of 1 MiB: AVX-512 the
// same, AVX2 +6%). 2 MiB is this Xeon's L2.
constexpr size_t kFarPrefetchMinBytes = size_t{2} << 20;
enum PrefetchMode { kNoPrefetch, kNearToL1, kNearPacedToL1, kFarToL2 };

std::atomic<int> prefetch_plan{static_cast<int>(PrefetchPlan::kAuto)};

// The plan this call runs: kAuto resolved by vendor.
PrefetchPlan PlanNow() {
  const auto plan = static_cast<PrefetchPlan>(prefetch_plan.load(std::memory_order_relaxed));
  if (plan != PrefetchPlan::kAuto) return plan;
  return CpuIsAmd() ? PrefetchPlan::kNear : PrefetchPlan::kFar;
}

}  // namespace

void SetPrefetchPlan(PrefetchPlan plan) { prefetch_plan.store(static_cast<int>(plan), std::memory_order_relaxed); }
PrefetchPlan CurrentPrefetchPlan() { return PlanNow(); }
const char* PrefetchPlanName(PrefetchPlan plan) {
  switch (plan) {
    case PrefetchPlan::kAuto: return "auto";
    case PrefetchPlan::kNone: return "none";
    case PrefetchPlan::kNear: return "near";
    case PrefetchPlan::kNearPaced: return "near-paced";
    case PrefetchPlan::kFar: return "far";
  }
  return "unknown";
}
bool ParsePrefetchPlan(const char* name, PrefetchPlan* plan) {
  for (PrefetchPlan p : {PrefetchPlan::kAuto, PrefetchPlan::kNone, PrefetchPlan::kNear, PrefetchPlan::kNearPaced,
                         PrefetchPlan::kFar}) {
    if (name != nullptr && std::strcmp(name, PrefetchPlanName(p)) == 0) {
      *plan = p;
      return true;
    }
  }
  return false;
}

StripeState InitialStripeState() {
  StripeState state;
  for (size_t lane = 0; lane < xxh3::kLanes; ++lane) state.acc[lane] = xxh3::InitialLane(lane);
  state.xor64 = 0;
  state.stripes_in_block = 0;
  return state;
}

// Each consumer walks the stripes in runs that end at block boundaries (the
// key of a stripe is its index in the block), scrambling when a block fills.
void ConsumeStripesScalar(StripeState* state, const uint8_t* p, size_t count,
                          const uint8_t* secret) {
  while (count > 0) {
    const size_t run = std::min(count, xxh3::kStripesPerBlock - state->stripes_in_block);
    const uint8_t* key = secret + 8 * state->stripes_in_block;
    for (size_t s = 0; s < run; ++s, p += xxh3::kStripeLen, key += 8) {
      for (size_t lane = 0; lane < xxh3::kLanes; ++lane) {
        state->acc[lane] += xxh3::StripeLaneDelta(p, key, lane);
        state->xor64 ^= xxh3::ReadLE64(p + 8 * lane);
      }
    }
    count -= run;
    state->stripes_in_block += run;
    if (state->stripes_in_block == xxh3::kStripesPerBlock) {
      for (size_t lane = 0; lane < xxh3::kLanes; ++lane) {
        state->acc[lane] = xxh3::ScrambleLane(state->acc[lane], secret, lane);
      }
      state->stripes_in_block = 0;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)

// ---- SSE2 (x86-64 baseline): four vectors of two lanes ----------------------

namespace {

#define DGRR_SSE2_INLINE __attribute__((always_inline)) inline

DGRR_SSE2_INLINE __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// XXH3's accumulate on two lanes: acc[i] += data[i ^ 1] +
// lo32(data[i] ^ key[i]) * hi32(data[i] ^ key[i]).
DGRR_SSE2_INLINE void Accumulate2(__m128i& acc, const __m128i& data, const uint8_t* key) {
  const __m128i keyed = _mm_xor_si128(data, Load128(key));
  const __m128i keyed_hi = _mm_shuffle_epi32(keyed, _MM_SHUFFLE(0, 3, 0, 1));
  const __m128i product = _mm_mul_epu32(keyed, keyed_hi);
  const __m128i swapped = _mm_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  acc = _mm_add_epi64(acc, _mm_add_epi64(product, swapped));
}

// XXH3's scramble on two lanes: acc = ((acc ^ acc >> 47) ^ key) * PRIME32_1,
// the 64x32-bit product built from two 32x32-bit products.
DGRR_SSE2_INLINE void Scramble2(__m128i& acc, const uint8_t* key) {
  const __m128i prime = _mm_set1_epi32(static_cast<int>(xxh3::kPrime32_1));
  __m128i a = _mm_xor_si128(acc, _mm_srli_epi64(acc, 47));
  a = _mm_xor_si128(a, Load128(key));
  const __m128i a_hi = _mm_shuffle_epi32(a, _MM_SHUFFLE(0, 3, 0, 1));
  acc = _mm_add_epi64(_mm_mul_epu32(a, prime), _mm_slli_epi64(_mm_mul_epu32(a_hi, prime), 32));
}

}  // namespace

void ConsumeStripesSse2(StripeState* state, const uint8_t* p, size_t count, const uint8_t* secret) {
  __m128i acc[4], xors[4];
  for (int v = 0; v < 4; ++v) {
    acc[v] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state->acc + 2 * v));
    xors[v] = _mm_setzero_si128();
  }
  while (count > 0) {
    const size_t run = std::min(count, xxh3::kStripesPerBlock - state->stripes_in_block);
    const uint8_t* key = secret + 8 * state->stripes_in_block;
    for (size_t s = 0; s < run; ++s, p += xxh3::kStripeLen, key += 8) {
      for (int v = 0; v < 4; ++v) {
        const __m128i data = Load128(p + 16 * v);
        xors[v] = _mm_xor_si128(xors[v], data);
        Accumulate2(acc[v], data, key + 16 * v);
      }
    }
    count -= run;
    state->stripes_in_block += run;
    if (state->stripes_in_block == xxh3::kStripesPerBlock) {
      for (int v = 0; v < 4; ++v) Scramble2(acc[v], secret + kScrambleKeyOffset + 16 * v);
      state->stripes_in_block = 0;
    }
  }
  alignas(16) uint64_t words[2];
  const __m128i x = _mm_xor_si128(_mm_xor_si128(xors[0], xors[1]), _mm_xor_si128(xors[2], xors[3]));
  _mm_store_si128(reinterpret_cast<__m128i*>(words), x);
  state->xor64 ^= words[0] ^ words[1];
  for (int v = 0; v < 4; ++v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state->acc + 2 * v), acc[v]);
  }
}

// ---- AVX2 (runtime dispatch): two vectors of four lanes ---------------------

namespace {

#define DGRR_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

DGRR_AVX2_INLINE void PacedPrefetchToL2(const void* line, __m256i& v) {
  asm volatile("prefetcht1 %1" : "+x"(v) : "m"(*static_cast<const char*>(line)));
}
DGRR_AVX2_INLINE void PacedPrefetchToL1(const void* line, __m256i& v) {
  asm volatile("prefetcht0 %1" : "+x"(v) : "m"(*static_cast<const char*>(line)));
}

DGRR_AVX2_INLINE __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

DGRR_AVX2_INLINE void Scramble4(__m256i& acc, const uint8_t* key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(xxh3::kPrime32_1));
  __m256i a = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  a = _mm256_xor_si256(a, Load256(key));
  const __m256i a_hi = _mm256_shuffle_epi32(a, _MM_SHUFFLE(0, 3, 0, 1));
  acc = _mm256_add_epi64(_mm256_mul_epu32(a, prime),
                         _mm256_slli_epi64(_mm256_mul_epu32(a_hi, prime), 32));
}

// Half a stripe (four lanes), as the AVX-512 consumer's KeyedProduct and
// TwoLines do it: `products` gets the keyed 32x32-bit products, `sums` the
// data itself, `xors` its XOR. XXH3's neighbour-word addition (data[i ^ 1])
// is a permutation of lanes that commutes with the sum, so it is applied once
// per run of stripes to `sums` (FoldSums4), not once per stripe: six vector
// operations per 32 bytes instead of seven. Additions are modulo 2^64, so the
// regrouping is exact.
DGRR_AVX2_INLINE void HalfStripe(__m256i& products, __m256i& sums, __m256i& xors, const __m256i& data,
                                 const uint8_t* key) {
  const __m256i keyed = _mm256_xor_si256(data, Load256(key));
  products = _mm256_add_epi64(products, _mm256_mul_epu32(keyed, _mm256_srli_epi64(keyed, 32)));
  sums = _mm256_add_epi64(sums, data);
  xors = _mm256_xor_si256(xors, data);
}

// acc += swap_neighbours(sums) + products; both restart at zero.
DGRR_AVX2_INLINE void FoldSums4(__m256i& acc, __m256i& products, __m256i& sums) {
  const __m256i swapped = _mm256_shuffle_epi32(sums, _MM_SHUFFLE(1, 0, 3, 2));
  acc = _mm256_add_epi64(acc, _mm256_add_epi64(products, swapped));
  products = _mm256_setzero_si256();
  sums = _mm256_setzero_si256();
}

// Software prefetch this far ahead, one per cache line. Streaming 256 MiB
// from memory on a 2-core AMD EPYC (Zen 3 class, AVX2, no AVX-512; the
// machine shared and loaded, CPU time, 21-31 interleaved rounds): no
// prefetch 0.74-0.79x of an AVX2 float sum of the same bytes, 1.5 KiB 0.84,
// 2 KiB 0.84-0.89, 2.5-6 KiB 0.81-0.92 (within the noise of 2 KiB); T1 or
// NTA hints, a second farther prefetch, or a prefetch every other line no
// better. The six vector operations that wait on each load fill the
// scheduler long before enough cache lines are in flight; the prefetches
// retire at once and keep the memory busy.
// Open question for the next AMD machine (2026-11-30): GCC places these 16
// `_mm_prefetch` calls as one burst at the start of the unrolled block (read
// in objdump of this build), as it did the far ones before they were tied
// to their stripe (PacedPrefetchToL2), and on Zen 5 a burst of the AVX-512
// pair's prefetches ran at 0.80-0.86x of the paced loop. So the figures above
// were of a burst; a paced T0 (PrefetchPlan::kNearPaced) and the paced far T1
// that Intel runs (kFar) are untried on AMD: DGRR_BENCH_PREFETCH=near-paced
// or far with compare_torch.sh measures them. Not changed blind: nothing
// here measures an AMD CPU.
constexpr size_t kAvx2PrefetchAhead = 2 * 1024;

// One whole block: 16 stripes, keys read from the secret (16 registers do
// not hold 32 key vectors), each stripe prefetching one line ahead as
// kMode says (near: kAvx2PrefetchAhead into L1; far: kFarPrefetchAhead
// into L2).
template <PrefetchMode kMode>
DGRR_AVX2_INLINE void Block4(__m256i (&products)[2], __m256i (&sums)[2], __m256i (&xors)[2],
                             const uint8_t* p, const uint8_t* secret) {
#pragma GCC unroll 16
  for (size_t s = 0; s < xxh3::kStripesPerBlock; ++s) {
    const uint8_t* stripe = p + xxh3::kStripeLen * s;
    if constexpr (kMode == kNearToL1) {
      _mm_prefetch(reinterpret_cast<const char*>(stripe + kAvx2PrefetchAhead), _MM_HINT_T0);
    } else if constexpr (kMode == kNearPacedToL1) {
      PacedPrefetchToL1(stripe + kAvx2PrefetchAhead, products[0]);
    } else if constexpr (kMode == kFarToL2) {
      PacedPrefetchToL2(stripe + kFarPrefetchAhead, products[0]);
    }
    HalfStripe(products[0], sums[0], xors[0], Load256(stripe), secret + 8 * s);
    HalfStripe(products[1], sums[1], xors[1], Load256(stripe + 32), secret + 8 * s + 32);
  }
}

// `n` stripes at p keyed from `key` on, folded into acc; returns p past them.
DGRR_AVX2_INLINE const uint8_t* Stripes4(__m256i (&acc)[2], __m256i (&products)[2], __m256i (&sums)[2],
                                         __m256i (&xors)[2], const uint8_t* p, size_t n, const uint8_t* key) {
  for (size_t s = 0; s < n; ++s, p += xxh3::kStripeLen, key += 8) {
    HalfStripe(products[0], sums[0], xors[0], Load256(p), key);
    HalfStripe(products[1], sums[1], xors[1], Load256(p + 32), key + 32);
  }
  FoldSums4(acc[0], products[0], sums[0]);
  FoldSums4(acc[1], products[1], sums[1]);
  return p;
}

DGRR_AVX2_INLINE void ScrambleBoth(__m256i (&acc)[2], const uint8_t* secret) {
  Scramble4(acc[0], secret + kScrambleKeyOffset);
  Scramble4(acc[1], secret + kScrambleKeyOffset + 32);
}

}  // namespace

// Whole blocks in stripe order with the per-run folding above and software
// prefetch (only of bytes this call reads); a partial first block (a resumed
// stream) and the last stripes take a plain per-stripe loop.
__attribute__((target("avx2"))) void ConsumeStripesAvx2(StripeState* state, const uint8_t* p,
                                                        size_t count, const uint8_t* secret) {
  __m256i acc[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(state->acc)),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state->acc + 4))};
  __m256i products[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  __m256i xors[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  // Stripes up to the next block boundary.
  if (state->stripes_in_block != 0) {
    const size_t run = std::min(count, xxh3::kStripesPerBlock - state->stripes_in_block);
    p = Stripes4(acc, products, sums, xors, p, run, secret + 8 * state->stripes_in_block);
    count -= run;
    state->stripes_in_block += run;
    if (state->stripes_in_block == xxh3::kStripesPerBlock) {
      ScrambleBoth(acc, secret);
      state->stripes_in_block = 0;
    }
  }
  const size_t blocks = count / xxh3::kStripesPerBlock;
  const size_t bytes = count * xxh3::kStripeLen;
  // Block b prefetches up to byte (b + 1) * 1024 + the distance.
  const PrefetchPlan plan = PlanNow();
  const bool far = plan == PrefetchPlan::kFar;
  const size_t ahead = far ? kFarPrefetchAhead : kAvx2PrefetchAhead;
  const bool prefetch = plan != PrefetchPlan::kNone && (!far || bytes >= kFarPrefetchMinBytes);
  const size_t prefetching = !prefetch || bytes < ahead ? 0 : (bytes - ahead) / xxh3::kBlockLen;
  for (size_t b = 0; b < blocks; ++b, p += xxh3::kBlockLen) {
    if (b >= prefetching) {
      Block4<kNoPrefetch>(products, sums, xors, p, secret);
    } else if (far) {
      Block4<kFarToL2>(products, sums, xors, p, secret);
    } else if (plan == PrefetchPlan::kNearPaced) {
      Block4<kNearPacedToL1>(products, sums, xors, p, secret);
    } else {
      Block4<kNearToL1>(products, sums, xors, p, secret);
    }
    FoldSums4(acc[0], products[0], sums[0]);
    FoldSums4(acc[1], products[1], sums[1]);
    ScrambleBoth(acc, secret);
  }
  count -= blocks * xxh3::kStripesPerBlock;
  // Fewer than 16 stripes left: they start a block that stays open.
  if (count > 0) {
    Stripes4(acc, products, sums, xors, p, count, secret);
    state->stripes_in_block = count;
  }
  alignas(32) uint64_t words[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(words), _mm256_xor_si256(xors[0], xors[1]));
  state->xor64 ^= words[0] ^ words[1] ^ words[2] ^ words[3];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state->acc), acc[0]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(state->acc + 4), acc[1]);
  // The compiler inserts this when optimizing; instrumented builds (ASan)
  // were seen to return with the upper state dirty, which costs the legacy
  // SSE code that runs next (fingerprint.cc, ClearUpperVectorState).
  _mm256_zeroupper();
}

// ---- AVX-512F (runtime dispatch): one vector holds a whole stripe ----------
// GCC 12's avx512fintrin.h self-initialises its "undefined" operands, which
// trips -Wmaybe-uninitialized inside the intrinsics; the values are unused.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

#define DGRR_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

DGRR_AVX512_INLINE void PacedPrefetchToL2(const void* line, __m512i& v) {
  asm volatile("prefetcht1 %1" : "+v"(v) : "m"(*static_cast<const char*>(line)));
}

DGRR_AVX512_INLINE __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// An empty asm that claims to change `v`: GCC may then neither merge the
// accumulations across stripes (its reassociation of the unrolled block
// re-read each cache line three times and spilled the keys: 20 GB/s from
// memory instead of 30) nor move this stripe's work past the next one's.
#define DGRR_PIN(v) asm("" : "+v"(v))

// products += lo32(keyed) * hi32(keyed), lane by lane, keyed = data ^ key.
DGRR_AVX512_INLINE void KeyedProduct(__m512i& products, const __m512i& data, const __m512i& key) {
  const __m512i keyed = _mm512_xor_si512(data, key);
  products = _mm512_add_epi64(products, _mm512_mul_epu32(keyed, _mm512_srli_epi64(keyed, 32)));
  DGRR_PIN(products);
}

// Two cache lines, each one 64-byte load and five operations: `products`
// gets the keyed 32x32-bit products, `sums` the data itself, `xors` their XOR
// (one three-way XOR for both). XXH3 adds each lane's neighbour word
// (data[i ^ 1]); that swap is a permutation of lanes, so it commutes with the
// sum and is applied once to `sums` when a run of stripes is folded in
// (FoldSums) instead of once per stripe. Additions are modulo 2^64: the
// regrouping is exact. Line 0 goes to products0/sums0 and line 1 to
// products1/sums1: the same pair for two stripes of one block (StripePair),
// one pair per block for the same stripe of two blocks (StripeOfTwoBlocks).
DGRR_AVX512_INLINE void TwoLines(__m512i& products0, __m512i& sums0, __m512i& products1,
                                 __m512i& sums1, __m512i& xors, const uint8_t* line0,
                                 const uint8_t* line1, const __m512i& key0, const __m512i& key1) {
  __m512i data0 = Load512(line0);
  __m512i data1 = Load512(line1);
  DGRR_PIN(data0);
  DGRR_PIN(data1);
  KeyedProduct(products0, data0, key0);
  KeyedProduct(products1, data1, key1);
  sums0 = _mm512_add_epi64(sums0, data0);
  DGRR_PIN(sums0);
  sums1 = _mm512_add_epi64(sums1, data1);
  xors = _mm512_ternarylogic_epi64(xors, data0, data1, 0x96);  // xors ^ data0 ^ data1
  DGRR_PIN(sums1);
  DGRR_PIN(xors);
}

DGRR_AVX512_INLINE void StripePair(__m512i& products, __m512i& sums, __m512i& xors,
                                   const uint8_t* p, const __m512i& key0, const __m512i& key1) {
  TwoLines(products, sums, products, sums, xors, p, p + xxh3::kStripeLen, key0, key1);
}

// One stripe on its own (runs that do not start or end on a block boundary).
DGRR_AVX512_INLINE void Stripe(__m512i& products, __m512i& sums, __m512i& xors, const uint8_t* p,
                               const __m512i& key) {
  const __m512i data = Load512(p);
  KeyedProduct(products, data, key);
  sums = _mm512_add_epi64(sums, data);
  xors = _mm512_xor_si512(xors, data);
}

// acc += swap_neighbours(sums) + products; both restart at zero.
DGRR_AVX512_INLINE void FoldSums(__m512i& acc, __m512i& products, __m512i& sums) {
  const __m512i swapped = _mm512_shuffle_epi32(sums, _MM_PERM_BADC);
  acc = _mm512_add_epi64(acc, _mm512_add_epi64(products, swapped));
  products = _mm512_setzero_si512();
  sums = _mm512_setzero_si512();
}

// The 64x32-bit product built from two 32x32-bit ones, as in Scramble4.
DGRR_AVX512_INLINE void Scramble8(__m512i& acc, const __m512i& key) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(xxh3::kPrime32_1));
  __m512i a = _mm512_ternarylogic_epi64(acc, _mm512_srli_epi64(acc, 47), key, 0x96);
  acc = _mm512_add_epi64(_mm512_mul_epu32(a, prime),
                         _mm512_slli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), prime), 32));
}

// Two consecutive blocks, a and b = a + 1024, interleaved stripe by stripe:
// the same stripe of each, then the next. Each block keeps its own products
// and sums (the stripes of a block share its delta only), so the two chains
// stay independent. Block a is folded and scrambled before block b, as XXH3
// chains them.
DGRR_AVX512_INLINE void StripeOfTwoBlocks(__m512i& products_a, __m512i& sums_a,
                                          __m512i& products_b, __m512i& sums_b, __m512i& xors,
                                          const uint8_t* p, const __m512i& key) {
  TwoLines(products_a, sums_a, products_b, sums_b, xors, p, p + xxh3::kBlockLen, key, key);
}

// Software prefetch this far ahead, one per cache line, issued for a pair of
// blocks at once, while that much input is left. From memory (256 MiB, AMD
// Zen 5) the interleaved pair with 6 KiB measured 8-10% faster than one block
// at a time with 8 KiB; 4 and 7 KiB slightly less, 3 and 16 KiB no better
// than one block at a time. Without it the hardware prefetcher alone runs
// behind this loop (and behind the interleaved order in particular: half the
// speed).
//
// Calls shorter than kPairedMinBytes take the blocks one at a time without
// prefetch: streamed from memory in pieces, the prefetching pairs were slower
// than that up to about 40 KiB a call (8 KiB pieces: 17 against 31 GB/s,
// 32 KiB: 31 against 32) and faster from 48 KiB (64 KiB: 34 against 32).
//
// On Intel the same prefetch costs instead: on a 2-vCPU Intel Xeon (family 6
// model 167, KVM; 2026-11-29) 256 MiB from memory ran at 7.6-7.8 GB/s with it
// and 10.1-10.6 GB/s without (the pairs kept; blocks one at a time without
// prefetch 9.8-10.3, with a 2 KiB prefetch 8.9-9.3; the AVX2 consumer, whose
// 2 KiB prefetch does help there, 9.4-9.8), three interleaved sets. So this
// prefetch runs on AMD CPUs only; the others prefetch far into L2 instead
// (kFarToL2, at the top: 1.13-1.16x torch.sum's rate there).
constexpr size_t kPrefetchAhead = 6 * 1024;
constexpr size_t kPairLen = 2 * xxh3::kBlockLen;
constexpr size_t kPairedMinBytes = 48 * 1024;

DGRR_AVX512_INLINE void PrefetchPair(const uint8_t* pair) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(pair) + kPrefetchAhead;
  // Kept a loop on purpose: one prefetch per iteration paces them. From
  // memory the 32 prefetches unrolled into one burst ran at 28 GB/s instead
  // of 37 (unrolled by 2: 34, by 4: 30); every other line only: 27.
#pragma GCC unroll 1
  for (size_t line = 0; line < kPairLen; line += xxh3::kStripeLen) {
    _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
  }
}

// Folds a block's products and sums into acc, then the block's scramble.
DGRR_AVX512_INLINE void EndBlock(__m512i& acc, __m512i& products, __m512i& sums,
                                 const __m512i& scramble_key) {
  FoldSums(acc, products, sums);
  Scramble8(acc, scramble_key);
}

// Two whole blocks: 16 stripes each, keys in registers, then both scrambles.
// Near (AMD): the pair's lines kPrefetchAhead ahead, as a loop first; far:
// each stripe's two lines kFarPrefetchAhead ahead into L2, with its work.
template <PrefetchMode kMode>
DGRR_AVX512_INLINE void BlockPair(__m512i& acc, __m512i& xors, const uint8_t* p,
                                  const __m512i (&keys)[xxh3::kStripesPerBlock],
                                  const __m512i& scramble_key) {
  if constexpr (kMode == kNearToL1) PrefetchPair(p);
  __m512i products_a = _mm512_setzero_si512(), sums_a = _mm512_setzero_si512();
  __m512i products_b = _mm512_setzero_si512(), sums_b = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (size_t s = 0; s < xxh3::kStripesPerBlock; ++s) {
    if constexpr (kMode == kFarToL2) {
      const uint8_t* line = p + xxh3::kStripeLen * s + kFarPrefetchAhead;
      PacedPrefetchToL2(line, products_a);
      PacedPrefetchToL2(line + xxh3::kBlockLen, products_b);
    }
    StripeOfTwoBlocks(products_a, sums_a, products_b, sums_b, xors, p + xxh3::kStripeLen * s,
                      keys[s]);
  }
  EndBlock(acc, products_a, sums_a, scramble_key);
  EndBlock(acc, products_b, sums_b, scramble_key);
}

// One whole block in stripe order (short calls, and the odd one after the
// pairs).
DGRR_AVX512_INLINE void Block(__m512i& acc, __m512i& products, __m512i& sums, __m512i& xors,
                              const uint8_t* p, const __m512i (&keys)[xxh3::kStripesPerBlock],
                              const __m512i& scramble_key) {
#pragma GCC unroll 8
  for (size_t s = 0; s < xxh3::kStripesPerBlock; s += 2) {
    StripePair(products, sums, xors, p + xxh3::kStripeLen * s, keys[s], keys[s + 1]);
  }
  EndBlock(acc, products, sums, scramble_key);
}

}  // namespace

// Whole blocks run with the 16 stripe keys held in registers (AVX-512 has 32),
// so the only memory operand of a stripe is its data: one 64-byte load per
// cache line; in interleaved pairs (BlockPair) when the call is long enough.
// Partial blocks (a resumed stream's first stripes, the last ones) take the
// per-stripe loop with keys from memory.
__attribute__((target("avx512f"))) void ConsumeStripesAvx512(StripeState* state, const uint8_t* p,
                                                            size_t count, const uint8_t* secret) {
  __m512i acc = Load512(state->acc);
  __m512i products = _mm512_setzero_si512();
  __m512i sums = _mm512_setzero_si512();
  __m512i xors = _mm512_setzero_si512();
  const __m512i scramble_key = Load512(secret + kScrambleKeyOffset);
  // Stripes up to the next block boundary.
  if (state->stripes_in_block != 0) {
    const size_t run = std::min(count, xxh3::kStripesPerBlock - state->stripes_in_block);
    const uint8_t* key = secret + 8 * state->stripes_in_block;
    for (size_t s = 0; s < run; ++s, p += xxh3::kStripeLen, key += 8) {
      Stripe(products, sums, xors, p, Load512(key));
    }
    FoldSums(acc, products, sums);
    count -= run;
    state->stripes_in_block += run;
    if (state->stripes_in_block == xxh3::kStripesPerBlock) {
      Scramble8(acc, scramble_key);
      state->stripes_in_block = 0;
    }
  }
  size_t blocks = count / xxh3::kStripesPerBlock;
  if (blocks > 0) {
    __m512i keys[xxh3::kStripesPerBlock];
    for (size_t s = 0; s < xxh3::kStripesPerBlock; ++s) {
      keys[s] = Load512(secret + 8 * s);
      DGRR_PIN(keys[s]);  // keep them in registers, not re-read from the secret
    }
    size_t done = 0;
    const size_t bytes = count * xxh3::kStripeLen;
    if (bytes >= kPairedMinBytes) {
      // Prefetch only what this call will read.
      const size_t pairs = blocks / 2;
      // The pair's near prefetch is a paced loop already: kNear and
      // kNearPaced are the same here.
      const PrefetchPlan plan = PlanNow();
      const bool far = plan == PrefetchPlan::kFar;
      const size_t ahead = far ? kFarPrefetchAhead : kPrefetchAhead;
      const bool prefetch = plan != PrefetchPlan::kNone && (!far || bytes >= kFarPrefetchMinBytes);
      const size_t prefetch_pairs = !prefetch || bytes < ahead ? 0 : std::min(pairs, (bytes - ahead) / kPairLen);
      if (far) {
        for (; done < 2 * prefetch_pairs; done += 2, p += kPairLen) {
          BlockPair<kFarToL2>(acc, xors, p, keys, scramble_key);
        }
      } else {
        for (; done < 2 * prefetch_pairs; done += 2, p += kPairLen) {
          BlockPair<kNearToL1>(acc, xors, p, keys, scramble_key);
        }
      }
      for (; done < 2 * pairs; done += 2, p += kPairLen) {
        BlockPair<kNoPrefetch>(acc, xors, p, keys, scramble_key);
      }
    }
    for (; done < blocks; ++done, p += xxh3::kBlockLen) {
      Block(acc, products, sums, xors, p, keys, scramble_key);
    }
    count -= blocks * xxh3::kStripesPerBlock;
  }
  // Fewer than 16 stripes left: they start a block that stays open.
  if (count > 0) {
    const uint8_t* key = secret;
    for (size_t s = 0; s < count; ++s, p += xxh3::kStripeLen, key += 8) {
      Stripe(products, sums, xors, p, Load512(key));
    }
    FoldSums(acc, products, sums);
    state->stripes_in_block = count;
  }
  alignas(64) uint64_t words[8];
  _mm512_store_si512(words, xors);
  for (uint64_t word : words) state->xor64 ^= word;
  _mm512_storeu_si512(state->acc, acc);
  _mm256_zeroupper();  // as in ConsumeStripesAvx2: never return with the upper state dirty
}

#undef DGRR_PIN
#pragma GCC diagnostic pop

namespace {
bool CpuHasAvx512f() {
  __builtin_cpu_init();
  return IsaAllowed(IsaLevel::kAvx512) && __builtin_cpu_supports("avx512f") != 0;
}

bool CpuHasAvx2() {
  __builtin_cpu_init();
  return IsaAllowed(IsaLevel::kAvx2) && __builtin_cpu_supports("avx2") != 0;
}
}  // namespace

StripeConsumer BestStripeConsumer() {
  static const StripeConsumer best = CpuHasAvx512f() ? ConsumeStripesAvx512
                                     : CpuHasAvx2()  ? ConsumeStripesAvx2
                                                     : ConsumeStripesSse2;
  return best;
}

const char* BestStripeConsumerName() {
  const StripeConsumer best = BestStripeConsumer();
  return best == ConsumeStripesAvx512 ? "avx512" : best == ConsumeStripesAvx2 ? "avx2" : "sse2";
}

std::vector<NamedStripeConsumer> AvailableStripeConsumers() {
  std::vector<NamedStripeConsumer> all = {{"scalar", ConsumeStripesScalar},
                                          {"sse2", ConsumeStripesSse2}};
  if (CpuHasAvx2()) all.push_back({"avx2", ConsumeStripesAvx2});
  if (CpuHasAvx512f()) all.push_back({"avx512", ConsumeStripesAvx512});
  return all;
}

#else  // not x86-64: the portable consumer

StripeConsumer BestStripeConsumer() { return ConsumeStripesScalar; }
const char* BestStripeConsumerName() { return "scalar"; }
std::vector<NamedStripeConsumer> AvailableStripeConsumers() {
  return {{"scalar", ConsumeStripesScalar}};
}

#endif

uint64_t FinishLong(const StripeState& state, const uint8_t* last_stripe, uint64_t total_len,
                    const uint8_t* secret) {
  uint64_t acc[xxh3::kLanes];
  for (size_t lane = 0; lane < xxh3::kLanes; ++lane) {
    acc[lane] =
        state.acc[lane] + xxh3::StripeLaneDelta(last_stripe, secret + kLastStripeKeyOffset, lane);
  }
  return xxh3::MergeLanes(acc, total_len, secret);
}

Fingerprint FingerprintLong(const uint8_t* data, size_t n, StripeConsumer consume) {
  const uint8_t* secret = DefaultXxh3Secret();
  StripeState state = InitialStripeState();
  // Every whole stripe except one holding the last byte: XXH3 keeps that byte
  // for its final stripe.
  const size_t stripes = (n - 1) / xxh3::kStripeLen;
  consume(&state, data, stripes, secret);
  const size_t rest = stripes * xxh3::kStripeLen;  // a multiple of 64: lanes line up
  Fingerprint result;
  result.xor64 = state.xor64 ^ Xor64(data + rest, n - rest);
  result.xxh3 = FinishLong(state, data + n - xxh3::kStripeLen, n, secret);
  return result;
}

}  // namespace dgrr::fingerprint_internal
