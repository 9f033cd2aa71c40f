// A host copy of a rank's registered state whose entries may live on a
// device: what the session hands its checkpoint store, which reads and writes
// host memory only. Checkpoint writes the copy; a restore fills the copy and
// copies it back. The copies go through the session's device (an
// AsyncFingerprinter: CUDA, or a test's fake), each on its entry's stream.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "fingerprint/async_fingerprint.h"
#include "runtime/state_registry.h"

namespace dgrr {

class HostStateCopy {
 public:
  // The registry `state` with each device entry restored from checkpoints
  // replaced by a host buffer holding its bytes (copied from the device,
  // waiting for each copy). Host entries, and device entries no checkpoint
  // reads, are the originals. `state` and `device` must outlive the copy.
  static StatusOr<std::unique_ptr<HostStateCopy>> Make(const StateRegistry& state, AsyncFingerprinter& device);

  HostStateCopy(const HostStateCopy&) = delete;
  HostStateCopy& operator=(const HostStateCopy&) = delete;

  StateRegistry& registry() { return copy_; }
  // Copies every host buffer back into its device entry (after a restore
  // into registry()).
  Status CopyBack() const;

 private:
  HostStateCopy(const StateRegistry& state, AsyncFingerprinter& device) : state_(state), device_(device) {}

  const StateRegistry& state_;
  AsyncFingerprinter& device_;
  StateRegistry copy_;
  // By entry index: the host buffer standing for a device entry (empty for
  // the others).
  std::vector<std::vector<uint8_t>> buffers_;
};

}  // namespace dgrr
