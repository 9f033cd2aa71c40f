// How dgrr's text outputs (inspect, plan, compare, report) write a shape:
// "[8,16,64]", "[]" for a scalar. Written once here so that every command
// shows a tensor's shape the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trace_format/record.h"

namespace dgrr::trace {

// "[d0,d1,...]".
std::string ShapeText(std::span<const int64_t> shape);
std::string ShapeText(std::span<const uint64_t> shape);

// The dims a boundary record stores in full: all of them, or, for a tensor
// of more than kInlineDims dims, the first kInlineDims - 1 (the last slot
// holds the digest of all of them).
std::vector<uint64_t> StoredDims(const BoundaryRecord& r);

// How ShapeText shows a tensor whose dims do not all fit in its record.
enum class LongShape {
  kEllipsis,  // "[1,2,3,4,5,...]"
  kDigest,    // "[1,2,3,4,5,...(ndim 7, digest 0x...)]", which tells shapes apart
};

// A boundary record's shape: ShapeText(StoredDims(r)), with the dims that
// did not fit shown as `long_shape` says.
std::string ShapeText(const BoundaryRecord& r, LongShape long_shape = LongShape::kEllipsis);

}  // namespace dgrr::trace
