#include "replay/mapper.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>

#include "rng/stream_id.h"

namespace dgrr::replay {
namespace {

// SplitMix64's finaliser: a cheap bijective mix, so that digests of keys that
// differ in one field differ in many bits.
constexpr uint64_t Mix64(uint64_t x) { return rng::MixSplitMix64(x); }

inline uint64_t Combine(uint64_t seed, uint64_t value) {
  return Mix64(seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)));
}

// An index sorted by key digest, with the digest beside it so that groups of
// equal keys are contiguous runs.
struct DigestIndex {
  uint64_t digest;
  uint64_t index;
  bool operator<(const DigestIndex& other) const {
    return digest != other.digest ? digest < other.digest : index < other.index;
  }
};

std::vector<uint64_t> Digests(std::span<const BoundaryItem> items, bool compare_rank) {
  std::vector<uint64_t> digests(items.size());
  for (size_t i = 0; i < items.size(); ++i) digests[i] = KeyDigest(items[i].key, compare_rank);
  return digests;
}

// Sorted by (digest, index): an LSD radix sort on the digest, 16 bits per
// pass. Each pass is stable and the input is in index order, so equal
// digests stay in index order. About 3x faster than std::sort at 1 M.
std::vector<DigestIndex> SortedByDigest(const std::vector<uint64_t>& digests) {
  const size_t n = digests.size();
  std::vector<DigestIndex> sorted(n), scratch(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = {digests[i], i};
  constexpr int kBits = 16;
  constexpr size_t kBuckets = size_t{1} << kBits;
  std::vector<size_t> offset(kBuckets);
  for (int shift = 0; shift < 64; shift += kBits) {
    std::fill(offset.begin(), offset.end(), 0);
    for (const DigestIndex& e : sorted) ++offset[(e.digest >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (size_t& o : offset) {
      const size_t count = o;
      o = sum;
      sum += count;
    }
    for (const DigestIndex& e : sorted) scratch[offset[(e.digest >> shift) & (kBuckets - 1)]++] = e;
    sorted.swap(scratch);
  }
  return sorted;
}

// locally_unique[i]: no other occurrence of i's key within +-radius of i.
// Occurrences of one key are adjacent in `sorted`, in index order.
std::vector<bool> LocallyUnique(const std::vector<DigestIndex>& sorted, uint64_t radius) {
  std::vector<bool> unique(sorted.size(), false);
  for (size_t k = 0; k < sorted.size(); ++k) {
    const uint64_t i = sorted[k].index;
    bool ok = true;
    if (k > 0 && sorted[k - 1].digest == sorted[k].digest && i - sorted[k - 1].index <= radius) ok = false;
    if (k + 1 < sorted.size() && sorted[k + 1].digest == sorted[k].digest &&
        sorted[k + 1].index - i <= radius)
      ok = false;
    unique[i] = ok;
  }
  return unique;
}

// The longest chain of candidates strictly increasing in both coordinates
// (a longest increasing subsequence, O(k log k)). `candidates` is sorted by
// first coordinate, each first coordinate at most once. Ties between chains
// of equal length go to the one ending with the smaller second coordinate,
// so the result depends on the candidate set only.
std::vector<std::pair<uint64_t, uint64_t>> LongestMonotoneChain(
    const std::vector<std::pair<uint64_t, uint64_t>>& candidates) {
  const size_t n = candidates.size();
  std::vector<size_t> tail;          // tail[len-1]: end of the best chain of length len
  std::vector<uint64_t> tail_second; // candidates[tail[k]].second, increasing in k
  std::vector<size_t> parent(n, n);  // predecessor in the chain, n for none
  tail.reserve(n);
  tail_second.reserve(n);
  for (size_t c = 0; c < n; ++c) {
    const uint64_t second = candidates[c].second;
    // Traces mostly agree, so most candidates extend the longest chain:
    // test that before searching.
    const size_t len =
        (tail_second.empty() || tail_second.back() < second)
            ? tail_second.size()
            : static_cast<size_t>(std::lower_bound(tail_second.begin(), tail_second.end(), second) -
                                  tail_second.begin());
    if (len > 0) parent[c] = tail[len - 1];
    if (len == tail.size()) {
      tail.push_back(c);
      tail_second.push_back(second);
    } else {
      tail[len] = c;
      tail_second[len] = second;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> chain;
  if (tail.empty()) return chain;
  for (size_t c = tail.back(); c != n; c = parent[c]) chain.push_back(candidates[c]);
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// The candidate pairs in order of A index, from partner[i] (kNoPartner: none).
constexpr uint64_t kNoPartner = ~uint64_t{0};
std::vector<std::pair<uint64_t, uint64_t>> CandidatesInOrder(const std::vector<uint64_t>& partner) {
  std::vector<std::pair<uint64_t, uint64_t>> candidates;
  candidates.reserve(static_cast<size_t>(
      partner.size() - static_cast<size_t>(std::count(partner.begin(), partner.end(), kNoPartner))));
  for (uint64_t i = 0; i < partner.size(); ++i) {
    if (partner[i] != kNoPartner) candidates.emplace_back(i, partner[i]);
  }
  return candidates;
}

// Where the monotone pairing puts A position i in B, from the nearest guide
// pair at or before i (or the first one after it); proportional without guides.
int64_t PredictB(const std::vector<std::pair<uint64_t, uint64_t>>& guide, uint64_t i,
                 uint64_t length_a, uint64_t length_b) {
  if (guide.empty()) {
    if (length_a == 0) return 0;
    return static_cast<int64_t>(static_cast<double>(i) * static_cast<double>(length_b) /
                                static_cast<double>(length_a));
  }
  auto it = std::upper_bound(guide.begin(), guide.end(), std::make_pair(i, std::numeric_limits<uint64_t>::max()));
  const auto& ref = (it == guide.begin()) ? *it : *(it - 1);
  return static_cast<int64_t>(ref.second) + (static_cast<int64_t>(i) - static_cast<int64_t>(ref.first));
}

// Anchors: pairs of locally unique, pairable boundaries kept in the same
// relative order in both sequences (docs/compare.md, "Anchors").
std::vector<std::pair<uint64_t, uint64_t>> FindAnchors(
    std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
    const std::vector<DigestIndex>& sorted_a, const std::vector<DigestIndex>& sorted_b,
    const MapperOptions& options) {
  const uint64_t radius = options.anchor_radius;
  const std::vector<bool> unique_a = LocallyUnique(sorted_a, radius);
  const std::vector<bool> unique_b = LocallyUnique(sorted_b, radius);

  // Pass 1: keys occurring exactly once in each sequence. Every A index
  // gets at most one candidate partner, so candidates come out sorted by A
  // from the partner array without a sort.
  std::vector<uint64_t> partner(a.size(), kNoPartner);
  struct Group { size_t a_begin, a_end, b_begin, b_end; };
  std::vector<Group> repeated;  // groups present in both, not once-once
  size_t ka = 0, kb = 0;
  while (ka < sorted_a.size() && kb < sorted_b.size()) {
    const uint64_t da = sorted_a[ka].digest, db = sorted_b[kb].digest;
    if (da < db) { ++ka; continue; }
    if (db < da) { ++kb; continue; }
    size_t ea = ka, eb = kb;
    while (ea < sorted_a.size() && sorted_a[ea].digest == da) ++ea;
    while (eb < sorted_b.size() && sorted_b[eb].digest == db) ++eb;
    if (ea - ka == 1 && eb - kb == 1) {
      const uint64_t i = sorted_a[ka].index, j = sorted_b[kb].index;
      if (Pairable(a[i].key, b[j].key, options.compare_rank)) partner[i] = j;
    } else {
      repeated.push_back({ka, ea, kb, eb});
    }
    ka = ea;
    kb = eb;
  }
  const std::vector<std::pair<uint64_t, uint64_t>> guide = LongestMonotoneChain(CandidatesInOrder(partner));

  // Pass 2: repeated keys whose occurrence is unique within +-radius on both
  // sides, paired with the B occurrence nearest to where the guide puts it.
  const int64_t reach = static_cast<int64_t>(radius / 2);
  for (const Group& g : repeated) {
    for (size_t k = g.a_begin; k < g.a_end; ++k) {
      const uint64_t i = sorted_a[k].index;
      if (!unique_a[i]) continue;
      const int64_t predicted = PredictB(guide, i, a.size(), b.size());
      // Nearest B occurrence of this key to `predicted`.
      auto first = sorted_b.begin() + static_cast<ptrdiff_t>(g.b_begin);
      auto last = sorted_b.begin() + static_cast<ptrdiff_t>(g.b_end);
      const uint64_t target = predicted < 0 ? 0 : static_cast<uint64_t>(predicted);
      auto it = std::lower_bound(first, last, DigestIndex{sorted_a[k].digest, target});
      int64_t best = -1;
      int64_t best_distance = std::numeric_limits<int64_t>::max();
      for (auto cand : {it, it == first ? last : it - 1}) {
        if (cand == last) continue;
        const int64_t j = static_cast<int64_t>(cand->index);
        const int64_t distance = std::llabs(j - predicted);
        if (distance < best_distance) { best_distance = distance; best = j; }
      }
      if (best < 0 || best_distance > reach) continue;
      const uint64_t j = static_cast<uint64_t>(best);
      if (unique_b[j] && Pairable(a[i].key, b[j].key, options.compare_rank)) partner[i] = j;
    }
  }
  return LongestMonotoneChain(CandidatesInOrder(partner));
}

// The banded monotone DP of one window A[a0, a1) x B[b0, b1).
class WindowAligner {
 public:
  WindowAligner(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                const std::vector<uint64_t>& digest_a, const std::vector<uint64_t>& digest_b,
                const MapperOptions& options)
      : a_(a), b_(b), digest_a_(digest_a), digest_b_(digest_b), options_(options) {}

  // Appends the window's pairs, in increasing order, to `pairs`.
  void Align(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1,
             std::vector<AlignedPair>* pairs) {
    const uint64_t n = a1 - a0, m = b1 - b0;
    if (n == 0 || m == 0) return;
    ComputeBand(n, m);
    if (total_cells_ > options_.max_window_cells && n > 1 && m > 1) {
      // Too big for one table: cut along the diagonal and align the halves.
      const uint64_t am = a0 + n / 2, bm = b0 + m / 2;
      Align(a0, am, b0, bm, pairs);
      Align(am, a1, bm, b1, pairs);
      return;
    }
    Fill(a0, b0, n);
    Traceback(a0, b0, n, m, pairs);
  }

 private:
  enum Move : uint8_t { kNone = 0, kDiagonal = 1, kSkipA = 2, kSkipB = 3 };
  static constexpr int32_t kUnreachable = std::numeric_limits<int32_t>::min() / 4;

  // Row i covers columns [lo_[i], hi_[i]]: the diagonals from the top-left
  // corner's to the bottom-right corner's, widened by `band` on both sides.
  // A window whose sides differ by d boundaries is thus aligned with a band
  // of width d + 2 * band + 1, wide enough for one block of d insertions
  // anywhere in it; consecutive rows always overlap, so (n, m) is reachable.
  void ComputeBand(uint64_t n, uint64_t m) {
    const int64_t w = options_.band;
    const int64_t below = m >= n ? 0 : static_cast<int64_t>(n - m);  // B shorter: lower diagonals
    const int64_t above = m >= n ? static_cast<int64_t>(m - n) : 0;  // B longer: upper diagonals
    lo_.resize(n + 1);
    hi_.resize(n + 1);
    row_start_.resize(n + 2);
    total_cells_ = 0;
    for (uint64_t i = 0; i <= n; ++i) {
      const int64_t row = static_cast<int64_t>(i);
      lo_[i] = static_cast<uint64_t>(std::max<int64_t>(0, row - below - w));
      hi_[i] = static_cast<uint64_t>(std::min<int64_t>(static_cast<int64_t>(m), row + above + w));
      row_start_[i] = total_cells_;
      total_cells_ += hi_[i] - lo_[i] + 1;
    }
    row_start_[n + 1] = total_cells_;
  }

  bool PairableAt(uint64_t i, uint64_t j) const {
    return digest_a_[i] == digest_b_[j] && Pairable(a_[i].key, b_[j].key, options_.compare_rank);
  }

  void Fill(uint64_t a0, uint64_t b0, uint64_t n) {
    moves_.assign(total_cells_, kNone);
    const int32_t match = options_.match_score, gap = options_.gap_penalty;
    previous_.clear();
    for (uint64_t i = 0; i <= n; ++i) {
      const uint64_t lo = lo_[i], hi = hi_[i];
      current_.assign(hi - lo + 1, kUnreachable);
      uint8_t* moves = moves_.data() + row_start_[i];
      for (uint64_t j = lo; j <= hi; ++j) {
        int32_t best = kUnreachable;
        uint8_t move = kNone;
        if (i == 0 && j == 0) best = 0;
        if (i > 0 && j > 0 && j - 1 >= lo_[i - 1] && j - 1 <= hi_[i - 1] &&
            previous_[j - 1 - lo_[i - 1]] != kUnreachable && PairableAt(a0 + i - 1, b0 + j - 1)) {
          best = previous_[j - 1 - lo_[i - 1]] + match;
          move = kDiagonal;
        }
        if (i > 0 && j >= lo_[i - 1] && j <= hi_[i - 1] && previous_[j - lo_[i - 1]] != kUnreachable) {
          const int32_t s = previous_[j - lo_[i - 1]] - gap;
          if (s > best) { best = s; move = kSkipA; }
        }
        if (j > lo && current_[j - 1 - lo] != kUnreachable) {
          const int32_t s = current_[j - 1 - lo] - gap;
          if (s > best) { best = s; move = kSkipB; }
        }
        current_[j - lo] = best;
        moves[j - lo] = move;
      }
      previous_.swap(current_);
    }
  }

  void Traceback(uint64_t a0, uint64_t b0, uint64_t n, uint64_t m,
                 std::vector<AlignedPair>* pairs) {
    const size_t first_new = pairs->size();
    uint64_t i = n, j = m;
    while (i > 0 || j > 0) {
      const uint8_t move = moves_[row_start_[i] + (j - lo_[i])];
      if (move == kDiagonal) {
        pairs->push_back({a0 + i - 1, b0 + j - 1, PairOrigin::kWindow});
        --i;
        --j;
      } else if (move == kSkipA) {
        --i;
      } else if (move == kSkipB) {
        --j;
      } else {
        break;  // unreachable by construction: (n, m) is always reachable
      }
    }
    std::reverse(pairs->begin() + static_cast<ptrdiff_t>(first_new), pairs->end());
  }

  std::span<const BoundaryItem> a_, b_;
  const std::vector<uint64_t>& digest_a_;
  const std::vector<uint64_t>& digest_b_;
  const MapperOptions& options_;
  std::vector<uint64_t> lo_, hi_, row_start_;
  uint64_t total_cells_ = 0;
  std::vector<uint8_t> moves_;
  std::vector<int32_t> previous_, current_;
};

// Where a leftover at position x on one side is expected on the other side:
// shifted along the nearest monotone pair (xs[k], ys[k]) with xs[k] <= x (the
// first pair if none), proportionally when there are no pairs. xs ascending.
int64_t PredictFromPairs(const std::vector<uint64_t>& xs, const std::vector<uint64_t>& ys,
                         uint64_t x, uint64_t length_x, uint64_t length_y) {
  if (xs.empty()) {
    if (length_x == 0) return 0;
    return static_cast<int64_t>(static_cast<double>(x) * static_cast<double>(length_y) /
                                static_cast<double>(length_x));
  }
  auto it = std::upper_bound(xs.begin(), xs.end(), x);
  const size_t k = (it == xs.begin()) ? 0 : static_cast<size_t>(it - xs.begin()) - 1;
  return static_cast<int64_t>(ys[k]) + (static_cast<int64_t>(x) - static_cast<int64_t>(xs[k]));
}

// Occurrences of `digest` in `sorted` whose index lies in [lo, hi].
std::pair<size_t, size_t> RangeOf(const std::vector<DigestIndex>& sorted, uint64_t digest,
                                  int64_t lo, int64_t hi) {
  const uint64_t ulo = lo < 0 ? 0 : static_cast<uint64_t>(lo);
  if (hi < 0) return {0, 0};
  const uint64_t uhi = static_cast<uint64_t>(hi);
  auto first = std::lower_bound(sorted.begin(), sorted.end(), DigestIndex{digest, ulo});
  auto last = std::upper_bound(sorted.begin(), sorted.end(), DigestIndex{digest, uhi});
  if (last < first) last = first;
  return {static_cast<size_t>(first - sorted.begin()), static_cast<size_t>(last - sorted.begin())};
}

constexpr int kMaxRescueRounds = 4;

// The nearest entry to `target` among those of `sorted` with `digest`, index
// within +-radius of target, and accepted by `usable`; -1 when there is none
// or when two are equally near (an ambiguous choice is no choice).
template <typename Usable>
int64_t NearestLeftover(const std::vector<DigestIndex>& sorted, uint64_t digest, int64_t target,
                        int64_t radius, Usable usable) {
  auto [first, last] = RangeOf(sorted, digest, target - radius, target + radius);
  int64_t best = -1;
  int64_t best_distance = std::numeric_limits<int64_t>::max();
  bool tie = false;
  for (size_t k = first; k < last; ++k) {
    const uint64_t index = sorted[k].index;
    if (!usable(index)) continue;
    const int64_t distance = std::llabs(static_cast<int64_t>(index) - target);
    if (distance < best_distance) {
      best_distance = distance;
      best = static_cast<int64_t>(index);
      tie = false;
    } else if (distance == best_distance) {
      tie = true;
    }
  }
  return tie ? -1 : best;
}

// The rescue pass (docs/compare.md, "Rescue"): a leftover i of A pairs with
// a leftover j of B when j is the nearest pairable leftover of B to where the
// monotone pairs put i, i is the nearest pairable leftover of A to where
// they put j, both within rescue_radius, and neither choice is a tie.
void Rescue(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
            const std::vector<uint64_t>& digest_a, const std::vector<uint64_t>& digest_b,
            const MapperOptions& options, Alignment* alignment) {
  if (alignment->unmatched_a.empty() || alignment->unmatched_b.empty()) return;
  // The monotone pairs, in both directions (sorted by A, which sorts B too).
  std::vector<uint64_t> pa, pb;
  pa.reserve(alignment->pairs.size());
  pb.reserve(alignment->pairs.size());
  for (const AlignedPair& p : alignment->pairs) {
    pa.push_back(p.index_a);
    pb.push_back(p.index_b);
  }
  std::vector<DigestIndex> left_a, left_b;
  for (uint64_t i : alignment->unmatched_a) left_a.push_back({digest_a[i], i});
  for (uint64_t j : alignment->unmatched_b) left_b.push_back({digest_b[j], j});
  std::sort(left_a.begin(), left_a.end());
  std::sort(left_b.begin(), left_b.end());
  std::vector<bool> taken_a(a.size(), false), taken_b(b.size(), false);
  const int64_t radius = options.rescue_radius;

  // A choice blocked by a nearer leftover may be freed once that one pairs,
  // so repeat until a round pairs nothing (a few rounds in practice).
  std::vector<AlignedPair> rescued;
  std::vector<uint64_t> pending = alignment->unmatched_a;
  for (int round = 0; round < kMaxRescueRounds && !pending.empty(); ++round) {
    std::vector<uint64_t> next_pending;
    for (uint64_t i : pending) {
      const int64_t predicted_j = PredictFromPairs(pa, pb, i, a.size(), b.size());
      const int64_t j = NearestLeftover(left_b, digest_a[i], predicted_j, radius, [&](uint64_t cand) {
        return !taken_b[cand] && Pairable(a[i].key, b[cand].key, options.compare_rank);
      });
      bool paired = false;
      if (j >= 0) {
        const uint64_t uj = static_cast<uint64_t>(j);
        const int64_t predicted_i = PredictFromPairs(pb, pa, uj, b.size(), a.size());
        const int64_t back =
            NearestLeftover(left_a, digest_b[uj], predicted_i, radius, [&](uint64_t cand) {
              return !taken_a[cand] && Pairable(a[cand].key, b[uj].key, options.compare_rank);
            });
        if (back == static_cast<int64_t>(i)) {
          taken_a[i] = true;
          taken_b[uj] = true;
          rescued.push_back({i, uj, PairOrigin::kRescue});
          paired = true;
        }
      }
      if (!paired) next_pending.push_back(i);
    }
    if (next_pending.size() == pending.size()) break;
    pending.swap(next_pending);
  }
  std::sort(rescued.begin(), rescued.end(),
            [](const AlignedPair& x, const AlignedPair& y) { return x.index_a < y.index_a; });
  if (rescued.empty()) return;
  std::vector<uint64_t> still_a, still_b;
  for (uint64_t i : alignment->unmatched_a) {
    if (!taken_a[i]) still_a.push_back(i);
  }
  for (uint64_t j : alignment->unmatched_b) {
    if (!taken_b[j]) still_b.push_back(j);
  }
  alignment->unmatched_a.swap(still_a);
  alignment->unmatched_b.swap(still_b);
  alignment->stats.rescued_pairs = rescued.size();
  // Merge by index_a: certification walks pairs in A order.
  std::vector<AlignedPair> merged;
  merged.reserve(alignment->pairs.size() + rescued.size());
  std::merge(alignment->pairs.begin(), alignment->pairs.end(), rescued.begin(), rescued.end(),
             std::back_inserter(merged),
             [](const AlignedPair& x, const AlignedPair& y) { return x.index_a < y.index_a; });
  alignment->pairs.swap(merged);
}

void FinishStats(Alignment* alignment) {
  AlignmentStats& s = alignment->stats;
  s.length_ratio = s.length_a == 0 ? 0.0
                                   : static_cast<double>(s.length_b) / static_cast<double>(s.length_a);
  const uint64_t total = s.length_a + s.length_b;
  s.unmatched_fraction =
      total == 0 ? 0.0
                 : static_cast<double>(alignment->unmatched_a.size() + alignment->unmatched_b.size()) /
                       static_cast<double>(total);
  s.anchors = alignment->anchors.size();
  const uint64_t longer = std::max(s.length_a, s.length_b);
  s.anchor_density = longer == 0 ? 0.0 : static_cast<double>(s.anchors) / static_cast<double>(longer);
}

}  // namespace

uint64_t KeyDigest(const BoundaryKey& key, bool compare_rank) {
  uint64_t h = Mix64(key.name_hash);
  h = Combine(h, key.shape_digest);
  h = Combine(h, key.first_example);
  h = Combine(h, (uint64_t{key.example_count} << 32) | (uint64_t{key.phase} << 16) |
                     (uint64_t{key.direction} << 8) | key.dtype);
  if (compare_rank) h = Combine(h, key.rank);
  return h;
}

bool LinesUp(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b, bool compare_rank) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!Pairable(a[i].key, b[i].key, compare_rank)) return false;
  }
  return true;
}

Alignment AlignLockstep(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b) {
  Alignment alignment;
  const uint64_t n = std::min(a.size(), b.size());
  alignment.pairs.reserve(n);
  for (uint64_t i = 0; i < n; ++i) alignment.pairs.push_back({i, i, PairOrigin::kLockstep});
  for (uint64_t i = n; i < a.size(); ++i) alignment.unmatched_a.push_back(i);
  for (uint64_t j = n; j < b.size(); ++j) alignment.unmatched_b.push_back(j);
  alignment.stats.length_a = a.size();
  alignment.stats.length_b = b.size();
  alignment.stats.lockstep = true;
  alignment.stats.windows = 0;
  FinishStats(&alignment);
  return alignment;
}

Alignment AlignTolerant(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                        const MapperOptions& options) {
  Alignment alignment;
  alignment.stats.length_a = a.size();
  alignment.stats.length_b = b.size();
  const std::vector<uint64_t> digest_a = Digests(a, options.compare_rank);
  const std::vector<uint64_t> digest_b = Digests(b, options.compare_rank);
  {
    const std::vector<DigestIndex> sorted_a = SortedByDigest(digest_a);
    const std::vector<DigestIndex> sorted_b = SortedByDigest(digest_b);
    alignment.anchors = FindAnchors(a, b, sorted_a, sorted_b, options);
  }

  // Windows: the stretches between consecutive anchors, plus the stretch
  // before the first and after the last.
  WindowAligner window(a, b, digest_a, digest_b, options);
  alignment.pairs.reserve(std::min(a.size(), b.size()));
  uint64_t a0 = 0, b0 = 0;
  auto close_window = [&](uint64_t a1, uint64_t b1) {
    if (a1 > a0 || b1 > b0) {
      ++alignment.stats.windows;
      alignment.stats.largest_window = std::max(alignment.stats.largest_window, std::max(a1 - a0, b1 - b0));
      const size_t before = alignment.pairs.size();
      window.Align(a0, a1, b0, b1, &alignment.pairs);
      alignment.stats.window_pairs += alignment.pairs.size() - before;
    }
  };
  for (const auto& [ia, jb] : alignment.anchors) {
    close_window(ia, jb);
    alignment.pairs.push_back({ia, jb, PairOrigin::kAnchor});
    a0 = ia + 1;
    b0 = jb + 1;
  }
  close_window(a.size(), b.size());

  // Leftovers, then the rescue pass.
  std::vector<bool> matched_a(a.size(), false), matched_b(b.size(), false);
  for (const AlignedPair& p : alignment.pairs) {
    matched_a[p.index_a] = true;
    matched_b[p.index_b] = true;
  }
  for (uint64_t i = 0; i < a.size(); ++i) {
    if (!matched_a[i]) alignment.unmatched_a.push_back(i);
  }
  for (uint64_t j = 0; j < b.size(); ++j) {
    if (!matched_b[j]) alignment.unmatched_b.push_back(j);
  }
  Rescue(a, b, digest_a, digest_b, options, &alignment);
  FinishStats(&alignment);
  return alignment;
}

Alignment Align(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                const MapperOptions& options) {
  if (LinesUp(a, b, options.compare_rank)) return AlignLockstep(a, b);
  return AlignTolerant(a, b, options);
}

}  // namespace dgrr::replay
