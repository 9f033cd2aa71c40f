#include "runtime/state_registry.h"

#include <cstdio>

namespace dgrr {
namespace {

// "host", "cuda:0 stream 0x...": two placements on one device differ by stream.
std::string PlaceName(const Placement& where) {
  if (where.host()) return where.ToString();
  char stream[32];
  std::snprintf(stream, sizeof stream, "%p", where.stream);
  return where.ToString() + " stream " + stream;
}

}  // namespace

const char* StateRoleName(StateRole role) {
  switch (role) {
    case StateRole::kParameter: return "parameter";
    case StateRole::kOptimizer: return "optimizer";
    case StateRole::kCounter: return "counter";
    case StateRole::kCursor: return "cursor";
    case StateRole::kRng: return "rng";
    case StateRole::kOther: return "other";
  }
  return "unknown";
}

const char* RestorePolicyName(RestorePolicy policy) {
  switch (policy) {
    case RestorePolicy::kCheckpoint: return "checkpoint";
    case RestorePolicy::kFastForward: return "fast-forward";
    case RestorePolicy::kNone: return "none";
  }
  return "unknown";
}

Status StateRegistry::Register(StateEntry entry) {
  if (entry.name.empty() || entry.name.size() > 256) {
    return Status::InvalidArgument("state name must be 1 to 256 bytes: '" + entry.name + "'");
  }
  if (Find(entry.name) != nullptr) {
    return Status::InvalidArgument("state '" + entry.name + "' is already registered");
  }
  if (entry.data == nullptr && entry.bytes > 0) {
    return Status::InvalidArgument("state '" + entry.name + "': null data with " +
                                   std::to_string(entry.bytes) + " bytes");
  }
  if (entry.dtype != DType::kUnknown && !entry.shape.empty()) {
    uint64_t elements = 1;
    for (int64_t d : entry.shape) {
      if (d < 0) return Status::InvalidArgument("state '" + entry.name + "': negative dimension");
      elements *= static_cast<uint64_t>(d);
    }
    if (elements * DTypeSize(entry.dtype) != entry.bytes) {
      return Status::InvalidArgument("state '" + entry.name + "': " + std::to_string(entry.bytes) +
                                     " bytes do not match its shape and dtype");
    }
  }
  if (!entry.where.host() && entry.where.device < 0) {
    return Status::InvalidArgument("state '" + entry.name +
                                   "': placed on a CUDA device without its number (use Placement::Cuda(device, stream))");
  }
  if (entry.role == StateRole::kParameter) {
    const Placement& first = parameter_placement_;
    const Placement& here = entry.where;
    if (has_parameters_ && (here.kind != first.kind || here.device != first.device || here.stream != first.stream)) {
      return Status::InvalidArgument("state '" + entry.name + "': a parameter on " + PlaceName(here) +
                                     " where the parameters registered before it are on " + PlaceName(first) +
                                     ": the parameter fingerprint is one stream over all of them, so they live in "
                                     "one place (host, or one device and stream)");
    }
    parameter_placement_ = here;
    has_parameters_ = true;
  }
  const bool first_on_a_device = !has_device_entries_ && !entry.where.host();
  has_device_entries_ = has_device_entries_ || !entry.where.host();
  entries_.push_back(std::move(entry));
  if (first_on_a_device && first_device_entry_hook_) first_device_entry_hook_();
  return Status::OK();
}

const StateEntry* StateRegistry::Find(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Fingerprint StateRegistry::ParameterFingerprint() const {
  Fingerprinter fp;
  for (const auto& e : entries_) {
    if (e.role == StateRole::kParameter) fp.Update(e.data, e.bytes);
  }
  return fp.Digest();
}

std::vector<MemorySegment> StateRegistry::ParameterSegments() const {
  std::vector<MemorySegment> segments;
  for (const auto& e : entries_) {
    if (e.role == StateRole::kParameter) segments.push_back({e.data, e.bytes});
  }
  return segments;
}

}  // namespace dgrr
