// The state registry: the named buffers that make up a rank's training state
// (parameters, optimizer moments, counters, data cursors, RNG positions), each
// tagged with how it is restored. Checkpointing and resume work from this list
// alone, so a training program states once what its state is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/placement.h"
#include "base/status.h"
#include "fingerprint/fingerprint.h"

namespace dgrr {

enum class StateRole : uint8_t {
  kParameter,   // model weights; fingerprinted into every STEP record
  kOptimizer,   // optimizer moments and the like
  kCounter,     // step counters, scheduler state
  kCursor,      // data position (epoch, index)
  kRng,         // RNG stream positions
  kOther,
};

enum class RestorePolicy : uint8_t {
  kCheckpoint,   // saved in each checkpoint and loaded on resume
  kFastForward,  // not saved; regenerated on resume by the fast-forward plan
  kNone,         // not needed after a checkpoint (scratch)
};

struct StateEntry {
  std::string name;       // stable identity, e.g. "params", "adam.m", "data.cursor"
  void* data = nullptr;   // not owned; must stay valid while registered
  uint64_t bytes = 0;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  StateRole role = StateRole::kOther;
  RestorePolicy restore = RestorePolicy::kCheckpoint;
  // Every rank holds the same bytes (data-parallel replicas): checkpoints store
  // it once after checking the ranks agree.
  bool replicated = false;
  // Where `data` lives. Device state is never read by the host: the session
  // fingerprints it on the device and copies it through its device
  // (SessionOptions::device_fingerprinter) for checkpoints and restores.
  Placement where = Placement::Host();
};

const char* StateRoleName(StateRole role);
const char* RestorePolicyName(RestorePolicy policy);

class StateRegistry {
 public:
  // Names are unique, 1..256 bytes; data non-null when bytes > 0; when dtype is
  // known and a shape given, bytes must match it. Every kParameter entry lives
  // where the first one does (host, or one device and stream): their
  // fingerprint is one stream over all of them.
  Status Register(StateEntry entry);
  const std::vector<StateEntry>& entries() const { return entries_; }
  const StateEntry* Find(const std::string& name) const;
  // The fingerprint of all kParameter entries, in registration order: one
  // stream over their concatenated bytes. Host parameters only (the session
  // fingerprints device ones on the device, over ParameterSegments()).
  Fingerprint ParameterFingerprint() const;
  // The kParameter entries' buffers, in registration order.
  std::vector<MemorySegment> ParameterSegments() const;
  // Where the kParameter entries live (host when there are none).
  const Placement& parameter_placement() const { return parameter_placement_; }
  // Whether any entry lives on a device.
  bool has_device_entries() const { return has_device_entries_; }
  // Called once, right after the first entry placed on a device is accepted:
  // the session makes its device fingerprinter then (CUDA context, kernels
  // loaded, pinned result slots), before a training loop keeps the device's
  // streams busy; loading kernels later may wait for them.
  void set_first_device_entry_hook(std::function<void()> hook) { first_device_entry_hook_ = std::move(hook); }

 private:
  friend class HostStateCopy;  // mirrors a registry entry for entry, placements aside

  std::vector<StateEntry> entries_;
  Placement parameter_placement_;
  bool has_parameters_ = false;
  bool has_device_entries_ = false;
  std::function<void()> first_device_entry_hook_;
};

}  // namespace dgrr
