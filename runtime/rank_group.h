// RankGroup: the little cross-rank communication the runtime itself needs
// (exchanging per-step parameter fingerprints for the SDC check). Training
// programs with their own communicator (MPI, NCCL) implement it with an
// all-gather of 16 bytes; InProcessRankGroup serves ranks that are threads of
// one process, as in `dgrr train`.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "runtime/communicator.h"

namespace dgrr {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int world_size() const = 0;
  // Every rank calls this once per round with its own fingerprint; each gets
  // all of them, indexed by rank. Blocks until every rank has contributed.
  virtual Status AllGather(int rank, const Fingerprint& mine, std::vector<Fingerprint>* all) = 0;
};

class InProcessRankGroup final : public RankGroup {
 public:
  explicit InProcessRankGroup(int world_size);
  int world_size() const override { return world_size_; }
  Status AllGather(int rank, const Fingerprint& mine, std::vector<Fingerprint>* all) override;
  // Wakes every waiting rank and makes this and every later AllGather return
  // `why`: a rank that failed must not leave the others waiting for it.
  void Abort(const Status& why);

 private:
  Status aborted_;
  const int world_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Fingerprint> slots_;
  int arrived_ = 0;
  int departed_ = 0;
  uint64_t round_ = 0;
};

// A RankGroup over any Communicator (in-process, MPI, later NCCL): the
// fingerprint exchange is one AllGather of 16 bytes. Unlike
// InProcessRankGroup, which all ranks share, each rank makes its own over
// its own communicator and passes it to its Session (SessionOptions::group);
// the `rank` argument must then be comm.rank().
class CommunicatorRankGroup final : public RankGroup {
 public:
  explicit CommunicatorRankGroup(Communicator& comm) : comm_(comm) {}
  int world_size() const override { return comm_.size(); }
  Status AllGather(int rank, const Fingerprint& mine, std::vector<Fingerprint>* all) override;
  Communicator& communicator() { return comm_; }

 private:
  Communicator& comm_;
};

// The ranks whose fingerprint differs from the majority value (all ranks that
// disagree with rank 0 when there is no strict majority).
std::vector<int> OutlierRanks(const std::vector<Fingerprint>& fingerprints);

}  // namespace dgrr
