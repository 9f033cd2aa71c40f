#include "runtime/outlier_ranks.h"

#include <cstdint>
#include <map>
#include <utility>

namespace dgrr {

std::vector<int> OutlierRanks(const std::vector<Fingerprint>& fingerprints) {
  if (fingerprints.empty()) return {};
  std::map<std::pair<uint64_t, uint64_t>, int> votes;
  for (const auto& f : fingerprints) ++votes[{f.xor64, f.xxh3}];
  std::pair<uint64_t, uint64_t> reference{};
  int best = 0;
  for (const auto& [fp, n] : votes) {
    if (n > best) {
      best = n;
      reference = fp;
    }
  }
  if (2 * best <= static_cast<int>(fingerprints.size())) {
    reference = {fingerprints[0].xor64, fingerprints[0].xxh3};  // no strict majority
  }
  std::vector<int> outliers;
  for (size_t r = 0; r < fingerprints.size(); ++r) {
    if (fingerprints[r].xor64 != reference.first || fingerprints[r].xxh3 != reference.second) {
      outliers.push_back(static_cast<int>(r));
    }
  }
  return outliers;
}

}  // namespace dgrr
