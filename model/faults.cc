#include "model/faults.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <map>
#include <set>
#include <cstdio>
#include <tuple>

#include "rng/philox.h"

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
    case FaultKind::kMultibit: return "multibit";
    case FaultKind::kStuckByte: return "stuck-byte";
    case FaultKind::kRandom: return "random";
    case FaultKind::kNan: return "nan";
    case FaultKind::kInf: return "inf";
  }
  return "unknown";
}

bool CorruptsTensor(FaultKind kind) {
  switch (kind) {
    case FaultKind::kBitflip:
    case FaultKind::kMultibit:
    case FaultKind::kStuckByte:
    case FaultKind::kRandom:
    case FaultKind::kNan:
    case FaultKind::kInf: return true;
    case FaultKind::kRace:
    case FaultKind::kSharedRng:
    case FaultKind::kReduceOrder:
    case FaultKind::kSkipRestore: return false;
  }
  return false;
}

const FaultSpec* TensorFaultAt(const std::vector<FaultSpec>& faults, uint64_t step, int rank) {
  for (const FaultSpec& f : faults) {
    if (CorruptsTensor(f.kind) && f.step == step && f.rank == rank) return &f;
  }
  return nullptr;
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
      {"bitflip", FaultKind::kBitflip},       {"multibit", FaultKind::kMultibit},
      {"stuck-byte", FaultKind::kStuckByte},  {"random", FaultKind::kRandom},
      {"nan", FaultKind::kNan},               {"inf", FaultKind::kInf},
      {"race", FaultKind::kRace},             {"shared-rng", FaultKind::kSharedRng},
      {"reduce-order", FaultKind::kReduceOrder}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) {
    return Status::InvalidArgument("inject: unknown kind '" + std::string(kind) +
                                   "' (known: bitflip, multibit, stuck-byte, random, nan, inf, race, "
                                   "shared-rng, reduce-order, skip-restore)");
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
    } else if (key == "example" && CorruptsTensor(spec.kind)) {
      DGRR_ASSIGN_OR_RETURN(spec.example, ParseUnsigned(key, value));
    } else if (key == "index" && CorruptsTensor(spec.kind)) {
      DGRR_ASSIGN_OR_RETURN(spec.index, ParseUnsigned(key, value));
    } else if (key == "bit" && spec.kind == FaultKind::kBitflip) {
      DGRR_ASSIGN_OR_RETURN(uint64_t b, ParseUnsigned(key, value));
      // The element's width is checked against the boundary (CheckFault).
      if (b > 31) return Status::InvalidArgument("inject: bit must be 0..31");
      spec.bit = static_cast<int>(b);
    } else if (key == "bits" && spec.kind == FaultKind::kMultibit) {
      // '+' separates them: ',' separates the fields.
      for (size_t at = 0; at <= value.size();) {
        size_t plus = value.find('+', at);
        if (plus == std::string_view::npos) plus = value.size();
        DGRR_ASSIGN_OR_RETURN(uint64_t b, ParseUnsigned(key, value.substr(at, plus - at)));
        if (b > 31) return Status::InvalidArgument("inject: bits must be 0..31, joined by '+' (bits=3+17)");
        if (std::find(spec.bits.begin(), spec.bits.end(), static_cast<int>(b)) != spec.bits.end()) {
          return Status::InvalidArgument("inject: bits=" + std::string(value) + " names bit " +
                                         std::to_string(b) + " twice");
        }
        spec.bits.push_back(static_cast<int>(b));
        at = plus + 1;
      }
    } else if (key == "count" && spec.kind == FaultKind::kMultibit) {
      DGRR_ASSIGN_OR_RETURN(uint64_t k, ParseUnsigned(key, value));
      if (k < 1 || k > 32) return Status::InvalidArgument("inject: count must be 1..32");
      spec.count = static_cast<int>(k);
    } else if (key == "elements" && spec.kind == FaultKind::kMultibit) {
      DGRR_ASSIGN_OR_RETURN(spec.elements, ParseUnsigned(key, value));
      if (spec.elements == 0) return Status::InvalidArgument("inject: elements must be at least 1");
    } else if (key == "byte" && spec.kind == FaultKind::kStuckByte) {
      DGRR_ASSIGN_OR_RETURN(uint64_t b, ParseUnsigned(key, value));
      if (b > 3) return Status::InvalidArgument("inject: byte must be 0..3");
      spec.byte = static_cast<int>(b);
    } else if (key == "value" && spec.kind == FaultKind::kStuckByte) {
      const bool hex = value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
      uint64_t v = 0;
      const std::string_view digits = hex ? value.substr(2) : value;
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, hex ? 16 : 10);
      if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty() || v > 255) {
        return Status::InvalidArgument("inject: value='" + std::string(value) +
                                       "' is not a byte (0..255, or 0x00..0xff)");
      }
      spec.value = static_cast<uint8_t>(v);
    } else if (key == "sign" && spec.kind == FaultKind::kInf) {
      if (value != "+" && value != "-") return Status::InvalidArgument("inject: sign must be + or -");
      spec.negative = value == "-";
    } else {
      return Status::InvalidArgument("inject: " + std::string(kind) + " has no field '" +
                                     std::string(key) + "'");
    }
  }
  if (!have_step) return Status::InvalidArgument("inject: " + std::string(kind) + " needs step=S");
  if ((CorruptsTensor(spec.kind) || spec.kind == FaultKind::kRace) && spec.at.empty()) {
    return Status::InvalidArgument("inject: " + std::string(kind) + " needs at=NAME");
  }
  if (!spec.bits.empty() && spec.count) {
    return Status::InvalidArgument("inject: multibit takes bits=B1+B2+... or count=K, not both");
  }
  if (spec.kind == FaultKind::kMultibit && spec.bits.empty() && !spec.count) spec.count = 2;
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
  if (!CorruptsTensor(f.kind)) return Status::OK();

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
  const std::string width = " has " + std::to_string(target->element_bits) + " bits (0.." +
                            std::to_string(target->element_bits - 1) + ")";
  if (f.bit && *f.bit >= target->element_bits) {
    return Status::InvalidArgument(what + "bit=" + std::to_string(*f.bit) + " is out of range: an element of " +
                                   f.at + width);
  }
  for (int b : f.bits) {
    if (b >= target->element_bits) {
      return Status::InvalidArgument(what + "bit " + std::to_string(b) + " is out of range: an element of " + f.at +
                                     width);
    }
  }
  if (f.count && *f.count > target->element_bits) {
    return Status::InvalidArgument(what + "count=" + std::to_string(*f.count) + " is out of range: an element of " +
                                   f.at + width);
  }
  if (f.elements > target->elements - f.index) {
    return Status::InvalidArgument(what + "elements=" + std::to_string(f.elements) + " from index " +
                                   std::to_string(f.index) + " runs past the end: " + f.at + " has " +
                                   std::to_string(target->elements) + " element(s)" +
                                   (target->per_example() ? " per example" : ""));
  }
  if (f.byte && *f.byte >= target->element_bits / 8) {
    return Status::InvalidArgument(what + "byte=" + std::to_string(*f.byte) + " is out of range: an element of " +
                                   f.at + " has " + std::to_string(target->element_bits / 8) + " byte(s)");
  }
  if ((f.kind == FaultKind::kNan || f.kind == FaultKind::kInf) && target->element_bits != 32) {
    return Status::InvalidArgument(what + f.at + " holds bytes, which have no " + FaultKindName(f.kind) +
                                   ": use random, stuck-byte, bitflip or multibit");
  }
  return Status::OK();
}

namespace {

// The i-th 32-bit word of the fault's random draws for one element.
class ElementDraws {
 public:
  ElementDraws(const FaultSpec& f, uint64_t seed, uint64_t example, uint64_t element)
      : key_{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}},
        counter_{{static_cast<uint32_t>(element), static_cast<uint32_t>(example), static_cast<uint32_t>(f.step),
                  static_cast<uint32_t>(f.rank) << 16}} {}
  uint32_t Next() {
    if (used_ == 4) {
      block_ = rng::Philox4x32(counter_, key_);
      ++counter_.word[3];  // the next block of this element's draws
      used_ = 0;
    }
    return block_.word[used_++];
  }

 private:
  rng::PhiloxKey key_;
  rng::PhiloxCounter counter_;
  rng::PhiloxBlock block_{};
  int used_ = 4;
};

}  // namespace

uint32_t CorruptElement(const FaultSpec& f, const FlipTarget& target, uint64_t seed, uint64_t example,
                        uint64_t element, uint32_t old_bits) {
  if (element < f.index || element - f.index >= f.elements) return old_bits;
  const int width = target.element_bits;
  const uint32_t mask = width == 32 ? 0xffffffffu : (1u << width) - 1;
  old_bits &= mask;
  switch (f.kind) {
    case FaultKind::kBitflip: return old_bits ^ (1u << f.bit.value_or(target.default_bit));
    case FaultKind::kMultibit: {
      uint32_t flips = 0;
      for (int b : f.bits) flips |= 1u << b;
      if (f.count) {
        // K distinct bits of `width`: a partial Fisher-Yates shuffle.
        ElementDraws draws(f, seed, example, element);
        int order[32];
        for (int b = 0; b < width; ++b) order[b] = b;
        for (int i = 0; i < *f.count; ++i) {
          const int j = i + static_cast<int>(draws.Next() % static_cast<uint32_t>(width - i));
          std::swap(order[i], order[j]);
          flips |= 1u << order[i];
        }
      }
      return old_bits ^ flips;
    }
    case FaultKind::kStuckByte: {
      const int shift = 8 * f.byte.value_or(width / 8 - 1);
      return (old_bits & ~(0xffu << shift)) | (static_cast<uint32_t>(f.value) << shift);
    }
    case FaultKind::kRandom: {
      ElementDraws draws(f, seed, example, element);
      for (;;) {
        const uint32_t v = draws.Next() & mask;
        if (v != old_bits) return v;  // a corruption always changes the element
      }
    }
    case FaultKind::kNan: return 0x7fc00000u;  // the canonical quiet NaN
    case FaultKind::kInf: return f.negative ? 0xff800000u : 0x7f800000u;
    case FaultKind::kRace:
    case FaultKind::kSharedRng:
    case FaultKind::kReduceOrder:
    case FaultKind::kSkipRestore: break;
  }
  return old_bits;
}

std::string FiredText(const FaultSpec& f, const FlipTarget& target, uint64_t example, uint32_t old_bits,
                      uint32_t new_bits) {
  const std::string of_example = target.per_example() ? " of example " + std::to_string(example) : "";
  if (f.kind == FaultKind::kBitflip) {
    return f.text + " fired: element " + std::to_string(f.index) + " bit " +
           std::to_string(f.bit.value_or(target.default_bit)) + of_example;
  }
  // What changed comes first: an EVENT payload stops at 100 bytes, and the
  // spec is in config.json anyway.
  char change[40];
  const int digits = target.element_bits / 4;
  std::snprintf(change, sizeof change, " 0x%0*x -> 0x%0*x", digits, old_bits, digits, new_bits);
  std::string text = std::string(FaultKindName(f.kind)) + " fired: element " + std::to_string(f.index) + change;
  if (f.elements > 1) text += " and " + std::to_string(f.elements - 1) + " more";
  return text + of_example + " (" + f.text + ")";
}

}  // namespace dgrr::model
