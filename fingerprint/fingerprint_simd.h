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

// XXH3's final stripe (the last 64 bytes of the whole input, which may overlap
// consumed ones; not XORed) and the merge. `total_len` > 240.
uint64_t FinishLong(const StripeState& state, const uint8_t* last_stripe, uint64_t total_len,
                    const uint8_t* secret);

// FingerprintBytes for n > 240 with a given consumer (tests and the benchmark
// run each one).
Fingerprint FingerprintLong(const uint8_t* data, size_t n, StripeConsumer consume);

}  // namespace dgrr::fingerprint_internal
