#include "runtime/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"

namespace dgrr {

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
  cudaStream_t barrier_stream = nullptr;  // the communicator's own, for Barrier
  void* barrier_bytes = nullptr;          // size() device bytes: Barrier's all-gather
};

namespace {

Status NcclFailure(const char* call, ncclResult_t rc, ncclComm_t comm) {
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(rc);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  }
  return Status::Internal(message);
}

Status CudaFailure(const char* call, cudaError_t err) {
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorString(err));
}

#define DGRR_NCCL(call, comm)                                                       \
  do {                                                                              \
    if (ncclResult_t rc_ = (call); rc_ != ncclSuccess) return NcclFailure(#call, rc_, comm); \
  } while (0)

Status CheckOptions(const NcclOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return Status::InvalidArgument("NCCL communicator: rank " + std::to_string(o.rank) + " outside a world of " +
                                   std::to_string(o.size));
  }
  if (o.device < 0) return Status::InvalidArgument("NCCL communicator: device " + std::to_string(o.device));
  if ((o.bootstrap == nullptr) == o.id_file.empty()) {
    return Status::InvalidArgument(
        "NCCL communicator: give exactly one way to share NCCL's id (a bootstrap communicator or an id file)");
  }
  if (o.bootstrap != nullptr && (o.bootstrap->rank() != o.rank || o.bootstrap->size() != o.size)) {
    return Status::InvalidArgument("NCCL communicator: rank " + std::to_string(o.rank) + " of " +
                                   std::to_string(o.size) + " over a bootstrap communicator that is rank " +
                                   std::to_string(o.bootstrap->rank()) + " of " + std::to_string(o.bootstrap->size()));
  }
  return Status::OK();
}

// Rank 0 writes the id (write, fsync, rename); the others wait for the whole
// file, at most `timeout`, and never read a half-written one.
StatusOr<ncclUniqueId> ShareIdByFile(const NcclOptions& o) {
  ncclUniqueId id;
  if (o.rank == 0) {
    DGRR_NCCL(ncclGetUniqueId(&id), nullptr);
    DGRR_RETURN_IF_ERROR(WriteFileAtomically(o.id_file, std::string_view(id.internal, sizeof(id.internal))));
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + o.id_timeout;
  while (!PathExists(o.id_file)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::FailedPrecondition("NCCL communicator: rank " + std::to_string(o.rank) + " waited " +
                                        std::to_string(o.id_timeout.count()) + " ms for rank 0's id in " +
                                        o.id_file + " (did rank 0 start?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  DGRR_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(o.id_file, sizeof(id.internal) + 1));
  if (bytes.size() != sizeof(id.internal)) {
    return Status::Corruption(o.id_file + ": " + std::to_string(bytes.size()) + " bytes, an NCCL id has " +
                              std::to_string(sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

StatusOr<ncclUniqueId> ShareId(const NcclOptions& o) {
  if (o.bootstrap == nullptr) return ShareIdByFile(o);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (o.rank == 0) DGRR_NCCL(ncclGetUniqueId(&id), nullptr);
  DGRR_RETURN_IF_ERROR(o.bootstrap->Broadcast(id.internal, sizeof(id.internal), 0));
  return id;
}

}  // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> OpenNcclCommunicator(const NcclOptions& options) {
  DGRR_RETURN_IF_ERROR(CheckOptions(options));
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || options.device >= devices) {
    return Status::FailedPrecondition("NCCL communicator: no CUDA device " + std::to_string(options.device) +
                                      (err != cudaSuccess ? std::string(" (") + cudaGetErrorString(err) + ")"
                                                          : " (" + std::to_string(devices) + " present)"));
  }
  DGRR_ASSIGN_OR_RETURN(ncclUniqueId id, ShareId(options));
  if (cudaError_t err = cudaSetDevice(options.device); err != cudaSuccess) return CudaFailure("cudaSetDevice", err);
  auto handle = std::make_unique<NcclCommunicator::Handle>();
  DGRR_NCCL(ncclCommInitRank(&handle->comm, options.size, id, options.rank), nullptr);
  // From here the communicator owns what is made, so a failure frees it.
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(handle), options));
  NcclCommunicator::Handle& h = *comm->handle_;
  if (cudaError_t err = cudaStreamCreateWithFlags(&h.barrier_stream, cudaStreamNonBlocking); err != cudaSuccess) {
    return CudaFailure("cudaStreamCreateWithFlags", err);
  }
  if (cudaError_t err = cudaMalloc(&h.barrier_bytes, static_cast<size_t>(options.size)); err != cudaSuccess) {
    return CudaFailure("cudaMalloc", err);
  }
  return comm;
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handle> handle, const NcclOptions& options)
    : handle_(std::move(handle)),
      rank_(options.rank),
      size_(options.size),
      device_(options.device),
      bootstrap_(options.bootstrap) {}

NcclCommunicator::~NcclCommunicator() {
  if (!handle_) return;
  if (handle_->barrier_bytes != nullptr) cudaFree(handle_->barrier_bytes);
  if (handle_->barrier_stream != nullptr) cudaStreamDestroy(handle_->barrier_stream);
  if (handle_->comm != nullptr) ncclCommDestroy(handle_->comm);
}

Status NcclCommunicator::CheckPlacement(const Placement& where, const char* what) const {
  if (where.kind != Placement::Kind::kCuda) {
    return Status::FailedPrecondition(std::string(what) +
                                      ": the NCCL communicator moves device memory only (host buffer given)");
  }
  if (where.device != device_) {
    return Status::FailedPrecondition(std::string(what) + ": buffer on cuda:" + std::to_string(where.device) +
                                      ", this rank's communicator is on cuda:" + std::to_string(device_));
  }
  return Status::OK();
}

Status NcclCommunicator::Barrier() {
  DGRR_NCCL(ncclAllGather(static_cast<char*>(handle_->barrier_bytes) + rank_, handle_->barrier_bytes, 1, ncclUint8,
                          handle_->comm, handle_->barrier_stream),
            handle_->comm);
  if (cudaError_t err = cudaStreamSynchronize(handle_->barrier_stream); err != cudaSuccess) {
    return CudaFailure("cudaStreamSynchronize", err);
  }
  return Status::OK();
}

Status NcclCommunicator::Broadcast(void* data, size_t count, int root, const Placement& where) {
  DGRR_RETURN_IF_ERROR(CheckPlacement(where, "Broadcast"));
  if (root < 0 || root >= size_) return Status::InvalidArgument("Broadcast: root " + std::to_string(root));
  DGRR_NCCL(ncclBroadcast(data, data, count, ncclUint8, root, handle_->comm, static_cast<cudaStream_t>(where.stream)),
            handle_->comm);
  return Status::OK();
}

Status NcclCommunicator::AllGather(const void* mine, size_t count, void* out, const Placement& where) {
  DGRR_RETURN_IF_ERROR(CheckPlacement(where, "AllGather"));
  DGRR_NCCL(ncclAllGather(mine, out, count, ncclUint8, handle_->comm, static_cast<cudaStream_t>(where.stream)),
            handle_->comm);
  return Status::OK();
}

Status NcclCommunicator::AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                                    const Placement& where) {
  DGRR_RETURN_IF_ERROR(CheckPlacement(where, "AllGatherV"));
  if (counts.size() != static_cast<size_t>(size_)) {
    return Status::InvalidArgument("AllGatherV: " + std::to_string(counts.size()) + " counts for " +
                                   std::to_string(size_) + " ranks");
  }
  // Rank r's bytes land at the sum of the counts before r, on every rank.
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<size_t> send_counts(counts.size(), counts[static_cast<size_t>(rank_)]);
  std::vector<size_t> send_offsets(counts.size(), 0);
  return AllToAllV(mine, send_counts, send_offsets, out, counts, offsets, where);
}

// One send and one receive per peer in one NCCL group: bytes move, nothing
// is added. A rank's own slice is a device copy on the same stream.
Status NcclCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                   std::span<const size_t> send_offsets, void* recv,
                                   std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                                   const Placement& where) {
  DGRR_RETURN_IF_ERROR(CheckPlacement(where, "AllToAllV"));
  const size_t n = static_cast<size_t>(size_);
  if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n || recv_offsets.size() != n) {
    return Status::InvalidArgument("AllToAllV: counts and offsets need one entry per rank (" + std::to_string(n) +
                                   ")");
  }
  auto stream = static_cast<cudaStream_t>(where.stream);
  const auto* src = static_cast<const char*>(send);
  auto* dst = static_cast<char*>(recv);
  const size_t me = static_cast<size_t>(rank_);
  if (send_counts[me] != recv_counts[me]) {
    return Status::InvalidArgument("AllToAllV: rank " + std::to_string(rank_) + " sends itself " +
                                   std::to_string(send_counts[me]) + " bytes but expects " +
                                   std::to_string(recv_counts[me]));
  }
  if (send_counts[me] > 0) {
    if (cudaError_t err = cudaMemcpyAsync(dst + recv_offsets[me], src + send_offsets[me], send_counts[me],
                                          cudaMemcpyDeviceToDevice, stream);
        err != cudaSuccess) {
      return CudaFailure("cudaMemcpyAsync", err);
    }
  }
  if (n == 1) return Status::OK();
  DGRR_NCCL(ncclGroupStart(), handle_->comm);
  Status posted = Status::OK();
  for (size_t peer = 0; peer < n && posted.ok(); ++peer) {
    if (peer == me) continue;
    const int p = static_cast<int>(peer);
    if (send_counts[peer] > 0) {
      if (ncclResult_t rc = ncclSend(src + send_offsets[peer], send_counts[peer], ncclUint8, p, handle_->comm, stream);
          rc != ncclSuccess) {
        posted = NcclFailure("ncclSend", rc, handle_->comm);
      }
    }
    if (posted.ok() && recv_counts[peer] > 0) {
      if (ncclResult_t rc = ncclRecv(dst + recv_offsets[peer], recv_counts[peer], ncclUint8, p, handle_->comm, stream);
          rc != ncclSuccess) {
        posted = NcclFailure("ncclRecv", rc, handle_->comm);
      }
    }
  }
  // The group is closed whatever happened inside it.
  const ncclResult_t ended = ncclGroupEnd();
  DGRR_RETURN_IF_ERROR(posted);
  if (ended != ncclSuccess) return NcclFailure("ncclGroupEnd", ended, handle_->comm);
  return Status::OK();
}

void NcclCommunicator::Abort(const Status& why) {
  if (handle_ && handle_->comm != nullptr) ncclCommAbort(handle_->comm);
  if (handle_) handle_->comm = nullptr;
  if (bootstrap_ != nullptr) bootstrap_->Abort(why);
  std::fprintf(stderr, "dgrr: rank %d aborts: %s\n", rank_, why.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(ExitCodeFor(why) == 0 ? 2 : ExitCodeFor(why));
}

}  // namespace dgrr
