#include "replay/synthetic.h"

#include <algorithm>
#include <utility>

#include "base/dtype.h"

#include "rng/stream_id.h"

namespace dgrr::replay {
namespace {

// SplitMix64's finaliser: a cheap bijective mix, so that digests of keys that
// differ in one field differ in many bits.
constexpr uint64_t Mix64(uint64_t x) { return rng::MixSplitMix64(x); }

// SplitMix64: small, fast and fully specified, so a seed gives the same pair
// on every platform.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix64(state_);
  }
  // Uniform in [0, 1) from the top 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t state_;
};

// Name hashes of A's vocabulary and of boundaries that only B has are drawn
// from disjoint salts so they never collide by construction.
constexpr uint64_t kNameSalt = 0x6e616d6500000000ULL;
constexpr uint64_t kRepeatedNameSalt = 0x7265706561740000ULL;
constexpr uint64_t kOnlyInBSalt = 0x6f6e6c7962000000ULL;
constexpr uint64_t kFingerprintSalt = 0x66696e6765727072ULL;

struct Entry {
  uint64_t origin;  // A index or kNotFromA
  BoundaryItem item;
};

// A boundary that only B has, placed beside `neighbour` (same step and examples).
BoundaryItem OnlyInB(const BoundaryItem& neighbour, uint64_t serial, SplitMix* rng) {
  BoundaryItem item = neighbour;
  item.key.name_hash = Mix64(kOnlyInBSalt + serial);
  item.shape_digest = rng->Next();
  item.xor64 = rng->Next();
  item.xxh3 = rng->Next();
  return item;
}

}  // namespace

BoundaryItem SyntheticBoundary(const SyntheticOptions& options, uint64_t i) {
  const uint64_t per_step = options.boundaries_per_step == 0 ? 1 : options.boundaries_per_step;
  const uint64_t step = i / per_step;
  const uint64_t k = i % per_step;
  BoundaryItem item;
  // Which repeated key, if any, owns position k: 0 for repeated_key_every,
  // 1 + e for repeat_distances[e]; the first that claims it wins.
  int repeated_key = -1;
  if (options.repeated_key_every != 0 &&
      k % options.repeated_key_every == options.repeated_key_every - 1) {
    repeated_key = 0;
  }
  for (size_t e = 0; repeated_key < 0 && e < options.repeat_distances.size(); ++e) {
    const uint32_t d = options.repeat_distances[e];
    if (d != 0 && k % d == d - 1) repeated_key = static_cast<int>(e + 1);
  }
  const bool repeated = repeated_key >= 0;
  const uint64_t salt = kRepeatedNameSalt + 16 * static_cast<uint64_t>(repeated_key);
  item.key.name_hash = repeated ? Mix64(salt) : Mix64(kNameSalt + k);
  item.shape_digest = repeated ? Mix64(salt + 1) : Mix64(kNameSalt + (k / 2) + (1u << 20));
  item.key.first_example = step * options.examples_per_step;
  item.key.example_count = options.examples_per_step;
  item.key.rank = options.rank;
  item.key.phase = (3 * k < 2 * per_step) ? 0 : 1;  // two thirds forward, one third backward
  item.key.direction = static_cast<uint8_t>(k % 2);
  item.dtype = static_cast<uint8_t>(DType::kF32);
  item.step = step;
  item.record_index = i;
  item.xor64 = Mix64(kFingerprintSalt ^ (2 * i));
  item.xxh3 = Mix64(kFingerprintSalt ^ (2 * i + 1));
  return item;
}

SyntheticPair MakeSyntheticPair(const SyntheticOptions& options) {
  SyntheticPair pair;
  const uint64_t n = options.length;
  SplitMix rng(Mix64(options.seed));
  pair.a.reserve(n);
  for (uint64_t i = 0; i < n; ++i) pair.a.push_back(SyntheticBoundary(options, i));

  auto protected_index = [&](uint64_t i) {
    return options.divergence_at.has_value() && *options.divergence_at == i;
  };
  // What happens to each A boundary: kept, deleted, or first/second of a fusion.
  enum Fate : uint8_t { kKept, kDeleted, kFusedFirst, kFusedSecond };
  std::vector<uint8_t> fate(n, kKept);
  for (uint64_t i = 0; i < n; ++i) {
    // Always draw, so that protecting an index does not shift the stream.
    const bool drop = rng.Uniform() < options.delete_fraction;
    if (drop && !protected_index(i)) fate[i] = kDeleted;
  }
  for (uint32_t f = 0, attempts = 0; f < options.fusions && n >= 2 && attempts < 100 * options.fusions;
       ++attempts) {
    const uint64_t i = rng.Below(n - 1);
    if (fate[i] != kKept || fate[i + 1] != kKept || protected_index(i) || protected_index(i + 1)) continue;
    fate[i] = kFusedFirst;
    fate[i + 1] = kFusedSecond;
    ++f;
  }

  std::vector<Entry> entries;
  entries.reserve(n + n / 8 + 16);
  uint64_t serial = 0;
  for (uint64_t i = 0; i < n; ++i) {
    switch (fate[i]) {
      case kKept: entries.push_back({i, pair.a[i]}); break;
      case kDeleted: ++pair.deleted; continue;
      case kFusedFirst:
        entries.push_back({kNotFromA, OnlyInB(pair.a[i], serial++, &rng)});
        ++pair.inserted;
        ++pair.deleted;
        break;
      case kFusedSecond: ++pair.deleted; continue;
    }
    if (rng.Uniform() < options.insert_fraction) {
      entries.push_back({kNotFromA, OnlyInB(pair.a[i], serial++, &rng)});
      ++pair.inserted;
    }
  }

  // Local reordering: swap a position with one a short distance ahead.
  const uint64_t reach = options.reorder_distance == 0 ? 1 : options.reorder_distance;
  const uint64_t shortest = std::clamp<uint64_t>(options.reorder_min_distance, 1, reach);
  std::vector<bool> swapped(options.disjoint_swaps ? entries.size() : 0, false);
  for (uint64_t p = 0; p < entries.size(); ++p) {
    if (rng.Uniform() >= options.reorder_fraction) continue;
    const uint64_t q = p + shortest + rng.Below(reach - shortest + 1);
    if (q >= entries.size()) continue;
    if (options.disjoint_swaps) {
      if (swapped[p] || swapped[q]) continue;
      swapped[p] = swapped[q] = true;
    }
    std::swap(entries[p], entries[q]);
    ++pair.swaps;
  }

  pair.b.reserve(entries.size());
  pair.origin_of_b.reserve(entries.size());
  for (uint64_t j = 0; j < entries.size(); ++j) {
    Entry& e = entries[j];
    e.item.record_index = j;
    const bool diverges =
        options.divergence_at.has_value() && e.origin != kNotFromA &&
        (e.origin == *options.divergence_at ||
         (options.divergence_propagates && e.origin > *options.divergence_at));
    if (diverges) {
      e.item.xor64 ^= 0x0000000100000001ULL;
      e.item.xxh3 = Mix64(e.item.xxh3);
    }
    if (options.divergence_at.has_value() && e.origin == *options.divergence_at) pair.divergence_b = j;
    pair.b.push_back(e.item);
    pair.origin_of_b.push_back(e.origin);
  }
  return pair;
}

}  // namespace dgrr::replay
