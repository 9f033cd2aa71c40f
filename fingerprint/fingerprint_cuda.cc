#include "fingerprint/fingerprint_cuda.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "fingerprint/fingerprint_cuda_kernels.h"

namespace dgrr {
namespace {

using fingerprint_cuda_internal::DeviceFingerprint;
static_assert(sizeof(Fingerprint) == sizeof(DeviceFingerprint) &&
                  offsetof(Fingerprint, xor64) == offsetof(DeviceFingerprint, xor64) &&
                  offsetof(Fingerprint, xxh3) == offsetof(DeviceFingerprint, xxh3),
              "the device writes a Fingerprint's bytes directly");

// Also clears the runtime's last error, so that a failure here (not a
// sticky one) is not reported again by the caller's next CUDA call.
Status CudaFailure(const char* step, int err) {
  cudaGetLastError();
  return Status::Internal(std::string("fingerprint on device: ") + step + ": " +
                          cudaGetErrorString(static_cast<cudaError_t>(err)));
}

fingerprint_cuda_internal::Streams KernelStreams(const FingerprintStreams& streams) {
  fingerprint_cuda_internal::Streams k;
  k.reads = streams.reads;
  k.chain = streams.chain;
  k.pool = streams.pool;
  return k;
}

}  // namespace

Status LoadDeviceFingerprintKernels() {
  const char* failed_step = "";
  const int err = fingerprint_cuda_internal::LoadKernels(&failed_step);
  if (err != 0) return CudaFailure(failed_step, err);
  return Status::OK();
}

Status FingerprintDeviceAsync(const void* dev_ptr, size_t n, CUstream_st* stream, Fingerprint* out) {
  FingerprintStreams streams;
  streams.reads = stream;
  return FingerprintDeviceAsync(dev_ptr, n, streams, out);
}

Status FingerprintDeviceAsync(const void* dev_ptr, size_t n, const FingerprintStreams& streams,
                              Fingerprint* out) {
  if (out == nullptr) return Status::InvalidArgument("FingerprintDeviceAsync: null output");
  if (dev_ptr == nullptr && n != 0) {
    return Status::InvalidArgument("FingerprintDeviceAsync: null device pointer with " +
                                   std::to_string(n) + " bytes");
  }
  const char* failed_step = "";
  // The device copies 16 bytes with the same layout into *out.
  const int err = fingerprint_cuda_internal::EnqueueFingerprint(
      dev_ptr, n, KernelStreams(streams), fingerprint_internal::DefaultXxh3Secret(),
      reinterpret_cast<DeviceFingerprint*>(out), &failed_step);
  if (err != 0) return CudaFailure(failed_step, err);
  return Status::OK();
}

StatusOr<Fingerprint> FingerprintDevice(const void* dev_ptr, size_t n, CUstream_st* stream) {
  Fingerprint result;
  DGRR_RETURN_IF_ERROR(FingerprintDeviceAsync(dev_ptr, n, stream, &result));
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return CudaFailure("cudaStreamSynchronize", err);
  return result;
}

Status FingerprintSegmentsDeviceAsync(std::span<const MemorySegment> segments, CUstream_st* stream,
                                      std::span<uint64_t> table, Fingerprint* out) {
  FingerprintStreams streams;
  streams.reads = stream;
  return FingerprintSegmentsDeviceAsync(segments, streams, table, out);
}

Status FingerprintSegmentsDeviceAsync(std::span<const MemorySegment> segments, const FingerprintStreams& streams,
                                      std::span<uint64_t> table, Fingerprint* out) {
  if (out == nullptr) return Status::InvalidArgument("FingerprintSegmentsDeviceAsync: null output");
  size_t count = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].data == nullptr && segments[i].bytes != 0) {
      return Status::InvalidArgument("FingerprintSegmentsDeviceAsync: segment " + std::to_string(i) +
                                     " has a null device pointer with " + std::to_string(segments[i].bytes) +
                                     " bytes");
    }
    if (segments[i].bytes != 0) ++count;
  }
  if (count > UINT32_MAX || table.size() < SegmentTableWords(count)) {
    return Status::InvalidArgument("FingerprintSegmentsDeviceAsync: a table of " + std::to_string(table.size()) +
                                   " words for " + std::to_string(count) + " segments");
  }
  // The table is written in place: the caller's (pinned) memory is what the
  // device copies from.
  uint64_t start = 0;
  size_t k = 0;
  table[0] = 0;
  for (const MemorySegment& seg : segments) {
    if (seg.bytes == 0) continue;
    start += seg.bytes;
    table[k + 1] = start;
    table[count + 1 + k] = reinterpret_cast<uintptr_t>(seg.data);
    ++k;
  }
  const char* failed_step = "";
  const int err = fingerprint_cuda_internal::EnqueueSegmentedFingerprint(
      table.data(), static_cast<uint32_t>(count), KernelStreams(streams), fingerprint_internal::DefaultXxh3Secret(),
      reinterpret_cast<DeviceFingerprint*>(out), &failed_step);
  if (err != 0) return CudaFailure(failed_step, err);
  return Status::OK();
}

StatusOr<Fingerprint> FingerprintSegmentsDevice(std::span<const MemorySegment> segments, CUstream_st* stream) {
  std::vector<uint64_t> table(SegmentTableWords(segments.size()));
  Fingerprint result;
  DGRR_RETURN_IF_ERROR(FingerprintSegmentsDeviceAsync(segments, stream, table, &result));
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return CudaFailure("cudaStreamSynchronize", err);
  return result;
}

}  // namespace dgrr
