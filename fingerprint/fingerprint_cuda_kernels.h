// Internal: the boundary between the kernels (compiled by nvcc as C++17) and
// fingerprint_cuda.cc (C++20, Status). Plain types only; not for other code.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dgrr::fingerprint_cuda_internal {

// Layout of the 16 bytes the device writes: equal to dgrr::Fingerprint's.
struct DeviceFingerprint {
  uint64_t xor64;
  uint64_t xxh3;
};

// Loads the module that holds the kernels on the current device. With lazy
// loading (CUDA's default since 12.2) that happens at a kernel's first
// launch otherwise, and loading a module may synchronize the context (CUDA's
// lazy-loading notes): a first fingerprint enqueued behind busy work could
// block the host until that work ends. Returns and reports as
// EnqueueFingerprint.
int LoadKernels(const char** failed_step);

// Where a fingerprint's work goes. `reads`: every kernel that reads the
// input (the XOR, the block deltas, the tail). `chain`: XXH3's serial chain
// over the block deltas, the result's copy and the scratch's release, after
// an event on `reads`; null or equal to `reads` for one stream. `pool`: a
// cudaMemPool_t for the scratch memory, null for the device's default pool.
struct Streams {
  CUstream_st* reads = nullptr;
  CUstream_st* chain = nullptr;
  void* pool = nullptr;
};

// Enqueues the kernels and the copy of the result to *out (valid once
// `chain`, or `reads` when there is no chain stream, passes that point).
// `secret` is XXH3's 192-byte default secret (host memory; passed by value to
// the kernels). Returns a cudaError_t value (0 = cudaSuccess); on failure
// *failed_step names the CUDA call that failed.
int EnqueueFingerprint(const void* dev_ptr, size_t n, const Streams& streams, const uint8_t* secret,
                       DeviceFingerprint* out, const char** failed_step);

// The fingerprint of the concatenation of `count` non-empty device segments,
// described by `host_table`: count + 1 logical start offsets (the last is the
// total length), then count device addresses, all uint64_t (xxh3::SegmentTable,
// segmented_core.h). The table is copied to the device on `reads`; from
// pinned memory that copy never waits, and the caller keeps the table
// unchanged until the stream has passed it. Returns and reports as
// EnqueueFingerprint.
int EnqueueSegmentedFingerprint(const uint64_t* host_table, uint32_t count, const Streams& streams,
                                const uint8_t* secret, DeviceFingerprint* out, const char** failed_step);

}  // namespace dgrr::fingerprint_cuda_internal
