#include "replay/tensor_diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "base/coding.h"

namespace dgrr::replay {
namespace {

// Layout of a float format's bit pattern.
struct FloatFormat {
  int width;          // bits
  int mantissa_bits;
  uint64_t exponent_mask() const {
    return ((uint64_t{1} << (width - 1 - mantissa_bits)) - 1) << mantissa_bits;
  }
  uint64_t mantissa_mask() const { return (uint64_t{1} << mantissa_bits) - 1; }
  uint64_t sign_bit() const { return uint64_t{1} << (width - 1); }
  bool IsNaN(uint64_t bits) const {
    return (bits & exponent_mask()) == exponent_mask() && (bits & mantissa_mask()) != 0;
  }
};

std::optional<FloatFormat> FormatOf(DType dtype) {
  switch (dtype) {
    case DType::kF16: return FloatFormat{16, 10};
    case DType::kBF16: return FloatFormat{16, 7};
    case DType::kF32: return FloatFormat{32, 23};
    case DType::kF64: return FloatFormat{64, 52};
    default: return std::nullopt;
  }
}

// Zero-extended little-endian load of element i.
uint64_t LoadBits(const uint8_t* data, size_t element_size, uint64_t i) {
  const uint8_t* p = data + i * element_size;
  uint64_t v = 0;
  for (size_t k = 0; k < element_size; ++k) v |= static_cast<uint64_t>(p[k]) << (8 * k);
  return v;
}

double HalfToDouble(uint64_t bits) {
  const int exponent = static_cast<int>((bits >> 10) & 0x1f);
  const double mantissa = static_cast<double>(bits & 0x3ff);
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);  // subnormal
  } else if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else {
    magnitude = std::ldexp(1024.0 + mantissa, exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// |a - b| of two integers of `dtype`, exactly, as an unsigned magnitude.
uint64_t IntegerDistance(DType dtype, size_t element_size, uint64_t a, uint64_t b) {
  if (IsSignedIntegerDType(dtype)) {
    const int64_t x = SignExtend(a, element_size), y = SignExtend(b, element_size);
    return x >= y ? static_cast<uint64_t>(x) - static_cast<uint64_t>(y)
                  : static_cast<uint64_t>(y) - static_cast<uint64_t>(x);
  }
  return a >= b ? a - b : b - a;
}

}  // namespace

bool IsSignedIntegerDType(DType dtype) {
  return dtype == DType::kI8 || dtype == DType::kI32 || dtype == DType::kI64;
}

int64_t SignExtend(uint64_t bits, size_t element_size) {
  if (element_size >= 8) return static_cast<int64_t>(bits);
  const int shift = static_cast<int>(64 - 8 * element_size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

bool IsFloatDType(DType dtype) { return FormatOf(dtype).has_value(); }

std::optional<uint64_t> UlpDistance(DType dtype, uint64_t a_bits, uint64_t b_bits) {
  const std::optional<FloatFormat> f = FormatOf(dtype);
  if (!f || f->IsNaN(a_bits) || f->IsNaN(b_bits)) return std::nullopt;
  const uint64_t sign = f->sign_bit();
  const uint64_t ma = a_bits & (sign - 1), mb = b_bits & (sign - 1);
  // Same sign: the magnitudes' distance. Opposite signs: both walk to zero
  // (at most 2 * (2^63 - 1) for f64, which fits).
  if ((a_bits & sign) == (b_bits & sign)) return ma >= mb ? ma - mb : mb - ma;
  return ma + mb;
}

double ElementValue(DType dtype, uint64_t bits) {
  switch (dtype) {
    case DType::kF16: return HalfToDouble(bits);
    case DType::kBF16: return static_cast<double>(BitsToFloat(static_cast<uint32_t>(bits) << 16));
    case DType::kF32: return static_cast<double>(BitsToFloat(static_cast<uint32_t>(bits)));
    case DType::kF64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    default: break;
  }
  const size_t size = std::max<size_t>(DTypeSize(dtype), 1);
  if (IsSignedIntegerDType(dtype)) return static_cast<double>(SignExtend(bits, size));
  return static_cast<double>(bits);
}

std::vector<int64_t> UnravelIndex(uint64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t k = shape.size(); k-- > 0;) {
    const uint64_t d = static_cast<uint64_t>(std::max<int64_t>(shape[k], 1));
    index[k] = static_cast<int64_t>(flat % d);
    flat /= d;
  }
  return index;
}

void DiffStats::Merge(const DiffStats& o) {
  elements += o.elements;
  differing += o.differing;
  nan_pairs += o.nan_pairs;
  max_abs = std::max(max_abs, o.max_abs);
  has_ulp = has_ulp || o.has_ulp;
  max_ulp = std::max(max_ulp, o.max_ulp);
}

TensorPairDiff DiffTensors(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                           const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t first_n) {
  TensorPairDiff out;
  out.name = name;
  out.dtype = dtype;
  out.shape = shape;
  const size_t size = std::max<size_t>(DTypeSize(dtype), 1);
  const uint64_t n = std::min(a.size(), b.size()) / size;
  const std::optional<FloatFormat> format = FormatOf(dtype);
  DiffStats& s = out.stats;
  s.elements = n;
  s.has_ulp = format.has_value();
  for (uint64_t i = 0; i < n; ++i) {
    // Equal bytes need no decoding: the common case stays a memcmp-like scan.
    if (std::memcmp(a.data() + i * size, b.data() + i * size, size) == 0) continue;
    const uint64_t x = LoadBits(a.data(), size, i), y = LoadBits(b.data(), size, i);
    ++s.differing;
    if (out.first.size() < first_n) out.first.push_back({i, UnravelIndex(i, shape), x, y});
    if (!format) {
      s.max_abs = std::max(s.max_abs, static_cast<double>(IntegerDistance(dtype, size, x, y)));
      continue;
    }
    const std::optional<uint64_t> ulp = UlpDistance(dtype, x, y);
    if (!ulp) {
      ++s.nan_pairs;
      continue;
    }
    s.max_ulp = std::max(s.max_ulp, *ulp);
    s.max_abs = std::max(s.max_abs, std::fabs(ElementValue(dtype, x) - ElementValue(dtype, y)));
  }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorDumpDiff DiffTensorSets(const std::vector<TensorView>& a, const std::vector<TensorView>& b,
                              size_t first_n) {
  std::map<std::string, const TensorView*> in_a, in_b;
  for (const auto& t : a) in_a.emplace(t.name, &t);
  for (const auto& t : b) in_b.emplace(t.name, &t);
  TensorDumpDiff out;
  for (const auto& [name, ta] : in_a) {
    auto it = in_b.find(name);
    if (it == in_b.end()) {
      out.only_in_a.push_back(name);
      continue;
    }
    const TensorView* tb = it->second;
    if (ta->dtype != tb->dtype) {
      out.mismatched.push_back({name, "dtype " + std::string(DTypeName(ta->dtype)) + " vs " +
                                          std::string(DTypeName(tb->dtype))});
    } else if (ta->shape != tb->shape) {
      out.mismatched.push_back({name, "shape " + ShapeString(ta->shape) + " vs " + ShapeString(tb->shape)});
    } else {
      out.pairs.push_back(DiffTensors(name, ta->dtype, ta->shape, *ta->data, *tb->data, first_n));
      out.total.Merge(out.pairs.back().stats);
    }
  }
  for (const auto& [name, tb] : in_b) {
    if (!in_a.count(name)) out.only_in_b.push_back(name);
  }
  return out;
}

TensorDumpDiff DiffTensorDumps(const checkpoint::TensorDump& a, const checkpoint::TensorDump& b,
                               size_t first_n) {
  auto views = [](const checkpoint::TensorDump& d) {
    std::vector<TensorView> out;
    for (const auto& t : d.tensors) out.push_back({t.name, t.dtype, t.shape, &t.data});
    return out;
  };
  return DiffTensorSets(views(a), views(b), first_n);
}

namespace {

TensorView EntryView(std::string name, const checkpoint::SavedEntry& e) {
  // An entry registered without a shape is compared as a vector.
  std::vector<int64_t> shape = e.shape;
  if (shape.empty()) shape = {static_cast<int64_t>(e.data.size() / std::max<size_t>(DTypeSize(e.dtype), 1))};
  return {std::move(name), e.dtype, std::move(shape), &e.data};
}

void AddRankViews(const checkpoint::SavedRank& rank, std::vector<TensorView>& out) {
  for (const auto& e : rank.entries) out.push_back(EntryView("ranks/" + std::to_string(rank.rank) + "/" + e.name, e));
}

}  // namespace

std::vector<TensorView> CheckpointTensors(const checkpoint::Checkpoint& c) {
  std::vector<TensorView> out;
  for (const auto& e : c.replicated) out.push_back(EntryView("replicated/" + e.name, e));
  for (const auto& r : c.ranks) AddRankViews(r, out);
  return out;
}

std::vector<TensorView> CheckpointTensors(const checkpoint::SavedShard& s) {
  std::vector<TensorView> out;
  for (const auto& e : s.replicated) out.push_back(EntryView("replicated/" + e.name, e));
  AddRankViews(s.own, out);
  return out;
}

}  // namespace dgrr::replay
