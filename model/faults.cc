#include "model/faults.h"

#include <charconv>
#include <climits>
#include <map>
#include <set>

namespace dgrr::model {
namespace {

StatusOr<uint64_t> ParseUnsigned(std::string_view key, std::string_view value) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    return Status::InvalidArgument("inject: " + std::string(key) + "='" + std::string(value) +
                                   "' is not a non-negative integer");
  }
  return v;
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kBitflip: return "bitflip";
    case FaultKind::kRace: return "race";
    case FaultKind::kSharedRng: return "shared-rng";
    case FaultKind::kReduceOrder: return "reduce-order";
    case FaultKind::kSkipRestore: return "skip-restore";
  }
  return "unknown";
}

StatusOr<FaultSpec> ParseFaultSpec(std::string_view text) {
  FaultSpec spec;
  spec.text = std::string(text);
  const size_t colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (kind == "skip-restore") {
    if (rest.empty()) return Status::InvalidArgument("inject: skip-restore needs a state name: skip-restore:NAME");
    spec.kind = FaultKind::kSkipRestore;
    spec.at = std::string(rest);
    return spec;
  }
  static const std::map<std::string_view, FaultKind> kinds = {
      {"bitflip", FaultKind::kBitflip},
      {"race", FaultKind::kRace},
      {"shared-rng", FaultKind::kSharedRng},
      {"reduce-order", FaultKind::kReduceOrder}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) {
    return Status::InvalidArgument("inject: unknown kind '" + std::string(kind) +
                                   "' (known: bitflip, race, shared-rng, reduce-order, skip-restore)");
  }
  spec.kind = it->second;
  bool have_step = false;
  // "step=1,step=2" would silently keep one of them: which the user meant is
  // unknowable, so it is refused.
  std::set<std::string_view> seen_keys;
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    if (comma == std::string_view::npos) comma = rest.size();
    const std::string_view field = rest.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Status::InvalidArgument("inject: field '" + std::string(field) + "' is not key=value");
    }
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (!seen_keys.insert(key).second) {
      return Status::InvalidArgument("inject: '" + std::string(text) + "' gives " + std::string(key) +
                                     " twice");
    }
    if (key == "step") {
      DGRR_ASSIGN_OR_RETURN(spec.step, ParseUnsigned(key, value));
      have_step = true;
    } else if (key == "rank") {
      DGRR_ASSIGN_OR_RETURN(uint64_t r, ParseUnsigned(key, value));
      if (r > INT_MAX) return Status::InvalidArgument("inject: rank=" + std::string(value) + " is out of range");
      spec.rank = static_cast<int>(r);
    } else if (key == "at") {
      spec.at = std::string(value);
    } else if (key == "example" && spec.kind == FaultKind::kBitflip) {
      DGRR_ASSIGN_OR_RETURN(spec.example, ParseUnsigned(key, value));
    } else if (key == "index" && spec.kind == FaultKind::kBitflip) {
      DGRR_ASSIGN_OR_RETURN(spec.index, ParseUnsigned(key, value));
    } else if (key == "bit" && spec.kind == FaultKind::kBitflip) {
      DGRR_ASSIGN_OR_RETURN(uint64_t b, ParseUnsigned(key, value));
      if (b > 31) return Status::InvalidArgument("inject: bit must be 0..31 for a float");
      spec.bit = static_cast<int>(b);
    } else {
      return Status::InvalidArgument("inject: " + std::string(kind) + " has no field '" +
                                     std::string(key) + "'");
    }
  }
  if (!have_step) return Status::InvalidArgument("inject: " + std::string(kind) + " needs step=S");
  if ((spec.kind == FaultKind::kBitflip || spec.kind == FaultKind::kRace) && spec.at.empty()) {
    return Status::InvalidArgument("inject: " + std::string(kind) + " needs at=NAME");
  }
  return spec;
}

}  // namespace dgrr::model
