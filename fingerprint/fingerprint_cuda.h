// Fingerprints of device memory, computed on the GPU on the operator's own
// stream, bitwise equal to FingerprintBytes on the same bytes. Built only when
// CUDA is (the target then defines DGRR_FINGERPRINT_HAVE_CUDA=1). This header
// includes no CUDA header: a cudaStream_t is a CUstream_st*, declared here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "fingerprint/fingerprint.h"

struct CUstream_st;  // what cudaStream_t points to

namespace dgrr {

// Loads the fingerprint kernels on the current device now. Otherwise the
// first launch loads them (CUDA's lazy loading), and loading may synchronize
// the context: a first fingerprint enqueued behind busy work would hold the
// host until that work ends. The asynchronous fingerprinter calls this once
// per device before its first fingerprint there. Errors: Internal.
Status LoadDeviceFingerprintKernels();

// Enqueues the fingerprint of n bytes at dev_ptr (device memory of the current
// device, any alignment) on `stream` (nullptr: the legacy default stream) and a
// copy of the result into *out. Returns once enqueued: *out is valid after the
// stream reaches that point (cudaStreamSynchronize, or an event). With pinned
// *out the whole call is asynchronous; with pageable *out CUDA makes the final
// copy wait for the stream. Scratch memory comes from the stream-ordered
// allocator (cudaMallocAsync) and is freed in stream order.
// Errors: InvalidArgument (null dev_ptr with n > 0, null out), Internal (a CUDA
// call failed; the message carries CUDA's error string).
Status FingerprintDeviceAsync(const void* dev_ptr, size_t n, CUstream_st* stream, Fingerprint* out);

// Where a fingerprint's work runs, for the overloads below that split it.
// On a GPU most of a long fingerprint's time is XXH3's serial chain (one
// 64-bit step a KiB per lane, docs/fingerprint.md): it reads only scratch
// memory, so it can run on a stream of its own while the input's stream
// goes on, which may then overwrite the input at once.
struct FingerprintStreams {
  CUstream_st* reads = nullptr;  // the input's stream: every pass that reads the input
  CUstream_st* chain = nullptr;  // the chain, the result's copy, the scratch's release; nullptr: `reads`
  void* pool = nullptr;          // a cudaMemPool_t for the scratch; nullptr: the device's default pool
};

// FingerprintDeviceAsync with the work split over `streams`: *out is valid
// once `streams.chain` (or `reads` without one) passes this point. A pool of
// one's own avoids the default pool's reuse across streams, which may make
// `reads` wait for an earlier chain.
Status FingerprintDeviceAsync(const void* dev_ptr, size_t n, const FingerprintStreams& streams, Fingerprint* out);

// FingerprintDeviceAsync, then waits for `stream`.
StatusOr<Fingerprint> FingerprintDevice(const void* dev_ptr, size_t n, CUstream_st* stream);

// Words of the segment table FingerprintSegmentsDeviceAsync sends to the
// device for `count` segments: count + 1 start offsets, then count addresses
// (empty segments are dropped, so this is enough for any of them).
inline size_t SegmentTableWords(size_t count) { return 2 * count + 1; }

// Enqueues ONE fingerprint over the concatenation of `segments` (device
// memory of the current device; any lengths, empty ones included, and any
// alignments) on `stream`, and a copy of the result into *out: bitwise
// FingerprintBytes of the concatenated bytes, without concatenating them
// (the kernels read through a segment table). The table is written into and
// travels from `table`, SegmentTableWords(segments.size()) words of host memory the
// caller leaves unchanged until the stream has passed this point; pinned,
// that copy never makes the host wait. Errors as FingerprintDeviceAsync
// (InvalidArgument for a null segment with bytes).
Status FingerprintSegmentsDeviceAsync(std::span<const MemorySegment> segments, CUstream_st* stream,
                                      std::span<uint64_t> table, Fingerprint* out);

// FingerprintSegmentsDeviceAsync with the work split over `streams`, as
// FingerprintDeviceAsync's overload; the table is read on `streams.reads`.
Status FingerprintSegmentsDeviceAsync(std::span<const MemorySegment> segments, const FingerprintStreams& streams,
                                      std::span<uint64_t> table, Fingerprint* out);

// FingerprintSegmentsDeviceAsync from a table of its own, then waits for
// `stream`.
StatusOr<Fingerprint> FingerprintSegmentsDevice(std::span<const MemorySegment> segments, CUstream_st* stream);

}  // namespace dgrr
