// The HDF5 checkpoint store behind a Session's Checkpoint() and Resume():
// checkpoint files as docs/checkpoint-format.md describes them, tensor dumps
// as docs/tensor-dump.md does. dgrr::Open (<dgrr/dgrr.h>) gives it to every
// session it opens.
#pragma once

#include <functional>

#include "checkpoint/checkpoint_file.h"
#include "runtime/checkpoint_store.h"

namespace dgrr::checkpoint {

struct Checkpoint;

// How a loaded checkpoint's state goes into a rank's registry. By default
// entry for entry (RestoreRank); a program whose saved layout changed between
// versions passes its own, so that its older checkpoints still restore under
// a control file (the reference trainer: model/train_state.h).
using StateRestorer = std::function<Status(const Checkpoint& checkpoint, int rank, StateRegistry& into)>;

class Hdf5CheckpointStore final : public CheckpointStore {
 public:
  Hdf5CheckpointStore() = default;
  explicit Hdf5CheckpointStore(StateRestorer restorer) : restorer_(std::move(restorer)) {}

  StatusOr<CheckpointShard> WriteShard(const CheckpointRequest& request) override;
  Status Commit(const CheckpointRequest& request, const std::vector<CheckpointShard>& shards) override;
  StatusOr<std::unique_ptr<LoadedCheckpoint>> Load(const std::string& path) override;
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewest(const std::string& run_dir, bool fallback,
                                                         uint64_t max_step = UINT64_MAX) override;
  // Each rank reads the manifest, its own shard and, when it restores
  // replicated entries, rank 0's (checkpoint_file.h, ReadCheckpointForRank).
  StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewestForRank(const std::string& run_dir, bool fallback, int rank,
                                                                const Agreement& agree,
                                                                uint64_t max_step = UINT64_MAX) override;
  StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadForRank(const std::string& path, int rank,
                                                          const Agreement& agree) override;
  Status RemoveTemporaries(const std::string& run_dir) override;
  Status WriteTensorDump(const std::string& path, const std::string& run_dir, const std::string& boundary,
                         uint64_t step, int rank, const std::vector<CapturedTensor>& tensors) override;

 private:
  // Restoring entry for entry, the loaded checkpoint's bytes stay in their
  // verified shards until Restore reads them straight into the registered
  // buffers (checkpoint_file.h, EntryData); a program's own restorer gets
  // them in memory.
  EntryData EntryMode() const { return restorer_ ? EntryData::kRead : EntryData::kDeferred; }

  StateRestorer restorer_;  // empty: RestoreRank
};

// The process's store (stateless, safe to share between ranks and threads).
CheckpointStore* DefaultCheckpointStore();

}  // namespace dgrr::checkpoint
