// Internal: the single-pass AVX2 fingerprint of inputs longer than 240 bytes.
//
// The libxxhash route (XOR a cache-sized chunk, then hash it from cache) reads
// memory once but runs the two computations one after the other; on the
// machines we measured it reaches only ~0.6x of a plain read. Here each
// 64-byte stripe is loaded once and feeds both the XOR and XXH3's accumulate
// step, so the pass runs at memory speed. The arithmetic is XXH3-64's own
// (xxh3_core.h describes it); tests compare every result with libxxhash.
// Chosen at run time only, on CPUs with AVX2; nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fingerprint/fingerprint.h"

namespace dgrr::fingerprint_internal {

// True when this build has the AVX2 path and the CPU supports it.
bool HaveAvx2Path();

// Requires HaveAvx2Path() and n > 240 (xxh3::kMidSizeMax). `secret` is XXH3's
// default secret (DefaultXxh3Secret()).
Fingerprint FingerprintLongAvx2(const uint8_t* data, size_t n, const uint8_t* secret);

}  // namespace dgrr::fingerprint_internal
