// dgrr checkpoint files (docs/checkpoint-format.md, "dgrr checkpoint v1"): one
// HDF5 file per checkpointed step with the saved state of every rank,
// zstd-compressed (filter 32015), each dataset carrying the XXH3-64 of its
// bytes, preceded by a 512-byte user block whose header covers the whole file
// with a hash so damaged files are refused before libhdf5 parses them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/checkpoint_store.h"
#include "runtime/state_registry.h"

namespace dgrr::checkpoint {

// v3: per-rank shard files committed by a manifest, the replicated entries
// spread over the shards (what trainers and sessions write); v2: the same
// with every replicated entry in rank 0's shard (still read, and written on
// request); v1: one file holding every rank (still read, and written by
// WriteCheckpoint for callers holding every rank's state in memory).
inline constexpr uint32_t kCheckpointFormatVersion = 3;
inline constexpr uint32_t kRankZeroReplicatedFormatVersion = 2;
inline constexpr uint32_t kSingleFileFormatVersion = 1;
inline constexpr uint64_t kCheckpointUserBlockBytes = 512;

// One rank's live state at the checkpointed step (the runtime's
// CheckpointRankState: rank, state, trace position, hashes already known).
using RankSnapshot = CheckpointRankState;

struct CheckpointMeta {
  uint64_t step = 0;
  uint64_t config_digest = 0;
  std::string run_id_hex;
  int world_size = 1;
  std::string plan_json;  // the fast-forward plan (PlansToJson), stored verbatim
};

struct CheckpointWriteOptions {
  // zstd level for every dataset (negative = zstd's fast levels). Chosen by
  // measurement on float weights (bench/README.md, section checkpoint).
  int zstd_level = -3;
  uint64_t chunk_bytes = 1 << 20;  // target uncompressed bytes per HDF5 chunk
  int threads = 0;                 // compression threads; 0 = min(cores, 8)
  // Sharded writers (WriteCheckpointShard, CommitCheckpoint): 3, or 2 for a
  // checkpoint an older dgrr reads (every replicated entry in rank 0's shard).
  uint32_t format_version = kCheckpointFormatVersion;
  // v3: the replicated entries go to the shards in shares of about
  // total / world_size bytes, but of no less than this (a small
  // replicated state stays whole in rank 0's shard).
  // Every rank of one checkpoint must use the same value.
  uint64_t replicated_share_min_bytes = 4 << 20;
  // Test hook for fault injection: called with "before-header" once libhdf5
  // has written the temporary file and before its header is stamped; a
  // non-OK result aborts the write there.
  std::function<Status(const char* stage)> fault_hook;
};

// Where a deferred entry's bytes are: its shard file, verified whole, and
// the dataset (defined in checkpoint_file.cc).
struct EntrySource;

// How a reader treats the entries' bytes. kRead: every entry's bytes are
// read and checked against its hash. kDeferred (shards of v2/v3 only; a v1
// file is read whole): each shard is still verified whole (header and
// payload hash) and every dataset's metadata read and checked, but the
// bytes stay in the file until RestoreRank reads them straight into the
// registered buffers (checking each one's hash there), which saves a copy of
// the state and the memory for it.
enum class EntryData { kRead, kDeferred };

// One saved state entry as read back.
struct SavedEntry {
  std::string name;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;  // as registered (empty when none was given)
  StateRole role = StateRole::kOther;
  bool replicated = false;
  uint64_t xxh3 = 0;           // XXH3-64 (seed 0) of data, verified on load
  std::vector<uint8_t> data;   // empty while deferred
  // Read with EntryData::kDeferred: where the bytes are, and how many.
  std::shared_ptr<const EntrySource> deferred;
  uint64_t deferred_bytes = 0;
  uint64_t size() const { return deferred ? deferred_bytes : data.size(); }
};

struct SavedRank {
  int rank = 0;
  uint64_t trace_position = 0;
  uint64_t state_digest = 0;         // StateDigest of what this rank restores
  std::vector<SavedEntry> entries;   // this rank's own (non-replicated) entries, by name
};

struct Checkpoint {
  std::string path;
  CheckpointMeta meta;
  std::string dgrr_version;          // of the writer
  uint64_t state_digest = 0;         // CombineStateDigests over ranks
  std::vector<SavedEntry> replicated;  // stored once for all ranks, by name
  std::vector<SavedRank> ranks;        // index == rank
  // -1: every rank's entries were read (ReadCheckpoint). r: only rank r's
  // (ReadCheckpointForRank); the other ranks hold their trace position and
  // digest from the manifest and no entries.
  int loaded_rank = -1;
  // The entry `name` as rank `rank` restores it (replicated or own); null if absent.
  const SavedEntry* Find(int rank, const std::string& name) const;
};

// What the user block says, verified (header hash, file length) but without
// reading the rest: cheap enough for bisect to compare many checkpoints.
struct CheckpointHeader {
  uint32_t format_version = 0;
  uint64_t file_length = 0;
  uint64_t payload_xxh3 = 0;
  uint64_t step = 0;
  uint64_t state_digest = 0;
};

// RUN_DIR/ckpt/step-00000040.h5
std::string CheckpointPath(const std::string& run_dir, uint64_t step);

// Writes a v1 single-file checkpoint (every rank's state in this process's
// memory) atomically (temporary in the same directory, fsync, rename, fsync dir).
// Saves entries with restore == kCheckpoint; replicated entries once, after
// checking every rank holds them bitwise identical (FailedPrecondition naming
// the entry and the ranks otherwise). `ranks` holds ranks 0..world_size-1.
Status WriteCheckpoint(const std::string& path, const CheckpointMeta& meta,
                       const std::vector<RankSnapshot>& ranks,
                       const CheckpointWriteOptions& options = {});

// --- v2: per-rank shards committed by a manifest (docs/checkpoint-format.md) ---

// What the manifest lists for one rank's shard (the runtime's
// CheckpointShard): the shard file's length, its header's payload hash (bytes
// 512..end), the rank's next trace record, its StateDigest, and (v3) how many
// replicated entries the shard holds (-1: a v2 manifest, which does not say;
// its replicated entries are all in rank 0's shard).
using ShardRecord = CheckpointShard;

// RUN_DIR/ckpt/step-00000040.h5 -> RUN_DIR/ckpt/step-00000040.rank-1.h5
std::string ShardPath(const std::string& manifest_path, int rank);

// Writes rank `rank.rank`'s shard of the checkpoint whose manifest will be
// `path`, durably (temporary, fsync, rename, fsync dir): its own entries and
// its share of the replicated ones (v3: ReplicatedShareOwners; v2: all of
// them on rank 0). The caller has checked that the ranks' replicated entries
// agree (by digests: nothing here compares memory).
StatusOr<ShardRecord> WriteCheckpointShard(const std::string& path, const CheckpointMeta& meta,
                                           const RankSnapshot& rank, const CheckpointWriteOptions& options = {});

// Which shard holds each replicated entry in a v3 checkpoint: the entries in
// name order (byte order), `bytes` their sizes in that order; share = the
// larger of ceil(total / world_size) and `min_share`; an entry whose first
// byte lies at offset s of the entries laid end to end goes to rank
// min(world_size - 1, s / share). Every rank computes the same from the
// layout the ranks have agreed on. Returns the owning rank per entry.
std::vector<int> ReplicatedShareOwners(const std::vector<uint64_t>& bytes, int world_size, uint64_t min_share);

// Rank 0, once every rank's WriteCheckpointShard has returned: writes the
// manifest `path` atomically, listing every shard with its size and hash.
// The checkpoint exists from the rename of this file on.
Status CommitCheckpoint(const std::string& path, const CheckpointMeta& meta, std::vector<ShardRecord> shards,
                        const CheckpointWriteOptions& options = {});

// Writes the state of a loaded checkpoint (ReadCheckpoint) to `path` as a new
// checkpoint, atomically like WriteCheckpoint, with `meta` in place of the
// source's and rank r's trace position set to trace_positions[r]. The saved
// entries go out byte for byte as loaded, so the new file's state digest
// equals the source's. Rollback uses it: the state re-executed in a scratch
// directory belongs in the run directory with the run's own trace positions.
// InvalidArgument when meta.world_size or trace_positions do not match the
// source's ranks.
Status RewriteCheckpoint(const Checkpoint& source, const std::string& path,
                         const CheckpointMeta& meta, const std::vector<uint64_t>& trace_positions,
                         const CheckpointWriteOptions& options = {});

// Reads and fully verifies a checkpoint, v1 (one file) or v2 (`path` is the
// manifest; every shard it lists is read and checked against it). Damage is
// Corruption naming the file and the offset (structural) or the dataset
// (content); a missing shard names the shard's file.
StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, EntryData data = EntryData::kRead);
StatusOr<CheckpointHeader> ReadCheckpointHeader(const std::string& path);

// What rank `rank` restores, for a job whose ranks each read their own part
// and then agree (a Session over its communicator): v2/v3: the manifest and
// rank `rank`'s shard, verified as ReadCheckpoint verifies them, and, when
// `rank`'s digest covers replicated entries, every other shard holding some
// (v3: those the manifest lists with any; v2: rank 0's). No other shard is
// read: each rank verifies its own, so every byte of the checkpoint is still
// checked by some reader. The result has loaded_rank == rank. v1 (one
// file): the whole file, as ReadCheckpoint.
StatusOr<Checkpoint> ReadCheckpointForRank(const std::string& path, int rank, EntryData data = EntryData::kRead);

// Every rank's verdict on one checkpoint: called by each rank with the result
// of its own read (ReadCheckpointForRank); returns OK when every rank read
// its part, else an error (the caller's own, or one naming a rank that
// failed). Every rank calls it the same number of times, in the same order.
using CheckpointAgreement = std::function<Status(const std::string& path, const Status& mine)>;

// One v2 or v3 shard file read on its own (dgrr diff-tensor): its header,
// payload hash, root attributes, groups and every dataset's hash are
// verified. Rank r's digest covers every replicated entry, and those may lie
// in other shards, so it is checked here only where they cannot: rank 0 of
// a v2 checkpoint, or a checkpoint of one rank (ReadCheckpoint checks every
// rank's).
struct SavedShard {
  std::string path;
  CheckpointMeta meta;                 // plan_json empty: the manifest holds it
  std::string dgrr_version;
  uint64_t state_digest = 0;           // this rank's
  int rank = 0;
  std::vector<SavedEntry> replicated;  // the replicated entries this shard holds
  SavedRank own;
};
StatusOr<SavedShard> ReadCheckpointShard(const std::string& path);

// Copies rank `rank`'s saved state into the registered buffers of `into`
// (entries with restore == kCheckpoint, except those in `skip`). Everything is
// checked before anything is copied: an entry missing on either side, or a
// dtype/size/shape mismatch, is FailedPrecondition naming the entry. Deferred
// entries are read from their shard straight into the buffers, each checked
// against its hash after it lands: a shard replaced or altered since it was
// verified is then an error with part of the state already restored (the
// caller must not go on from it; nothing a dgrr writer does alters a
// committed shard).
Status RestoreRank(const Checkpoint& checkpoint, int rank, StateRegistry& into,
                   const std::set<std::string>& skip = {});

// Steps of RUN_DIR/ckpt/step-*.h5, ascending (empty when there is no ckpt dir).
StatusOr<std::vector<uint64_t>> ListCheckpointSteps(const std::string& run_dir);

// Removes the temporaries a writer killed before its rename left in
// RUN_DIR/ckpt, and the shards of steps without a manifest (never a
// committed checkpoint); returns how many.
StatusOr<int> RemoveStaleTemporaries(const std::string& run_dir);

// The newest checkpoint with step <= max_step that reads and verifies,
// loaded (its path in .path), so callers never read it twice. Without
// `fallback` the newest one's error is returned, prefixed with its step and a
// hint to pass --fallback; with it older ones are tried and the errors of
// those passed over go to `skipped` (when given). NotFound when there is none.
StatusOr<Checkpoint> FindNewestGoodCheckpoint(const std::string& run_dir, uint64_t max_step,
                                              bool fallback, std::vector<std::string>* skipped = nullptr,
                                              EntryData data = EntryData::kRead);

// The same search by rank `rank` of a job: each rank reads its part
// (ReadCheckpointForRank) and `agree` settles each candidate for all ranks
// at once, so they fall back together and resume from the same step.
StatusOr<Checkpoint> FindNewestGoodCheckpointForRank(const std::string& run_dir, uint64_t max_step, bool fallback,
                                                     int rank, const CheckpointAgreement& agree,
                                                     EntryData data = EntryData::kRead);

// Digest of the state one rank restores (its kCheckpoint entries, replicated
// ones included), independent of registration order: XXH3-64 over the entries
// sorted by name (docs/checkpoint-format.md gives the bytes).
uint64_t StateDigest(const StateRegistry& state);
// The checkpoint's overall digest from the per-rank digests (rank order).
uint64_t CombineStateDigests(const std::vector<uint64_t>& rank_digests);

}  // namespace dgrr::checkpoint
