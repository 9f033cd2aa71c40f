#include "checkpoint/session_store.h"

#include <cstdint>
#include <filesystem>

#include "base/file.h"
#include "base/kill_point.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"

namespace dgrr::checkpoint {
namespace {

class LoadedHdf5Checkpoint final : public LoadedCheckpoint {
 public:
  LoadedHdf5Checkpoint(Checkpoint ckpt, const StateRestorer& restorer)
      : ckpt_(std::move(ckpt)), restorer_(restorer) {}
  const std::string& path() const override { return ckpt_.path; }
  uint64_t step() const override { return ckpt_.meta.step; }
  uint64_t config_digest() const override { return ckpt_.meta.config_digest; }
  int world_size() const override { return ckpt_.meta.world_size; }
  uint64_t trace_position(int rank) const override {
    return rank >= 0 && static_cast<size_t>(rank) < ckpt_.ranks.size() ? ckpt_.ranks[rank].trace_position : 0;
  }
  Status Restore(int rank, StateRegistry& into) const override {
    return restorer_ ? restorer_(ckpt_, rank, into) : RestoreRank(ckpt_, rank, into);
  }

 private:
  Checkpoint ckpt_;
  StateRestorer restorer_;
};

CheckpointMeta MetaOf(const CheckpointRequest& request) {
  CheckpointMeta meta;
  meta.step = request.step;
  meta.config_digest = request.config_digest;
  meta.run_id_hex = request.run_id_hex;
  meta.world_size = request.world_size;
  meta.plan_json = request.plan_json;
  return meta;
}

}  // namespace

StatusOr<CheckpointShard> Hdf5CheckpointStore::WriteShard(const CheckpointRequest& request) {
  CheckpointWriteOptions write;
  write.fault_hook = [&request](const char*) {
    KillPoint("ckpt-temp", static_cast<int64_t>(request.step), request.rank.rank);
    return Status::OK();
  };
  return WriteCheckpointShard(CheckpointPath(request.run_dir, request.step), MetaOf(request), request.rank, write);
}

Status Hdf5CheckpointStore::Commit(const CheckpointRequest& request, const std::vector<CheckpointShard>& shards) {
  return CommitCheckpoint(CheckpointPath(request.run_dir, request.step), MetaOf(request), shards);
}

StatusOr<std::unique_ptr<LoadedCheckpoint>> Hdf5CheckpointStore::Load(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(path, EntryMode()));
  return std::unique_ptr<LoadedCheckpoint>(new LoadedHdf5Checkpoint(std::move(ckpt), restorer_));
}

StatusOr<std::unique_ptr<LoadedCheckpoint>> Hdf5CheckpointStore::FindNewest(const std::string& run_dir,
                                                                            bool fallback, uint64_t max_step) {
  DGRR_ASSIGN_OR_RETURN(Checkpoint ckpt, FindNewestGoodCheckpoint(run_dir, max_step, fallback, nullptr, EntryMode()));
  return std::unique_ptr<LoadedCheckpoint>(new LoadedHdf5Checkpoint(std::move(ckpt), restorer_));
}

StatusOr<std::unique_ptr<LoadedCheckpoint>> Hdf5CheckpointStore::FindNewestForRank(const std::string& run_dir,
                                                                                   bool fallback, int rank,
                                                                                   const Agreement& agree,
                                                                                   uint64_t max_step) {
  DGRR_ASSIGN_OR_RETURN(Checkpoint ckpt,
                        FindNewestGoodCheckpointForRank(run_dir, max_step, fallback, rank, agree, EntryMode()));
  return std::unique_ptr<LoadedCheckpoint>(new LoadedHdf5Checkpoint(std::move(ckpt), restorer_));
}

StatusOr<std::unique_ptr<LoadedCheckpoint>> Hdf5CheckpointStore::LoadForRank(const std::string& path, int rank,
                                                                             const Agreement& agree) {
  StatusOr<Checkpoint> ckpt = ReadCheckpointForRank(path, rank, EntryMode());
  DGRR_RETURN_IF_ERROR(agree(path, ckpt.status()));
  return std::unique_ptr<LoadedCheckpoint>(new LoadedHdf5Checkpoint(std::move(ckpt).value(), restorer_));
}

Status Hdf5CheckpointStore::RemoveTemporaries(const std::string& run_dir) {
  return RemoveStaleTemporaries(run_dir).status();
}

Status Hdf5CheckpointStore::WriteTensorDump(const std::string& path, const std::string& run_dir,
                                            const std::string& boundary, uint64_t step, int rank,
                                            const std::vector<CapturedTensor>& tensors) {
  TensorDump dump;
  dump.run_dir = run_dir;
  dump.boundary = boundary;
  dump.step = step;
  dump.rank = rank;
  for (const CapturedTensor& t : tensors) {
    DumpedTensor d;
    d.name = TensorDatasetName(t.example_first, t.example_count);
    // Several occurrences with the same example range (a boundary recorded
    // twice in a step) get a counter, as the reference trainer names them.
    for (int k = 1; dump.Find(d.name) != nullptr; ++k) {
      d.name = TensorDatasetName(t.example_first, t.example_count) + "." + std::to_string(k);
    }
    d.dtype = t.dtype;
    d.shape = t.shape;
    d.example_first = t.example_first;
    d.example_count = t.example_count;
    d.phase = t.phase;
    d.recorded = Fingerprint{t.xor64, t.xxh3};
    d.data = t.bytes;
    dump.tensors.push_back(std::move(d));
  }
  return ::dgrr::checkpoint::WriteTensorDump(path, dump);
}

CheckpointStore* DefaultCheckpointStore() {
  static Hdf5CheckpointStore store;
  return &store;
}

}  // namespace dgrr::checkpoint
