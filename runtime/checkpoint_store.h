// CheckpointStore: where a Session's checkpoints go and come from.
//
// The session (runtime/) decides *when* to checkpoint and *what* the state is
// (its StateRegistry); the store decides *how* it is kept on disk. The HDF5
// store lives in checkpoint/ (checkpoint/session_store.h), one layer up, and
// dgrr::Open (<dgrr/dgrr.h>) hands it to the session, so runtime/ never
// depends on the file format and tests can substitute a store that fails.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/state_registry.h"

namespace dgrr {

// One rank's live state at the checkpointed step.
struct CheckpointRankState {
  int rank = 0;
  const StateRegistry* state = nullptr;
  uint64_t trace_position = 0;  // index of the rank's next trace record
  // XXH3-64 (seed 0) of the entries the session has just hashed, by name
  // (its replicated ones, fingerprinted to compare them across ranks), so a
  // store need not hash them again. Null: none.
  const std::map<std::string, uint64_t>* known_xxh3 = nullptr;
};

// One rank's part of the checkpoint of a step: every rank asks its store to
// write its own shard, from its own memory (ranks may be processes).
struct CheckpointRequest {
  std::string run_dir;
  uint64_t step = 0;
  uint64_t config_digest = 0;
  std::string run_id_hex;
  int world_size = 1;
  std::string plan_json;  // the fast-forward plan, when the program has one ("" otherwise)
  CheckpointRankState rank;  // the calling rank's state
};

// What a written shard is, as the committing rank lists it (the ranks'
// sessions exchange these over their communicators; nothing else crosses).
struct CheckpointShard {
  int rank = 0;
  uint64_t bytes = 0;           // the shard's size
  uint64_t payload_xxh3 = 0;    // its content hash
  uint64_t trace_position = 0;  // index of the rank's next trace record
  uint64_t state_digest = 0;    // digest of the state the rank restores
  // How many replicated entries the shard holds (a store spreads them over
  // the ranks' shards; its commit lists where); -1 when the store does not say.
  int64_t replicated_entries = -1;
};

// A checkpoint read back and verified, ready to restore from.
class LoadedCheckpoint {
 public:
  virtual ~LoadedCheckpoint() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t step() const = 0;
  virtual uint64_t config_digest() const = 0;
  virtual int world_size() const = 0;
  // Where rank `rank`'s trace stood when the checkpoint was taken.
  virtual uint64_t trace_position(int rank) const = 0;
  // Copies rank `rank`'s saved state into the registered buffers of `into`
  // (entries restored from checkpoints); everything is checked before
  // anything is copied.
  virtual Status Restore(int rank, StateRegistry& into) const = 0;
};

// A full tensor captured at a boundary, for a control file's dump request.
struct CapturedTensor {
  uint64_t example_first = 0;
  uint32_t example_count = 0;
  std::string phase;             // trace phase name
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  uint64_t xor64 = 0, xxh3 = 0;  // as recorded
  std::vector<uint8_t> bytes;
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Writes the calling rank's shard of the checkpoint of `request.step`
  // durably. It is not a checkpoint yet: Commit makes it one.
  virtual StatusOr<CheckpointShard> WriteShard(const CheckpointRequest& request) = 0;
  // Rank 0, once every rank's WriteShard has succeeded: commits the
  // checkpoint (docs/checkpoint-format.md: the manifest, written last). A
  // step whose commit never happened does not exist for Load or FindNewest.
  virtual Status Commit(const CheckpointRequest& request, const std::vector<CheckpointShard>& shards) = 0;
  // Reads and verifies the checkpoint file at `path`.
  virtual StatusOr<std::unique_ptr<LoadedCheckpoint>> Load(const std::string& path) = 0;
  // The newest checkpoint of `run_dir` with step <= max_step that reads and
  // verifies. Without `fallback` a damaged newest one is an error; with it,
  // older ones are tried. NotFound when the run has none.
  virtual StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewest(const std::string& run_dir, bool fallback,
                                                                 uint64_t max_step = UINT64_MAX) = 0;
  // Every rank's verdict on one checkpoint a job's ranks read in parts: each
  // rank calls it with the result of reading its own part; OK when every
  // rank read its part, else an error (its own, or one naming a rank that
  // failed). Every rank calls it for the same checkpoints in the same order.
  using Agreement = std::function<Status(const std::string& path, const Status& mine)>;
  // FindNewest and Load for rank `rank` of a job of several ranks, each of
  // which calls them: a store may then read only what this rank restores
  // (verifying it as Load does), leaving the other parts to their ranks, and
  // settle each checkpoint it tries through `agree`, so that the ranks fall
  // back, fail or resume together. The returned checkpoint need only restore
  // `rank`. By default the whole checkpoint, as FindNewest and Load.
  virtual StatusOr<std::unique_ptr<LoadedCheckpoint>> FindNewestForRank(const std::string& run_dir, bool fallback,
                                                                        int rank, const Agreement& agree,
                                                                        uint64_t max_step = UINT64_MAX) {
    (void)rank;
    (void)agree;
    return FindNewest(run_dir, fallback, max_step);
  }
  virtual StatusOr<std::unique_ptr<LoadedCheckpoint>> LoadForRank(const std::string& path, int rank,
                                                                  const Agreement& agree) {
    (void)rank;
    (void)agree;
    return Load(path);
  }
  // Removes what writers killed mid-write left behind in `run_dir`.
  virtual Status RemoveTemporaries(const std::string& run_dir) = 0;
  // Writes the tensors of one boundary at one step (docs/tensor-dump.md).
  virtual Status WriteTensorDump(const std::string& path, const std::string& run_dir,
                                 const std::string& boundary, uint64_t step, int rank,
                                 const std::vector<CapturedTensor>& tensors) = 0;
};

}  // namespace dgrr
