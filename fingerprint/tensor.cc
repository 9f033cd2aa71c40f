#include "fingerprint/tensor.h"

#include <algorithm>
#include <limits>

namespace dgrr {
namespace {

// Product of the dims, or nullopt when it does not fit in 64 bits.
std::optional<uint64_t> ElementCount(std::span<const int64_t> dims) {
  uint64_t count = 1;
  for (int64_t dim : dims) {
    const auto d = static_cast<uint64_t>(dim);
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / d) return std::nullopt;
    count *= d;
  }
  return count;
}

std::string ShapeString(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace

Status TensorRef::Validate() const {
  if (ndim < 0 || ndim > kMaxTensorDims) {
    return Status::InvalidArgument("tensor ndim " + std::to_string(ndim) + " outside [0, " +
                                   std::to_string(kMaxTensorDims) + "]");
  }
  if (data == nullptr && bytes != 0) {
    return Status::InvalidArgument("tensor data is null but bytes is " + std::to_string(bytes));
  }
  for (int i = 0; i < ndim; ++i) {
    if (dims[i] < 0) {
      return Status::InvalidArgument("tensor dim " + std::to_string(i) + " is negative (" +
                                     std::to_string(dims[i]) + ")");
    }
  }
  const std::optional<uint64_t> count = ElementCount(shape());
  if (!count) {
    return Status::InvalidArgument("tensor shape " + ShapeString(shape()) +
                                   " has more than 2^64 elements");
  }
  const uint64_t element_size = DTypeSize(dtype);
  if (element_size == 0) return Status::OK();  // raw bytes: shape says nothing about size
  if (*count > std::numeric_limits<uint64_t>::max() / element_size) {
    return Status::InvalidArgument("tensor " + ShapeString(shape()) + " of " +
                                   std::string(DTypeName(dtype)) + " overflows 64-bit byte count");
  }
  if (bytes != *count * element_size) {
    return Status::InvalidArgument("tensor bytes " + std::to_string(bytes) +
                                   " != " + std::to_string(*count) + " elements * " +
                                   std::to_string(element_size) + " bytes (" +
                                   std::string(DTypeName(dtype)) + ShapeString(shape()) + ")");
  }
  return Status::OK();
}

std::string TensorRef::DebugString() const {
  std::string s = std::string(DTypeName(dtype)) + ShapeString(shape()) + " " + std::to_string(bytes) + " bytes";
  if (!where.host()) s += ", " + where.ToString();
  return s;
}

StatusOr<TensorRef> MakeTensorRef(const void* data, DType dtype, std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxTensorDims)) {
    return Status::InvalidArgument("tensor ndim " + std::to_string(dims.size()) + " outside [0, " +
                                   std::to_string(kMaxTensorDims) + "]");
  }
  if (DTypeSize(dtype) == 0) {
    return Status::InvalidArgument("MakeTensorRef needs a dtype with a size, got " +
                                   std::string(DTypeName(dtype)) + "; use MakeBytesRef");
  }
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), t.dims);
  // bytes comes from the shape; a negative or overflowing shape leaves it 0
  // and Validate names the problem.
  const std::optional<uint64_t> count = ElementCount(t.shape());
  const bool negative = std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
  if (!negative && count && *count <= std::numeric_limits<uint64_t>::max() / DTypeSize(dtype)) {
    t.bytes = *count * DTypeSize(dtype);
  }
  DGRR_RETURN_IF_ERROR(t.Validate());
  return t;
}

TensorRef MakeBytesRef(const void* data, uint64_t n) {
  TensorRef t;
  t.data = data;
  t.bytes = n;
  t.dtype = DType::kUnknown;
  t.ndim = 1;
  t.dims[0] = static_cast<int64_t>(std::min<uint64_t>(n, std::numeric_limits<int64_t>::max()));
  return t;
}

StatusOr<Fingerprint> FingerprintTensor(const TensorRef& t) {
  // The description is built only on failure: this runs on every boundary.
  if (Status status = t.Validate(); !status.ok()) return status.WithPrefix(t.DebugString());
  if (!t.where.host()) {
    return Status::FailedPrecondition(t.DebugString() +
                                      ": a device tensor is fingerprinted on its stream, not read by the host");
  }
  return FingerprintBytes(t.data, t.bytes);
}

}  // namespace dgrr
