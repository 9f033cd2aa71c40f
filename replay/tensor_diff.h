// Element-wise comparison of two sets of named tensors: two tensor dumps
// (checkpoint/tensor_file.h) or two checkpoints (checkpoint/checkpoint_file.h),
// the logic behind `dgrr diff-tensor` (docs/json/diff-tensor.md).
//
// Two elements differ when their bit patterns differ (so +0 and -0 differ,
// and so do two NaNs with different payloads). For each differing pair:
//   * abs: |a - b| evaluated in double (f16, bf16 and f32 convert exactly;
//     integers exactly up to 2^53); inf when exactly one side is infinite or
//     both are infinite with opposite signs;
//   * ulp (float dtypes only): the distance on the ordered-integer mapping of
//     the sign-magnitude bit patterns (magnitude m becomes +m or -m by the sign
//     bit), i.e. the number of representable values stepped over. +0 and -0
//     are both 0 there, so the smallest positive and negative denormals are 2
//     apart and the largest finite value is 1 from infinity.
// A pair in which either side is NaN counts as differing (when the bits
// differ) and as a NaN pair, and takes no part in the abs and ulp maxima:
// no distance to a NaN is meaningful.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"

namespace dgrr::replay {

// The ulp distance of two elements of float dtype `dtype` (f16, bf16, f32,
// f64) given as zero-extended bit patterns; nullopt when either is NaN.
std::optional<uint64_t> UlpDistance(DType dtype, uint64_t a_bits, uint64_t b_bits);
// The element's value as a double (integers may round beyond 2^53).
double ElementValue(DType dtype, uint64_t bits);
bool IsFloatDType(DType dtype);
bool IsSignedIntegerDType(DType dtype);
// The integer an element of `element_size` bytes holds, sign-extended.
int64_t SignExtend(uint64_t bits, size_t element_size);
// The multi-dimensional row-major index of flat element `flat` of `shape`.
std::vector<int64_t> UnravelIndex(uint64_t flat, const std::vector<int64_t>& shape);

struct DifferingElement {
  uint64_t flat_index = 0;
  std::vector<int64_t> index;  // row-major, one entry per dimension (empty for a scalar)
  uint64_t a_bits = 0, b_bits = 0;  // the elements' bit patterns, zero-extended
};

struct DiffStats {
  uint64_t elements = 0;
  uint64_t differing = 0;   // bitwise
  uint64_t nan_pairs = 0;   // differing pairs with a NaN on either side
  double max_abs = 0;       // over differing pairs without NaN
  bool has_ulp = false;     // float dtypes
  uint64_t max_ulp = 0;     // over differing pairs without NaN
  void Merge(const DiffStats& other);
};

struct TensorPairDiff {
  std::string name;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  DiffStats stats;
  std::vector<DifferingElement> first;  // the first `first_n` differing elements, in index order
};

struct Mismatch {
  std::string name;
  std::string reason;  // "dtype f32 vs bf16", "shape [4, 8] vs [8, 4]"
};

struct TensorDumpDiff {
  std::vector<TensorPairDiff> pairs;  // compared, in name order
  std::vector<std::string> only_in_a, only_in_b;
  std::vector<Mismatch> mismatched;   // same name, different dtype or shape: not compared
  DiffStats total;                    // over `pairs`
  bool identical() const {
    return total.differing == 0 && only_in_a.empty() && only_in_b.empty() && mismatched.empty();
  }
};

// Compares two tensors of one dtype and shape, element by element. `a` and
// `b` each hold exactly elements * element-size bytes.
TensorPairDiff DiffTensors(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                           const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t first_n);

// One tensor of a set being compared; `data` is not owned.
struct TensorView {
  std::string name;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  const std::vector<uint8_t>* data = nullptr;
};

// Pairs the tensors of two sets by name and compares each pair.
TensorDumpDiff DiffTensorSets(const std::vector<TensorView>& a, const std::vector<TensorView>& b,
                              size_t first_n);

// Every saved entry of a checkpoint (or of one shard of it), named by its
// dataset's HDF5 path without the leading '/': "replicated/<name>",
// "ranks/<r>/<name>". An entry saved without a shape is a vector.
std::vector<TensorView> CheckpointTensors(const checkpoint::Checkpoint& checkpoint);
std::vector<TensorView> CheckpointTensors(const checkpoint::SavedShard& shard);

// Pairs the datasets of two dumps by name and compares each pair.
TensorDumpDiff DiffTensorDumps(const checkpoint::TensorDump& a, const checkpoint::TensorDump& b,
                               size_t first_n);

// "[4, 8]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace dgrr::replay
