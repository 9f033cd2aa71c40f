// NcclCommunicator: one rank per GPU, collectives on device buffers over NCCL.
//
// The same byte collectives as every Communicator (runtime/communicator.h),
// so the canonical reduction and the session use it unchanged: NCCL moves
// bytes (ncclUint8 broadcasts and all-gathers, grouped ncclSend/ncclRecv for
// the V-collectives) and is never asked to add anything, so NCCL_ALGO,
// NCCL_PROTO, channel counts and topology cannot change a recorded bit.
//
// Buffers must be device memory of the communicator's device
// (Placement::Cuda(device, stream)); host placements are refused
// (FailedPrecondition), as the host backends refuse device ones. Collectives
// are enqueued on the placement's stream and return once enqueued, as NCCL's
// do: the data is there when that stream gets there. Barrier is the exception:
// it synchronizes the communicator's own stream, since a barrier's point is
// the host's order.
//
// Built into dgrr::runtime when CUDA is (DGRR_HAVE_NCCL=1 for what links
// it). This header includes neither <nccl.h> nor <cuda_runtime.h>.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/communicator.h"

namespace dgrr {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // the CUDA device this rank's buffers live on
  // How the ranks agree on NCCL's unique id (exactly one of the two):
  // - `bootstrap`: a host communicator of the same ranks (MPI under mpirun);
  //   rank 0's id is broadcast over it, and Abort goes through it too.
  // - `id_file`: a path every rank can read (the run directory: `nccl-id`);
  //   rank 0 writes it atomically, the others wait for it at most
  //   `id_timeout`. The caller picks a path no earlier job left behind.
  Communicator* bootstrap = nullptr;
  std::string id_file;
  std::chrono::milliseconds id_timeout{std::chrono::seconds(120)};
};

class NcclCommunicator final : public Communicator {
 public:
  ~NcclCommunicator() override;  // destroys the NCCL communicator and its stream
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }
  int device() const { return device_; }

  Status Barrier() override;
  Status Broadcast(void* data, size_t count, int root, const Placement& where = {}) override;
  Status AllGather(const void* mine, size_t count, void* out, const Placement& where = {}) override;
  Status AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                    const Placement& where = {}) override;
  Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, const Placement& where = {}) override;
  // ncclCommAbort (so that peers blocked in NCCL get an error), then the
  // bootstrap communicator's Abort when there is one (mpirun ends the job),
  // else one line on stderr and exit with the CLI's code for `why`.
  [[noreturn]] void Abort(const Status& why) override;

 private:
  friend StatusOr<std::unique_ptr<NcclCommunicator>> OpenNcclCommunicator(const NcclOptions& options);
  struct Handle;  // ncclComm_t and the barrier's stream and byte, kept out of this header
  NcclCommunicator(std::unique_ptr<Handle> handle, const NcclOptions& options);
  Status CheckPlacement(const Placement& where, const char* what) const;

  std::unique_ptr<Handle> handle_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  Communicator* bootstrap_ = nullptr;
};

// Opens rank options.rank of options.size on options.device. InvalidArgument
// for a rank outside the world, no bootstrap or both, a negative device;
// FailedPrecondition when there is no such CUDA device; DeadlineExceeded-like
// FailedPrecondition when the id file does not appear in time (naming it);
// Internal with NCCL's message when NCCL fails. Every rank calls it together
// (ncclCommInitRank waits for all of them).
StatusOr<std::unique_ptr<NcclCommunicator>> OpenNcclCommunicator(const NcclOptions& options);

}  // namespace dgrr
