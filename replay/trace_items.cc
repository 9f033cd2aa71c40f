#include "replay/trace_items.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <variant>

#include "base/file.h"
#include "runtime/run_directory.h"

#include "rng/stream_id.h"

namespace dgrr::replay {
namespace {

// SplitMix64's finaliser: a cheap bijective mix, so that digests of keys that
// differ in one field differ in many bits.
constexpr uint64_t Mix64(uint64_t x) { return rng::MixSplitMix64(x); }

std::string RankTracePath(const std::string& dir, uint32_t rank) {
  return TracePathFor(dir, static_cast<int>(rank));
}

StatusOr<trace::TraceHeader> ReadHeader(const std::string& path) {
  if (!PathExists(path)) return Status::NotFound(path + ": no such trace file");
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(path));
  return reader->header();
}

}  // namespace

uint64_t BoundaryNameHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return Mix64(h ^ name.size());
}

uint64_t BoundaryShapeDigest(const trace::BoundaryRecord& record) {
  uint64_t h = Mix64(record.ndim + 0x9e3779b97f4a7c15ULL);
  for (uint64_t d : record.dims) h = Mix64(h ^ d);
  return h;
}

BoundaryItem MakeBoundaryItem(const trace::BoundaryRecord& record, uint64_t name_hash,
                              uint64_t record_index, uint64_t shape_digest) {
  BoundaryItem item;
  item.key.name_hash = name_hash;
  item.shape_digest = shape_digest;
  item.key.first_example = record.first_example;
  item.key.example_count = record.example_count;
  item.key.rank = record.rank;
  item.key.phase = static_cast<uint8_t>(record.phase);
  item.key.direction = static_cast<uint8_t>(record.direction);
  item.dtype = static_cast<uint8_t>(record.dtype);
  item.step = record.step;
  item.record_index = record_index;
  item.xor64 = record.xor64;
  item.xxh3 = record.xxh3;
  return item;
}

std::string RunInput::TracePathOfRank(uint32_t rank) const {
  for (size_t i = 0; i < headers.size(); ++i) {
    if (headers[i].rank == rank) return trace_paths[i];
  }
  return {};
}

StatusOr<RunInput> OpenRunInput(const std::string& path) {
  RunInput run;
  run.path = path;
  if (!PathExists(path)) return Status::NotFound(path + ": no such trace file or run directory");
  std::string dir;
  if (IsDirectory(path)) {
    run.is_run_dir = true;
    dir = path;
    const std::string first = RankTracePath(dir, 0);
    DGRR_ASSIGN_OR_RETURN(trace::TraceHeader header0, ReadHeader(first));
    if (header0.world_size == 0) {
      return Status::Corruption(first + ": header: world_size is 0");
    }
    run.world_size = header0.world_size;
    for (uint32_t r = 0; r < run.world_size; ++r) {
      const std::string trace_path = RankTracePath(dir, r);
      DGRR_ASSIGN_OR_RETURN(trace::TraceHeader header, ReadHeader(trace_path));
      if (header.rank != r || header.world_size != run.world_size ||
          header.run_id != header0.run_id) {
        return Status::Corruption(trace_path + ": header: rank " + std::to_string(header.rank) +
                                  " of " + std::to_string(header.world_size) +
                                  " does not belong to the run of " + first + " (rank " +
                                  std::to_string(r) + " of " + std::to_string(run.world_size) +
                                  ", same run id)");
      }
      run.trace_paths.push_back(trace_path);
      run.headers.push_back(header);
    }
  } else {
    DGRR_ASSIGN_OR_RETURN(trace::TraceHeader header, ReadHeader(path));
    dir = DirName(path);
    run.world_size = header.world_size;
    run.trace_paths.push_back(path);
    run.headers.push_back(header);
  }
  // The run's config and environment live beside its traces (runtime/session.h).
  if (PathExists(ConfigPathFor(dir))) run.config_path = ConfigPathFor(dir);
  const std::string env = EnvPathFor(dir, static_cast<int>(run.headers.front().rank));
  if (PathExists(env)) run.env_path = env;
  return run;
}

bool ItemFilter::Ignored(const std::string& name) const {
  for (const std::string& glob : ignore_globs) {
    if (::fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

struct BoundaryStream::RankReader {
  std::unique_ptr<trace::TraceReader> reader;
  std::vector<uint64_t> hash_of_id;  // by name id; 0 = not yet hashed
  std::vector<int8_t> ignored_id;    // by name id: -1 unknown, 0 kept, 1 ignored
  uint64_t ignored = 0;
  bool has_peek = false;
  bool done = false;
  BoundaryItem peek;
  // The reader's current run of validated boundaries, read where they lie.
  trace::BoundaryRun run;
  size_t run_pos = 0;
  // The last shape digested: consecutive boundaries often share a shape.
  uint8_t last_ndim = 0xff;
  std::array<uint64_t, trace::kInlineDims> last_dims{};
  uint64_t last_shape_digest = 0;
};

BoundaryStream::BoundaryStream(RankOrder order, ItemFilter filter)
    : order_(order), filter_(std::move(filter)) {}
BoundaryStream::~BoundaryStream() = default;

StatusOr<std::unique_ptr<BoundaryStream>> BoundaryStream::Open(const RunInput& run,
                                                               RankOrder order, ItemFilter filter) {
  std::unique_ptr<BoundaryStream> stream(new BoundaryStream(order, std::move(filter)));
  for (const std::string& path : run.trace_paths) {
    auto rank = std::make_unique<RankReader>();
    DGRR_ASSIGN_OR_RETURN(rank->reader, trace::TraceReader::Open(path));
    stream->ranks_.push_back(std::move(rank));
  }
  return stream;
}

uint64_t BoundaryStream::ignored() const {
  uint64_t n = 0;
  for (const auto& r : ranks_) n += r->ignored;
  return n;
}

std::vector<std::string> BoundaryStream::warnings() const {
  std::vector<std::string> out;
  for (const auto& r : ranks_) {
    std::string w = r->reader->torn_tail_warning();
    if (!w.empty()) out.push_back(std::move(w));
  }
  return out;
}

namespace {

// 16 KiB runs: the reader checksums and checks a run right before
// ItemsFromRun reads it, all three passes from L1.
constexpr size_t kRunRecords = 128;

// The shape digest of a boundary's bytes (BoundaryShapeDigest's value).
uint64_t ShapeDigestOf(const trace::BoundaryView& view) {
  uint64_t h = Mix64(view.ndim() + 0x9e3779b97f4a7c15ULL);
  for (size_t i = 0; i < trace::kInlineDims; ++i) h = Mix64(h ^ view.dim(i));
  return h;
}

}  // namespace

// The slow part of a new or ignored name, out of the hot loop: true when the
// boundary is kept.
bool BoundaryStream::KeepName(RankReader& rank, uint32_t name_id) {
  if (name_id >= rank.hash_of_id.size()) {
    rank.hash_of_id.resize(name_id + 1, 0);
    rank.ignored_id.resize(name_id + 1, -1);
  }
  if (rank.ignored_id[name_id] < 0) {
    const std::string& name = *rank.reader->name(name_id);  // the reader checked it exists
    rank.ignored_id[name_id] = filter_.Ignored(name) ? 1 : 0;
    rank.hash_of_id[name_id] = BoundaryNameHash(name);
    names_.emplace(rank.hash_of_id[name_id], name);
  }
  return rank.ignored_id[name_id] == 0;
}

// Items from the rest of the reader's current run, into out[0, max): the
// hot loop of a comparison, with no Status and no call per item. The loop's
// state lives in locals, written back once: the items are stores of 64-bit
// words that, as far as the compiler knows, may land on `rank`'s fields, so
// kept there every field was reloaded and stored again per item.
size_t BoundaryStream::ItemsFromRun(RankReader& rank, BoundaryItem* out, size_t max) {
  const uint8_t* const bytes = rank.run.bytes;
  const uint64_t first_index = rank.run.first_index;
  const size_t end = std::min(rank.run.count, rank.run_pos + max);
  size_t at = rank.run_pos;
  size_t n = 0;
  const int8_t* ignored_id = rank.ignored_id.data();
  const uint64_t* hash_of_id = rank.hash_of_id.data();
  size_t known_names = rank.ignored_id.size();
  uint8_t last_ndim = rank.last_ndim;
  std::array<uint64_t, trace::kInlineDims> last_dims = rank.last_dims;
  uint64_t last_shape_digest = rank.last_shape_digest;
  for (; at < end; ++at) {
    const trace::BoundaryView b(bytes + at * trace::kRecordSize);
    const uint32_t name_id = b.name_id();
    if (name_id >= known_names || ignored_id[name_id] != 0) [[unlikely]] {
      const bool keep = KeepName(rank, name_id);
      ignored_id = rank.ignored_id.data();  // KeepName may grow them
      hash_of_id = rank.hash_of_id.data();
      known_names = rank.ignored_id.size();
      if (!keep) {
        ++rank.ignored;
        continue;
      }
    }
    // Consecutive boundaries often share a shape: digest it only on change.
    uint64_t shape_change = b.ndim() ^ last_ndim;
    for (size_t i = 0; i < trace::kInlineDims; ++i) shape_change |= b.dim(i) ^ last_dims[i];
    if (shape_change != 0) [[unlikely]] {
      last_ndim = b.ndim();
      for (size_t i = 0; i < trace::kInlineDims; ++i) last_dims[i] = b.dim(i);
      last_shape_digest = ShapeDigestOf(b);
    }
    BoundaryItem& item = out[n++];
    item.key.name_hash = hash_of_id[name_id];
    item.shape_digest = last_shape_digest;
    item.key.first_example = b.first_example();
    item.key.example_count = b.example_count();
    item.key.rank = b.rank();
    item.key.phase = static_cast<uint8_t>(b.phase());
    item.key.direction = static_cast<uint8_t>(b.direction());
    item.dtype = static_cast<uint8_t>(b.dtype());
    item.step = b.step();
    item.record_index = first_index + at;
    item.xor64 = b.xor64();
    item.xxh3 = b.xxh3();
  }
  rank.run_pos = at;
  rank.last_ndim = last_ndim;
  rank.last_dims = last_dims;
  rank.last_shape_digest = last_shape_digest;
  return n;
}

Status BoundaryStream::ReadOfRank(RankReader& rank, BoundaryItem* out, size_t max, size_t* n) {
  *n = 0;
  while (*n < max && !rank.done) {
    if (rank.run_pos == rank.run.count) {
      bool done = false;
      rank.run_pos = 0;
      DGRR_RETURN_IF_ERROR(rank.reader->NextBoundaryRun(kRunRecords, &rank.run, &done));
      if (done) {
        rank.done = true;
        break;
      }
    }
    *n += ItemsFromRun(rank, out + *n, max - *n);
  }
  return Status::OK();
}

Status BoundaryStream::NextOfRank(RankReader& rank, BoundaryItem* item, bool* have) {
  size_t n = 0;
  DGRR_RETURN_IF_ERROR(ReadOfRank(rank, item, 1, &n));
  *have = n == 1;
  return Status::OK();
}

Status BoundaryStream::LoadNextStep() {
  step_items_.clear();
  step_pos_ = 0;
  for (auto& rank : ranks_) {
    if (!rank->has_peek && !rank->done) {
      DGRR_RETURN_IF_ERROR(NextOfRank(*rank, &rank->peek, &rank->has_peek));
    }
  }
  bool any = false;
  uint64_t step = 0;
  for (auto& rank : ranks_) {
    if (rank->has_peek && (!any || rank->peek.step < step)) step = rank->peek.step;
    any = any || rank->has_peek;
  }
  if (!any) return Status::OK();
  // Rank by rank, every boundary of `step` (a rank's steps never go down).
  for (auto& rank : ranks_) {
    while (rank->has_peek && rank->peek.step == step) {
      step_items_.push_back(rank->peek);
      rank->has_peek = false;
      DGRR_RETURN_IF_ERROR(NextOfRank(*rank, &rank->peek, &rank->has_peek));
    }
  }
  if (order_ == RankOrder::kByExample) {
    // Per-example boundaries exist once per example whatever the world size;
    // ordering them by example makes the order independent of the sharding.
    // Rank-level boundaries follow in two stages: every rank's own work
    // (data, forward, backward: a micro-batch's records, whose example count
    // is not 1) before any rank's collectives and optimizer, since a
    // collective combines what every rank computed in the step. So a fault in
    // rank 1's backward is named there, not at rank 0's reduced gradient that
    // merely received it (a DDP job: docs/compare.md §6.1).
    auto stage = [](const BoundaryItem& x) {
      return x.key.phase >= static_cast<uint8_t>(trace::Phase::kCollective) ? 1 : 0;
    };
    std::stable_sort(step_items_.begin(), step_items_.end(),
                     [&stage](const BoundaryItem& x, const BoundaryItem& y) {
                       const bool x_rank_level = x.key.example_count != 1;
                       const bool y_rank_level = y.key.example_count != 1;
                       if (x_rank_level != y_rank_level) return y_rank_level;
                       if (!x_rank_level) return x.key.first_example < y.key.first_example;
                       if (stage(x) != stage(y)) return stage(x) < stage(y);
                       return x.key.rank < y.key.rank;
                     });
  }
  return Status::OK();
}

Status BoundaryStream::Read(size_t max, std::vector<BoundaryItem>* out) {
  if (ranks_.size() == 1) {
    // One trace: its own order, no step buffering.
    // Items are written in place: a push_back per item costs more than
    // decoding one.
    RankReader& rank = *ranks_.front();
    size_t n = 0;
    while (n < max && !rank.done) {
      // Grown by doubling, not to `max` at once: a caller may ask for "all".
      if (n == out->size()) out->resize(std::min(max, std::max<size_t>(1024, 2 * n)));
      size_t got = 0;
      Status s = ReadOfRank(rank, out->data() + n, out->size() - n, &got);
      if (!s.ok()) {
        out->clear();
        return s;
      }
      n += got;
    }
    out->resize(n);
  } else {
    out->clear();
    while (out->size() < max) {
      if (step_pos_ == step_items_.size()) {
        DGRR_RETURN_IF_ERROR(LoadNextStep());
        if (step_items_.empty()) break;
      }
      const size_t take = std::min(max - out->size(), step_items_.size() - step_pos_);
      out->insert(out->end(), step_items_.begin() + step_pos_,
                  step_items_.begin() + step_pos_ + take);
      step_pos_ += take;
    }
  }
  produced_ += out->size();
  return Status::OK();
}

StatusOr<std::vector<BoundaryItem>> ReadAllItems(BoundaryStream& stream) {
  std::vector<BoundaryItem> all, chunk;
  do {
    DGRR_RETURN_IF_ERROR(stream.Read(1 << 16, &chunk));
    all.insert(all.end(), chunk.begin(), chunk.end());
  } while (!chunk.empty());
  return all;
}

StatusOr<BoundaryDetail> LoadBoundaryDetail(const RunInput& run, const NameTable& names,
                                            const BoundaryItem& item) {
  BoundaryDetail detail;
  detail.trace_path = run.TracePathOfRank(item.key.rank);
  if (detail.trace_path.empty()) {
    return Status::Internal(run.path + ": no trace for rank " + std::to_string(item.key.rank));
  }
  auto it = names.find(item.key.name_hash);
  detail.name = it == names.end() ? "?" : it->second;
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(detail.trace_path));
  trace::Record record;
  DGRR_RETURN_IF_ERROR(reader->ReadRecordAt(item.record_index, &record));
  const auto* b = std::get_if<trace::BoundaryRecord>(&record.body);
  if (b == nullptr) {
    return Status::Corruption(detail.trace_path + ": record " + std::to_string(item.record_index) +
                              ": expected a boundary record");
  }
  detail.record = *b;
  return detail;
}

}  // namespace dgrr::replay
