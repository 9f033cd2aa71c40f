// Fingerprints of device memory, computed on the GPU on the operator's own
// stream, bitwise equal to FingerprintBytes on the same bytes. Built only when
// CUDA is (the target then defines DGRR_FINGERPRINT_HAVE_CUDA=1). This header
// includes no CUDA header: a cudaStream_t is a CUstream_st*, declared here.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "fingerprint/fingerprint.h"

struct CUstream_st;  // what cudaStream_t points to

namespace dgrr {

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

// FingerprintDeviceAsync, then waits for `stream`.
StatusOr<Fingerprint> FingerprintDevice(const void* dev_ptr, size_t n, CUstream_st* stream);

}  // namespace dgrr
