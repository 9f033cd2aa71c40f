#include "replay/mapper.h"

#include <algorithm>
#include <cstdlib>

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

// Where a boundary at position x on one side is expected on the other side:
// shifted along the nearest anchor (xs[k], ys[k]) with xs[k] <= x (the first
// anchor if none), proportionally when there are no anchors. xs ascending.
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

// Identical copies: same dtype, shape and fingerprints. A pair that differs
// in any of them is a divergence, so only this counts as evidence.
inline bool Identical(const BoundaryItem& x, const BoundaryItem& y) { return SameContent(x, y); }

constexpr int64_t kNone = -1;
// Rounds of (key evidence, fingerprint evidence); each round can only pair
// more, and in practice the second round already pairs nothing new.
constexpr int kMaxRepeatRounds = 8;

// One side's occurrences of one repeated key, ascending by position, with
// their predicted positions on the other side and their partners (indexes
// into the other side's occurrence list, kNone when unpaired).
struct Occurrences {
  std::vector<uint64_t> index;
  std::vector<int64_t> predicted;
  std::vector<int64_t> partner;
  std::vector<PairOrigin> origin;
  // candidates[k]: the other side's occurrences whose position lies within
  // `band` of predicted[k], as a half-open range of positions in its list.
  std::vector<std::pair<size_t, size_t>> candidates;
};

void FindCandidates(Occurrences* from, const Occurrences& to, int64_t band) {
  from->candidates.resize(from->index.size());
  for (size_t k = 0; k < from->index.size(); ++k) {
    const int64_t lo = from->predicted[k] - band, hi = from->predicted[k] + band;
    auto first = std::lower_bound(to.index.begin(), to.index.end(), lo < 0 ? 0 : uint64_t(lo),
                                  [](uint64_t x, uint64_t v) { return x < v; });
    auto last = hi < 0 ? first
                       : std::upper_bound(to.index.begin(), to.index.end(), uint64_t(hi));
    if (last < first) last = first;
    from->candidates[k] = {size_t(first - to.index.begin()), size_t(last - to.index.begin())};
  }
}

// The only unpaired candidate of `from`[k] accepted by `accept`; kNone when
// there is none or more than one.
template <typename Accept>
int64_t OnlyCandidate(const Occurrences& from, size_t k, const Occurrences& to, Accept accept) {
  int64_t only = kNone;
  for (size_t l = from.candidates[k].first; l < from.candidates[k].second; ++l) {
    if (to.partner[l] != kNone || !accept(l)) continue;
    if (only != kNone) return kNone;
    only = static_cast<int64_t>(l);
  }
  return only;
}

// Is another occurrence of the key within 2 * band of occurrence k of `side`
// still unpaired? Then key evidence alone cannot tell the two apart: a
// boundary displaced past the reach could be either.
bool UnpairedTwinNear(const Occurrences& side, size_t k, int64_t band) {
  const uint64_t span = 2 * static_cast<uint64_t>(band);
  for (size_t t = k; t-- > 0 && side.index[k] - side.index[t] <= span;) {
    if (side.partner[t] == kNone) return true;
  }
  for (size_t t = k + 1; t < side.index.size() && side.index[t] - side.index[k] <= span; ++t) {
    if (side.partner[t] == kNone) return true;
  }
  return false;
}

// Is an occurrence of `to` other than `except` unpaired within 2 * band of
// `predicted`? A pair whose fingerprints differ is a divergence, so it needs
// this wider margin: then a boundary displaced by up to 2 * band can never
// take another one's counterpart and show as a false divergence.
bool UnpairedOtherWithinMargin(const Occurrences& to, int64_t predicted, int64_t band, size_t except) {
  const int64_t lo = predicted - 2 * band, hi = predicted + 2 * band;
  auto first = std::lower_bound(to.index.begin(), to.index.end(), lo < 0 ? 0 : uint64_t(lo));
  for (auto it = first; it != to.index.end() && static_cast<int64_t>(*it) <= hi; ++it) {
    const size_t t = static_cast<size_t>(it - to.index.begin());
    if (t != except && to.partner[t] == kNone) return true;
  }
  return false;
}

// Pairs the occurrences of one repeated key (docs/compare.md §3.3): x of A
// and y of B pair when, among the unpaired occurrences within reach of each
// one's prediction, y is x's only candidate and x is y's and neither has an
// unpaired twin within 2 * band on its own side (key evidence), or, when that fails, y is x's only candidate with identical fingerprints and x
// is y's (fingerprint evidence). Rounds repeat while they pair something,
// because a pair removes a candidate from its neighbours' choices.
void PairRepeatedKey(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                     bool compare_rank, int64_t band, Occurrences* oa, Occurrences* ob) {
  auto pairable = [&](size_t k, size_t l) {
    return Pairable(a[oa->index[k]].key, b[ob->index[l]].key, compare_rank);
  };
  auto identical = [&](size_t k, size_t l) {
    return pairable(k, l) && Identical(a[oa->index[k]], b[ob->index[l]]);
  };
  auto try_pair = [&](bool by_fingerprint) {
    bool progress = false;
    for (size_t k = 0; k < oa->index.size(); ++k) {
      if (oa->partner[k] != kNone) continue;
      const int64_t l = OnlyCandidate(*oa, k, *ob, [&](size_t l) {
        return by_fingerprint ? identical(k, l) : pairable(k, l);
      });
      if (l == kNone) continue;
      const size_t ul = static_cast<size_t>(l);
      const int64_t back = OnlyCandidate(*ob, ul, *oa, [&](size_t k2) {
        return by_fingerprint ? identical(k2, ul) : pairable(k2, ul);
      });
      if (back != static_cast<int64_t>(k)) continue;
      if (!by_fingerprint) {
        if (UnpairedTwinNear(*oa, k, band) || UnpairedTwinNear(*ob, ul, band)) continue;
        if (!Identical(a[oa->index[k]], b[ob->index[ul]]) &&
            (UnpairedOtherWithinMargin(*ob, oa->predicted[k], band, ul) ||
             UnpairedOtherWithinMargin(*oa, ob->predicted[ul], band, k))) {
          continue;
        }
      }
      oa->partner[k] = l;
      ob->partner[ul] = static_cast<int64_t>(k);
      oa->origin[k] = by_fingerprint ? PairOrigin::kFingerprint : PairOrigin::kRepeatKey;
      progress = true;
    }
    return progress;
  };
  // Identical copies: an occurrence x whose several identical unpaired
  // candidates each have x as their only identical candidate (one collective
  // recorded once here and by every rank there) pairs with the nearest; the
  // others are then replicas of it. Any choice certifies the same.
  auto pair_copies = [&](Occurrences* from, Occurrences* to, bool from_is_a) {
    auto same = [&](size_t f, size_t t) { return from_is_a ? identical(f, t) : identical(t, f); };
    bool progress = false;
    for (size_t k = 0; k < from->index.size(); ++k) {
      if (from->partner[k] != kNone) continue;
      int64_t best = kNone, best_distance = 0;
      size_t copies = 0;
      bool contested = false;
      for (size_t l = from->candidates[k].first; l < from->candidates[k].second && !contested; ++l) {
        if (to->partner[l] != kNone || !same(k, l)) continue;
        contested = OnlyCandidate(*to, l, *from, [&](size_t f) { return same(f, l); }) !=
                    static_cast<int64_t>(k);
        const int64_t distance = std::llabs(static_cast<int64_t>(to->index[l]) - from->predicted[k]);
        if (best == kNone || distance < best_distance) {
          best = static_cast<int64_t>(l);
          best_distance = distance;
        }
        ++copies;
      }
      if (contested || copies < 2) continue;
      from->partner[k] = best;
      to->partner[static_cast<size_t>(best)] = static_cast<int64_t>(k);
      (from_is_a ? from->origin[k] : to->origin[static_cast<size_t>(best)]) = PairOrigin::kFingerprint;
      progress = true;
    }
    return progress;
  };
  for (int round = 0; round < kMaxRepeatRounds; ++round) {
    const bool by_key = try_pair(false);
    const bool by_fingerprint = try_pair(true);
    if (by_key || by_fingerprint) continue;
    const bool copies_a = pair_copies(oa, ob, true);
    const bool copies_b = pair_copies(ob, oa, false);
    if (!copies_a && !copies_b) break;
  }
}

// Does any occurrence of `side` stay unpaired? Asked once per key and side
// after pairing, not once per unpaired occurrence: for a key that repeats on
// every step of a long run, the per-occurrence scan would be quadratic.
bool AnyUnpaired(const Occurrences& side) {
  return std::any_of(side.partner.begin(), side.partner.end(),
                     [](int64_t p) { return p == kNone; });
}

// Why occurrence k of `from` stayed unpaired; to_has_unpaired is
// AnyUnpaired(to).
Unpaired WhyUnpaired(const Occurrences& from, size_t k, const Occurrences& to, bool to_has_unpaired,
                     std::span<const BoundaryItem> from_items, std::span<const BoundaryItem> to_items) {
  size_t unpaired_in_reach = 0, seen_back = 0;
  for (size_t l = from.candidates[k].first; l < from.candidates[k].second; ++l) {
    if (to.partner[l] != kNone) {
      // An extra copy of a boundary that is paired already (rank replicas).
      if (Identical(from_items[from.index[k]], to_items[to.index[l]])) return Unpaired::kReplica;
      continue;
    }
    ++unpaired_in_reach;
    seen_back += to.candidates[l].first <= k && k < to.candidates[l].second;
  }
  // Candidates that do not have k within their own reach cannot pair with it:
  // k is out of their reach, as they are out of its.
  if (seen_back > 0) return Unpaired::kAmbiguous;
  if (unpaired_in_reach > 0) return Unpaired::kOutsideReach;
  return to_has_unpaired ? Unpaired::kOutsideReach : Unpaired::kNoCounterpart;
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

const char* PairOriginName(PairOrigin origin) {
  switch (origin) {
    case PairOrigin::kLockstep: return "lockstep";
    case PairOrigin::kAnchor: return "anchor";
    case PairOrigin::kMoved: return "moved";
    case PairOrigin::kRepeatKey: return "repeat_key";
    case PairOrigin::kFingerprint: return "fingerprint";
  }
  return "unknown";
}

const char* DifferenceName(Difference difference) {
  switch (difference) {
    case Difference::kNone: return "none";
    case Difference::kValues: return "values";
    case Difference::kDtype: return "dtype";
    case Difference::kShape: return "shape";
    case Difference::kDtypeAndShape: return "dtype_and_shape";
  }
  return "unknown";
}

const char* UnpairedName(Unpaired why) {
  switch (why) {
    case Unpaired::kNoCounterpart: return "no_counterpart";
    case Unpaired::kOutsideReach: return "outside_reach";
    case Unpaired::kAmbiguous: return "ambiguous";
    case Unpaired::kReplica: return "replica";
  }
  return "unknown";
}

Coverage CoverageOf(const Alignment& alignment) {
  Coverage c;
  auto count = [&](const std::vector<uint64_t>& unmatched, const std::vector<Unpaired>& why,
                   std::optional<uint64_t>* first) {
    for (size_t k = 0; k < unmatched.size(); ++k) {
      // Unmatched boundaries without a reason (an alignment built by hand)
      // count as having no counterpart.
      const Unpaired w = k < why.size() ? why[k] : Unpaired::kNoCounterpart;
      if (w == Unpaired::kReplica) {
        ++c.replicas;
        continue;
      }
      ++(w == Unpaired::kAmbiguous      ? c.ambiguous
         : w == Unpaired::kOutsideReach ? c.outside_reach
                                        : c.no_counterpart);
      if (!first->has_value()) *first = unmatched[k];
    }
  };
  count(alignment.unmatched_a, alignment.why_a, &c.first_a);
  count(alignment.unmatched_b, alignment.why_b, &c.first_b);
  return c;
}

uint64_t KeyDigest(const BoundaryKey& key, bool compare_rank) {
  uint64_t h = Mix64(key.name_hash);
  h = Combine(h, key.first_example);
  h = Combine(h, (uint64_t{key.example_count} << 32) | (uint64_t{key.phase} << 16) |
                     (uint64_t{key.direction} << 8));
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
  alignment.why_a.assign(alignment.unmatched_a.size(), Unpaired::kNoCounterpart);
  alignment.why_b.assign(alignment.unmatched_b.size(), Unpaired::kNoCounterpart);
  FinishStats(&alignment);
  return alignment;
}

Alignment AlignTolerant(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                        const MapperOptions& options) {
  Alignment alignment;
  alignment.stats.length_a = a.size();
  alignment.stats.length_b = b.size();
  const bool compare_rank = options.compare_rank;
  const int64_t band = options.band;
  std::vector<DigestIndex> sorted_a = SortedByDigest(Digests(a, compare_rank));
  std::vector<DigestIndex> sorted_b = SortedByDigest(Digests(b, compare_rank));

  // Groups of equal digests present on both sides; a digest on one side only
  // has no counterpart at all.
  struct Group { size_t a_begin, a_end, b_begin, b_end; };
  std::vector<Group> once_once, repeated;
  std::vector<int64_t> partner_a(a.size(), kNone), partner_b(b.size(), kNone);
  std::vector<PairOrigin> origin_a(a.size(), PairOrigin::kAnchor);
  std::vector<Unpaired> why_a(a.size(), Unpaired::kNoCounterpart);
  std::vector<Unpaired> why_b(b.size(), Unpaired::kNoCounterpart);
  for (size_t ka = 0, kb = 0; ka < sorted_a.size() && kb < sorted_b.size();) {
    const uint64_t da = sorted_a[ka].digest, db = sorted_b[kb].digest;
    if (da < db) { ++ka; continue; }
    if (db < da) { ++kb; continue; }
    size_t ea = ka, eb = kb;
    while (ea < sorted_a.size() && sorted_a[ea].digest == da) ++ea;
    while (eb < sorted_b.size() && sorted_b[eb].digest == db) ++eb;
    (ea - ka == 1 && eb - kb == 1 ? once_once : repeated).push_back({ka, ea, kb, eb});
    ka = ea;
    kb = eb;
  }

  // A key that occurs once on each side pairs wherever it is: no other
  // choice is consistent. Those in the longest monotone chain are anchors.
  std::vector<std::pair<uint64_t, uint64_t>> candidates;
  candidates.reserve(once_once.size());
  for (const Group& g : once_once) {
    const uint64_t i = sorted_a[g.a_begin].index, j = sorted_b[g.b_begin].index;
    if (Pairable(a[i].key, b[j].key, compare_rank)) candidates.emplace_back(i, j);
  }
  std::sort(candidates.begin(), candidates.end());
  alignment.anchors = LongestMonotoneChain(candidates);
  std::vector<uint64_t> anchor_a, anchor_b;
  anchor_a.reserve(alignment.anchors.size());
  anchor_b.reserve(alignment.anchors.size());
  for (const auto& [i, j] : alignment.anchors) {
    anchor_a.push_back(i);
    anchor_b.push_back(j);
  }
  for (const auto& [i, j] : candidates) {
    partner_a[i] = static_cast<int64_t>(j);
    partner_b[j] = static_cast<int64_t>(i);
    origin_a[i] = PairOrigin::kMoved;
  }
  for (const auto& [i, j] : alignment.anchors) origin_a[i] = PairOrigin::kAnchor;
  alignment.stats.moved_pairs = candidates.size() - alignment.anchors.size();

  // Repeated keys, group by group, against the anchors' predictions.
  Occurrences oa, ob;
  for (const Group& g : repeated) {
    oa = Occurrences{};
    ob = Occurrences{};
    for (size_t k = g.a_begin; k < g.a_end; ++k) {
      const uint64_t i = sorted_a[k].index;
      oa.index.push_back(i);
      oa.predicted.push_back(PredictFromPairs(anchor_a, anchor_b, i, a.size(), b.size()));
    }
    for (size_t k = g.b_begin; k < g.b_end; ++k) {
      const uint64_t j = sorted_b[k].index;
      ob.index.push_back(j);
      ob.predicted.push_back(PredictFromPairs(anchor_b, anchor_a, j, b.size(), a.size()));
    }
    oa.partner.assign(oa.index.size(), kNone);
    ob.partner.assign(ob.index.size(), kNone);
    oa.origin.assign(oa.index.size(), PairOrigin::kRepeatKey);
    ob.origin.assign(ob.index.size(), PairOrigin::kRepeatKey);
    FindCandidates(&oa, ob, band);
    FindCandidates(&ob, oa, band);
    PairRepeatedKey(a, b, compare_rank, band, &oa, &ob);
    const bool a_has_unpaired = AnyUnpaired(oa), b_has_unpaired = AnyUnpaired(ob);
    for (size_t k = 0; k < oa.index.size(); ++k) {
      const uint64_t i = oa.index[k];
      if (oa.partner[k] != kNone) {
        const uint64_t j = ob.index[static_cast<size_t>(oa.partner[k])];
        partner_a[i] = static_cast<int64_t>(j);
        partner_b[j] = static_cast<int64_t>(i);
        origin_a[i] = oa.origin[k];
        ++(oa.origin[k] == PairOrigin::kFingerprint ? alignment.stats.fingerprint_pairs
                                                    : alignment.stats.repeat_key_pairs);
      } else {
        why_a[i] = WhyUnpaired(oa, k, ob, b_has_unpaired, a, b);
      }
    }
    for (size_t l = 0; l < ob.index.size(); ++l) {
      if (ob.partner[l] == kNone) why_b[ob.index[l]] = WhyUnpaired(ob, l, oa, a_has_unpaired, b, a);
    }
  }

  alignment.pairs.reserve(std::min(a.size(), b.size()));
  for (uint64_t i = 0; i < a.size(); ++i) {
    if (partner_a[i] != kNone) {
      alignment.pairs.push_back({i, static_cast<uint64_t>(partner_a[i]), origin_a[i]});
    } else {
      alignment.unmatched_a.push_back(i);
      alignment.why_a.push_back(why_a[i]);
    }
  }
  for (uint64_t j = 0; j < b.size(); ++j) {
    if (partner_b[j] == kNone) {
      alignment.unmatched_b.push_back(j);
      alignment.why_b.push_back(why_b[j]);
    }
  }
  FinishStats(&alignment);
  return alignment;
}

Alignment Align(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                const MapperOptions& options) {
  if (LinesUp(a, b, options.compare_rank)) return AlignLockstep(a, b);
  return AlignTolerant(a, b, options);
}

}  // namespace dgrr::replay
