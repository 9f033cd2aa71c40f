// TensorRef: a non-owning view of a tensor crossing an operator boundary, the
// unit that gets fingerprinted and traced. Only `bytes` bytes at `data` are
// read; dtype and shape are metadata the trace records beside the fingerprint.
// `where` says whose memory `data` is: host memory is read by the CPU; device
// memory is read only on the device, by a kernel on `where.stream`
// (runtime/device_recorder.h), never dereferenced on the host.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "base/dtype.h"
#include "base/placement.h"
#include "base/status.h"
#include "fingerprint/fingerprint.h"

namespace dgrr {

inline constexpr int kMaxTensorDims = 8;

struct TensorRef {
  const void* data = nullptr;  // not owned; must outlive every use of the ref
  uint64_t bytes = 0;          // size of the contiguous buffer at data
  DType dtype = DType::kUnknown;
  int ndim = 0;  // 0 is a scalar (one element)
  int64_t dims[kMaxTensorDims] = {};
  Placement where;  // host unless said otherwise

  std::span<const int64_t> shape() const {
    return {dims,
            static_cast<size_t>(ndim < 0 ? 0 : (ndim > kMaxTensorDims ? kMaxTensorDims : ndim))};
  }
  // InvalidArgument naming the problem when: data is null with bytes > 0,
  // ndim is outside [0, kMaxTensorDims], a dim is negative, the element count
  // times the dtype size overflows 64 bits, or (dtype known) bytes differs from
  // element count * DTypeSize(dtype).
  Status Validate() const;
  // "f32[2,3] 24 bytes" (", cuda:0" appended for device memory).
  std::string DebugString() const;
};

// A view of a contiguous tensor of the given dtype and shape; bytes is derived
// from them. The result has passed Validate().
StatusOr<TensorRef> MakeTensorRef(const void* data, DType dtype, std::span<const int64_t> dims);
inline StatusOr<TensorRef> MakeTensorRef(const void* data, DType dtype,
                                         std::initializer_list<int64_t> dims) {
  return MakeTensorRef(data, dtype, std::span<const int64_t>(dims.begin(), dims.size()));
}
// Raw bytes of no declared type: dtype kUnknown, shape [n].
TensorRef MakeBytesRef(const void* data, uint64_t n);

// Validates t, then FingerprintBytes(t.data, t.bytes). A tensor in device
// memory is refused (FailedPrecondition): its bytes are fingerprinted on its
// stream (FingerprintDeviceAsync), never read by the host.
StatusOr<Fingerprint> FingerprintTensor(const TensorRef& t);

}  // namespace dgrr
