// A small shared library that lets bench/fingerprint/compare_torch.py call
// dgrr's fingerprint on the very bytes of a torch tensor (ctypes, by pointer),
// so torch.sum and FingerprintBytes are timed on the same memory in the same
// process, interleaved. Plain C entry points; nothing here is part of dgrr's
// API.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fingerprint/fingerprint.h"
#include "fingerprint/fingerprint_simd.h"

#include "bench/fingerprint/read_pass.h"

namespace {

using dgrr::bench::ReadPass;

}  // namespace

extern "C" {

// FingerprintBytes(data, n) into out[0] = xor64, out[1] = xxh3.
__attribute__((visibility("default"))) void dgrr_bench_fingerprint(const void* data, size_t n,
                                                                    uint64_t* out) {
  const dgrr::Fingerprint f = dgrr::FingerprintBytes(data, n);
  out[0] = f.xor64;
  out[1] = f.xxh3;
}

// The single pass with a named stripe consumer ("avx512", "avx2", "sse2",
// "scalar"); returns 0 when this CPU or build has no such consumer.
__attribute__((visibility("default"))) int dgrr_bench_fingerprint_with(const void* data, size_t n,
                                                                       const char* consumer,
                                                                       uint64_t* out) {
  using dgrr::fingerprint_internal::StripeConsumer;
  StripeConsumer consume = nullptr;
  for (const auto& [name, fn] : dgrr::fingerprint_internal::AvailableStripeConsumers()) {
    if (std::strcmp(name, consumer) == 0) consume = fn;
  }
  if (consume == nullptr || n <= 240) return 0;
  const dgrr::Fingerprint f =
      dgrr::fingerprint_internal::FingerprintLong(static_cast<const uint8_t*>(data), n, consume);
  out[0] = f.xor64;
  out[1] = f.xxh3;
  return 1;
}

__attribute__((visibility("default"))) uint64_t dgrr_bench_read_pass(const void* data, size_t n) {
  return ReadPass(static_cast<const uint8_t*>(data), n);
}

// Which form the read pass runs ("avx2" or "portable").
__attribute__((visibility("default"))) const char* dgrr_bench_read_pass_isa() {
  return dgrr::bench::ReadPassIsa();
}

// The consumers' software prefetch (fingerprint_internal::PrefetchPlan) by
// name ("auto", "none", "near", "near-paced", "far"); 0 for an unknown name.
__attribute__((visibility("default"))) int dgrr_bench_set_prefetch(const char* name) {
  dgrr::fingerprint_internal::PrefetchPlan plan;
  if (!dgrr::fingerprint_internal::ParsePrefetchPlan(name, &plan)) return 0;
  dgrr::fingerprint_internal::SetPrefetchPlan(plan);
  return 1;
}

// The prefetch the consumers run now ("auto" resolved).
__attribute__((visibility("default"))) const char* dgrr_bench_prefetch() {
  return dgrr::fingerprint_internal::PrefetchPlanName(dgrr::fingerprint_internal::CurrentPrefetchPlan());
}

// Which consumer FingerprintBytes uses on this CPU.
__attribute__((visibility("default"))) const char* dgrr_bench_best_consumer() {
  return dgrr::fingerprint_internal::BestStripeConsumerName();
}

}  // extern "C"
