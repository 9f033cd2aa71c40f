#include "runtime/recording_mode.h"

namespace dgrr {

std::string_view RecordModeName(RecordMode mode) {
  switch (mode) {
    case RecordMode::kFull: return "full";
    case RecordMode::kTrusted: return "trusted";
    case RecordMode::kSdc: return "sdc";
    case RecordMode::kOff: return "off";
  }
  return "unknown";
}

std::optional<RecordMode> ParseRecordMode(std::string_view name) {
  for (RecordMode m : {RecordMode::kFull, RecordMode::kTrusted, RecordMode::kSdc, RecordMode::kOff}) {
    if (RecordModeName(m) == name) return m;
  }
  return std::nullopt;
}

bool IsTrustedPrimitive(OpKind kind) {
  return kind == OpKind::kMatmul || kind == OpKind::kElementwise;
}

bool ShouldRecordBoundary(RecordMode mode, trace::Phase phase, OpKind kind) {
  switch (mode) {
    case RecordMode::kFull: return true;
    case RecordMode::kTrusted: return !IsTrustedPrimitive(kind);
    case RecordMode::kSdc: return phase == trace::Phase::kCollective;
    case RecordMode::kOff: return false;
  }
  return true;
}

}  // namespace dgrr
