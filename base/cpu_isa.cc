#include "base/cpu_isa.h"

#include <optional>
#include <string_view>

#include "base/environment.h"

namespace dgrr {
namespace {

constexpr const char* kVariable = "DGRR_MAX_ISA";

std::optional<IsaLevel> ParseLevel(std::string_view value) {
  if (value == "sse2") return IsaLevel::kSse2;
  if (value == "avx2") return IsaLevel::kAvx2;
  if (value == "avx512") return IsaLevel::kAvx512;
  return std::nullopt;
}

}  // namespace

IsaLevel MaxIsa() {
  static const IsaLevel cap = [] {
    const std::optional<std::string> value = GetEnv(kVariable);
    if (!value || value->empty()) return IsaLevel::kAvx512;
    return ParseLevel(*value).value_or(IsaLevel::kAvx512);
  }();
  return cap;
}

const char* IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kSse2: return "sse2";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "unknown";
}

Status CheckMaxIsaEnvironment() {
  const std::optional<std::string> value = GetEnv(kVariable);
  if (!value || value->empty() || ParseLevel(*value)) return Status::OK();
  return Status::InvalidArgument(std::string(kVariable) + "='" + *value +
                                 "': expected sse2, avx2 or avx512 (the widest vector instruction set "
                                 "dgrr's kernels may use)");
}

}  // namespace dgrr
