// Bulk Philox4x32-10 block generation on the host.
//
// Several blocks are computed side by side in SIMD lanes (one block per
// 32-bit lane, the 32x32->64 multiplies done by pmuludq on even/odd lanes) and
// transposed back into draw order. Every kernel performs exactly the integer
// operations of Philox4x32() in rng/philox.h, so all produce identical words;
// runtime dispatch (AVX-512F > AVX2 > SSE2) only changes the speed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rng/philox.h"

namespace dgrr::rng {

enum class FillKernel {
  kScalar,  // one block at a time, rng/philox.h
  kSse2,    // 4 vectors of 4 blocks in flight (x86-64 baseline)
  kAvx2,    // 4 vectors of 8 blocks in flight
  kAvx512,  // 2 vectors of 16 blocks in flight
};

const char* FillKernelName(FillKernel kernel);
// Whether this build and this CPU can run `kernel`.
bool FillKernelSupported(FillKernel kernel);
// The kernel PhiloxFillBlocks uses on this CPU (chosen once).
FillKernel BestFillKernel();

// out[4*b + lane] = word `lane` of the block with counter
// CounterFor(first_block + b, subsequence) and key KeyFromSeed(key), for
// b < block_count. first_block + block_count must not exceed 2^62.
void PhiloxFillBlocks(uint64_t key, uint64_t subsequence, uint64_t first_block,
                      size_t block_count, uint32_t* out);

// Same with an explicit kernel (tests and benchmarks); `kernel` must be supported.
void PhiloxFillBlocksWith(FillKernel kernel, uint64_t key, uint64_t subsequence,
                          uint64_t first_block, size_t block_count, uint32_t* out);

}  // namespace dgrr::rng
