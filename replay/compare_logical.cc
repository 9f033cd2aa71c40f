#include "replay/compare_logical.h"

#include <algorithm>
#include <unordered_map>

namespace dgrr::replay {
namespace {

constexpr size_t kRankChunk = 4096;

// The whole run through BoundaryStream: today's orders, unchanged.
class StreamSource : public ItemSource {
 public:
  explicit StreamSource(std::unique_ptr<BoundaryStream> stream) : stream_(std::move(stream)) {}
  Status Read(size_t max, std::vector<BoundaryItem>* out) override { return stream_->Read(max, out); }
  uint64_t produced() const override { return stream_->produced(); }
  uint64_t ignored() const override { return stream_->ignored(); }
  const NameTable& names() const override { return stream_->names(); }
  std::vector<std::string> warnings() const override { return stream_->warnings(); }

 private:
  std::unique_ptr<BoundaryStream> stream_;
};

}  // namespace

StatusOr<std::unique_ptr<ItemSource>> OpenStreamSource(const RunInput& run, RankOrder order,
                                                       const ItemFilter& filter) {
  DGRR_ASSIGN_OR_RETURN(auto stream, BoundaryStream::Open(run, order, filter));
  return std::unique_ptr<ItemSource>(new StreamSource(std::move(stream)));
}

bool CompareAsLogicalRuns(const RunInput& a, const RunInput& b) {
  // A single trace of a multi-rank run is one shard, not a logical run.
  auto whole = [](const RunInput& run) { return run.is_run_dir || run.world_size == 1; };
  return a.world_size != b.world_size && whole(a) && whole(b);
}

std::string_view RankDisagreementKindName(RankDisagreement::Kind kind) {
  switch (kind) {
    case RankDisagreement::Kind::kDiffers: return "differs";
    case RankDisagreement::Kind::kMissingOnRank: return "missing_on_rank";
    case RankDisagreement::Kind::kOnlyOnRank: return "only_on_rank";
  }
  return "?";
}

// One rank's trace, read a chunk at a time, with a cursor for step grouping.
struct LogicalRunSource::Rank {
  std::unique_ptr<BoundaryStream> stream;
  std::vector<BoundaryItem> buffer;
  size_t pos = 0;
  bool done = false;

  // Whether buffer[pos] holds the rank's next item, refilling as needed.
  StatusOr<bool> Peek() {
    if (pos < buffer.size()) return true;
    if (done) return false;
    pos = 0;
    DGRR_RETURN_IF_ERROR(stream->Read(kRankChunk, &buffer));
    done = buffer.empty();
    return !done;
  }
};

LogicalRunSource::LogicalRunSource() = default;
LogicalRunSource::~LogicalRunSource() = default;

StatusOr<std::unique_ptr<LogicalRunSource>> LogicalRunSource::Open(const RunInput& run,
                                                                   const ItemFilter& filter) {
  std::unique_ptr<LogicalRunSource> source(new LogicalRunSource());
  for (size_t r = 0; r < run.trace_paths.size(); ++r) {
    RunInput one = run;  // each rank read alone, in its own program order
    one.trace_paths = {run.trace_paths[r]};
    one.headers = {run.headers[r]};
    auto rank = std::make_unique<Rank>();
    DGRR_ASSIGN_OR_RETURN(rank->stream, BoundaryStream::Open(one, RankOrder::kByRank, filter));
    source->ranks_.push_back(std::move(rank));
  }
  return source;
}

uint64_t LogicalRunSource::ignored() const {
  uint64_t n = 0;
  for (const auto& r : ranks_) n += r->stream->ignored();
  return n;
}

const NameTable& LogicalRunSource::names() const {
  for (const auto& r : ranks_) names_.insert(r->stream->names().begin(), r->stream->names().end());
  return names_;
}

std::vector<std::string> LogicalRunSource::warnings() const {
  std::vector<std::string> out;
  for (const auto& r : ranks_) {
    for (std::string& w : r->stream->warnings()) out.push_back(std::move(w));
  }
  return out;
}

void LogicalRunSource::Note(RankDisagreement d) {
  if (disagreement_count_++ == 0) first_step_ordinal_ = d.step_ordinal;
  if (!first_index_ || d.index < *first_index_) first_index_ = d.index;
  if (disagreements_.size() < kKeptDisagreements) disagreements_.push_back(std::move(d));
}

void LogicalRunSource::CheckReplicas(uint64_t step, uint32_t r,
                                     const std::vector<BoundaryItem>& reference,
                                     const std::vector<uint64_t>& reference_index,
                                     const std::vector<BoundaryItem>& copies, uint64_t block_end) {
  // Occurrences of one key pair in order: the k-th copy with the k-th of
  // rank 0's. The digest finds candidates; the full key decides.
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (size_t k = 0; k < reference.size(); ++k) {
    by_key[KeyDigest(reference[k].key, false)].push_back(k);
  }
  std::vector<bool> matched(reference.size(), false);
  RankDisagreement d;
  d.step = step;
  d.rank = r;
  d.step_ordinal = steps_loaded_;
  for (const BoundaryItem& copy : copies) {
    ++replicas_checked_;
    size_t found = reference.size();
    auto it = by_key.find(KeyDigest(copy.key, false));
    if (it != by_key.end()) {
      for (size_t k : it->second) {
        if (!matched[k] && Pairable(reference[k].key, copy.key, false)) {
          found = k;
          break;
        }
      }
    }
    if (found == reference.size()) {
      d.kind = RankDisagreement::Kind::kOnlyOnRank;
      d.reference = {};
      d.copy = copy;
      d.index = block_end;
      Note(d);
      continue;
    }
    matched[found] = true;
    if (!SameContent(reference[found], copy)) {  // fingerprints, dtype or shape
      d.kind = RankDisagreement::Kind::kDiffers;
      d.reference = reference[found];
      d.copy = copy;
      d.index = reference_index[found];
      Note(d);
    }
  }
  for (size_t k = 0; k < reference.size(); ++k) {
    if (matched[k]) continue;
    d.kind = RankDisagreement::Kind::kMissingOnRank;
    d.reference = reference[k];
    d.copy = {};
    d.index = reference_index[k];
    Note(d);
  }
}

Status LogicalRunSource::LoadNextStep() {
  const uint64_t base = loaded_;  // the logical index of this step's first boundary
  step_items_.clear();
  step_pos_ = 0;
  bool any = false;
  uint64_t step = 0;
  for (auto& rank : ranks_) {
    DGRR_ASSIGN_OR_RETURN(bool have, rank->Peek());
    if (have && (!any || rank->buffer[rank->pos].step < step)) step = rank->buffer[rank->pos].step;
    any = any || have;
  }
  if (!any) return Status::OK();

  // Every rank's boundaries of `step`, in program order.
  std::vector<std::vector<BoundaryItem>> of_rank(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = *ranks_[r];
    for (;;) {
      DGRR_ASSIGN_OR_RETURN(bool have, rank.Peek());
      if (!have || rank.buffer[rank.pos].step != step) break;
      of_rank[r].push_back(rank.buffer[rank.pos++]);
    }
  }
  // The step's batch: the union of every example range recorded in it.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& items : of_rank) {
    for (const BoundaryItem& x : items) {
      lo = std::min<uint64_t>(lo, x.key.first_example);
      hi = std::max<uint64_t>(hi, x.key.first_example + x.key.example_count);
    }
  }
  auto replicated = [&](const BoundaryItem& x) {
    return x.key.example_count != 1 && x.key.first_example == lo &&
           x.key.first_example + x.key.example_count == hi;
  };
  // Per-example boundaries by example, whichever rank held it.
  for (const auto& items : of_rank) {
    for (const BoundaryItem& x : items) {
      if (x.key.example_count == 1) step_items_.push_back(x);
    }
  }
  std::stable_sort(step_items_.begin(), step_items_.end(),
                   [](const BoundaryItem& x, const BoundaryItem& y) {
                     return x.key.first_example < y.key.first_example;
                   });
  // Replicated boundaries: rank 0's stand for the logical run.
  std::vector<BoundaryItem> reference;
  std::vector<uint64_t> reference_index;
  for (const BoundaryItem& x : of_rank[0]) {
    if (!replicated(x)) continue;
    reference_index.push_back(base + step_items_.size());
    reference.push_back(x);
    step_items_.push_back(x);
  }
  const uint64_t block_end = base + step_items_.size();
  for (size_t r = 1; r < of_rank.size(); ++r) {
    std::vector<BoundaryItem> copies;
    for (const BoundaryItem& x : of_rank[r]) {
      if (replicated(x)) copies.push_back(x);
    }
    CheckReplicas(step, static_cast<uint32_t>(r), reference, reference_index, copies, block_end);
  }
  // Anything else (a rank's per-shard total): by rank, as recorded. Its
  // range depends on the sharding, so across world sizes it stays unpaired.
  for (const auto& items : of_rank) {
    for (const BoundaryItem& x : items) {
      if (x.key.example_count != 1 && !replicated(x)) step_items_.push_back(x);
    }
  }
  ++steps_loaded_;
  loaded_ += step_items_.size();
  return Status::OK();
}

Status LogicalRunSource::Read(size_t max, std::vector<BoundaryItem>* out) {
  out->clear();
  while (out->size() < max) {
    if (step_pos_ == step_items_.size()) {
      DGRR_RETURN_IF_ERROR(LoadNextStep());
      if (step_items_.empty()) break;
    }
    const size_t take = std::min(max - out->size(), step_items_.size() - step_pos_);
    out->insert(out->end(), step_items_.begin() + step_pos_, step_items_.begin() + step_pos_ + take);
    step_pos_ += take;
  }
  produced_ += out->size();
  return Status::OK();
}

}  // namespace dgrr::replay
