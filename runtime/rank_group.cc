#include "runtime/rank_group.h"

#include <string>
#include <map>

namespace dgrr {

Status InProcessRankGroup::AllGatherBytes(int rank, const void* mine, size_t count, void* out) {
  if (rank < 0 || rank >= world_size()) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " outside a group of " +
                                   std::to_string(world_size()));
  }
  return group_.ranks[static_cast<size_t>(rank)]->AllGather(mine, count, out);
}

std::vector<int> OutlierRanks(const std::vector<Fingerprint>& fingerprints) {
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
  if (fingerprints.empty()) return {};
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

Status CommunicatorRankGroup::AllGatherBytes(int rank, const void* mine, size_t count, void* out) {
  if (rank != comm_.rank()) {
    return Status::InvalidArgument("rank group: rank " + std::to_string(rank) + " called through the " +
                                   std::string(comm_.name()) + " communicator of rank " +
                                   std::to_string(comm_.rank()));
  }
  return comm_.AllGather(mine, count, out);
}

}  // namespace dgrr
