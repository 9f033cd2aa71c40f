// The HDF5 checkpoint store behind a Session's Checkpoint() and Resume():
// checkpoint files as docs/checkpoint-format.md describes them, tensor dumps
// as docs/tensor-dump.md does. dgrr::Open (<dgrr/dgrr.h>) gives it to every
// session it opens.
#pragma once

#include "runtime/checkpoint_store.h"

namespace dgrr::checkpoint {

class Hdf5CheckpointStore final : public CheckpointStore {
 public:
  StatusOr<CheckpointShard> WriteShard(const CheckpointRequest& request) override;
  Status Commit(const CheckpointRequest& request, const std::vector<CheckpointShard>& shards) override;
  StatusOr<std::unique_ptr<LoadedCheckpoint>> Load(const std::string& path) override;
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewest(const std::string& run_dir, bool fallback) override;
  Status RemoveTemporaries(const std::string& run_dir) override;
  Status WriteTensorDump(const std::string& path, const std::string& run_dir, const std::string& boundary,
                         uint64_t step, int rank, const std::vector<CapturedTensor>& tensors) override;
};

// The process's store (stateless, safe to share between ranks and threads).
CheckpointStore* DefaultCheckpointStore();

}  // namespace dgrr::checkpoint
