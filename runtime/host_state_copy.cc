#include "runtime/host_state_copy.h"

namespace dgrr {
namespace {

bool CopiedToHost(const StateEntry& e) { return !e.where.host() && e.restore == RestorePolicy::kCheckpoint; }

}  // namespace

StatusOr<std::unique_ptr<HostStateCopy>> HostStateCopy::Make(const StateRegistry& state, AsyncFingerprinter& device) {
  std::unique_ptr<HostStateCopy> copy(new HostStateCopy(state, device));
  copy->buffers_.resize(state.entries().size());
  for (size_t i = 0; i < state.entries().size(); ++i) {
    StateEntry entry = state.entries()[i];
    if (CopiedToHost(entry)) {
      std::vector<uint8_t>& buffer = copy->buffers_[i];
      buffer.resize(entry.bytes);
      DGRR_RETURN_IF_ERROR(device.CopyToHost(entry.data, entry.bytes, entry.where, buffer.data()));
      entry.data = buffer.data();
      entry.where = Placement::Host();
    }
    // Entry for entry as `state` (which Register checked); only placements
    // change, so the copy may mix host and device parameters. Its flags
    // follow its own entries, so that nothing takes the copy for a host
    // registry while an entry it did not copy still lives on a device.
    StateRegistry& mirror = copy->copy_;
    if (entry.role == StateRole::kParameter && !mirror.has_parameters_) {
      mirror.parameter_placement_ = entry.where;
      mirror.has_parameters_ = true;
    }
    mirror.has_device_entries_ = mirror.has_device_entries_ || !entry.where.host();
    mirror.entries_.push_back(std::move(entry));
  }
  return copy;
}

Status HostStateCopy::CopyBack() const {
  for (size_t i = 0; i < state_.entries().size(); ++i) {
    const StateEntry& entry = state_.entries()[i];
    if (!CopiedToHost(entry)) continue;
    DGRR_RETURN_IF_ERROR(device_.CopyToDevice(buffers_[i].data(), entry.bytes, entry.where, entry.data));
  }
  return Status::OK();
}

}  // namespace dgrr
