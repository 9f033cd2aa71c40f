#include "runtime/rank_group.h"

#include <string>
#include <type_traits>

#include <map>

namespace dgrr {

InProcessRankGroup::InProcessRankGroup(int world_size)
    : world_size_(world_size), slots_(static_cast<size_t>(world_size)) {}

Status InProcessRankGroup::AllGather(int rank, const Fingerprint& mine,
                                     std::vector<Fingerprint>* all) {
  if (rank < 0 || rank >= world_size_) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " outside a group of " +
                                   std::to_string(world_size_));
  }
  std::unique_lock<std::mutex> lock(mu_);
  // Wait until the previous round has been fully read by every rank.
  cv_.wait(lock, [&] { return departed_ == 0 || !aborted_.ok(); });
  if (!aborted_.ok()) return aborted_;
  const uint64_t my_round = round_;
  slots_[static_cast<size_t>(rank)] = mine;
  if (++arrived_ == world_size_) {
    ++round_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return round_ != my_round || !aborted_.ok(); });
    if (round_ == my_round) return aborted_;
  }
  *all = slots_;
  if (++departed_ == world_size_) {
    arrived_ = 0;
    departed_ = 0;
    cv_.notify_all();
  }
  return Status::OK();
}

void InProcessRankGroup::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? Status::Internal("rank group aborted") : why;
  cv_.notify_all();
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

Status CommunicatorRankGroup::AllGather(int rank, const Fingerprint& mine, std::vector<Fingerprint>* all) {
  if (rank != comm_.rank()) {
    return Status::InvalidArgument("rank group: rank " + std::to_string(rank) + " called through the " +
                                   std::string(comm_.name()) + " communicator of rank " +
                                   std::to_string(comm_.rank()));
  }
  // Copied as native words: the ranks of one job share an architecture, and
  // the fingerprints are only compared within the job, never stored.
  static_assert(sizeof(Fingerprint) == 16 && std::is_trivially_copyable_v<Fingerprint>);
  all->assign(static_cast<size_t>(comm_.size()), Fingerprint{});
  return comm_.AllGather(&mine, sizeof(Fingerprint), all->data());
}

}  // namespace dgrr
