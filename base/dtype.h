// Element types of tensors crossing a boundary. The numeric values are part of
// the trace format (docs/trace-format.md) and never change once published.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dgrr {

enum class DType : uint8_t {
  kUnknown = 0,  // raw bytes of no declared type
  kF32 = 1,
  kF64 = 2,
  kF16 = 3,
  kBF16 = 4,
  kI8 = 5,
  kU8 = 6,
  kI32 = 7,
  kU32 = 8,
  kI64 = 9,
  kU64 = 10,
  kBool = 11,
};
inline constexpr uint8_t kMaxDTypeValue = 11;

// Bytes per element; 0 for kUnknown.
size_t DTypeSize(DType t);
// "f32", "bf16", ... ; "bytes" for kUnknown.
std::string_view DTypeName(DType t);
std::optional<DType> ParseDType(std::string_view name);
inline bool IsValidDType(uint8_t v) { return v <= kMaxDTypeValue; }

}  // namespace dgrr
