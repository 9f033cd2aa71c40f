// InProcessCommunicator: ranks that are threads of one process.
//
// The ranks share an InProcessWorld. Each collective is two rendezvous: every
// rank posts where its buffers are, then each rank copies what it receives
// straight out of its peers' buffers, then the ranks meet again so that no
// buffer is reused while a peer may still read it. Nothing is staged and
// nothing is summed. A rank that fails calls Abort(): every rank waiting in
// or entering a collective then returns that error, so a failure never
// leaves threads waiting for a peer that is gone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/communicator.h"

namespace dgrr {

class InProcessWorld {
 public:
  explicit InProcessWorld(int size);
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int size() const { return size_; }
  // Makes every pending and later collective of every rank return `why`
  // (the first reason wins).
  void Abort(const Status& why);

 private:
  friend class InProcessCommunicator;

  enum class Op : uint8_t { kBarrier, kBroadcast, kAllGatherV, kAllToAllV };  // AllGather is an AllGatherV
  // What a rank posts for one collective: its buffers, as the collective
  // needs them (unused fields stay empty).
  struct Post {
    Op op = Op::kBarrier;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    int root = -1;
    std::span<const size_t> send_counts, send_offsets;
    std::span<const size_t> recv_counts, recv_offsets;
  };

  // Waits until every rank has arrived (or the world is aborted).
  Status Meet();
  // Posts `mine`, meets, checks that every rank runs the same collective.
  Status PostAndMeet(int rank, const Post& mine);

  const int size_;
  std::vector<Post> posts_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  Status aborted_;
};

class InProcessCommunicator final : public Communicator {
 public:
  // Rank `rank` of `world`, which must outlive this communicator.
  InProcessCommunicator(InProcessWorld& world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  std::string_view name() const override { return "in-process"; }

  Status Barrier() override;
  Status Broadcast(void* data, size_t count, int root, const Placement& where = {}) override;
  Status AllGather(const void* mine, size_t count, void* out, const Placement& where = {}) override;
  Status AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                    const Placement& where = {}) override;
  Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, const Placement& where = {}) override;
  void Abort(const Status& why) override { world_.Abort(why); }

 private:
  // A rank that refuses its own arguments fails every rank (the others are,
  // or will be, waiting for it at the rendezvous); returns `s`.
  Status FailAllUnless(Status s);
  // The second meeting of a collective: every rank has finished reading its
  // peers' buffers. `copied` is this rank's own outcome, reported after it.
  Status Finish(Status copied);

  InProcessWorld& world_;
  const int rank_;
};

// A world of `size` ranks and one communicator per rank, for tests and for
// programs that run their ranks as threads.
struct InProcessGroup {
  explicit InProcessGroup(int size);
  std::unique_ptr<InProcessWorld> world;
  std::vector<std::unique_ptr<InProcessCommunicator>> ranks;
};

}  // namespace dgrr
