#include "runtime/inprocess_communicator.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace dgrr {

namespace {

const char* OpName(int op) {
  static const char* const kNames[] = {"Barrier", "Broadcast", "AllGather(V)", "AllToAllV"};
  return kNames[op];
}

Status RefuseDevice(const Placement& where) {
  if (where.host()) return Status::OK();
  return Status::FailedPrecondition("the in-process communicator moves host memory only (device " +
                                    std::to_string(where.device) + " given)");
}

}  // namespace

InProcessWorld::InProcessWorld(int size) : size_(size), posts_(static_cast<size_t>(size)) {}

void InProcessWorld::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? Status::Internal("communicator aborted") : why;
  cv_.notify_all();
}

Status InProcessWorld::Meet() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return Status::OK();
  }
  cv_.wait(lock, [&] { return generation_ != generation || !aborted_.ok(); });
  return generation_ != generation ? Status::OK() : aborted_;
}

Status InProcessWorld::PostAndMeet(int rank, const Post& mine) {
  posts_[static_cast<size_t>(rank)] = mine;
  DGRR_RETURN_IF_ERROR(Meet());
  // Every rank checks every post, so all ranks reach the same verdict and
  // none copies from a peer that has given up.
  for (int r = 0; r < size_; ++r) {
    const Post& p = posts_[static_cast<size_t>(r)];
    if (p.op != posts_[0].op) {
      return Status::InvalidArgument("collective mismatch: rank 0 called " +
                                     std::string(OpName(static_cast<int>(posts_[0].op))) + ", rank " +
                                     std::to_string(r) + " called " + OpName(static_cast<int>(p.op)));
    }
  }
  return Status::OK();
}

InProcessCommunicator::InProcessCommunicator(InProcessWorld& world, int rank) : world_(world), rank_(rank) {}

Status InProcessCommunicator::FailAllUnless(Status s) {
  if (!s.ok()) world_.Abort(s);
  return s;
}

Status InProcessCommunicator::Finish(Status copied) {
  Status met = world_.Meet();
  return copied.ok() ? met : copied;
}

Status InProcessCommunicator::Barrier() {
  InProcessWorld::Post post;
  post.op = InProcessWorld::Op::kBarrier;
  DGRR_RETURN_IF_ERROR(world_.PostAndMeet(rank_, post));
  return Finish(Status::OK());
}

Status InProcessCommunicator::Broadcast(void* data, size_t count, int root, const Placement& where) {
  DGRR_RETURN_IF_ERROR(FailAllUnless(RefuseDevice(where)));
  InProcessWorld::Post post;
  post.op = InProcessWorld::Op::kBroadcast;
  post.send = data;
  post.count = count;
  post.root = root;
  DGRR_RETURN_IF_ERROR(world_.PostAndMeet(rank_, post));
  const auto& posts = world_.posts_;
  for (int r = 0; r < size(); ++r) {
    const auto& p = posts[static_cast<size_t>(r)];
    if (p.root != root || p.count != count || root < 0 || root >= size()) {
      return Finish(Status::InvalidArgument("Broadcast: rank " + std::to_string(r) + " passed root " +
                                            std::to_string(p.root) + " and " + std::to_string(p.count) +
                                            " bytes, rank " + std::to_string(rank_) + " root " +
                                            std::to_string(root) + " and " + std::to_string(count)));
    }
  }
  if (rank_ != root && count > 0) std::memcpy(data, posts[static_cast<size_t>(root)].send, count);
  return Finish(Status::OK());
}

// Equal counts: one AllGatherV, whose rendezvous checks that every rank
// passed the same.
Status InProcessCommunicator::AllGather(const void* mine, size_t count, void* out, const Placement& where) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return AllGatherV(mine, counts, out, where);
}

Status InProcessCommunicator::AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                                         const Placement& where) {
  DGRR_RETURN_IF_ERROR(FailAllUnless(RefuseDevice(where)));
  DGRR_RETURN_IF_ERROR(FailAllUnless(CheckRankArrays(*this, counts, {}, "AllGatherV")));
  InProcessWorld::Post post;
  post.op = InProcessWorld::Op::kAllGatherV;
  post.send = mine;
  post.send_counts = counts;
  DGRR_RETURN_IF_ERROR(world_.PostAndMeet(rank_, post));
  const auto& posts = world_.posts_;
  for (int r = 0; r < size(); ++r) {
    const auto theirs = posts[static_cast<size_t>(r)].send_counts;
    if (!std::equal(theirs.begin(), theirs.end(), counts.begin(), counts.end())) {
      return Finish(Status::InvalidArgument("AllGatherV: rank " + std::to_string(r) +
                                            " passed other counts than rank " + std::to_string(rank_)));
    }
  }
  auto* dst = static_cast<uint8_t*>(out);
  for (int r = 0; r < size(); ++r) {
    const size_t n = counts[static_cast<size_t>(r)];
    if (n > 0) std::memcpy(dst, posts[static_cast<size_t>(r)].send, n);
    dst += n;
  }
  return Finish(Status::OK());
}

Status InProcessCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                        std::span<const size_t> send_offsets, void* recv,
                                        std::span<const size_t> recv_counts,
                                        std::span<const size_t> recv_offsets, const Placement& where) {
  DGRR_RETURN_IF_ERROR(FailAllUnless(RefuseDevice(where)));
  DGRR_RETURN_IF_ERROR(FailAllUnless(CheckRankArrays(*this, send_counts, send_offsets, "AllToAllV send")));
  DGRR_RETURN_IF_ERROR(FailAllUnless(CheckRankArrays(*this, recv_counts, recv_offsets, "AllToAllV receive")));
  InProcessWorld::Post post;
  post.op = InProcessWorld::Op::kAllToAllV;
  post.send = send;
  post.send_counts = send_counts;
  post.send_offsets = send_offsets;
  post.recv_counts = recv_counts;
  post.recv_offsets = recv_offsets;
  DGRR_RETURN_IF_ERROR(world_.PostAndMeet(rank_, post));
  const auto& posts = world_.posts_;
  // Every pair is checked by every rank, so a mismatch fails them all alike.
  for (size_t src = 0; src < posts.size(); ++src) {
    for (size_t dst = 0; dst < posts.size(); ++dst) {
      if (posts[src].send_counts[dst] != posts[dst].recv_counts[src]) {
        return Finish(Status::InvalidArgument("AllToAllV: rank " + std::to_string(src) + " sends " +
                                              std::to_string(posts[src].send_counts[dst]) +
                                              " bytes to rank " + std::to_string(dst) + ", which expects " +
                                              std::to_string(posts[dst].recv_counts[src])));
      }
    }
  }
  auto* dst = static_cast<uint8_t*>(recv);
  const size_t me = static_cast<size_t>(rank_);
  for (size_t src = 0; src < posts.size(); ++src) {
    const size_t n = recv_counts[src];
    if (n == 0) continue;
    const auto* from = static_cast<const uint8_t*>(posts[src].send) + posts[src].send_offsets[me];
    std::memcpy(dst + recv_offsets[src], from, n);
  }
  return Finish(Status::OK());
}

InProcessGroup::InProcessGroup(int size) : world(std::make_unique<InProcessWorld>(size)) {
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<InProcessCommunicator>(*world, r));
}

}  // namespace dgrr
