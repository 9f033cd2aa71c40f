// Internal: the single-pass fingerprint of the long-input (> 240 bytes) path.
//
// XOR-then-hash per cache-sized chunk (libxxhash streaming) reads memory once
// but runs the two computations back to back: ~0.6x of a plain read pass on
// the machine we measured. Here each 64-byte stripe is loaded once and feeds
// both the XOR and XXH3's accumulate step, so the pass runs at memory speed.
// The arithmetic is XXH3-64's own (xxh3_core.h describes it); the tests
// compare every variant with libxxhash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fingerprint/fingerprint.h"

namespace dgrr::fingerprint_internal {

// The state before any stripe: XXH3's initial lanes, xor64 = 0.
StripeState InitialStripeState();

// Consumes `count` whole 64-byte stripes at p (any alignment): XXH3's
// accumulate step keyed by the stripe's place in its block, the scramble after
// every 16th stripe, and the XOR of all their words. The caller must keep the
// stripe holding the input's last byte for FinishLong.
using StripeConsumer = void (*)(StripeState* state, const uint8_t* p, size_t count,
                                const uint8_t* secret);
void ConsumeStripesScalar(StripeState* state, const uint8_t* p, size_t count,
                          const uint8_t* secret);
#if defined(__x86_64__) && defined(__GNUC__)
void ConsumeStripesSse2(StripeState* state, const uint8_t* p, size_t count,
                        const uint8_t* secret);  // x86-64 baseline
void ConsumeStripesAvx2(StripeState* state, const uint8_t* p, size_t count,
                        const uint8_t* secret);  // only where the CPU has AVX2
void ConsumeStripesAvx512(StripeState* state, const uint8_t* p, size_t count,
                          const uint8_t* secret);  // only where the CPU has AVX-512F
#endif
// The fastest consumer this CPU supports (chosen once).
StripeConsumer BestStripeConsumer();
// Every consumer this build and CPU can run, slowest first, with its name
// (the tests and the benchmarks iterate over it).
struct NamedStripeConsumer {
  const char* name;
  StripeConsumer consume;
};
std::vector<NamedStripeConsumer> AvailableStripeConsumers();
// "avx512", "avx2", "sse2" or "scalar": which one BestStripeConsumer picked.
const char* BestStripeConsumerName();

// Which software prefetch the streaming consumers (AVX2, AVX-512) issue, for
// measuring them on a CPU (bench/fingerprint/compare_torch.sh with
// DGRR_BENCH_PREFETCH; the tests run every plan): every plan gives the same
// bits. kAuto, the default, is kNear on AMD CPUs (what they were tuned with)
// and kFar on the others (fingerprint_simd.cc says what was measured).
//   kNone   no software prefetch
//   kNear   into L1: the AVX2 blocks 2 KiB ahead, each line, the compiler free
//           to place them (it issues them as a burst); the AVX-512 pairs
//           6 KiB ahead, a pair's 32 lines as a loop at its start
//   kNearPaced  the same distances, each line issued with its stripe's work
//   kFar    into L2, 16 KiB ahead, each line with its stripe's work, in calls
//           of 2 MiB or more
enum class PrefetchPlan { kAuto, kNone, kNear, kNearPaced, kFar };
// Process-wide; for benchmarks and tests.
void SetPrefetchPlan(PrefetchPlan plan);
PrefetchPlan CurrentPrefetchPlan();  // kAuto resolved to what runs here
const char* PrefetchPlanName(PrefetchPlan plan);  // "auto", "none", "near", "near-paced", "far"
// The plan of that name; false when none has it.
bool ParsePrefetchPlan(const char* name, PrefetchPlan* plan);

// XXH3's final stripe (the last 64 bytes of the whole input, which may overlap
// consumed ones; not XORed) and the merge. `total_len` > 240.
uint64_t FinishLong(const StripeState& state, const uint8_t* last_stripe, uint64_t total_len,
                    const uint8_t* secret);

// FingerprintBytes for n > 240 with a given consumer (tests and the benchmark
// run each one).
Fingerprint FingerprintLong(const uint8_t* data, size_t n, StripeConsumer consume);

}  // namespace dgrr::fingerprint_internal
