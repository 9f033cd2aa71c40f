// RankGroup: the session's own few cross-rank exchanges (the run id, the
// per-step SDC check, a checkpoint's agreement on the replicated state and
// its shard records), each an all-gather of one small fixed-size value per
// rank, passed as what it is. A thin adapter: a Communicator moves the bytes.
// CommunicatorRankGroup adapts a rank's own communicator (one per rank, as
// `dgrr train`, MPI programs and the Python binding have them);
// InProcessRankGroup is one object that thread-ranks share (tests, simple
// programs), over an in-process world of communicators.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "runtime/communicator.h"
#include "runtime/inprocess_communicator.h"

namespace dgrr {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int world_size() const = 0;
  // Every rank calls this once per round with `count` bytes (the same count
  // on every rank); `out` receives world_size() * count bytes, rank r's at
  // r * count. Blocks until every rank has contributed.
  virtual Status AllGatherBytes(int rank, const void* mine, size_t count, void* out) = 0;
  // The same for one value of a trivially copyable type, indexed by rank.
  // Copied as native bytes: the ranks of one job share an architecture, and
  // the values are only used within the job, never stored.
  template <typename T>
  Status AllGather(int rank, const T& mine, std::vector<T>* all) {
    static_assert(std::is_trivially_copyable_v<T>);
    all->assign(static_cast<size_t>(world_size()), T{});
    return AllGatherBytes(rank, &mine, sizeof(T), all->data());
  }
};

// One object for all the ranks of an in-process world (each calls with its
// own rank).
class InProcessRankGroup final : public RankGroup {
 public:
  explicit InProcessRankGroup(int world_size) : group_(world_size) {}
  int world_size() const override { return group_.world->size(); }
  Status AllGatherBytes(int rank, const void* mine, size_t count, void* out) override;
  // Wakes every waiting rank and makes this and every later AllGather return
  // `why`: a rank that failed must not leave the others waiting for it.
  void Abort(const Status& why) { group_.world->Abort(why.ok() ? Status::Internal("rank group aborted") : why); }

 private:
  InProcessGroup group_;
};

// A RankGroup over any Communicator with host buffers (in-process, MPI):
// each rank makes its own over its own communicator and passes it to its
// Session (SessionOptions::group); the `rank` argument must be comm.rank().
class CommunicatorRankGroup final : public RankGroup {
 public:
  explicit CommunicatorRankGroup(Communicator& comm) : comm_(comm) {}
  int world_size() const override { return comm_.size(); }
  Status AllGatherBytes(int rank, const void* mine, size_t count, void* out) override;
  Communicator& communicator() { return comm_; }

 private:
  Communicator& comm_;
};

// The ranks whose fingerprint differs from the majority value (all ranks that
// disagree with rank 0 when there is no strict majority).
std::vector<int> OutlierRanks(const std::vector<Fingerprint>& fingerprints);

}  // namespace dgrr
