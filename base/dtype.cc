#include "base/dtype.h"

#include <array>

namespace dgrr {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kUnknown, "bytes", 0}, {DType::kF32, "f32", 4},  {DType::kF64, "f64", 8},
    {DType::kF16, "f16", 2},       {DType::kBF16, "bf16", 2}, {DType::kI8, "i8", 1},
    {DType::kU8, "u8", 1},         {DType::kI32, "i32", 4},  {DType::kU32, "u32", 4},
    {DType::kI64, "i64", 8},       {DType::kU64, "u64", 8},  {DType::kBool, "bool", 1},
}};
}  // namespace

size_t DTypeSize(DType t) {
  auto v = static_cast<size_t>(t);
  return v < kDTypes.size() ? kDTypes[v].size : 0;
}

std::string_view DTypeName(DType t) {
  auto v = static_cast<size_t>(t);
  return v < kDTypes.size() ? kDTypes[v].name : "invalid";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

}  // namespace dgrr
