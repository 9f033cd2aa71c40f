#include "checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <xxhash.h>

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <optional>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "base/coding.h"
#include "base/file.h"
#include "base/version.h"
#include "checkpoint/file_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/zstd_filter.h"
#include "fingerprint/fingerprint.h"

namespace dgrr::checkpoint {
namespace {

// ---------------------------------------------------------------------------
// The user-block header (docs/checkpoint-format.md, "User block").
// ---------------------------------------------------------------------------
constexpr char kMagic[8] = {'D', 'G', 'R', 'R', 'C', 'K', 'P', 'T'};
constexpr uint32_t kHeaderBytes = 64;
constexpr size_t kOffVersion = 8, kOffHeaderBytes = 12, kOffUserBlock = 16, kOffFileLength = 24,
                 kOffPayloadHash = 32, kOffStep = 40, kOffStateDigest = 48, kOffHeaderHash = 56;
constexpr const char* kFormatName = "dgrr checkpoint";
constexpr const char* kShardFormatName = "dgrr checkpoint shard";
constexpr int kMaxDims = 32;
constexpr uint64_t kMaxWorldSize = 1 << 16;

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string FileNameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void EncodeHeader(uint8_t* block, uint32_t version, uint64_t file_length, uint64_t payload_hash, uint64_t step,
                  uint64_t state_digest) {
  std::memset(block, 0, kCheckpointUserBlockBytes);
  std::memcpy(block, kMagic, sizeof kMagic);
  EncodeFixed32(block + kOffVersion, version);
  EncodeFixed32(block + kOffHeaderBytes, kHeaderBytes);
  EncodeFixed64(block + kOffUserBlock, kCheckpointUserBlockBytes);
  EncodeFixed64(block + kOffFileLength, file_length);
  EncodeFixed64(block + kOffPayloadHash, payload_hash);
  EncodeFixed64(block + kOffStep, step);
  EncodeFixed64(block + kOffStateDigest, state_digest);
  EncodeFixed64(block + kOffHeaderHash, Xxh3(block, kOffHeaderHash));
}

// Checks the header's own fields; `actual_length` is the file's size.
StatusOr<CheckpointHeader> DecodeHeader(const std::string& path, const uint8_t* block,
                                        size_t available, uint64_t actual_length) {
  auto bad = [&](uint64_t offset, const std::string& why) {
    return Status::Corruption(path + ": offset " + std::to_string(offset) + ": " + why);
  };
  if (available < kCheckpointUserBlockBytes) {
    return bad(available, "file is " + std::to_string(actual_length) +
                              " bytes, shorter than the 512-byte checkpoint header (truncated)");
  }
  if (std::memcmp(block, kMagic, sizeof kMagic) != 0) {
    return bad(0, "bad magic: not a dgrr checkpoint");
  }
  const uint8_t* p = block;
  const uint64_t header_hash = DecodeFixed64(p + kOffHeaderHash);
  if (header_hash != Xxh3(block, kOffHeaderHash)) return bad(kOffHeaderHash, "header hash mismatch");
  CheckpointHeader h;
  h.format_version = DecodeFixed32(p + kOffVersion);
  if (h.format_version != kCheckpointFormatVersion && h.format_version != kRankZeroReplicatedFormatVersion &&
      h.format_version != kSingleFileFormatVersion) {
    return bad(kOffVersion, "unsupported format version " + std::to_string(h.format_version));
  }
  if (DecodeFixed32(p + kOffHeaderBytes) != kHeaderBytes ||
      DecodeFixed64(p + kOffUserBlock) != kCheckpointUserBlockBytes) {
    return bad(kOffHeaderBytes, "unexpected header or user-block size");
  }
  for (size_t i = kHeaderBytes; i < kCheckpointUserBlockBytes; ++i) {
    if (block[i] != 0) return bad(i, "nonzero byte in the reserved part of the user block");
  }
  h.file_length = DecodeFixed64(p + kOffFileLength);
  h.payload_xxh3 = DecodeFixed64(p + kOffPayloadHash);
  h.step = DecodeFixed64(p + kOffStep);
  h.state_digest = DecodeFixed64(p + kOffStateDigest);
  if (h.file_length != actual_length) {
    return bad(std::min(h.file_length, actual_length),
               "file is " + std::to_string(actual_length) + " bytes but its header says " +
                   std::to_string(h.file_length) +
                   (actual_length < h.file_length ? " (truncated)" : " (trailing bytes)"));
  }
  return h;
}

// ---------------------------------------------------------------------------
// Digests.
// ---------------------------------------------------------------------------
struct DigestItem {
  const std::string* name;
  DType dtype;
  const std::vector<int64_t>* shape;
  uint64_t bytes;
  uint64_t xxh3;
};

void AppendEntryRecord(std::string& out, const DigestItem& item) {
  PutFixed32(&out, static_cast<uint32_t>(item.name->size()));
  out += *item.name;
  out.push_back(static_cast<char>(item.dtype));
  PutFixed32(&out, static_cast<uint32_t>(item.shape->size()));
  for (int64_t d : *item.shape) PutFixed64(&out, static_cast<uint64_t>(d));
  PutFixed64(&out, item.bytes);
  PutFixed64(&out, item.xxh3);
}

uint64_t DigestOfItems(std::vector<DigestItem> items) {
  std::sort(items.begin(), items.end(),
            [](const DigestItem& a, const DigestItem& b) { return *a.name < *b.name; });
  std::string records;
  for (const DigestItem& item : items) AppendEntryRecord(records, item);
  return Xxh3(records.data(), records.size());
}

DigestItem ItemOf(const SavedEntry& e) {
  return {&e.name, e.dtype, &e.shape, e.size(), e.xxh3};
}

// Whether a rank's digest covers the replicated entries and its own.
bool DigestCovers(const SavedRank& rank, const std::vector<SavedEntry>& replicated) {
  std::vector<DigestItem> items;
  for (const SavedEntry& e : replicated) items.push_back(ItemOf(e));
  for (const SavedEntry& e : rank.entries) items.push_back(ItemOf(e));
  return DigestOfItems(std::move(items)) == rank.state_digest;
}

// Rank r's digest (in its shard at `path`) against every replicated entry and its own.
Status CheckRankDigest(const std::string& path, const SavedRank& rank, const std::vector<SavedEntry>& replicated) {
  if (DigestCovers(rank, replicated)) return Status::OK();
  return Status::Corruption(path + ": /ranks/" + std::to_string(rank.rank) +
                            ": state_digest does not match the saved entries");
}

// ---------------------------------------------------------------------------
// Writing: plan the datasets, compress their chunks in parallel, build the
// HDF5 file, stamp the header, commit atomically.
// ---------------------------------------------------------------------------
struct DatasetPlan {
  std::string group;  // "/replicated", "/ranks/3", "/meta"
  std::string name;
  DType dtype = DType::kUnknown;
  StateRole role = StateRole::kOther;
  size_t element_size = 1;
  bool has_shape = false;
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;  // empty: contiguous (zero-byte datasets)
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  std::string Path() const { return group + "/" + name; }
};

struct ChunkJob {
  size_t dataset = 0;
  std::vector<hsize_t> offset;  // element coordinates of the chunk's origin
  std::vector<uint8_t> stored;  // compressed frame, or a gathered raw edge chunk
  const uint8_t* raw_in_place = nullptr;  // raw chunk stored straight from the source
  uint64_t raw_bytes = 0;
  uint32_t filter_mask = 0;     // 1: stored raw (zstd skipped; the filter is optional)
  const uint8_t* bytes() const { return raw_in_place ? raw_in_place : stored.data(); }
  uint64_t size() const { return raw_in_place ? raw_bytes : stored.size(); }
};

Status ValidateName(const std::string& name) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos) {
    return Status::InvalidArgument("state entry name '" + name +
                                   "' cannot be an HDF5 dataset name (empty, '.' or contains '/')");
  }
  return Status::OK();
}

// Chunk shape: whole trailing dimensions where possible, so a chunk is one
// contiguous run of the row-major array; rows balanced to limit edge padding.
std::vector<hsize_t> ChooseChunk(const std::vector<hsize_t>& dims, size_t element_size,
                                 uint64_t target_bytes) {
  std::vector<hsize_t> chunk = dims;
  const uint64_t target = std::max<uint64_t>(target_bytes, element_size);
  for (size_t i = 0; i < dims.size(); ++i) {
    uint64_t inner = element_size;
    for (size_t j = i + 1; j < dims.size(); ++j) inner *= dims[j];
    if (dims[i] * inner <= target) break;
    if (inner <= target) {
      const uint64_t max_rows = target / inner;
      const uint64_t pieces = (dims[i] + max_rows - 1) / max_rows;
      chunk[i] = (dims[i] + pieces - 1) / pieces;
      break;
    }
    chunk[i] = 1;
  }
  return chunk;
}

// `known_xxh3`: the bytes' XXH3-64 when the caller has it (not hashed again).
StatusOr<DatasetPlan> PlanDataset(std::string group, const std::string& name, DType dtype,
                                  StateRole role, const std::vector<int64_t>& shape,
                                  const void* data, uint64_t bytes, uint64_t chunk_bytes,
                                  const uint64_t* known_xxh3 = nullptr) {
  DGRR_RETURN_IF_ERROR(ValidateName(name));
  DatasetPlan plan;
  plan.group = std::move(group);
  plan.name = name;
  plan.dtype = dtype;
  plan.role = role;
  plan.element_size = StoredElementSize(dtype);
  plan.data = static_cast<const uint8_t*>(data);
  plan.bytes = bytes;
  if (!shape.empty()) {
    if (shape.size() > static_cast<size_t>(kMaxDims)) {
      return Status::InvalidArgument("state entry '" + name + "' has more than 32 dimensions");
    }
    uint64_t elements = 1;
    for (int64_t d : shape) {
      if (d < 0) return Status::InvalidArgument("state entry '" + name + "' has a negative dimension");
      elements *= static_cast<uint64_t>(d);
      plan.dims.push_back(static_cast<hsize_t>(d));
    }
    if (elements * plan.element_size != bytes) {
      return Status::InvalidArgument("state entry '" + name + "': shape does not match its " +
                                     std::to_string(bytes) + " bytes");
    }
    plan.has_shape = true;
  } else {
    if (bytes % plan.element_size != 0) {
      return Status::InvalidArgument("state entry '" + name + "': " + std::to_string(bytes) +
                                     " bytes is not a whole number of elements");
    }
    plan.dims = {static_cast<hsize_t>(bytes / plan.element_size)};
  }
  plan.xxh3 = known_xxh3 != nullptr ? *known_xxh3 : Xxh3(data, bytes);
  if (bytes > 0) plan.chunk = ChooseChunk(plan.dims, plan.element_size, chunk_bytes);
  return plan;
}

// Copies the part of the row-major array inside the chunk at `offset` into a
// zero-filled chunk buffer (HDF5 stores edge chunks full-size).
void GatherChunk(const DatasetPlan& ds, const std::vector<hsize_t>& offset, size_t dim,
                 const uint8_t* src, uint8_t* dst) {
  uint64_t src_inner = ds.element_size, dst_inner = ds.element_size;
  for (size_t j = dim + 1; j < ds.dims.size(); ++j) {
    src_inner *= ds.dims[j];
    dst_inner *= ds.chunk[j];
  }
  const hsize_t count = std::min(ds.chunk[dim], ds.dims[dim] - offset[dim]);
  src += offset[dim] * src_inner;
  if (dim + 1 == ds.dims.size()) {
    std::memcpy(dst, src, count * ds.element_size);
    return;
  }
  for (hsize_t i = 0; i < count; ++i) {
    GatherChunk(ds, offset, dim + 1, src + i * src_inner, dst + i * dst_inner);
  }
}

std::vector<ChunkJob> ListChunks(const std::vector<DatasetPlan>& datasets) {
  std::vector<ChunkJob> jobs;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const DatasetPlan& ds = datasets[d];
    if (ds.chunk.empty()) continue;
    std::vector<hsize_t> offset(ds.dims.size(), 0);
    bool more = true;
    while (more) {
      jobs.push_back({d, offset, {}, 0});
      more = false;
      for (size_t k = ds.dims.size(); k-- > 0;) {  // odometer over the chunk grid
        offset[k] += ds.chunk[k];
        if (offset[k] < ds.dims[k]) {
          more = true;
          break;
        }
        offset[k] = 0;
      }
    }
  }
  return jobs;
}

// A chunk that lies wholly inside the array and spans its trailing dimensions
// is one contiguous run of the source: compressed (or stored) without a copy.
const uint8_t* ContiguousSource(const DatasetPlan& ds, const std::vector<hsize_t>& offset) {
  if (offset[0] + ds.chunk[0] > ds.dims[0]) return nullptr;
  uint64_t row_bytes = ds.element_size;
  for (size_t j = 1; j < ds.dims.size(); ++j) {
    if (ds.chunk[j] != ds.dims[j]) return nullptr;
    row_bytes *= ds.dims[j];
  }
  return ds.data + offset[0] * row_bytes;
}

// `scratch` is the worker's reusable output buffer: float weights barely
// compress, and fresh multi-megabyte buffers per chunk cost page faults.
void CompressChunk(const std::vector<DatasetPlan>& datasets, int level, ChunkJob& job,
                   std::vector<uint8_t>& scratch) {
  const DatasetPlan& ds = datasets[job.dataset];
  uint64_t chunk_bytes = ds.element_size;
  for (hsize_t c : ds.chunk) chunk_bytes *= c;
  const uint8_t* src = ContiguousSource(ds, job.offset);
  if (src == nullptr) {
    job.stored.assign(chunk_bytes, 0);
    GatherChunk(ds, job.offset, 0, ds.data, job.stored.data());
    src = job.stored.data();
  }
  if (scratch.size() < ZstdChunkBound(chunk_bytes)) scratch.resize(ZstdChunkBound(chunk_bytes));
  const size_t n = ZstdCompressChunk(level, src, chunk_bytes, scratch.data(), scratch.size());
  if (n > 0 && n < chunk_bytes) {
    job.stored.assign(scratch.begin(), scratch.begin() + n);
  } else {
    // Incompressible (or a zstd failure): stored raw, marked in the chunk's filter mask.
    job.filter_mask = 1;
    if (src != job.stored.data()) {
      job.raw_in_place = src;
      job.raw_bytes = chunk_bytes;
    }
  }
}

// Chunks are independent, so the bytes do not depend on the thread count.
void CompressAll(const std::vector<DatasetPlan>& datasets, int level, int threads,
                 std::vector<ChunkJob>& jobs) {
  if (threads <= 0) threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  threads = static_cast<int>(std::min<size_t>(threads, jobs.size()));
  if (threads <= 1) {
    std::vector<uint8_t> scratch;
    for (ChunkJob& job : jobs) CompressChunk(datasets, level, job, scratch);
    return;
  }
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<uint8_t> scratch;
      for (size_t i = t; i < jobs.size(); i += threads) CompressChunk(datasets, level, jobs[i], scratch);
    });
  }
  for (std::thread& w : workers) w.join();
}

Status WriteDatasetAttributes(hid_t dset, const DatasetPlan& ds) {
  const std::string what = "dataset " + ds.Path();
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(dset, "xxh3", ds.xxh3, what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(dset, "bytes", ds.bytes, what));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(dset, "dtype", std::string(DTypeName(ds.dtype)), what));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(dset, "role", StateRoleName(ds.role), what));
  return WriteU64Attribute(dset, "has_shape", ds.has_shape ? 1 : 0, what);
}

Status CreateDataset(hid_t file, const std::string& file_path, const DatasetPlan& ds, int level,
                     H5Handle& out) {
  const std::string what = "dataset " + ds.Path();
  H5Handle space(H5Screate_simple(static_cast<int>(ds.dims.size()), ds.dims.data(), nullptr));
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!ds.chunk.empty()) {
    const unsigned cd_level = static_cast<unsigned>(level);
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(ds.chunk.size()), ds.chunk.data()) < 0 ||
        H5Pset_filter(dcpl.get(), kZstdFilterId, H5Z_FLAG_OPTIONAL, 1, &cd_level) < 0) {
      return Hdf5WriteFailure(file_path, "chunk/filter settings for " + what);
    }
  }
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  H5Pset_obj_track_times(dcpl.get(), false);  // same state, same bytes
  out = H5Handle(H5Dcreate2(file, ds.Path().c_str(), Hdf5TypeFor(ds.dtype), space.get(),
                            H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!out.valid()) return Hdf5WriteFailure(file_path, "creating " + what);
  return WriteDatasetAttributes(out.get(), ds);
}

Status WriteRootAttributes(hid_t f, const char* format, uint32_t version, const CheckpointMeta& meta,
                           uint64_t state_digest) {
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "format", format, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "format_version", version, "/"));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "dgrr_version", DGRR_VERSION_STRING, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "step", meta.step, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "config_digest", meta.config_digest, "/"));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "run_id", meta.run_id_hex, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "world_size", static_cast<uint64_t>(meta.world_size), "/"));
  return WriteU64Attribute(f, "state_digest", state_digest, "/");
}

struct RankPlan {
  int rank = 0;
  uint64_t trace_position = 0;
  uint64_t state_digest = 0;
};

// Writes the HDF5 file (user block still blank) to `tmp_path` with the sec2
// driver: chunks go from our buffers to the file with no intermediate image.
// (H5Fget_file_image is not used: with a user block, HDF5 1.10.8 hands out an
// image whose superblock checksum is wrong.)
// What kind of file WriteHdf5File makes: a v1 single-file checkpoint (every
// rank, /meta) or a v2 shard (one rank, no /meta, a `rank` attribute).
struct FileKind {
  const char* format = kFormatName;
  uint32_t version = kSingleFileFormatVersion;
  int shard_rank = -1;  // >= 0: a shard of this rank
};

Status WriteHdf5File(const std::string& tmp_path, const FileKind& kind, const CheckpointMeta& meta,
                     uint64_t state_digest, const std::vector<RankPlan>& ranks,
                     const std::vector<DatasetPlan>& datasets, const std::vector<ChunkJob>& chunks, int level) {
  DGRR_RETURN_IF_ERROR(InitHdf5());
  auto lock = LockHdf5();
  DGRR_ASSIGN_OR_RETURN(H5Handle file, CreateHdf5File(tmp_path, kCheckpointUserBlockBytes));
  const hid_t f = file.get();
  DGRR_RETURN_IF_ERROR(WriteRootAttributes(f, kind.format, kind.version, meta, state_digest));
  if (kind.shard_rank >= 0) {
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "rank", static_cast<uint64_t>(kind.shard_rank), "/"));
  }

  std::vector<std::string> groups = {"/replicated", "/ranks"};
  if (kind.shard_rank < 0) groups.insert(groups.begin(), "/meta");
  for (const RankPlan& r : ranks) groups.push_back("/ranks/" + std::to_string(r.rank));
  H5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl.get(), false);
  for (const std::string& g : groups) {
    H5Handle group(H5Gcreate2(f, g.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
    if (!group.valid()) return Hdf5WriteFailure(tmp_path, "creating group " + g);
  }
  for (const RankPlan& r : ranks) {
    const std::string g = "/ranks/" + std::to_string(r.rank);
    H5Handle group(H5Gopen2(f, g.c_str(), H5P_DEFAULT));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(group.get(), "trace_position", r.trace_position, g));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(group.get(), "state_digest", r.state_digest, g));
  }
  std::vector<H5Handle> handles(datasets.size());
  for (size_t d = 0; d < datasets.size(); ++d) {
    DGRR_RETURN_IF_ERROR(CreateDataset(f, tmp_path, datasets[d], level, handles[d]));
  }
  for (const ChunkJob& job : chunks) {
    if (H5Dwrite_chunk(handles[job.dataset].get(), H5P_DEFAULT, job.filter_mask, job.offset.data(),
                       job.size(), job.bytes()) < 0) {
      return Hdf5WriteFailure(tmp_path, "writing a chunk of dataset " + datasets[job.dataset].Path());
    }
  }
  handles.clear();
  if (H5Fclose(file.Release()) < 0) return Hdf5WriteFailure(tmp_path, "write (on close)");
  return Status::OK();
}

// Collects the datasets to save, checking replicated entries agree bitwise.
Status PlanState(const CheckpointMeta& meta, const std::vector<RankSnapshot>& ranks,
                 const CheckpointWriteOptions& options, std::vector<DatasetPlan>& datasets,
                 std::vector<RankPlan>& rank_plans) {
  if (meta.world_size < 1 || static_cast<uint64_t>(meta.world_size) > kMaxWorldSize ||
      ranks.size() != static_cast<size_t>(meta.world_size)) {
    return Status::InvalidArgument("checkpoint: world_size " + std::to_string(meta.world_size) +
                                   " but " + std::to_string(ranks.size()) + " rank snapshots");
  }
  std::vector<const RankSnapshot*> by_rank(ranks.size(), nullptr);
  for (const RankSnapshot& r : ranks) {
    if (r.rank < 0 || r.rank >= meta.world_size || by_rank[r.rank] != nullptr || r.state == nullptr) {
      return Status::InvalidArgument("checkpoint: rank snapshots must be ranks 0.." +
                                     std::to_string(meta.world_size - 1) + ", each once, with state");
    }
    by_rank[r.rank] = &r;
  }
  // Replicated entries: rank 0's copy is saved once; every other rank must
  // register the same entry with identical metadata and bytes.
  std::map<std::string, std::pair<int, const StateEntry*>> replicated;
  for (const RankSnapshot* r : by_rank) {
    for (const StateEntry& e : r->state->entries()) {
      if (e.restore != RestorePolicy::kCheckpoint || !e.replicated) continue;
      auto [it, inserted] = replicated.emplace(e.name, std::make_pair(r->rank, &e));
      if (inserted) continue;
      const StateEntry& first = *it->second.second;
      const std::string who = "replicated state entry '" + e.name + "' differs between rank " +
                              std::to_string(it->second.first) + " and rank " + std::to_string(r->rank);
      if (first.dtype != e.dtype || first.bytes != e.bytes || first.shape != e.shape) {
        return Status::FailedPrecondition(who + " (dtype, size or shape)");
      }
      const auto* a = static_cast<const uint8_t*>(first.data);
      const auto* b = static_cast<const uint8_t*>(e.data);
      if (e.bytes > 0 && std::memcmp(a, b, e.bytes) != 0) {
        // The same registration with other bytes: the ranks' copies of state
        // that must be identical have diverged (a silent data corruption, as
        // the per-step SDC check reports it), not a misuse of the API.
        const uint64_t at = std::mismatch(a, a + e.bytes, b).first - a;
        return Status::Divergence(who + " (first difference at byte " + std::to_string(at) + ")");
      }
    }
  }
  // Each entry's bytes are hashed once, by PlanDataset; the per-rank state
  // digests are built from those hashes (replicated ones shared by every rank).
  std::map<std::string, uint64_t> replicated_xxh3;
  for (const auto& [name, owner] : replicated) {
    const StateEntry& e = *owner.second;
    DGRR_ASSIGN_OR_RETURN(DatasetPlan plan, PlanDataset("/replicated", e.name, e.dtype, e.role, e.shape,
                                                        e.data, e.bytes, options.chunk_bytes));
    replicated_xxh3[name] = plan.xxh3;
    datasets.push_back(std::move(plan));
  }
  for (const RankSnapshot* r : by_rank) {
    size_t seen = 0;
    std::vector<DigestItem> digest_items;
    for (const StateEntry& e : r->state->entries()) {
      if (e.restore != RestorePolicy::kCheckpoint) continue;
      if (e.replicated) {
        auto hash = replicated_xxh3.find(e.name);
        if (hash != replicated_xxh3.end()) digest_items.push_back({&e.name, e.dtype, &e.shape, e.bytes, hash->second});
      }
      if (!e.replicated) {
        if (replicated.count(e.name)) {
          return Status::FailedPrecondition("state entry '" + e.name + "' is replicated on rank " +
                                            std::to_string(replicated[e.name].first) +
                                            " but not on rank " + std::to_string(r->rank));
        }
        DGRR_ASSIGN_OR_RETURN(DatasetPlan plan,
                              PlanDataset("/ranks/" + std::to_string(r->rank), e.name, e.dtype, e.role,
                                          e.shape, e.data, e.bytes, options.chunk_bytes));
        digest_items.push_back({&e.name, e.dtype, &e.shape, e.bytes, plan.xxh3});
        datasets.push_back(std::move(plan));
      } else {
        ++seen;
      }
    }
    if (seen != replicated.size()) {
      for (const auto& [name, owner] : replicated) {
        const StateEntry* mine = r->state->Find(name);
        if (mine == nullptr || !mine->replicated || mine->restore != RestorePolicy::kCheckpoint) {
          return Status::FailedPrecondition("replicated state entry '" + name + "' is on rank " +
                                            std::to_string(owner.first) + " but missing on rank " +
                                            std::to_string(r->rank));
        }
      }
    }
    rank_plans.push_back({r->rank, r->trace_position, DigestOfItems(std::move(digest_items))});
  }
  DGRR_ASSIGN_OR_RETURN(DatasetPlan plan,
                        PlanDataset("/meta", "plan_json", DType::kU8, StateRole::kOther, {},
                                    meta.plan_json.data(), meta.plan_json.size(), options.chunk_bytes));
  datasets.push_back(std::move(plan));
  return Status::OK();
}

// Hashes bytes [512, end) of the file HDF5 wrote, streaming through a small
// buffer, and writes the header into its user block.
Status StampHeader(const std::string& tmp_path, uint32_t version, uint64_t step, uint64_t state_digest,
                   uint64_t* length = nullptr, uint64_t* payload = nullptr) {
  uint64_t offset = kCheckpointUserBlockBytes;
  uint64_t payload_hash = 0;
  {
    DGRR_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenRandomAccessFile(tmp_path));
    DGRR_ASSIGN_OR_RETURN(payload_hash, Xxh3OfFile(*file, kCheckpointUserBlockBytes, &offset));
  }
  if (offset == kCheckpointUserBlockBytes) return Status::Internal("HDF5 wrote no file body to " + tmp_path);
  uint8_t block[kCheckpointUserBlockBytes];
  EncodeHeader(block, version, offset, payload_hash, step, state_digest);
  if (length != nullptr) *length = offset;
  if (payload != nullptr) *payload = payload_hash;
  return FileSystem::Default()->WriteAt(tmp_path, 0,
                                        std::string_view(reinterpret_cast<const char*>(block), sizeof block));
}

// One rank's datasets for its shard: its own entries and its share of the
// replicated ones (the ranks have shown by digests that theirs agree; v2:
// rank 0 holds them all). The rank digest covers every entry the rank
// restores, as in v1. `replicated_held` receives how many replicated entries
// the shard holds.
Status PlanShard(const CheckpointMeta& meta, const RankSnapshot& r, const CheckpointWriteOptions& options,
                 std::vector<DatasetPlan>& datasets, RankPlan& plan, uint64_t& replicated_held) {
  if (meta.world_size < 1 || static_cast<uint64_t>(meta.world_size) > kMaxWorldSize || r.rank < 0 ||
      r.rank >= meta.world_size || r.state == nullptr) {
    return Status::InvalidArgument("checkpoint shard: rank " + std::to_string(r.rank) + " of world_size " +
                                   std::to_string(meta.world_size) + (r.state == nullptr ? " without state" : ""));
  }
  // Which replicated entries this shard holds: the same on every rank, since
  // the ranks agree on the replicated entries' names and sizes.
  std::vector<const StateEntry*> replicated;
  for (const StateEntry& e : r.state->entries()) {
    if (e.restore == RestorePolicy::kCheckpoint && e.replicated) replicated.push_back(&e);
  }
  std::sort(replicated.begin(), replicated.end(),
            [](const StateEntry* a, const StateEntry* b) { return a->name < b->name; });
  std::vector<int> owners(replicated.size(), 0);
  if (options.format_version >= kCheckpointFormatVersion) {
    std::vector<uint64_t> sizes;
    for (const StateEntry* e : replicated) sizes.push_back(e->bytes);
    owners = ReplicatedShareOwners(sizes, meta.world_size, options.replicated_share_min_bytes);
  }
  std::set<const StateEntry*> held;
  for (size_t i = 0; i < replicated.size(); ++i) {
    if (owners[i] == r.rank) held.insert(replicated[i]);
  }
  replicated_held = held.size();
  auto known = [&](const StateEntry& e) -> const uint64_t* {
    if (r.known_xxh3 == nullptr) return nullptr;
    auto it = r.known_xxh3->find(e.name);
    return it == r.known_xxh3->end() ? nullptr : &it->second;
  };
  std::vector<DigestItem> items;
  for (const StateEntry& e : r.state->entries()) {
    if (e.restore != RestorePolicy::kCheckpoint) continue;
    if (e.replicated && held.count(&e) == 0) {
      DGRR_RETURN_IF_ERROR(ValidateName(e.name));
      const uint64_t* hash = known(e);
      items.push_back({&e.name, e.dtype, &e.shape, e.bytes, hash != nullptr ? *hash : Xxh3(e.data, e.bytes)});
      continue;
    }
    const std::string group = e.replicated ? "/replicated" : "/ranks/" + std::to_string(r.rank);
    DGRR_ASSIGN_OR_RETURN(DatasetPlan dataset, PlanDataset(group, e.name, e.dtype, e.role, e.shape, e.data,
                                                           e.bytes, options.chunk_bytes, known(e)));
    items.push_back({&e.name, e.dtype, &e.shape, e.bytes, dataset.xxh3});
    datasets.push_back(std::move(dataset));
  }
  plan = {r.rank, r.trace_position, DigestOfItems(std::move(items))};
  return Status::OK();
}

Status CheckShardedVersion(uint32_t version) {
  if (version != kCheckpointFormatVersion && version != kRankZeroReplicatedFormatVersion) {
    return Status::InvalidArgument("checkpoint: cannot write sharded format version " + std::to_string(version) +
                                   " (2 or 3)");
  }
  return Status::OK();
}

Status WriteManifestHdf5(const std::string& tmp_path, const std::string& path, const CheckpointMeta& meta,
                         uint32_t version, uint64_t state_digest, const std::vector<ShardRecord>& shards,
                         const std::vector<DatasetPlan>& datasets, const std::vector<ChunkJob>& chunks, int level) {
  DGRR_RETURN_IF_ERROR(InitHdf5());
  auto lock = LockHdf5();
  DGRR_ASSIGN_OR_RETURN(H5Handle file, CreateHdf5File(tmp_path, kCheckpointUserBlockBytes));
  const hid_t f = file.get();
  DGRR_RETURN_IF_ERROR(WriteRootAttributes(f, kFormatName, version, meta, state_digest));
  H5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl.get(), false);
  for (const char* g : {"/meta", "/shards"}) {
    H5Handle group(H5Gcreate2(f, g, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
    if (!group.valid()) return Hdf5WriteFailure(tmp_path, std::string("creating group ") + g);
  }
  for (const ShardRecord& shard : shards) {
    const std::string g = "/shards/" + std::to_string(shard.rank);
    H5Handle group(H5Gcreate2(f, g.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
    if (!group.valid()) return Hdf5WriteFailure(tmp_path, "creating group " + g);
    const hid_t h = group.get();
    DGRR_RETURN_IF_ERROR(WriteStringAttribute(h, "file", FileNameOf(ShardPath(path, shard.rank)), g));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(h, "bytes", shard.bytes, g));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(h, "xxh3", shard.payload_xxh3, g));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(h, "trace_position", shard.trace_position, g));
    DGRR_RETURN_IF_ERROR(WriteU64Attribute(h, "state_digest", shard.state_digest, g));
    if (version >= kCheckpointFormatVersion) {
      DGRR_RETURN_IF_ERROR(
          WriteU64Attribute(h, "replicated", static_cast<uint64_t>(shard.replicated_entries), g));
    }
  }
  std::vector<H5Handle> handles(datasets.size());
  for (size_t d = 0; d < datasets.size(); ++d) {
    DGRR_RETURN_IF_ERROR(CreateDataset(f, tmp_path, datasets[d], level, handles[d]));
  }
  for (const ChunkJob& job : chunks) {
    if (H5Dwrite_chunk(handles[job.dataset].get(), H5P_DEFAULT, job.filter_mask, job.offset.data(), job.size(),
                       job.bytes()) < 0) {
      return Hdf5WriteFailure(tmp_path, "writing a chunk of dataset " + datasets[job.dataset].Path());
    }
  }
  handles.clear();
  if (H5Fclose(file.Release()) < 0) return Hdf5WriteFailure(tmp_path, "write (on close)");
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Reading.
// ---------------------------------------------------------------------------
struct FileIdentity {
  dev_t device;
  ino_t inode;
  off_t size;
  struct timespec modified;
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size &&
           modified.tv_sec == o.modified.tv_sec && modified.tv_nsec == o.modified.tv_nsec;
  }
};

FileIdentity IdentityOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

// Verifies the header and the hash of every byte after it, streaming the file
// through a small buffer (big fresh buffers cost page faults), and returns the
// identity of the file it verified.
StatusOr<FileIdentity> VerifyWholeFile(const std::string& path, CheckpointHeader& header) {
  DGRR_ASSIGN_OR_RETURN(const int fd, OpenRegularFileDescriptor(path));
  // The header first (a file shorter than it is refused by DecodeHeader).
  struct stat st;
  uint8_t block[kCheckpointUserBlockBytes];
  DGRR_ASSIGN_OR_RETURN(const size_t got, StatAndReadStart(fd, path, &st, block, sizeof block));
  StatusOr<CheckpointHeader> decoded = DecodeHeader(path, block, got, static_cast<uint64_t>(st.st_size));
  if (!decoded.ok()) {
    ::close(fd);
    return decoded.status();
  }
  header = *decoded;
  uint64_t offset = kCheckpointUserBlockBytes;
  StatusOr<uint64_t> payload_hash = HashFileFrom(fd, path, kCheckpointUserBlockBytes, &offset);
  ::close(fd);
  if (!payload_hash.ok()) return payload_hash.status();
  if (offset != header.file_length) {
    return Status::Corruption(path + ": offset " + std::to_string(offset) + ": file changed length while read");
  }
  if (*payload_hash != header.payload_xxh3) {
    return Status::Corruption(path + ": offset " + std::to_string(kCheckpointUserBlockBytes) +
                              ": hash of bytes 512.." + std::to_string(offset) +
                              " does not match the header (file damaged)");
  }
  return IdentityOf(st);
}


StatusOr<H5Handle> OpenVerifiedHdf5(const std::string& path) {
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_fapl_sec2(fapl.get()) < 0) return Status::Internal("HDF5: sec2 driver rejected");
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.valid()) return Status::Corruption(path + ": offset 512: HDF5 cannot open the file");
  return file;
}

Status CheckUnchanged(const std::string& path, const FileIdentity& verified) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !(IdentityOf(st) == verified)) {
    return Status::IOError(path + ": the file was replaced or modified while it was read");
  }
  return Status::OK();
}

}  // namespace

// Where a deferred entry's bytes are (checkpoint_file.h).
struct EntrySource {
  std::string path;     // the shard, verified whole
  std::string dataset;  // "/replicated/<name>" or "/ranks/<r>/<name>"
  FileIdentity verified;
};

namespace {

std::optional<StateRole> ParseRole(const std::string& name) {
  for (StateRole role : {StateRole::kParameter, StateRole::kOptimizer, StateRole::kCounter,
                         StateRole::kCursor, StateRole::kRng, StateRole::kOther}) {
    if (name == StateRoleName(role)) return role;
  }
  return std::nullopt;
}

// Copies a chunk buffer's part inside the array into the row-major array
// (the inverse of GatherChunk; the padding of an edge chunk is dropped).
void ScatterChunk(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk, size_t element_size,
                  const std::vector<hsize_t>& offset, size_t dim, const uint8_t* src, uint8_t* dst) {
  uint64_t dst_inner = element_size, src_inner = element_size;
  for (size_t j = dim + 1; j < dims.size(); ++j) {
    dst_inner *= dims[j];
    src_inner *= chunk[j];
  }
  const hsize_t count = std::min(chunk[dim], dims[dim] - offset[dim]);
  dst += offset[dim] * dst_inner;
  if (dim + 1 == dims.size()) {
    std::memcpy(dst, src, count * element_size);
    return;
  }
  for (hsize_t i = 0; i < count; ++i) {
    ScatterChunk(dims, chunk, element_size, offset, dim + 1, src + i * src_inner, dst + i * dst_inner);
  }
}

enum class DirectRead { kDone, kNotApplicable, kFailed };

// Reads a chunked dataset whose only filter is zstd (every dataset dgrr
// writes with data) chunk by chunk with H5Dread_chunk, so the bytes go from
// the file straight into `out` (a chunk stored raw, the common case for float
// state, is read in place when it is one contiguous run of the array) instead
// of through libhdf5's chunk cache and filter pipeline, which copy each chunk
// at least once more. The bytes are the same as H5Dread's: every chunk is
// either raw (filter mask bit 0) or one zstd frame of exactly the chunk's
// size. kNotApplicable for any other layout or filter, left to H5Dread.
// When the chunks are runs of whole rows (so they land in memory order),
// each run is fed to `hash` (XXH3-64 streaming, seed 0) as soon as it has
// landed, while it is still in cache, and `*hashed` is set.
DirectRead ReadChunksDirectly(hid_t dset, const std::vector<hsize_t>& dims, size_t element_size, uint8_t* out,
                              XXH3_state_t* hash, bool* hashed) {
  *hashed = false;
  H5Handle dcpl(H5Dget_create_plist(dset));
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return DirectRead::kNotApplicable;
  if (H5Pget_nfilters(dcpl.get()) != 1) return DirectRead::kNotApplicable;
  unsigned flags = 0;
  size_t nelmts = 0;
  unsigned filter_config = 0;
  if (H5Pget_filter2(dcpl.get(), 0, &flags, &nelmts, nullptr, 0, nullptr, &filter_config) != kZstdFilterId) {
    return DirectRead::kNotApplicable;
  }
  const int rank = H5Pget_chunk(dcpl.get(), 0, nullptr);
  if (rank != static_cast<int>(dims.size())) return DirectRead::kNotApplicable;
  std::vector<hsize_t> chunk(dims.size());
  if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) return DirectRead::kNotApplicable;
  uint64_t chunk_bytes = element_size;
  for (hsize_t c : chunk) {
    if (c == 0) return DirectRead::kFailed;
    chunk_bytes *= c;
  }
  uint64_t row_bytes = element_size;  // bytes of one index of dimension 0
  bool trailing_whole = true;          // chunks span every dimension after the first
  for (size_t j = 1; j < dims.size(); ++j) {
    row_bytes *= dims[j];
    trailing_whole = trailing_whole && chunk[j] == dims[j];
  }
  std::vector<uint8_t> stored, decoded;
  std::vector<hsize_t> offset(dims.size(), 0);
  for (bool more = true; more;) {
    hsize_t size = 0;
    if (H5Dget_chunk_storage_size(dset, offset.data(), &size) < 0) return DirectRead::kFailed;
    // An unwritten chunk (never in dgrr's files): H5Dread decides what it reads as.
    if (size == 0) return DirectRead::kNotApplicable;
    // A chunk read in place: it lies wholly inside the array as one run.
    uint8_t* in_place =
        trailing_whole && offset[0] + chunk[0] <= dims[0] ? out + offset[0] * row_bytes : nullptr;
    uint32_t mask = 0;
    uint8_t* dst = nullptr;  // where the chunk's decoded bytes are, when not in place
    if (size == chunk_bytes && in_place != nullptr) {
      // Raw or, improbably, a frame exactly as long as the chunk: read it in
      // place and decode from a copy if it was a frame.
      if (H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &mask, in_place) < 0) return DirectRead::kFailed;
      if ((mask & 1u) == 0) {
        stored.assign(in_place, in_place + size);
        if (!ZstdDecompressChunk(stored.data(), stored.size(), in_place, chunk_bytes)) return DirectRead::kFailed;
      }
    } else {
      stored.resize(size);
      if (H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &mask, stored.data()) < 0) return DirectRead::kFailed;
      if ((mask & 1u) != 0) {
        if (size != chunk_bytes) return DirectRead::kFailed;
        dst = stored.data();
      } else if (in_place != nullptr) {
        if (!ZstdDecompressChunk(stored.data(), size, in_place, chunk_bytes)) return DirectRead::kFailed;
      } else {
        decoded.resize(chunk_bytes);
        if (!ZstdDecompressChunk(stored.data(), size, decoded.data(), chunk_bytes)) return DirectRead::kFailed;
        dst = decoded.data();
      }
      if (dst != nullptr) {
        if (in_place != nullptr) {
          std::memcpy(in_place, dst, chunk_bytes);
        } else {
          ScatterChunk(dims, chunk, element_size, offset, 0, dst, out);
        }
      }
    }
    if (trailing_whole) {
      const hsize_t rows = std::min(chunk[0], dims[0] - offset[0]);
      XXH3_64bits_update(hash, out + offset[0] * row_bytes, rows * row_bytes);
    }
    more = false;
    for (size_t k = dims.size(); k-- > 0;) {  // odometer over the chunk grid
      offset[k] += chunk[k];
      if (offset[k] < dims[k]) {
        more = true;
        break;
      }
      offset[k] = 0;
    }
  }
  *hashed = trailing_whole;
  return DirectRead::kDone;
}

// The dataspace of an open dataset: 1 to 32 dimensions whose elements of
// `element_size` bytes make `bytes`.
StatusOr<std::vector<hsize_t>> DatasetDims(hid_t dset, const std::string& what, size_t element_size,
                                           uint64_t bytes) {
  H5Handle space(H5Dget_space(dset));
  const int ndims = H5Sget_simple_extent_ndims(space.get());
  if (ndims < 1 || ndims > kMaxDims) return Status::Corruption(what + ": unexpected dataspace rank");
  std::vector<hsize_t> dims(ndims);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  uint64_t elements = 1;
  for (hsize_t d : dims) elements *= d;
  if (elements * element_size != bytes) return Status::Corruption(what + ": dataspace does not match 'bytes'");
  return dims;
}

// The bytes of an open dataset (dataspace `dims`) into `out`, checked
// against `xxh3`; errors say `what` (file and dataset).
Status ReadDatasetBytes(hid_t dset, const std::string& what, const std::vector<hsize_t>& dims, DType dtype,
                        uint8_t* out, uint64_t bytes, uint64_t xxh3) {
  bool hashed = false;
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash(XXH3_createState(), XXH3_freeState);
  if (hash == nullptr) return Status::Internal("out of memory for a hash state");
  XXH3_64bits_reset(hash.get());
  if (bytes > 0) {
    const DirectRead direct = ReadChunksDirectly(dset, dims, StoredElementSize(dtype), out, hash.get(), &hashed);
    if (direct == DirectRead::kFailed ||
        (direct == DirectRead::kNotApplicable &&
         H5Dread(dset, Hdf5TypeFor(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)) {
      return Status::Corruption(what + ": data cannot be read or decompressed");
    }
    if (direct != DirectRead::kDone) hashed = false;
  }
  const uint64_t actual = hashed ? XXH3_64bits_digest(hash.get()) : Xxh3(out, bytes);
  if (actual != xxh3) {
    return Status::Corruption(what + ": content hash mismatch (stored " + Hex64(xxh3) + ", computed " +
                              Hex64(actual) + ")");
  }
  return Status::OK();
}

// One dataset: its attributes checked, and its bytes read and checked, or,
// with `defer` (the identity of the verified file), left in the file.
StatusOr<SavedEntry> ReadDataset(hid_t file, const std::string& file_path, const std::string& group,
                                 const std::string& name, const FileIdentity* defer = nullptr) {
  const std::string what = file_path + ": dataset " + group + "/" + name;
  auto bad = [&](const std::string& why) { return Status::Corruption(what + ": " + why); };
  H5Handle dset(H5Dopen2(file, (group + "/" + name).c_str(), H5P_DEFAULT));
  if (!dset.valid()) return bad("not a readable dataset");
  SavedEntry e;
  e.name = name;
  e.replicated = group == "/replicated";
  DGRR_ASSIGN_OR_RETURN(std::string dtype_name, ReadStringAttribute(dset.get(), "dtype", what));
  DGRR_ASSIGN_OR_RETURN(std::string role_name, ReadStringAttribute(dset.get(), "role", what));
  DGRR_ASSIGN_OR_RETURN(e.xxh3, ReadU64Attribute(dset.get(), "xxh3", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t bytes, ReadU64Attribute(dset.get(), "bytes", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t has_shape, ReadU64Attribute(dset.get(), "has_shape", what));
  const std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) return bad("unknown dtype '" + dtype_name + "'");
  e.dtype = *dtype;
  const std::optional<StateRole> role = ParseRole(role_name);
  if (!role) return bad("unknown role '" + role_name + "'");
  e.role = *role;
  H5Handle type(H5Dget_type(dset.get()));
  if (H5Tequal(type.get(), Hdf5TypeFor(e.dtype)) <= 0) return bad("stored type does not match dtype " + dtype_name);
  DGRR_ASSIGN_OR_RETURN(std::vector<hsize_t> dims, DatasetDims(dset.get(), what, StoredElementSize(e.dtype), bytes));
  if (has_shape > 1 || (!has_shape && dims.size() != 1)) return bad("bad 'has_shape'");
  if (has_shape) e.shape.assign(dims.begin(), dims.end());
  if (defer != nullptr) {
    e.deferred = std::make_shared<const EntrySource>(EntrySource{file_path, group + "/" + name, *defer});
    e.deferred_bytes = bytes;
    return e;
  }
  e.data.resize(bytes);
  DGRR_RETURN_IF_ERROR(ReadDatasetBytes(dset.get(), what, dims, e.dtype, e.data.data(), bytes, e.xxh3));
  return e;
}

StatusOr<std::vector<SavedEntry>> ReadGroup(hid_t file, const std::string& file_path,
                                            const std::string& group, const FileIdentity* defer = nullptr) {
  H5Handle g(H5Gopen2(file, group.c_str(), H5P_DEFAULT));
  if (!g.valid()) return Status::Corruption(file_path + ": group " + group + " is missing");
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListGroup(g.get(), file_path + ": group " + group));
  std::vector<SavedEntry> entries;
  for (const std::string& name : names) {
    DGRR_ASSIGN_OR_RETURN(SavedEntry e, ReadDataset(file, file_path, group, name, defer));
    entries.push_back(std::move(e));
  }
  return entries;
}

Status ReadRoot(hid_t f, const std::string& path, Checkpoint& out, uint64_t& format_version,
                const char* expected_format = kFormatName) {
  const std::string what = path + ": /";
  DGRR_ASSIGN_OR_RETURN(std::string format, ReadStringAttribute(f, "format", what));
  if (format != expected_format) {
    return Status::Corruption(what + ": format is '" + format + "', expected '" + expected_format + "'" +
                              (format == kShardFormatName ? " (a shard: read the checkpoint's manifest, step-N.h5)"
                                                          : ""));
  }
  DGRR_ASSIGN_OR_RETURN(format_version, ReadU64Attribute(f, "format_version", what));
  DGRR_ASSIGN_OR_RETURN(out.dgrr_version, ReadStringAttribute(f, "dgrr_version", what));
  DGRR_ASSIGN_OR_RETURN(out.meta.step, ReadU64Attribute(f, "step", what));
  DGRR_ASSIGN_OR_RETURN(out.meta.config_digest, ReadU64Attribute(f, "config_digest", what));
  DGRR_ASSIGN_OR_RETURN(out.meta.run_id_hex, ReadStringAttribute(f, "run_id", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t world_size, ReadU64Attribute(f, "world_size", what));
  DGRR_ASSIGN_OR_RETURN(out.state_digest, ReadU64Attribute(f, "state_digest", what));
  if (world_size < 1 || world_size > kMaxWorldSize) {
    return Status::Corruption(what + ": implausible world_size " + std::to_string(world_size));
  }
  out.meta.world_size = static_cast<int>(world_size);
  return Status::OK();
}

// /ranks/<r> of a v1 file or of rank r's shard: its trace position, digest
// and own entries (the digest is checked by the caller, who holds the
// replicated entries it covers: CheckRankDigest).
StatusOr<SavedRank> ReadRankGroup(hid_t f, const std::string& path, int r, const FileIdentity* defer = nullptr) {
  const std::string g = "/ranks/" + std::to_string(r);
  const std::string what = path + ": " + g;
  H5Handle group(H5Gopen2(f, g.c_str(), H5P_DEFAULT));
  if (!group.valid()) return Status::Corruption(what + ": missing");
  SavedRank rank;
  rank.rank = r;
  DGRR_ASSIGN_OR_RETURN(rank.trace_position, ReadU64Attribute(group.get(), "trace_position", what));
  DGRR_ASSIGN_OR_RETURN(rank.state_digest, ReadU64Attribute(group.get(), "state_digest", what));
  DGRR_ASSIGN_OR_RETURN(rank.entries, ReadGroup(f, path, g, defer));
  return rank;
}

Status ReadRanks(hid_t f, const std::string& path, Checkpoint& out) {
  H5Handle ranks_group(H5Gopen2(f, "/ranks", H5P_DEFAULT));
  if (!ranks_group.valid()) return Status::Corruption(path + ": group /ranks is missing");
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListGroup(ranks_group.get(), path + ": /ranks"));
  if (names.size() != static_cast<size_t>(out.meta.world_size)) {
    return Status::Corruption(path + ": /ranks has " + std::to_string(names.size()) +
                              " members for world_size " + std::to_string(out.meta.world_size));
  }
  std::vector<uint64_t> digests;
  for (int r = 0; r < out.meta.world_size; ++r) {
    DGRR_ASSIGN_OR_RETURN(SavedRank rank, ReadRankGroup(f, path, r));
    DGRR_RETURN_IF_ERROR(CheckRankDigest(path, rank, out.replicated));
    digests.push_back(rank.state_digest);
    out.ranks.push_back(std::move(rank));
  }
  if (CombineStateDigests(digests) != out.state_digest) {
    return Status::Corruption(path + ": /: state_digest does not match the ranks' digests");
  }
  return Status::OK();
}

}  // namespace

const SavedEntry* Checkpoint::Find(int rank, const std::string& name) const {
  for (const SavedEntry& e : replicated) {
    if (e.name == name) return &e;
  }
  if (rank < 0 || static_cast<size_t>(rank) >= ranks.size()) return nullptr;
  for (const SavedEntry& e : ranks[rank].entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::string CheckpointPath(const std::string& run_dir, uint64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%08" PRIu64 ".h5", step);
  return run_dir + "/ckpt/" + name;
}

uint64_t StateDigest(const StateRegistry& state) {
  std::vector<uint64_t> hashes;
  std::vector<DigestItem> items;
  for (const StateEntry& e : state.entries()) {
    if (e.restore != RestorePolicy::kCheckpoint) continue;
    items.push_back({&e.name, e.dtype, &e.shape, e.bytes, Xxh3(e.data, e.bytes)});
  }
  return DigestOfItems(std::move(items));
}

uint64_t CombineStateDigests(const std::vector<uint64_t>& rank_digests) {
  std::string bytes;
  PutFixed32(&bytes, static_cast<uint32_t>(rank_digests.size()));
  for (uint64_t d : rank_digests) PutFixed64(&bytes, d);
  return Xxh3(bytes.data(), bytes.size());
}

Status WriteCheckpoint(const std::string& path, const CheckpointMeta& meta,
                       const std::vector<RankSnapshot>& ranks, const CheckpointWriteOptions& options) {
  std::vector<DatasetPlan> datasets;
  std::vector<RankPlan> rank_plans;
  DGRR_RETURN_IF_ERROR(PlanState(meta, ranks, options, datasets, rank_plans));
  std::vector<ChunkJob> chunks = ListChunks(datasets);
  CompressAll(datasets, options.zstd_level, options.threads, chunks);
  std::vector<uint64_t> digests;
  for (const RankPlan& r : rank_plans) digests.push_back(r.state_digest);
  const uint64_t state_digest = CombineStateDigests(digests);
  DGRR_RETURN_IF_ERROR(CreateDirectories(DirName(path)));
  return CommitFileAtomically(path, [&](const std::string& tmp) -> Status {
    // Every HDF5 failure is named with the file it was writing, once.
    if (Status s = WriteHdf5File(tmp, FileKind{}, meta, state_digest, rank_plans, datasets, chunks,
                                 options.zstd_level);
        !s.ok()) {
      return NamingFile(s, tmp);
    }
    if (options.fault_hook) DGRR_RETURN_IF_ERROR(options.fault_hook("before-header"));
    return StampHeader(tmp, kSingleFileFormatVersion, meta.step, state_digest);
  });
}

std::vector<int> ReplicatedShareOwners(const std::vector<uint64_t>& bytes, int world_size, uint64_t min_share) {
  std::vector<int> owners(bytes.size(), 0);
  if (world_size <= 1) return owners;
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  const uint64_t world = static_cast<uint64_t>(world_size);
  const uint64_t share = std::max<uint64_t>({(total + world - 1) / world, min_share, 1});
  uint64_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    owners[i] = static_cast<int>(std::min<uint64_t>(world - 1, start / share));
    start += bytes[i];
  }
  return owners;
}

std::string ShardPath(const std::string& manifest_path, int rank) {
  std::string stem = manifest_path;
  if (stem.size() >= 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  return stem + ".rank-" + std::to_string(rank) + ".h5";
}

StatusOr<ShardRecord> WriteCheckpointShard(const std::string& path, const CheckpointMeta& meta,
                                           const RankSnapshot& rank, const CheckpointWriteOptions& options) {
  DGRR_RETURN_IF_ERROR(CheckShardedVersion(options.format_version));
  std::vector<DatasetPlan> datasets;
  RankPlan plan;
  uint64_t replicated_held = 0;
  DGRR_RETURN_IF_ERROR(PlanShard(meta, rank, options, datasets, plan, replicated_held));
  std::vector<ChunkJob> chunks = ListChunks(datasets);
  CompressAll(datasets, options.zstd_level, options.threads, chunks);
  DGRR_RETURN_IF_ERROR(CreateDirectories(DirName(path)));
  ShardRecord record;
  record.rank = rank.rank;
  record.trace_position = rank.trace_position;
  record.state_digest = plan.state_digest;
  record.replicated_entries = static_cast<int64_t>(replicated_held);
  const FileKind kind{kShardFormatName, options.format_version, rank.rank};
  DGRR_RETURN_IF_ERROR(CommitFileAtomically(ShardPath(path, rank.rank), [&](const std::string& tmp) -> Status {
    if (Status s = WriteHdf5File(tmp, kind, meta, plan.state_digest, {plan}, datasets, chunks, options.zstd_level);
        !s.ok()) {
      return NamingFile(s, tmp);
    }
    if (options.fault_hook) DGRR_RETURN_IF_ERROR(options.fault_hook("before-header"));
    return StampHeader(tmp, options.format_version, meta.step, plan.state_digest, &record.bytes,
                       &record.payload_xxh3);
  }));
  return record;
}

Status CommitCheckpoint(const std::string& path, const CheckpointMeta& meta, std::vector<ShardRecord> shards,
                        const CheckpointWriteOptions& options) {
  DGRR_RETURN_IF_ERROR(CheckShardedVersion(options.format_version));
  std::sort(shards.begin(), shards.end(), [](const ShardRecord& a, const ShardRecord& b) { return a.rank < b.rank; });
  bool ranks_ok = meta.world_size >= 1 && shards.size() == static_cast<size_t>(meta.world_size);
  for (size_t r = 0; ranks_ok && r < shards.size(); ++r) {
    ranks_ok = shards[r].rank == static_cast<int>(r) &&
               (options.format_version < kCheckpointFormatVersion || shards[r].replicated_entries >= 0);
  }
  if (!ranks_ok) {
    return Status::InvalidArgument("checkpoint manifest: world_size " + std::to_string(meta.world_size) + " but " +
                                   std::to_string(shards.size()) +
                                   " shards (ranks 0..world_size-1, each once, with their replicated entry counts)");
  }
  std::vector<uint64_t> digests;
  for (const ShardRecord& shard : shards) digests.push_back(shard.state_digest);
  const uint64_t state_digest = CombineStateDigests(digests);
  DGRR_ASSIGN_OR_RETURN(DatasetPlan plan,
                        PlanDataset("/meta", "plan_json", DType::kU8, StateRole::kOther, {}, meta.plan_json.data(),
                                    meta.plan_json.size(), options.chunk_bytes));
  std::vector<DatasetPlan> datasets;
  datasets.push_back(std::move(plan));
  std::vector<ChunkJob> chunks = ListChunks(datasets);
  CompressAll(datasets, options.zstd_level, 1, chunks);
  return CommitFileAtomically(path, [&](const std::string& tmp) -> Status {
    if (Status s = WriteManifestHdf5(tmp, path, meta, options.format_version, state_digest, shards, datasets,
                                     chunks, options.zstd_level);
        !s.ok()) {
      return NamingFile(s, tmp);
    }
    return StampHeader(tmp, options.format_version, meta.step, state_digest);
  });
}

Status RewriteCheckpoint(const Checkpoint& source, const std::string& path,
                         const CheckpointMeta& meta, const std::vector<uint64_t>& trace_positions,
                         const CheckpointWriteOptions& options) {
  const size_t world = source.ranks.size();
  if (meta.world_size < 0 || static_cast<size_t>(meta.world_size) != world ||
      trace_positions.size() != world) {
    return Status::InvalidArgument("rewriting " + source.path + ": it holds " + std::to_string(world) +
                                   " ranks; got world_size " + std::to_string(meta.world_size) +
                                   " and " + std::to_string(trace_positions.size()) +
                                   " trace positions");
  }
  // Each rank's registry views the loaded bytes (WriteCheckpoint only reads
  // them): the replicated entries, which are identical on every rank by
  // construction, then the rank's own.
  std::vector<StateRegistry> registries(world);
  auto view = [](const SavedEntry& e) {
    StateEntry entry;
    entry.name = e.name;
    entry.data = const_cast<uint8_t*>(e.data.data());
    entry.bytes = e.data.size();
    entry.dtype = e.dtype;
    entry.shape = e.shape;
    entry.role = e.role;
    entry.restore = RestorePolicy::kCheckpoint;
    entry.replicated = e.replicated;
    return entry;
  };
  std::vector<RankSnapshot> snapshots;
  for (size_t r = 0; r < world; ++r) {
    for (const SavedEntry& e : source.replicated) DGRR_RETURN_IF_ERROR(registries[r].Register(view(e)));
    for (const SavedEntry& e : source.ranks[r].entries) {
      DGRR_RETURN_IF_ERROR(registries[r].Register(view(e)));
    }
    snapshots.push_back({static_cast<int>(r), &registries[r], trace_positions[r]});
  }
  // Sharded like a trainer's checkpoint. The old manifest goes first, so a
  // kill between the shards and the new manifest leaves the step absent
  // rather than a manifest listing shards that were since replaced.
  if (PathExists(path)) DGRR_RETURN_IF_ERROR(RemoveFile(path));
  std::vector<ShardRecord> shards;
  for (const RankSnapshot& snapshot : snapshots) {
    DGRR_ASSIGN_OR_RETURN(ShardRecord shard, WriteCheckpointShard(path, meta, snapshot, options));
    shards.push_back(shard);
  }
  return CommitCheckpoint(path, meta, std::move(shards), options);
}

StatusOr<CheckpointHeader> ReadCheckpointHeader(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenRandomAccessFile(path));
  DGRR_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  uint8_t block[kCheckpointUserBlockBytes];
  DGRR_ASSIGN_OR_RETURN(size_t n, file->Read(0, sizeof block, block));
  return DecodeHeader(path, block, n, size);
}

namespace {

Status ReadPlanJson(hid_t f, const std::string& path, Checkpoint& out) {
  DGRR_ASSIGN_OR_RETURN(std::vector<SavedEntry> meta, ReadGroup(f, path, "/meta"));
  if (meta.size() != 1 || meta[0].name != "plan_json") {
    return Status::Corruption(path + ": group /meta must hold exactly plan_json");
  }
  out.meta.plan_json.assign(meta[0].data.begin(), meta[0].data.end());
  return Status::OK();
}

// v1: everything in this one file.
Status ReadSingleFileBody(hid_t f, const std::string& path, Checkpoint& out) {
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> top, ListGroup(f, path + ": /"));
  if (top != std::vector<std::string>{"meta", "ranks", "replicated"}) {
    return Status::Corruption(path + ": /: expected exactly the groups meta, ranks, replicated");
  }
  DGRR_ASSIGN_OR_RETURN(out.replicated, ReadGroup(f, path, "/replicated"));
  DGRR_RETURN_IF_ERROR(ReadRanks(f, path, out));
  return ReadPlanJson(f, path, out);
}

// v2/v3 manifest: /meta/plan_json and /shards/<r> listing each rank's shard.
StatusOr<std::vector<ShardRecord>> ReadManifestBody(hid_t f, const std::string& path, uint64_t version,
                                                    Checkpoint& out) {
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> top, ListGroup(f, path + ": /"));
  if (top != std::vector<std::string>{"meta", "shards"}) {
    return Status::Corruption(path + ": /: expected exactly the groups meta, shards (a manifest)");
  }
  DGRR_RETURN_IF_ERROR(ReadPlanJson(f, path, out));
  H5Handle shards_group(H5Gopen2(f, "/shards", H5P_DEFAULT));
  if (!shards_group.valid()) return Status::Corruption(path + ": group /shards is missing");
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListGroup(shards_group.get(), path + ": /shards"));
  if (names.size() != static_cast<size_t>(out.meta.world_size)) {
    return Status::Corruption(path + ": /shards has " + std::to_string(names.size()) + " members for world_size " +
                              std::to_string(out.meta.world_size));
  }
  std::vector<ShardRecord> shards;
  for (int r = 0; r < out.meta.world_size; ++r) {
    const std::string g = "/shards/" + std::to_string(r);
    const std::string what = path + ": " + g;
    H5Handle group(H5Gopen2(f, g.c_str(), H5P_DEFAULT));
    if (!group.valid()) return Status::Corruption(what + ": missing");
    ShardRecord shard;
    shard.rank = r;
    DGRR_ASSIGN_OR_RETURN(std::string file, ReadStringAttribute(group.get(), "file", what));
    const std::string expected = FileNameOf(ShardPath(path, r));
    if (file != expected) {
      return Status::Corruption(what + ": file is '" + file + "', expected '" + expected + "'");
    }
    DGRR_ASSIGN_OR_RETURN(shard.bytes, ReadU64Attribute(group.get(), "bytes", what));
    DGRR_ASSIGN_OR_RETURN(shard.payload_xxh3, ReadU64Attribute(group.get(), "xxh3", what));
    DGRR_ASSIGN_OR_RETURN(shard.trace_position, ReadU64Attribute(group.get(), "trace_position", what));
    DGRR_ASSIGN_OR_RETURN(shard.state_digest, ReadU64Attribute(group.get(), "state_digest", what));
    if (version >= kCheckpointFormatVersion) {
      DGRR_ASSIGN_OR_RETURN(uint64_t held, ReadU64Attribute(group.get(), "replicated", what));
      if (held > (uint64_t{1} << 32)) {
        return Status::Corruption(what + ": implausible replicated entry count " + std::to_string(held));
      }
      shard.replicated_entries = static_cast<int64_t>(held);
    }
    shards.push_back(shard);
  }
  return shards;
}

// A shard's root attributes: format 'dgrr checkpoint shard', version 2 or 3
// (`version`), and its rank.
Status ReadShardRoot(hid_t f, const std::string& path, SavedShard& out, uint64_t& version) {
  Checkpoint root;
  DGRR_RETURN_IF_ERROR(ReadRoot(f, path, root, version, kShardFormatName));
  DGRR_ASSIGN_OR_RETURN(uint64_t rank_attr, ReadU64Attribute(f, "rank", path + ": /"));
  if (version != kCheckpointFormatVersion && version != kRankZeroReplicatedFormatVersion) {
    return Status::Corruption(path + ": /: format_version " + std::to_string(version) + " in a shard (must be 2 or 3)");
  }
  if (rank_attr >= static_cast<uint64_t>(root.meta.world_size)) {
    return Status::Corruption(path + ": /: rank " + std::to_string(rank_attr) + " outside world_size " +
                              std::to_string(root.meta.world_size));
  }
  out.path = path;
  out.meta = root.meta;
  out.dgrr_version = root.dgrr_version;
  out.state_digest = root.state_digest;
  out.rank = static_cast<int>(rank_attr);
  return Status::OK();
}

// A shard's groups: exactly /ranks/<rank> and /replicated (v2: entries on
// rank 0's shard only). The rank's digest is not checked here: it covers the
// replicated entries, which may lie in other shards (CheckRankDigest).
Status ReadShardGroups(hid_t f, const std::string& path, uint64_t version, SavedShard& out,
                       const FileIdentity* defer = nullptr) {
  const int r = out.rank;
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> top, ListGroup(f, path + ": /"));
  if (top != std::vector<std::string>{"ranks", "replicated"}) {
    return Status::Corruption(path + ": /: expected exactly the groups ranks, replicated (a shard)");
  }
  DGRR_ASSIGN_OR_RETURN(out.replicated, ReadGroup(f, path, "/replicated", defer));
  if (version == kRankZeroReplicatedFormatVersion && r != 0 && !out.replicated.empty()) {
    return Status::Corruption(path + ": /replicated: in format version 2 only rank 0's shard holds replicated state");
  }
  H5Handle ranks_group(H5Gopen2(f, "/ranks", H5P_DEFAULT));
  if (!ranks_group.valid()) return Status::Corruption(path + ": group /ranks is missing");
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> members, ListGroup(ranks_group.get(), path + ": /ranks"));
  if (members != std::vector<std::string>{std::to_string(r)}) {
    return Status::Corruption(path + ": /ranks must hold exactly " + std::to_string(r));
  }
  DGRR_ASSIGN_OR_RETURN(out.own, ReadRankGroup(f, path, r, defer));
  return Status::OK();
}

// Adds the replicated entries one shard holds to those read so far (kept in
// name order); a name two shards hold is refused.
Status MergeReplicated(const std::string& path, std::vector<SavedEntry> from, std::vector<SavedEntry>& into) {
  std::set<std::string> had;
  for (const SavedEntry& e : into) had.insert(e.name);
  for (SavedEntry& e : from) {
    if (!had.insert(e.name).second) {
      return Status::Corruption(path + ": /replicated/" + e.name + ": another shard holds it too");
    }
    into.push_back(std::move(e));
  }
  std::sort(into.begin(), into.end(), [](const SavedEntry& a, const SavedEntry& b) { return a.name < b.name; });
  return Status::OK();
}

// One shard, checked against what the manifest (format `version`) lists for
// it; its rank's digest is left to the caller, who gathers the replicated
// entries it covers.
StatusOr<SavedShard> ReadListedShard(const std::string& manifest, const ShardRecord& listed, uint64_t version,
                                     const Checkpoint& out, EntryData data) {
  const int r = listed.rank;
  const std::string path = ShardPath(manifest, r);
  if (!PathExists(path)) {
    return Status::Corruption(path + ": offset 0: missing (rank " + std::to_string(r) + "'s shard, listed by " +
                              manifest + ")");
  }
  CheckpointHeader header;
  DGRR_ASSIGN_OR_RETURN(FileIdentity verified, VerifyWholeFile(path, header));
  auto bad = [&](uint64_t offset, const std::string& why) {
    return Status::Corruption(path + ": offset " + std::to_string(offset) + ": " + why);
  };
  if (header.format_version != version) {
    return bad(kOffVersion, "a shard of a format version " + std::to_string(version) + " manifest must be version " +
                                std::to_string(version) + ", is " + std::to_string(header.format_version));
  }
  if (header.file_length != listed.bytes) {
    return bad(kOffFileLength, "shard is " + std::to_string(header.file_length) + " bytes, the manifest " +
                                   manifest + " lists " + std::to_string(listed.bytes));
  }
  if (header.payload_xxh3 != listed.payload_xxh3) {
    return bad(kOffPayloadHash, "payload hash differs from the one the manifest " + manifest +
                                    " lists (a shard of another write)");
  }
  if (header.step != out.meta.step || header.state_digest != listed.state_digest) {
    return bad(kOffStep, "step or state digest differs from the manifest " + manifest);
  }
  SavedShard shard;
  {
    auto lock = LockHdf5();
    DGRR_ASSIGN_OR_RETURN(H5Handle file, OpenVerifiedHdf5(path));
    const hid_t f = file.get();
    uint64_t shard_version = 0;
    DGRR_RETURN_IF_ERROR(ReadShardRoot(f, path, shard, shard_version));
    if (shard_version != version || shard.meta.step != out.meta.step ||
        shard.meta.config_digest != out.meta.config_digest || shard.meta.run_id_hex != out.meta.run_id_hex ||
        shard.meta.world_size != out.meta.world_size || shard.rank != r ||
        shard.state_digest != listed.state_digest) {
      return Status::Corruption(path + ": /: format_version, step, config_digest, run_id, world_size, rank or "
                                       "state_digest disagree with the manifest " + manifest);
    }
    DGRR_RETURN_IF_ERROR(
        ReadShardGroups(f, path, version, shard, data == EntryData::kDeferred ? &verified : nullptr));
  }
  DGRR_RETURN_IF_ERROR(CheckUnchanged(path, verified));
  if (listed.replicated_entries >= 0 &&
      shard.replicated.size() != static_cast<uint64_t>(listed.replicated_entries)) {
    return Status::Corruption(path + ": /replicated: holds " + std::to_string(shard.replicated.size()) +
                              " entries, the manifest " + manifest + " lists " +
                              std::to_string(listed.replicated_entries));
  }
  if (shard.own.trace_position != listed.trace_position || shard.own.state_digest != listed.state_digest) {
    return Status::Corruption(path + ": /ranks/" + std::to_string(r) +
                              ": trace_position or state_digest disagree with the manifest " + manifest);
  }
  return shard;
}

Status ReadShards(const std::string& manifest, const std::vector<ShardRecord>& shards, uint64_t version,
                  Checkpoint& out, EntryData data) {
  for (const ShardRecord& listed : shards) {
    DGRR_ASSIGN_OR_RETURN(SavedShard shard, ReadListedShard(manifest, listed, version, out, data));
    DGRR_RETURN_IF_ERROR(MergeReplicated(shard.path, std::move(shard.replicated), out.replicated));
    out.ranks.push_back(std::move(shard.own));
  }
  std::vector<uint64_t> digests;
  for (const SavedRank& rank : out.ranks) {
    DGRR_RETURN_IF_ERROR(CheckRankDigest(ShardPath(manifest, rank.rank), rank, out.replicated));
    digests.push_back(rank.state_digest);
  }
  if (CombineStateDigests(digests) != out.state_digest) {
    return Status::Corruption(manifest + ": /: state_digest does not match the shards' digests");
  }
  return Status::OK();
}

// The file at `path` (v1: all of it; v2: the manifest), verified; `shards`
// receives a manifest's shard records.
StatusOr<Checkpoint> ReadTopFile(const std::string& path, uint32_t& top_version,
                                 std::vector<ShardRecord>& shards) {
  CheckpointHeader header;
  DGRR_ASSIGN_OR_RETURN(FileIdentity verified, VerifyWholeFile(path, header));
  // Only now, with every byte as written, does libhdf5 see the file. It reads
  // it by path; the identity check after reading catches a replacement
  // between the two (writers always rename a new file into place).
  DGRR_RETURN_IF_ERROR(InitHdf5());
  Checkpoint out;
  out.path = path;
  {
    auto lock = LockHdf5();
    DGRR_ASSIGN_OR_RETURN(H5Handle file, OpenVerifiedHdf5(path));
    uint64_t format_version = 0;
    DGRR_RETURN_IF_ERROR(ReadRoot(file.get(), path, out, format_version));
    if (format_version != header.format_version || out.meta.step != header.step ||
        out.state_digest != header.state_digest) {
      return Status::Corruption(path + ": /: format_version, step or state_digest disagree with the header");
    }
    if (format_version == kSingleFileFormatVersion) {
      DGRR_RETURN_IF_ERROR(ReadSingleFileBody(file.get(), path, out));
    } else {
      DGRR_ASSIGN_OR_RETURN(shards, ReadManifestBody(file.get(), path, format_version, out));
    }
  }
  DGRR_RETURN_IF_ERROR(CheckUnchanged(path, verified));
  top_version = header.format_version;
  return out;
}

}  // namespace

StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, EntryData data) {
  uint32_t format_version = 0;
  std::vector<ShardRecord> shards;
  DGRR_ASSIGN_OR_RETURN(Checkpoint out, ReadTopFile(path, format_version, shards));
  if (format_version != kSingleFileFormatVersion) {
    DGRR_RETURN_IF_ERROR(ReadShards(path, shards, format_version, out, data));
  }
  return out;
}

StatusOr<Checkpoint> ReadCheckpointForRank(const std::string& path, int rank, EntryData data) {
  uint32_t format_version = 0;
  std::vector<ShardRecord> shards;
  DGRR_ASSIGN_OR_RETURN(Checkpoint out, ReadTopFile(path, format_version, shards));
  if (rank < 0 || rank >= out.meta.world_size) {
    return Status::InvalidArgument(path + ": no rank " + std::to_string(rank) + " (world_size " +
                                   std::to_string(out.meta.world_size) + ")");
  }
  if (format_version == kSingleFileFormatVersion) return out;  // v1: one file, read whole
  // The manifest's own records must make its overall digest (ReadShards
  // checks the same against the shards' digests, which equal the records).
  std::vector<uint64_t> digests;
  for (const ShardRecord& listed : shards) {
    digests.push_back(listed.state_digest);
    SavedRank listed_rank;
    listed_rank.rank = listed.rank;
    listed_rank.trace_position = listed.trace_position;
    listed_rank.state_digest = listed.state_digest;
    out.ranks.push_back(std::move(listed_rank));
  }
  if (CombineStateDigests(digests) != out.state_digest) {
    return Status::Corruption(path + ": /: state_digest does not match the shards' digests");
  }
  out.loaded_rank = rank;
  DGRR_ASSIGN_OR_RETURN(SavedShard own, ReadListedShard(path, shards[rank], format_version, out, data));
  DGRR_RETURN_IF_ERROR(MergeReplicated(own.path, std::move(own.replicated), out.replicated));
  // Rank r's digest covers every replicated entry: read the other shards
  // that hold some (v3: the manifest says which; v2: rank 0's, unless the
  // rank's own entries alone make its digest, when there are none).
  std::vector<int> holders;
  if (format_version >= kCheckpointFormatVersion) {
    for (const ShardRecord& listed : shards) {
      if (listed.rank != rank && listed.replicated_entries > 0) holders.push_back(listed.rank);
    }
  } else if (rank != 0 && !DigestCovers(own.own, {})) {
    holders.push_back(0);
  }
  for (int holder : holders) {
    DGRR_ASSIGN_OR_RETURN(SavedShard other, ReadListedShard(path, shards[holder], format_version, out, data));
    DGRR_RETURN_IF_ERROR(MergeReplicated(other.path, std::move(other.replicated), out.replicated));
  }
  DGRR_RETURN_IF_ERROR(CheckRankDigest(ShardPath(path, rank), own.own, out.replicated));
  out.ranks[rank] = std::move(own.own);
  return out;
}

StatusOr<SavedShard> ReadCheckpointShard(const std::string& path) {
  CheckpointHeader header;
  DGRR_ASSIGN_OR_RETURN(FileIdentity verified, VerifyWholeFile(path, header));
  if (header.format_version != kCheckpointFormatVersion &&
      header.format_version != kRankZeroReplicatedFormatVersion) {
    return Status::Corruption(path + ": offset " + std::to_string(kOffVersion) +
                              ": a shard must be format version 2 or 3, is " + std::to_string(header.format_version));
  }
  DGRR_RETURN_IF_ERROR(InitHdf5());
  SavedShard shard;
  {
    auto lock = LockHdf5();
    DGRR_ASSIGN_OR_RETURN(H5Handle file, OpenVerifiedHdf5(path));
    uint64_t version = 0;
    DGRR_RETURN_IF_ERROR(ReadShardRoot(file.get(), path, shard, version));
    if (version != header.format_version || shard.meta.step != header.step ||
        shard.state_digest != header.state_digest) {
      return Status::Corruption(path + ": /: format_version, step or state_digest disagree with the header");
    }
    DGRR_RETURN_IF_ERROR(ReadShardGroups(file.get(), path, version, shard));
    // The rank's digest can be checked alone only where this shard holds
    // every replicated entry: rank 0 of a v2 checkpoint, or a single rank.
    if ((version == kRankZeroReplicatedFormatVersion && shard.rank == 0) || shard.meta.world_size == 1) {
      DGRR_RETURN_IF_ERROR(CheckRankDigest(path, shard.own, shard.replicated));
    }
  }
  DGRR_RETURN_IF_ERROR(CheckUnchanged(path, verified));
  return shard;
}

namespace {

// Reads deferred entries of the shard at `path` straight into their
// registered buffers, each checked against its hash; the file must still be
// the one verified when it was listed.
Status ReadDeferredInto(const std::string& path,
                        const std::vector<std::pair<const StateEntry*, const SavedEntry*>>& reads) {
  const FileIdentity& verified = reads.front().second->deferred->verified;
  DGRR_RETURN_IF_ERROR(CheckUnchanged(path, verified));
  DGRR_RETURN_IF_ERROR(InitHdf5());
  {
    auto lock = LockHdf5();
    DGRR_ASSIGN_OR_RETURN(H5Handle file, OpenVerifiedHdf5(path));
    for (const auto& [entry, saved] : reads) {
      const std::string what = path + ": dataset " + saved->deferred->dataset;
      H5Handle dset(H5Dopen2(file.get(), saved->deferred->dataset.c_str(), H5P_DEFAULT));
      if (!dset.valid()) return Status::Corruption(what + ": not a readable dataset");
      DGRR_ASSIGN_OR_RETURN(std::vector<hsize_t> dims,
                            DatasetDims(dset.get(), what, StoredElementSize(saved->dtype), entry->bytes));
      DGRR_RETURN_IF_ERROR(ReadDatasetBytes(dset.get(), what, dims, saved->dtype,
                                            static_cast<uint8_t*>(entry->data), entry->bytes, saved->xxh3));
    }
  }
  return CheckUnchanged(path, verified);
}

}  // namespace

Status RestoreRank(const Checkpoint& checkpoint, int rank, StateRegistry& into,
                   const std::set<std::string>& skip) {
  if (rank < 0 || static_cast<size_t>(rank) >= checkpoint.ranks.size()) {
    return Status::InvalidArgument(checkpoint.path + ": no rank " + std::to_string(rank) +
                                   " (world_size " + std::to_string(checkpoint.ranks.size()) + ")");
  }
  if (checkpoint.loaded_rank >= 0 && checkpoint.loaded_rank != rank) {
    return Status::InvalidArgument(checkpoint.path + ": rank " + std::to_string(rank) +
                                   "'s state was not read (only rank " + std::to_string(checkpoint.loaded_rank) +
                                   "'s)");
  }
  const std::string where = checkpoint.path + ": rank " + std::to_string(rank) + ": ";
  std::vector<std::pair<const StateEntry*, const SavedEntry*>> copies;
  std::set<std::string> wanted;
  for (const StateEntry& e : into.entries()) {
    if (e.restore != RestorePolicy::kCheckpoint || skip.count(e.name)) continue;
    wanted.insert(e.name);
    const SavedEntry* saved = checkpoint.Find(rank, e.name);
    if (saved == nullptr) {
      return Status::FailedPrecondition(where + "state entry '" + e.name + "' is not in the checkpoint");
    }
    if (saved->replicated != e.replicated || saved->dtype != e.dtype || saved->size() != e.bytes ||
        (saved->shape != e.shape)) {
      return Status::FailedPrecondition(
          where + "state entry '" + e.name + "' does not match the checkpoint (saved " +
          std::string(DTypeName(saved->dtype)) + ", " + std::to_string(saved->size()) + " bytes" +
          (saved->replicated ? ", replicated" : "") + "; registered " + std::string(DTypeName(e.dtype)) +
          ", " + std::to_string(e.bytes) + " bytes" + (e.replicated ? ", replicated" : "") + ")");
    }
    copies.emplace_back(&e, saved);
  }
  auto check_unclaimed = [&](const std::vector<SavedEntry>& saved) -> Status {
    for (const SavedEntry& s : saved) {
      if (!wanted.count(s.name) && !skip.count(s.name)) {
        return Status::FailedPrecondition(where + "checkpoint entry '" + s.name +
                                          "' is not registered for restore");
      }
    }
    return Status::OK();
  };
  DGRR_RETURN_IF_ERROR(check_unclaimed(checkpoint.replicated));
  DGRR_RETURN_IF_ERROR(check_unclaimed(checkpoint.ranks[rank].entries));
  // Deferred entries are read from their files, one file at a time.
  std::map<std::string, std::vector<std::pair<const StateEntry*, const SavedEntry*>>> by_file;
  for (const auto& [entry, saved] : copies) {
    if (saved->deferred) {
      by_file[saved->deferred->path].emplace_back(entry, saved);
    } else if (entry->bytes > 0) {
      std::memcpy(entry->data, saved->data.data(), entry->bytes);
    }
  }
  for (const auto& [path, reads] : by_file) DGRR_RETURN_IF_ERROR(ReadDeferredInto(path, reads));
  return Status::OK();
}

StatusOr<int> RemoveStaleTemporaries(const std::string& run_dir) {
  const std::string dir = run_dir + "/ckpt";
  std::vector<std::string> stale;
  StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    if (names.status().IsNotFound()) return 0;
    return names.status();
  }
  for (const std::string& name : *names) {
    if (IsTemporaryName(name)) stale.push_back(dir + "/" + name);
    // step-N.rank-R.h5 without its manifest step-N.h5: a write that never
    // committed (a checkpoint exists only when its manifest does).
    const size_t cut = name.find(".rank-");
    if (cut != std::string::npos && name.rfind("step-", 0) == 0 && name.size() > 3 &&
        name.compare(name.size() - 3, 3, ".h5") == 0 && !PathExists(dir + "/" + name.substr(0, cut) + ".h5")) {
      stale.push_back(dir + "/" + name);
    }
  }
  for (const std::string& path : stale) {
    // Every rank process of a resumed job may clean at once: gone is fine.
    if (Status s = RemoveFile(path); !s.ok() && !s.IsNotFound()) return s;
  }
  if (!stale.empty()) DGRR_RETURN_IF_ERROR(SyncDirectory(dir));
  return static_cast<int>(stale.size());
}

StatusOr<std::vector<uint64_t>> ListCheckpointSteps(const std::string& run_dir) {
  const std::string dir = run_dir + "/ckpt";
  std::vector<uint64_t> steps;
  StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    if (names.status().IsNotFound()) return steps;
    return names.status();
  }
  for (const std::string& name : *names) {
    if (name.size() < 9 || name.rfind("step-", 0) != 0 || name.substr(name.size() - 3) != ".h5") continue;
    const std::string digits = name.substr(5, name.size() - 8);
    if (digits.empty() || digits.size() > 19 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    steps.push_back(std::stoull(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

StatusOr<Checkpoint> FindNewestGood(const std::string& run_dir, uint64_t max_step, bool fallback,
                                    std::vector<std::string>* skipped,
                                    const std::function<StatusOr<Checkpoint>(const std::string&)>& read) {
  DGRR_ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpointSteps(run_dir));
  Status newest_error;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > max_step) continue;
    StatusOr<Checkpoint> checkpoint = read(CheckpointPath(run_dir, *it));
    if (checkpoint.ok()) return checkpoint;
    if (!fallback) {
      return checkpoint.status().WithPrefix("checkpoint of step " + std::to_string(*it) +
                                            " (pass --fallback to use an older good one)");
    }
    if (skipped != nullptr) skipped->push_back(checkpoint.status().ToString());
    if (newest_error.ok()) newest_error = checkpoint.status();
  }
  std::string msg = run_dir + ": no good checkpoint at or before step " + std::to_string(max_step);
  if (!newest_error.ok()) msg += " (newest error: " + newest_error.ToString() + ")";
  return Status::NotFound(msg);
}

}  // namespace

StatusOr<Checkpoint> FindNewestGoodCheckpoint(const std::string& run_dir, uint64_t max_step,
                                              bool fallback, std::vector<std::string>* skipped, EntryData data) {
  return FindNewestGood(run_dir, max_step, fallback, skipped,
                        [data](const std::string& path) { return ReadCheckpoint(path, data); });
}

StatusOr<Checkpoint> FindNewestGoodCheckpointForRank(const std::string& run_dir, uint64_t max_step, bool fallback,
                                                     int rank, const CheckpointAgreement& agree, EntryData data) {
  return FindNewestGood(run_dir, max_step, fallback, nullptr, [&](const std::string& path) -> StatusOr<Checkpoint> {
    StatusOr<Checkpoint> mine = ReadCheckpointForRank(path, rank, data);
    DGRR_RETURN_IF_ERROR(agree(path, mine.status()));
    return mine;
  });
}

}  // namespace dgrr::checkpoint
