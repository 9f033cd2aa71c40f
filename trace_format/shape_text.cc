#include "trace_format/shape_text.h"

#include "base/coding.h"

namespace dgrr::trace {
namespace {

template <typename T>
std::string Join(std::span<const T> dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s.push_back(',');
    s += std::to_string(dims[i]);
  }
  return s;
}

}  // namespace

std::string ShapeText(std::span<const int64_t> shape) { return "[" + Join(shape) + "]"; }

std::string ShapeText(std::span<const uint64_t> shape) { return "[" + Join(shape) + "]"; }

std::vector<uint64_t> StoredDims(const BoundaryRecord& r) {
  const size_t shown = r.ndim <= kInlineDims ? r.ndim : kInlineDims - 1;
  return std::vector<uint64_t>(r.dims.begin(), r.dims.begin() + shown);
}

std::string ShapeText(const BoundaryRecord& r, LongShape long_shape) {
  const std::vector<uint64_t> dims = StoredDims(r);
  std::string s = "[" + Join(std::span<const uint64_t>(dims));
  if (r.ndim > kInlineDims) {
    s += ",...";
    if (long_shape == LongShape::kDigest) {
      s += "(ndim " + std::to_string(r.ndim) + ", digest " + Hex64(r.dims[kInlineDims - 1]) + ")";
    }
  }
  return s + "]";
}

}  // namespace dgrr::trace
