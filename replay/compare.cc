#include "replay/compare.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>

#include "base/coding.h"
#include "base/file.h"
#include "runtime/json_input.h"
#include "trace_format/read_ahead.h"
#include "trace_format/shape_text.h"

namespace dgrr::replay {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Walks with an explicit stack rather than a recursion per nesting level:
// DiffJson is public and takes documents from anywhere, not only from
// ParseJson's depth-capped files. One path string is shared by the whole walk:
// each pending value holds the length of its parent's path and its own last
// component, so a document n levels deep costs O(n) in paths, not a copy of
// every ancestor's path per level (O(n^2): 100k levels took over a minute
// under ASan). The stack is LIFO, so when a value is taken the path's first
// parent_length characters are still its parent's path.
void Flatten(const json& root, std::map<std::string, std::string>* out) {
  struct Pending {
    const json* value;
    size_t parent_length;
    bool is_key;            // an object member: "." before it unless at the root
    std::string component;  // the member's key, or "[i]"
  };
  std::vector<Pending> pending = {{&root, 0, false, ""}};
  std::string path;
  while (!pending.empty()) {
    Pending p = std::move(pending.back());
    pending.pop_back();
    path.resize(p.parent_length);
    if (p.is_key && !path.empty()) path += '.';
    path += p.component;
    const json* value = p.value;
    if (value->is_object() && !value->empty()) {
      for (auto it = value->begin(); it != value->end(); ++it) {
        pending.push_back({&it.value(), path.size(), true, it.key()});
      }
    } else if (value->is_array() && !value->empty()) {
      for (size_t i = 0; i < value->size(); ++i) {
        pending.push_back({&(*value)[i], path.size(), false, "[" + std::to_string(i) + "]"});
      }
    } else {
      (*out)[path.empty() ? "(root)" : path] = value->dump();
    }
  }
}

// `"inject": []` against `"inject": ["bitflip:..."]` is one difference,
// inject[0], not also a phantom `inject` present on one side only.
void DropEmptyContainersTheOtherSideFills(std::map<std::string, std::string>* flat,
                                          const std::map<std::string, std::string>& other) {
  for (auto it = flat->begin(); it != flat->end();) {
    const bool empty = it->second == "[]" || it->second == "{}";
    bool filled = false;
    if (empty && !other.count(it->first)) {
      for (const char* sep : {"[", "."}) {
        const std::string prefix = it->first + sep;
        auto next = other.lower_bound(prefix);
        filled = filled || (next != other.end() && next->first.compare(0, prefix.size(), prefix) == 0);
      }
    }
    it = filled ? flat->erase(it) : std::next(it);
  }
}

// Both JSON files when both exist; differences key by key.
Status DiffJsonFiles(const std::string& path_a, const std::string& path_b, bool environment,
                     bool* available, std::vector<KeyDifference>* differences) {
  *available = !path_a.empty() && !path_b.empty();
  if (!*available) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(json a, ReadJsonFile(path_a));
  DGRR_ASSIGN_OR_RETURN(json b, ReadJsonFile(path_b));
  if (environment) {
    a = EnvironmentForDiff(a);
    b = EnvironmentForDiff(b);
  }
  *differences = DiffJson(a, b);
  return Status::OK();
}

// Pairs before `prefix` kept as the identity, the rest aligned by the
// schedule-tolerant mapper; one Alignment over the whole sequences.
Alignment AlignFromFirstMismatch(const std::vector<BoundaryItem>& a,
                                 const std::vector<BoundaryItem>& b, uint64_t prefix,
                                 const MapperOptions& options) {
  Alignment whole;
  whole.pairs.reserve(std::min(a.size(), b.size()));
  for (uint64_t k = 0; k < prefix; ++k) whole.pairs.push_back({k, k, PairOrigin::kLockstep});
  std::span<const BoundaryItem> rest_a(a.data() + prefix, a.size() - prefix);
  std::span<const BoundaryItem> rest_b(b.data() + prefix, b.size() - prefix);
  if (rest_a.empty() || rest_b.empty()) {
    for (uint64_t i = prefix; i < a.size(); ++i) whole.unmatched_a.push_back(i);
    for (uint64_t j = prefix; j < b.size(); ++j) whole.unmatched_b.push_back(j);
    whole.why_a.assign(whole.unmatched_a.size(), Unpaired::kNoCounterpart);
    whole.why_b.assign(whole.unmatched_b.size(), Unpaired::kNoCounterpart);
  } else {
    Alignment rest = AlignTolerant(rest_a, rest_b, options);
    for (const AlignedPair& p : rest.pairs) {
      whole.pairs.push_back({p.index_a + prefix, p.index_b + prefix, p.origin});
    }
    for (const auto& [i, j] : rest.anchors) whole.anchors.push_back({i + prefix, j + prefix});
    for (uint64_t i : rest.unmatched_a) whole.unmatched_a.push_back(i + prefix);
    for (uint64_t j : rest.unmatched_b) whole.unmatched_b.push_back(j + prefix);
    whole.why_a = std::move(rest.why_a);
    whole.why_b = std::move(rest.why_b);
    whole.stats = rest.stats;
  }
  AlignmentStats& s = whole.stats;
  s.length_a = a.size();
  s.length_b = b.size();
  s.length_ratio = a.empty() ? 0.0 : static_cast<double>(b.size()) / static_cast<double>(a.size());
  const uint64_t total = a.size() + b.size();
  s.unmatched_fraction =
      total == 0 ? 0.0
                 : static_cast<double>(whole.unmatched_a.size() + whole.unmatched_b.size()) /
                       static_cast<double>(total);
  s.anchors = whole.anchors.size();
  const uint64_t longer = std::max(a.size(), b.size());
  s.anchor_density = longer == 0 ? 0.0 : static_cast<double>(s.anchors) / static_cast<double>(longer);
  s.lockstep = prefix == a.size() && prefix == b.size();
  return whole;
}

// Boundaries never compared (replicas are compared) of one side before
// index `end`: `unmatched` is ascending.
uint64_t UncomparedBefore(const std::vector<uint64_t>& unmatched, const std::vector<Unpaired>& why,
                          uint64_t end) {
  uint64_t n = 0;
  for (size_t k = 0; k < unmatched.size() && unmatched[k] < end; ++k) {
    n += (k < why.size() ? why[k] : Unpaired::kNoCounterpart) != Unpaired::kReplica;
  }
  return n;
}

// The first few uncompared boundaries of both sides, by position; only those
// of A before index `end_a` and of B before `end_b`.
void ListUncompared(const Alignment& alignment, uint64_t end_a, uint64_t end_b,
                    std::vector<std::pair<char, std::pair<uint64_t, Unpaired>>>* out) {
  std::vector<std::pair<uint64_t, std::pair<char, Unpaired>>> all;
  auto collect = [&](char side, const std::vector<uint64_t>& unmatched, const std::vector<Unpaired>& why,
                     uint64_t end) {
    size_t taken = 0;
    for (size_t k = 0; k < unmatched.size() && unmatched[k] < end && taken < kListedUncompared; ++k) {
      const Unpaired w = k < why.size() ? why[k] : Unpaired::kNoCounterpart;
      if (w == Unpaired::kReplica) continue;
      all.push_back({unmatched[k], {side, w}});
      ++taken;
    }
  };
  collect('A', alignment.unmatched_a, alignment.why_a, end_a);
  collect('B', alignment.unmatched_b, alignment.why_b, end_b);
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  if (all.size() > kListedUncompared) all.resize(kListedUncompared);
  for (const auto& [index, what] : all) out->push_back({what.first, {index, what.second}});
}

uint64_t FirstKeyMismatch(const std::vector<BoundaryItem>& a, const std::vector<BoundaryItem>& b,
                          bool compare_rank) {
  const uint64_t n = std::min(a.size(), b.size());
  uint64_t k = 0;
  while (k < n && Pairable(a[k].key, b[k].key, compare_rank)) ++k;
  return k;
}

StatusOr<ReportedBoundary> Report(const RunInput& run, const NameTable& names,
                                  const BoundaryItem& item, uint64_t index) {
  DGRR_ASSIGN_OR_RETURN(BoundaryDetail detail, LoadBoundaryDetail(run, names, item));
  ReportedBoundary out;
  out.trace = detail.trace_path;
  out.record_index = item.record_index;
  out.index = index;
  out.world_size = run.world_size;
  out.name = detail.name;
  out.record = detail.record;
  return out;
}

StatusOr<ReportedPair> ReportPair(const RunInput& ra, const NameTable& na, const RunInput& rb,
                                  const NameTable& nb, const PairView& view) {
  ReportedPair pair;
  pair.ordinal = view.ordinal;
  pair.status = view.status;
  pair.difference = view.difference;
  DGRR_ASSIGN_OR_RETURN(pair.a, Report(ra, na, view.a, view.index_a));
  DGRR_ASSIGN_OR_RETURN(pair.b, Report(rb, nb, view.b, view.index_b));
  return pair;
}

SideSummary Summarise(const RunInput& run, const ItemSource& stream) {
  SideSummary s;
  s.path = run.path;
  s.is_run_dir = run.is_run_dir;
  s.world_size = run.world_size;
  s.trace_paths = run.trace_paths;
  s.boundaries = stream.produced();
  s.ignored = stream.ignored();
  s.warnings = stream.warnings();
  return s;
}

// Reads one side's chunks on a second thread, one chunk ahead: reading and
// validating the two traces is nearly all of a lockstep comparison, and the
// two sides are independent until they are compared. What a chunk holds and
// every status are those of calling stream.Read on the caller's thread; an
// exception on the reading thread is rethrown on the caller's. The thread
// holds a read-ahead slot (trace_format/read_ahead.h): the readers' own
// read-ahead threads come on top of it only where cores are left for them.
class ChunkPrefetcher {
 public:
  ChunkPrefetcher(ItemSource& stream, size_t chunk) : stream_(stream), chunk_(chunk) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ChunkPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  ChunkPrefetcher(const ChunkPrefetcher&) = delete;
  ChunkPrefetcher& operator=(const ChunkPrefetcher&) = delete;

  // The next chunk, as stream.Read(chunk, out) would give it.
  Status Read(std::vector<BoundaryItem>* out) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return ready_ || finished_; });
    if (error_) std::rethrow_exception(error_);
    if (!ready_) {  // the stream ended or failed: it would say so again
      out->clear();
      return status_;
    }
    out->swap(chunk_items_);  // the caller's spent vector is reused for the next chunk
    ready_ = false;
    changed_.notify_all();
    return status_;
  }

 private:
  void Run() {
    std::vector<BoundaryItem> items;
    try {
      for (;;) {
        Status status = stream_.Read(chunk_, &items);
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return !ready_ || stop_; });
        if (stop_) break;
        const bool last = !status.ok() || items.empty();
        chunk_items_.swap(items);
        status_ = std::move(status);
        ready_ = true;
        changed_.notify_all();
        if (last) break;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }

  ItemSource& stream_;
  const size_t chunk_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<BoundaryItem> chunk_items_;  // the chunk ready for Read
  Status status_;
  bool ready_ = false;
  bool finished_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  trace::ReadingThreadSlot slot_;
  std::thread thread_;  // last: started once everything above exists
};

// The streaming pass; true when the sequences lined up to their ends.
StatusOr<bool> TryLockstep(ItemSource& sa, ItemSource& sb, bool compare_rank,
                           const CertifyOptions& certify_options, size_t chunk,
                           CertifyReport* report) {
  LockstepComparer comparer(compare_rank, certify_options);
  std::vector<BoundaryItem> ca, cb;
  // B is read on a second thread when the system gives one, else here.
  std::optional<ChunkPrefetcher> prefetch_b;
  try {
    prefetch_b.emplace(sb, chunk);
  } catch (const std::system_error&) {
    prefetch_b.reset();
  }
  for (;;) {
    DGRR_RETURN_IF_ERROR(sa.Read(chunk, &ca));
    DGRR_RETURN_IF_ERROR(prefetch_b ? prefetch_b->Read(&cb) : sb.Read(chunk, &cb));
    if (ca.empty() && cb.empty()) break;
    if (!comparer.Feed(ca, cb)) return false;
  }
  *report = comparer.Finish();
  return true;
}

StatusOr<std::vector<BoundaryItem>> ReadAll(ItemSource& source) {
  std::vector<BoundaryItem> all, chunk;
  do {
    DGRR_RETURN_IF_ERROR(source.Read(1 << 16, &chunk));
    all.insert(all.end(), chunk.begin(), chunk.end());
  } while (!chunk.empty());
  return all;
}

// One side's items in comparison order: the logical run (§6.3), or the
// run's ranks by example (§6.2; paired ranks stay in the key).
struct Side {
  std::unique_ptr<ItemSource> source;
  const LogicalRunSource* logical = nullptr;  // source, when logical
};

StatusOr<Side> OpenSide(const RunInput& run, bool logical, const ItemFilter& filter) {
  Side side;
  if (logical) {
    DGRR_ASSIGN_OR_RETURN(auto source, LogicalRunSource::Open(run, filter));
    side.logical = source.get();
    side.source = std::move(source);
  } else {
    // Within a step, every rank's per-example work logically precedes the
    // collectives that combine it: ordering by example first means a fault on
    // rank 1 is named at its own boundary, not at rank 0's all-reduce that
    // merely received it. (Ranks stay in the pairing key when paired.)
    DGRR_ASSIGN_OR_RETURN(side.source, OpenStreamSource(run, RankOrder::kByExample, filter));
  }
  return side;
}

// A rank that disagrees with its own run's rank 0 ends the certified prefix
// before the logical boundary concerned: its step is not certified, whatever
// the other run says. `pair_at(k)` gives the k-th pair's (index_a, index_b).
template <typename PairAt>
void EndPrefixAtRankDisagreement(const Side& a, const Side& b, uint64_t pairs, PairAt pair_at,
                                 CompareResult* result) {
  const auto* la = a.logical;
  const auto* lb = b.logical;
  const bool in_a = la != nullptr && la->first_disagreement_index().has_value();
  const bool in_b = lb != nullptr && lb->first_disagreement_index().has_value();
  if (!in_a && !in_b) return;
  const uint64_t cut_a = in_a ? *la->first_disagreement_index() : UINT64_MAX;
  const uint64_t cut_b = in_b ? *lb->first_disagreement_index() : UINT64_MAX;
  uint64_t k = 0;
  for (; k < pairs; ++k) {
    const auto [ia, ib] = pair_at(k);
    if (ia >= cut_a || ib >= cut_b) break;
  }
  CertifyReport& c = result->certify;
  const bool ended_at_end = !c.first_divergence && !c.stopped_at_uncompared;
  if (k < c.certified_pairs || (k == c.certified_pairs && ended_at_end)) {
    result->prefix_ends_at_rank_disagreement = true;
    c.certified_pairs = k;
  }
  uint64_t steps = c.certified_steps;
  if (in_a) steps = std::min(steps, la->first_disagreement_step_ordinal());
  if (in_b) steps = std::min(steps, lb->first_disagreement_step_ordinal());
  c.certified_steps = steps;
}

Status ReportRankDisagreements(const RunInput& run, const Side& side, char which,
                               CompareResult* result) {
  if (side.logical == nullptr) return Status::OK();
  result->rank_disagreement_count += side.logical->disagreement_count();
  const NameTable& names = side.logical->names();
  for (const RankDisagreement& d : side.logical->disagreements()) {
    ReportedRankDisagreement out;
    out.side = which;
    out.kind = d.kind;
    out.step = d.step;
    out.rank = d.rank;
    out.world_size = run.world_size;
    if (d.kind != RankDisagreement::Kind::kOnlyOnRank) {
      DGRR_ASSIGN_OR_RETURN(out.reference, Report(run, names, d.reference, d.index));
    }
    if (d.kind != RankDisagreement::Kind::kMissingOnRank) {
      DGRR_ASSIGN_OR_RETURN(out.copy, Report(run, names, d.copy, d.index));
    }
    result->rank_disagreements.push_back(std::move(out));
  }
  return Status::OK();
}

// The environment fingerprint's keys (runtime/environment.cc) that only
// say how many threads there were: the results do not depend on them.
bool EnvironmentKeyChangesResults(const std::string& key) {
  return key != "host.hardware_threads" && key.rfind("controls.dgrr.threads.", 0) != 0;
}

}  // namespace

std::vector<KeyDifference> DiffJson(const json& a, const json& b) {
  std::map<std::string, std::string> flat_a, flat_b;
  Flatten(a, &flat_a);
  Flatten(b, &flat_b);
  DropEmptyContainersTheOtherSideFills(&flat_a, flat_b);
  DropEmptyContainersTheOtherSideFills(&flat_b, flat_a);
  std::vector<KeyDifference> out;
  auto ia = flat_a.begin();
  auto ib = flat_b.begin();
  while (ia != flat_a.end() || ib != flat_b.end()) {
    if (ib == flat_b.end() || (ia != flat_a.end() && ia->first < ib->first)) {
      out.push_back({ia->first, ia->second, std::nullopt});
      ++ia;
    } else if (ia == flat_a.end() || ib->first < ia->first) {
      out.push_back({ib->first, std::nullopt, ib->second});
      ++ib;
    } else {
      if (ia->second != ib->second) out.push_back({ia->first, ia->second, ib->second});
      ++ia;
      ++ib;
    }
  }
  return out;
}

json EnvironmentForDiff(const json& env) {
  json out = env;
  if (!out.is_object()) return out;
  out.erase("collected_unix_ns");
  out.erase("digest");
  if (out.contains("host") && out["host"].is_object()) out["host"].erase("hostname");
  if (out.contains("controls") && out["controls"].is_array()) {
    json by_name = json::object();
    for (const json& control : out["controls"]) {
      if (!control.is_object() || !control.contains("name") || !control["name"].is_string()) continue;
      json fields = control;
      fields.erase("name");
      by_name[control["name"].get<std::string>()] = fields;
    }
    out["controls"] = by_name;
  }
  return out;
}

StatusOr<CompareResult> CompareRuns(const std::string& a, const std::string& b,
                                    const CompareOptions& options) {
  DGRR_ASSIGN_OR_RETURN(RunInput ra, OpenRunInput(a));
  DGRR_ASSIGN_OR_RETURN(RunInput rb, OpenRunInput(b));
  CompareResult result;
  result.ranks_paired = RanksComparable(ra.world_size, rb.world_size);

  result.config_digests_differ = ra.headers.front().config_digest != rb.headers.front().config_digest;
  result.env_digests_differ = ra.headers.front().env_digest != rb.headers.front().env_digest;
  DGRR_RETURN_IF_ERROR(DiffJsonFiles(ra.config_path, rb.config_path, false,
                                     &result.configs_available, &result.config_differences));
  DGRR_RETURN_IF_ERROR(DiffJsonFiles(ra.env_path, rb.env_path, true,
                                     &result.environments_available,
                                     &result.environment_differences));
  if (options.config_key_changes_results) {
    for (KeyDifference& d : result.config_differences) d.changes_results = options.config_key_changes_results(d.key);
  }
  for (KeyDifference& d : result.environment_differences) d.changes_results = EnvironmentKeyChangesResults(d.key);

  result.logical = CompareAsLogicalRuns(ra, rb);
  const ItemFilter filter{options.ignore_globs};
  CertifyOptions certify_options;
  certify_options.context = options.context;
  certify_options.isolation_window = std::max<uint32_t>(1, options.isolation_window);

  DGRR_ASSIGN_OR_RETURN(Side side_a, OpenSide(ra, result.logical, filter));
  DGRR_ASSIGN_OR_RETURN(Side side_b, OpenSide(rb, result.logical, filter));
  ItemSource* sa = side_a.source.get();
  ItemSource* sb = side_b.source.get();
  bool streamed = false;
  std::vector<std::pair<char, std::pair<uint64_t, Unpaired>>> uncompared;  // side, index, why
  std::vector<BoundaryItem> uncompared_items;
  // The same for those before the first divergence on their side.
  std::vector<std::pair<char, std::pair<uint64_t, Unpaired>>> earlier;
  std::vector<BoundaryItem> earlier_items;
  if (!options.keep_sequences) {
    DGRR_ASSIGN_OR_RETURN(streamed, TryLockstep(*sa, *sb, result.ranks_paired, certify_options,
                                                std::max<size_t>(1, options.chunk_items),
                                                &result.certify));
  }
  if (streamed) {
    result.lockstep = true;
    result.lockstep_prefix = sa->produced();
    result.stats.length_a = sa->produced();
    result.stats.length_b = sb->produced();
    result.stats.length_ratio = sa->produced() == 0 ? 0.0 : 1.0;
    result.stats.lockstep = true;
    EndPrefixAtRankDisagreement(side_a, side_b, result.certify.pairs,
                                [](uint64_t k) { return std::pair<uint64_t, uint64_t>(k, k); },
                                &result);
  } else {
    // The keys stopped lining up (or the caller wants everything): read both
    // sides again into memory and align from the first key mismatch on.
    DGRR_ASSIGN_OR_RETURN(side_a, OpenSide(ra, result.logical, filter));
    DGRR_ASSIGN_OR_RETURN(side_b, OpenSide(rb, result.logical, filter));
    sa = side_a.source.get();
    sb = side_b.source.get();
    DGRR_ASSIGN_OR_RETURN(std::vector<BoundaryItem> items_a, ReadAll(*sa));
    DGRR_ASSIGN_OR_RETURN(std::vector<BoundaryItem> items_b, ReadAll(*sb));
    MapperOptions mapper;
    mapper.compare_rank = result.ranks_paired;
    mapper.band = options.band;
    result.lockstep_prefix = FirstKeyMismatch(items_a, items_b, result.ranks_paired);
    Alignment alignment =
        AlignFromFirstMismatch(items_a, items_b, result.lockstep_prefix, mapper);
    result.certify = Certify(items_a, items_b, alignment, certify_options);
    EndPrefixAtRankDisagreement(side_a, side_b, alignment.pairs.size(),
                                [&](uint64_t k) {
                                  const AlignedPair& p = alignment.pairs[k];
                                  return std::pair<uint64_t, uint64_t>(p.index_a, p.index_b);
                                },
                                &result);
    result.lockstep = alignment.stats.lockstep;
    result.stats = alignment.stats;
    result.unmatched_a = alignment.unmatched_a.size();
    result.unmatched_b = alignment.unmatched_b.size();
    result.coverage = CoverageOf(alignment);
    ListUncompared(alignment, UINT64_MAX, UINT64_MAX, &uncompared);
    for (const auto& [side, at] : uncompared) {
      uncompared_items.push_back(side == 'A' ? items_a[at.first] : items_b[at.first]);
    }
    if (const auto& first = result.certify.first_divergence) {
      // What could not be compared before the first differing pair: the
      // true first divergence may be there (docs/compare.md §4).
      result.earlier_uncompared =
          UncomparedBefore(alignment.unmatched_a, alignment.why_a, first->index_a) +
          UncomparedBefore(alignment.unmatched_b, alignment.why_b, first->index_b);
      ListUncompared(alignment, first->index_a, first->index_b, &earlier);
      for (const auto& [side, at] : earlier) {
        earlier_items.push_back(side == 'A' ? items_a[at.first] : items_b[at.first]);
      }
    }
    if (options.keep_sequences) {
      result.has_sequences = true;
      result.items_a = std::move(items_a);
      result.items_b = std::move(items_b);
      result.alignment = std::move(alignment);
      result.names_a = sa->names();
      result.names_b = sb->names();
    }
  }
  result.a = Summarise(ra, *sa);
  result.b = Summarise(rb, *sb);
  if (side_a.logical) result.a.replicas_checked = side_a.logical->replicas_checked();
  if (side_b.logical) result.b.replicas_checked = side_b.logical->replicas_checked();
  DGRR_RETURN_IF_ERROR(ReportRankDisagreements(ra, side_a, 'A', &result));
  DGRR_RETURN_IF_ERROR(ReportRankDisagreements(rb, side_b, 'B', &result));

  auto report_uncompared = [&](const std::vector<std::pair<char, std::pair<uint64_t, Unpaired>>>& list,
                               const std::vector<BoundaryItem>& items,
                               std::vector<UncomparedBoundary>* out) -> Status {
    for (size_t k = 0; k < list.size(); ++k) {
      const auto& [side, at] = list[k];
      UncomparedBoundary u;
      u.side = side;
      u.why = at.second;
      DGRR_ASSIGN_OR_RETURN(u.boundary, Report(side == 'A' ? ra : rb,
                                               side == 'A' ? sa->names() : sb->names(), items[k],
                                               at.first));
      out->push_back(std::move(u));
    }
    return Status::OK();
  };
  DGRR_RETURN_IF_ERROR(report_uncompared(uncompared, uncompared_items, &result.uncompared));
  DGRR_RETURN_IF_ERROR(
      report_uncompared(earlier, earlier_items, &result.earlier_uncompared_listed));
  const CertifyReport& c = result.certify;
  if (c.first_divergence) {
    DGRR_ASSIGN_OR_RETURN(result.first_divergence,
                          ReportPair(ra, sa->names(), rb, sb->names(), *c.first_divergence));
    for (const PairView& v : c.before) {
      DGRR_ASSIGN_OR_RETURN(ReportedPair p, ReportPair(ra, sa->names(), rb, sb->names(), v));
      result.before.push_back(std::move(p));
    }
    for (const PairView& v : c.after) {
      DGRR_ASSIGN_OR_RETURN(ReportedPair p, ReportPair(ra, sa->names(), rb, sb->names(), v));
      result.after.push_back(std::move(p));
    }
  }
  return result;
}

// ---- JSON ------------------------------------------------------------------

namespace {

using trace::ShapeText;
using trace::StoredDims;

ordered_json BoundaryJson(const ReportedBoundary& x) {
  const trace::BoundaryRecord& r = x.record;
  return {{"trace", x.trace},
          {"record_index", x.record_index},
          {"index", x.index},
          {"step", r.step},
          {"rank", r.rank},
          {"world_size", x.world_size},
          {"phase", std::string(trace::PhaseName(r.phase))},
          {"direction", std::string(trace::DirectionName(r.direction))},
          {"name", x.name},
          {"dtype", std::string(DTypeName(r.dtype))},
          {"ndim", r.ndim},
          {"shape", StoredDims(r)},
          {"first_example", r.first_example},
          {"example_count", r.example_count},
          {"xor64", Hex64(r.xor64)},
          {"xxh3", Hex64(r.xxh3)}};
}

const char* StatusName(PairStatus s) { return s == PairStatus::kEqual ? "equal" : "differs"; }

ordered_json PairJson(const ReportedPair& p) {
  return {{"ordinal", p.ordinal},
          {"status", StatusName(p.status)},
          {"difference", p.difference == Difference::kNone ? ordered_json(nullptr)
                                                           : ordered_json(DifferenceName(p.difference))},
          {"a", BoundaryJson(p.a)},
          {"b", BoundaryJson(p.b)}};
}

ordered_json UncomparedJson(const std::vector<UncomparedBoundary>& list) {
  ordered_json out = ordered_json::array();
  for (const UncomparedBoundary& u : list) {
    out.push_back({{"side", std::string(1, u.side)},
                   {"reason", UnpairedName(u.why)},
                   {"boundary", BoundaryJson(u.boundary)}});
  }
  return out;
}

ordered_json SideJson(const SideSummary& s) {
  return {{"path", s.path},
          {"kind", s.is_run_dir ? "run_dir" : "trace"},
          {"world_size", s.world_size},
          {"traces", s.trace_paths},
          {"boundaries", s.boundaries},
          {"ignored", s.ignored},
          {"replicas_checked", s.replicas_checked},
          {"warnings", s.warnings}};
}

ordered_json DifferencesJson(const std::vector<KeyDifference>& diffs) {
  ordered_json out = ordered_json::array();
  for (const KeyDifference& d : diffs) {
    out.push_back({{"key", d.key},
                   {"a", d.a ? ordered_json(*d.a) : ordered_json(nullptr)},
                   {"b", d.b ? ordered_json(*d.b) : ordered_json(nullptr)}});
  }
  return out;
}

}  // namespace

ordered_json CompareJson(const CompareResult& r) {
  const CertifyReport& c = r.certify;
  const AlignmentStats& s = r.stats;
  ordered_json out;
  out["schema"] = "dgrr.compare/4";
  out["verdict"] = r.found_difference() ? "divergence" : "no_divergence";
  out["a"] = SideJson(r.a);
  out["b"] = SideJson(r.b);
  out["ranks"] = r.ranks_paired ? "paired" : r.logical ? "logical" : "merged";
  out["config"] = {{"available", r.configs_available},
                   {"digests_differ", r.config_digests_differ},
                   {"differences", DifferencesJson(r.config_differences)}};
  out["environment"] = {{"available", r.environments_available},
                        {"digests_differ", r.env_digests_differ},
                        {"differences", DifferencesJson(r.environment_differences)}};
  out["alignment"] = {{"mode", r.lockstep ? "lockstep" : "tolerant"},
                      {"lockstep_prefix", r.lockstep_prefix},
                      {"length_a", s.length_a},
                      {"length_b", s.length_b},
                      {"length_ratio", s.length_ratio},
                      {"unmatched_a", r.unmatched_a},
                      {"unmatched_b", r.unmatched_b},
                      {"unmatched_fraction", s.unmatched_fraction},
                      {"anchors", s.anchors},
                      {"anchor_density", s.anchor_density},
                      {"moved_pairs", s.moved_pairs},
                      {"repeat_key_pairs", s.repeat_key_pairs},
                      {"fingerprint_pairs", s.fingerprint_pairs}};
  out["coverage"] = {{"uncompared", r.coverage.uncompared()},
                     {"no_counterpart", r.coverage.no_counterpart},
                     {"outside_reach", r.coverage.outside_reach},
                     {"ambiguous", r.coverage.ambiguous},
                     {"replicas", r.coverage.replicas},
                     {"first", UncomparedJson(r.uncompared)}};
  out["certification"] = {{"pairs", c.pairs},
                          {"certified_pairs", c.certified_pairs},
                          {"prefix_ends_at", r.prefix_ends_at_rank_disagreement ? "rank_disagreement"
                                             : c.stopped_at_uncompared        ? "uncompared"
                                             : c.first_divergence             ? "divergence"
                                                                              : "end"},
                          {"certified_steps", c.certified_steps},
                          {"differing_pairs", c.differing},
                          {"later_differing_pairs", c.later_differing}};
  ordered_json disagreements = ordered_json::array();
  for (const ReportedRankDisagreement& d : r.rank_disagreements) {
    disagreements.push_back(
        {{"side", std::string(1, d.side)},
         {"kind", std::string(RankDisagreementKindName(d.kind))},
         {"step", d.step},
         {"rank", d.rank},
         {"world_size", d.world_size},
         {"reference", d.reference ? BoundaryJson(*d.reference) : ordered_json(nullptr)},
         {"copy", d.copy ? BoundaryJson(*d.copy) : ordered_json(nullptr)}});
  }
  out["rank_disagreements"] = {{"count", r.rank_disagreement_count}, {"first", disagreements}};
  if (r.first_divergence) {
    ordered_json before = ordered_json::array(), after = ordered_json::array();
    for (const ReportedPair& p : r.before) before.push_back(PairJson(p));
    for (const ReportedPair& p : r.after) after.push_back(PairJson(p));
    out["divergence"] = {{"kind", DivergenceKindName(c.kind)},
                         {"first", PairJson(*r.first_divergence)},
                         {"before", before},
                         {"after", after},
                         {"earlier_uncompared", r.earlier_uncompared},
                         {"earlier_uncompared_first", UncomparedJson(r.earlier_uncompared_listed)}};
  } else {
    out["divergence"] = nullptr;
  }
  return out;
}

std::string DifferenceText(const ReportedPair& p) {
  const trace::BoundaryRecord& a = p.a.record;
  const trace::BoundaryRecord& b = p.b.record;
  std::string out;
  if (p.difference == Difference::kDtype || p.difference == Difference::kDtypeAndShape) {
    out += "dtype " + std::string(DTypeName(a.dtype)) + " -> " + std::string(DTypeName(b.dtype));
  }
  if (p.difference == Difference::kShape || p.difference == Difference::kDtypeAndShape) {
    if (!out.empty()) out += ", ";
    out += "shape " + ShapeText(a) + " -> " + ShapeText(b);
  }
  if (p.difference == Difference::kValues) out = "values differ";
  return out;
}

// ---- text ------------------------------------------------------------------

namespace {

std::string Describe(const ReportedBoundary& x) {
  const trace::BoundaryRecord& r = x.record;
  std::ostringstream o;
  o << "step " << r.step << " rank " << r.rank << " " << trace::PhaseName(r.phase) << " "
    << trace::DirectionName(r.direction) << " " << x.name << " " << DTypeName(r.dtype)
    << ShapeText(r) << " examples " << r.first_example << "+" << r.example_count;
  return o.str();
}

// Settings documented never to change results, so never "a likely
// explanation": the worker thread count and the rank count (results are
// bitwise independent of both: the canonical reduction, docs/communicator.md;
// the config digest of a checkpoint leaves threads out with ckpt_every,
// docs/checkpoint-format.md), the audit interval (the audit only reads), and
// the machine's hardware thread count. Host
// name and collection time are dropped before diffing (EnvironmentForDiff).
// `diverged`: whether the recordings differ at all. When they do not, no
// setting is "a likely explanation": none of them changed a recorded value.
void PrintDifferences(std::ostringstream& o, const char* what, bool available, bool digests_differ,
                      const std::vector<KeyDifference>& diffs, bool diverged) {
  if (!available) {
    o << what << ": not available for both runs"
      << (digests_differ ? " (the trace headers' digests differ)" : "") << "\n";
    return;
  }
  if (diffs.empty()) {
    o << what << ": identical\n";
    return;
  }
  size_t harmless = 0;
  for (const KeyDifference& d : diffs) harmless += !d.changes_results;
  const size_t likely = diffs.size() - harmless;
  o << what << ": " << diffs.size() << " difference" << (diffs.size() == 1 ? "" : "s");
  if (likely > 0 && !diverged) {
    o << " (none changed a recorded value)\n";
  } else if (harmless == 0) {
    o << " (a likely explanation)\n";
  } else if (likely == 0) {
    o << " (in settings that never change results)\n";
  } else {
    o << " (" << likely << " a likely explanation; " << harmless
      << " in settings that never change results)\n";
  }
  for (const KeyDifference& d : diffs) {
    o << "  " << d.key << ": " << d.a.value_or("(absent)") << " | " << d.b.value_or("(absent)")
      << (d.changes_results ? "" : "  (never changes results)") << "\n";
  }
}

// A pair of a logical comparison: the two sides' ranks differ in meaning,
// so both are named with their world sizes ("rank 1 of 4 vs rank 0 of 1").
std::string DescribeLogical(const ReportedPair& p) {
  const trace::BoundaryRecord& r = p.a.record;
  std::ostringstream o;
  o << "step " << r.step << " " << trace::PhaseName(r.phase) << " "
    << trace::DirectionName(r.direction) << " " << p.a.name << " " << DTypeName(r.dtype)
    << ShapeText(r) << " examples " << r.first_example << "+" << r.example_count << ", rank "
    << p.a.record.rank << " of " << p.a.world_size << " vs rank " << p.b.record.rank << " of "
    << p.b.world_size;
  return o.str();
}

std::string DescribePair(const ReportedPair& p, bool logical) {
  return logical ? DescribeLogical(p) : Describe(p.a);
}

void PrintContextPair(std::ostringstream& o, const ReportedPair& p, const char* marker,
                      bool logical) {
  o << "  " << marker << " #" << p.ordinal << " " << StatusName(p.status);
  if (p.difference != Difference::kNone && p.difference != Difference::kValues) {
    o << " (" << DifferenceText(p) << ")";
  }
  o << "  " << DescribePair(p, logical) << "\n";
}

void PrintUncompared(std::ostringstream& o, const char* indent, const UncomparedBoundary& u) {
  o << indent << u.side << " #" << u.boundary.index << " " << UnpairedName(u.why) << "  "
    << Describe(u.boundary) << "  record #" << u.boundary.record_index << "\n";
}

void PrintRankDisagreements(std::ostringstream& o, const CompareResult& r) {
  if (r.rank_disagreement_count == 0) return;
  o << "rank disagreements: " << r.rank_disagreement_count
    << " replicated boundar" << (r.rank_disagreement_count == 1 ? "y" : "ies")
    << " where a rank disagrees with its own run's rank 0\n";
  for (const ReportedRankDisagreement& d : r.rank_disagreements) {
    const ReportedBoundary& x = d.copy ? *d.copy : *d.reference;
    const trace::BoundaryRecord& rec = x.record;
    o << "  " << d.side << " step " << d.step << " rank " << d.rank << " of " << d.world_size << ": "
      << trace::PhaseName(rec.phase) << " " << trace::DirectionName(rec.direction) << " " << x.name
      << " " << DTypeName(rec.dtype) << ShapeText(rec) << " examples " << rec.first_example << "+"
      << rec.example_count;
    switch (d.kind) {
      case RankDisagreement::Kind::kDiffers:
        o << " differs from rank 0's\n"
          << "    rank " << d.rank << " xor64=" << Hex64(d.copy->record.xor64)
          << " xxh3=" << Hex64(d.copy->record.xxh3) << "  record #" << d.copy->record_index
          << " of " << d.copy->trace << "\n"
          << "    rank 0 xor64=" << Hex64(d.reference->record.xor64)
          << " xxh3=" << Hex64(d.reference->record.xxh3) << "  record #"
          << d.reference->record_index << " of " << d.reference->trace << "\n";
        break;
      case RankDisagreement::Kind::kMissingOnRank:
        o << " recorded by rank 0 (record #" << d.reference->record_index << " of "
          << d.reference->trace << "), not by rank " << d.rank << "\n";
        break;
      case RankDisagreement::Kind::kOnlyOnRank:
        o << " recorded by rank " << d.rank << " (record #" << d.copy->record_index << " of "
          << d.copy->trace << "), not by rank 0\n";
        break;
    }
  }
  if (r.rank_disagreement_count > r.rank_disagreements.size()) {
    o << "  ... (" << r.rank_disagreement_count - r.rank_disagreements.size() << " more)\n";
  }
}

}  // namespace

std::string CompareText(const CompareResult& r) {
  std::ostringstream o;
  const CertifyReport& c = r.certify;
  const AlignmentStats& s = r.stats;
  o << "compare A=" << r.a.path << " (" << r.a.world_size << " rank"
    << (r.a.world_size == 1 ? "" : "s") << ", " << r.a.boundaries << " boundaries)\n"
    << "        B=" << r.b.path << " (" << r.b.world_size << " rank"
    << (r.b.world_size == 1 ? "" : "s") << ", " << r.b.boundaries << " boundaries)\n";
  if (r.a.ignored + r.b.ignored > 0) {
    o << "ignored: " << r.a.ignored << " in A, " << r.b.ignored << " in B (--ignore)\n";
  }
  PrintDifferences(o, "config", r.configs_available, r.config_digests_differ,
                   r.config_differences, r.diverged());
  PrintDifferences(o, "environment", r.environments_available, r.env_digests_differ,
                   r.environment_differences, r.diverged());
  if (r.logical) {
    o << "ranks: compared as logical runs (world sizes differ): examples from whichever rank "
         "held them, replicated boundaries from rank 0 ("
      << r.a.replicas_checked + r.b.replicas_checked
      << " copies of other ranks checked against it)\n";
  } else {
    o << "ranks: " << (r.ranks_paired ? "paired rank by rank" : "merged (world sizes differ)")
      << "\n";
  }
  if (r.lockstep) {
    o << "alignment: lockstep, " << c.pairs << " pairs\n";
  } else {
    o.setf(std::ios::fixed);
    o.precision(4);
    o << "alignment: tolerant after " << r.lockstep_prefix << " lockstep pairs; " << c.pairs
      << " pairs, " << r.unmatched_a << " only in A, " << r.unmatched_b << " only in B\n"
      << "  length ratio " << s.length_ratio << ", unmatched fraction " << s.unmatched_fraction
      << ", anchor density " << s.anchor_density << "\n";
  }
  const Coverage& cov = r.coverage;
  if (cov.uncompared() == 0) {
    o << "coverage: every boundary compared";
    if (cov.replicas > 0) o << " (" << cov.replicas << " as identical replicas)";
    o << "\n";
  } else {
    o << "coverage: " << cov.uncompared() << " boundaries never compared (" << cov.no_counterpart
      << " without a counterpart, " << cov.outside_reach << " outside the reach of --band, "
      << cov.ambiguous << " ambiguous)\n";
    for (const UncomparedBoundary& u : r.uncompared) PrintUncompared(o, "  ", u);
    if (cov.uncompared() > r.uncompared.size()) {
      o << "  ... (" << cov.uncompared() - r.uncompared.size() << " more)\n";
    }
  }
  o << "certified prefix: " << c.certified_pairs << " pairs, " << c.certified_steps << " steps"
    << (r.prefix_ends_at_rank_disagreement ? " (ends at the first rank disagreement)"
        : c.stopped_at_uncompared          ? " (ends at the first uncompared boundary)"
                                           : "")
    << "\n";
  PrintRankDisagreements(o, r);
  if (!r.first_divergence) {
    o << (r.found_difference() ? "result: divergence (within a run: its ranks disagree)\n"
                               : "result: no divergence\n");
    return o.str();
  }
  const ReportedPair& d = *r.first_divergence;
  o << "first divergence: pair #" << d.ordinal;
  if (d.difference != Difference::kValues) o << " (" << DifferenceText(d) << ")";
  o << ": " << DescribePair(d, r.logical) << "\n"
    << "  A xor64=" << Hex64(d.a.record.xor64) << " xxh3=" << Hex64(d.a.record.xxh3) << "  record #"
    << d.a.record_index << " of " << d.a.trace << "\n"
    << "  B xor64=" << Hex64(d.b.record.xor64) << " xxh3=" << Hex64(d.b.record.xxh3) << "  record #"
    << d.b.record_index << " of " << d.b.trace << "\n";
  if (r.earlier_uncompared > 0) {
    o << "  caution: " << r.earlier_uncompared << " boundar"
      << (r.earlier_uncompared == 1 ? "y" : "ies")
      << " before this pair could not be compared: it is the first compared difference, and the "
         "true first divergence may be "
      << (r.earlier_uncompared == 1 ? "that boundary" : "among them") << ":\n";
    for (const UncomparedBoundary& u : r.earlier_uncompared_listed) PrintUncompared(o, "    ", u);
    if (r.earlier_uncompared > r.earlier_uncompared_listed.size()) {
      o << "    ... (" << r.earlier_uncompared - r.earlier_uncompared_listed.size() << " more)\n";
    }
  }
  if (!r.before.empty() || !r.after.empty()) o << "context:\n";
  for (const ReportedPair& p : r.before) PrintContextPair(o, p, " ", r.logical);
  PrintContextPair(o, d, ">", r.logical);
  for (const ReportedPair& p : r.after) PrintContextPair(o, p, " ", r.logical);
  o << "later differing pairs: " << c.later_differing << "; "
    << (c.kind == DivergenceKind::kIsolated     ? "an isolated divergence (its neighbours agree again)"
        : c.kind == DivergenceKind::kPropagates ? "the divergence propagates"
                                                : "whether it propagates is undetermined")
    << "\n"
    << "result: divergence\n";
  return o.str();
}

}  // namespace dgrr::replay
