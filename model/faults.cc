#include "model/faults.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <map>
#include <set>
#include <tuple>

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
      // The element's width is checked against the boundary (CheckFault).
      if (b > 31) return Status::InvalidArgument("inject: bit must be 0..31");
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

namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

constexpr std::string_view kAllreducePrefix = "allreduce.";
constexpr std::string_view kMomentMPrefix = "adamw.m.";
constexpr std::string_view kMomentVPrefix = "adamw.v.";
constexpr std::string_view kGradientSuffix = ".grad";

}  // namespace

std::string ClosestNames(std::string_view name, const std::vector<std::string>& names, size_t count) {
  std::vector<std::pair<size_t, const std::string*>> ranked;
  ranked.reserve(names.size());
  for (const std::string& n : names) ranked.emplace_back(EditDistance(name, n), &n);
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) {
    return std::tie(x.first, *x.second) < std::tie(y.first, *y.second);
  });
  std::string out;
  for (size_t i = 0; i < ranked.size() && i < count; ++i) out += (i ? ", " : "") + *ranked[i].second;
  return out;
}

const char* FlipSiteName(FlipSite site) {
  switch (site) {
    case FlipSite::kTokens: return "input tokens";
    case FlipSite::kExample: return "per-example boundary";
    case FlipSite::kCollective: return "all-reduced gradient";
    case FlipSite::kGradient: return "optimizer input gradient";
    case FlipSite::kParameter: return "updated parameter";
    case FlipSite::kMomentM: return "optimizer first moment";
    case FlipSite::kMomentV: return "optimizer second moment";
  }
  return "unknown";
}

FaultTargets::FaultTargets(std::string tokens_name, uint64_t tokens_per_example,
                           const std::vector<std::pair<std::string, uint64_t>>& per_example,
                           const ParameterLayout& layout)
    : layout_(layout) {
  FlipTarget tokens;
  tokens.name = std::move(tokens_name);
  tokens.site = FlipSite::kTokens;
  tokens.elements = tokens_per_example;
  tokens.element_bits = 8;
  tokens.default_bit = 0;
  targets_.push_back(std::move(tokens));
  for (const auto& [name, elements] : per_example) {
    FlipTarget t;
    t.name = name;
    t.site = FlipSite::kExample;
    t.elements = elements;
    targets_.push_back(std::move(t));
  }
  const std::vector<NamedTensor>& tensors = layout_.tensors();
  auto per_batch = [&](std::string name, FlipSite site, size_t i) {
    FlipTarget t;
    t.name = std::move(name);
    t.site = site;
    t.elements = tensors[i].size;
    t.tensor = i;
    targets_.push_back(std::move(t));
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    per_batch(std::string(kAllreducePrefix) + GradientName(tensors[i].name), FlipSite::kCollective, i);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& p = tensors[i].name;
    per_batch(p + std::string(kGradientSuffix), FlipSite::kGradient, i);
    per_batch(p, FlipSite::kParameter, i);
    per_batch(std::string(kMomentMPrefix) + p, FlipSite::kMomentM, i);
    per_batch(std::string(kMomentVPrefix) + p, FlipSite::kMomentV, i);
  }
}

const FlipTarget* FaultTargets::Find(std::string_view name) const {
  for (const FlipTarget& t : targets_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<std::string> FaultTargets::Names() const {
  std::vector<std::string> names;
  names.reserve(targets_.size());
  for (const FlipTarget& t : targets_) names.push_back(t.name);
  return names;
}

const NamedTensor* FaultTargets::ReducedParameter(std::string_view name) const {
  if (name.substr(0, kAllreducePrefix.size()) == kAllreducePrefix) name.remove_prefix(kAllreducePrefix.size());
  if (const NamedTensor* t = layout_.Find(name)) return t;
  for (const NamedTensor& t : layout_.tensors()) {
    if (GradientName(t.name) == name) return &t;
  }
  return nullptr;
}

Status CheckFault(const FaultSpec& f, const FaultTargets& targets, const FaultRun& run) {
  const std::string what = "inject " + f.text + ": ";
  if (f.rank < 0 || f.rank >= run.ranks) {
    return Status::InvalidArgument(what + "rank " + std::to_string(f.rank) + " does not exist (ranks: " +
                                   std::to_string(run.ranks) + ")");
  }
  if (f.kind != FaultKind::kSkipRestore && f.step >= static_cast<uint64_t>(run.steps)) {
    return Status::InvalidArgument(what + "step " + std::to_string(f.step) + " is past the last step " +
                                   std::to_string(run.steps - 1));
  }
  if (f.kind == FaultKind::kRace && targets.ReducedParameter(f.at) == nullptr) {
    std::vector<std::string> params;
    for (const NamedTensor& t : targets.layout().tensors()) {
      params.push_back(t.name);
      params.push_back(std::string(kAllreducePrefix) + GradientName(t.name));
    }
    return Status::InvalidArgument(what + "the model has no parameter '" + f.at +
                                   "' whose gradient reduction could race; closest: " +
                                   ClosestNames(f.at, params));
  }
  if (f.kind == FaultKind::kSkipRestore && !run.resume) {
    return Status::InvalidArgument(what + "skip-restore applies to --resume only");
  }
  if (f.kind != FaultKind::kBitflip) return Status::OK();

  const FlipTarget* target = targets.Find(f.at);
  if (target == nullptr) {
    return Status::InvalidArgument(what + "the model records no boundary '" + f.at +
                                   "'; closest: " + ClosestNames(f.at, targets.Names()));
  }
  if (f.example) {
    if (!target->per_example()) {
      return Status::InvalidArgument(what + f.at + " is recorded once per batch, not per example: drop example=");
    }
    const uint64_t shard = static_cast<uint64_t>(run.batch / run.ranks);
    const uint64_t first = f.step * static_cast<uint64_t>(run.batch) + static_cast<uint64_t>(f.rank) * shard;
    if (*f.example < first || *f.example >= first + shard) {
      return Status::InvalidArgument(what + "example " + std::to_string(*f.example) + " is not in rank " +
                                     std::to_string(f.rank) + "'s shard at that step (examples " +
                                     std::to_string(first) + ".." + std::to_string(first + shard - 1) + ")");
    }
  }
  if (f.index >= target->elements) {
    return Status::InvalidArgument(what + "index=" + std::to_string(f.index) + " is out of range: " + f.at +
                                   " has " + std::to_string(target->elements) + " element(s)" +
                                   (target->per_example() ? " per example" : ""));
  }
  if (f.bit && *f.bit >= target->element_bits) {
    return Status::InvalidArgument(what + "bit=" + std::to_string(*f.bit) + " is out of range: an element of " +
                                   f.at + " has " + std::to_string(target->element_bits) + " bits (0.." +
                                   std::to_string(target->element_bits - 1) + ")");
  }
  return Status::OK();
}

}  // namespace dgrr::model
