#include "fingerprint/async_fingerprint.h"

#if DGRR_FINGERPRINT_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "fingerprint/fingerprint_cuda.h"
#endif

namespace dgrr {

#if DGRR_FINGERPRINT_HAVE_CUDA
namespace {

Status CudaError(const char* what, cudaError_t err) {
  return Status::Internal(std::string("device fingerprint: ") + what + ": " + cudaGetErrorString(err));
}

// Makes `device` current for its lifetime and restores the previous one, so
// that the events and scratch memory of a tensor belong to its own device.
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  Status Enter(int device) {
    if (cudaError_t err = cudaGetDevice(&previous_); err != cudaSuccess) return CudaError("cudaGetDevice", err);
    if (device == previous_) return Status::OK();
    if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) return CudaError("cudaSetDevice", err);
    switched_ = true;
    return Status::OK();
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// One result slot: 16 pinned bytes the device copies the fingerprint into,
// and the event recorded on the stream right after that copy. A segment
// list's table is staged in the slot's pinned `table` (grown on demand),
// which the device has read once the event completes.
struct Slot {
  Fingerprint* result = nullptr;
  cudaEvent_t done = nullptr;
  int device = 0;
  uint64_t* table = nullptr;
  size_t table_words = 0;
};

class CudaFingerprinter final : public AsyncFingerprinter {
 public:
  CudaFingerprinter() = default;
  CudaFingerprinter(const CudaFingerprinter&) = delete;
  CudaFingerprinter& operator=(const CudaFingerprinter&) = delete;

  // The device may still be writing into slots in flight: wait for them
  // before the pinned memory goes.
  ~CudaFingerprinter() override {
    for (auto& [ticket, slot] : in_flight_) cudaEventSynchronize(slot.done);
    for (auto& [device, slots] : free_) {
      for (Slot& s : slots) cudaEventDestroy(s.done);
    }
    for (auto& [ticket, slot] : in_flight_) cudaEventDestroy(slot.done);
    for (Fingerprint* block : pinned_blocks_) cudaFreeHost(block);
    for (void* table : pinned_tables_) cudaFreeHost(table);
    for (auto& [device, side] : sides_) {
      DeviceScope scope;
      if (!scope.Enter(device).ok()) continue;
      for (cudaStream_t chain : side.chains) {
        cudaStreamSynchronize(chain);
        cudaStreamDestroy(chain);
      }
      if (side.pool != nullptr) cudaMemPoolDestroy(side.pool);
    }
  }

  // The current device's kernels and first slots, before any work is
  // enqueued (MakeCudaFingerprinter).
  Status Prepare() {
    int device = 0;
    if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return CudaError("cudaGetDevice", err);
    return AddBlock(device, &free_[device]);
  }

  StatusOr<Ticket> Enqueue(const TensorRef& tensor) override {
    if (tensor.where.kind != Placement::Kind::kCuda) {
      return Status::InvalidArgument("device fingerprint of " + tensor.DebugString() + ": not CUDA memory");
    }
    DeviceScope scope;
    DGRR_RETURN_IF_ERROR(scope.Enter(tensor.where.device));
    DGRR_ASSIGN_OR_RETURN(Slot slot, TakeSlot(tensor.where.device));
    const FingerprintStreams streams = StreamsFor(tensor.where);
    return Issue(slot, streams.chain, FingerprintDeviceAsync(tensor.data, tensor.bytes, streams, slot.result));
  }

  StatusOr<Ticket> EnqueueSegments(std::span<const MemorySegment> segments, const Placement& where) override {
    if (where.kind != Placement::Kind::kCuda) {
      return Status::InvalidArgument("device fingerprint of " + std::to_string(segments.size()) +
                                     " segments on " + where.ToString() + ": not CUDA memory");
    }
    DeviceScope scope;
    DGRR_RETURN_IF_ERROR(scope.Enter(where.device));
    DGRR_ASSIGN_OR_RETURN(Slot slot, TakeSlot(where.device));
    Status enqueued = StageTable(&slot, SegmentTableWords(segments.size()));
    const FingerprintStreams streams = StreamsFor(where);
    if (enqueued.ok()) {
      enqueued = FingerprintSegmentsDeviceAsync(segments, streams, std::span<uint64_t>(slot.table, slot.table_words),
                                                slot.result);
    }
    return Issue(slot, streams.chain, enqueued);
  }

  Status CopyToHost(const void* src, uint64_t bytes, const Placement& where, void* dst) override {
    return Copy(dst, src, bytes, where, cudaMemcpyDeviceToHost);
  }
  Status CopyToDevice(const void* src, uint64_t bytes, const Placement& where, void* dst) override {
    return Copy(dst, src, bytes, where, cudaMemcpyHostToDevice);
  }

  StatusOr<std::optional<Fingerprint>> Poll(Ticket ticket) override {
    DGRR_ASSIGN_OR_RETURN(Slot slot, Find(ticket));
    const cudaError_t err = cudaEventQuery(slot.done);
    if (err == cudaErrorNotReady) return std::optional<Fingerprint>();
    if (err != cudaSuccess) return CudaError("cudaEventQuery", err);
    return std::optional<Fingerprint>(Collect(ticket, slot));
  }

  StatusOr<Fingerprint> Wait(Ticket ticket) override {
    DGRR_ASSIGN_OR_RETURN(Slot slot, Find(ticket));
    if (cudaError_t err = cudaEventSynchronize(slot.done); err != cudaSuccess) {
      return CudaError("cudaEventSynchronize", err);
    }
    return Collect(ticket, slot);
  }

 private:
  static constexpr int kSlotsPerBlock = 64;
  // Streams a device's fingerprint chains take in turn, so that the chains of
  // consecutive tensors run side by side (one warp each).
  static constexpr int kChainStreams = 4;

  // What a device's scratch pool keeps of freed memory at a synchronization
  // instead of giving it back: the scratch of a step's fingerprints (1/16 of
  // their bytes, a few chains at a time) without holding GiBs for good.
  static constexpr uint64_t kPoolKeeps = uint64_t{256} << 20;

  // A device's chain streams and scratch pool. The pool reuses memory only
  // once its release has completed (no reuse that would make the tensor's
  // stream wait for an earlier chain) and keeps up to kPoolKeeps between
  // steps.
  struct DeviceSide {
    std::vector<cudaStream_t> chains;
    cudaMemPool_t pool = nullptr;
    size_t next = 0;
  };

  // The reads on the tensor's stream, the chain on the device's next chain
  // stream (made by AddBlock, which TakeSlot has called).
  FingerprintStreams StreamsFor(const Placement& where) {
    DeviceSide& side = sides_.at(where.device);
    FingerprintStreams streams;
    streams.reads = static_cast<CUstream_st*>(where.stream);
    streams.chain = side.chains[side.next++ % side.chains.size()];
    streams.pool = side.pool;
    return streams;
  }

  // Called with `device` current: the kernels, the chain streams, the pool.
  Status PrepareDevice(int device) {
    DGRR_RETURN_IF_ERROR(LoadDeviceFingerprintKernels());
    DeviceSide side;
    for (int i = 0; i < kChainStreams; ++i) {
      cudaStream_t chain = nullptr;
      if (cudaError_t err = cudaStreamCreateWithFlags(&chain, cudaStreamNonBlocking); err != cudaSuccess) {
        for (cudaStream_t made : side.chains) cudaStreamDestroy(made);
        return CudaError("cudaStreamCreateWithFlags", err);
      }
      side.chains.push_back(chain);
    }
    // Where the pool cannot be made as wanted, the device's default pool
    // serves (correct; an allocation may then wait for an earlier chain).
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaError_t err = cudaMemPoolCreate(&side.pool, &props);
    int no = 0;
    uint64_t keep = kPoolKeeps;
    if (err == cudaSuccess) err = cudaMemPoolSetAttribute(side.pool, cudaMemPoolReuseAllowInternalDependencies, &no);
    if (err == cudaSuccess) err = cudaMemPoolSetAttribute(side.pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (err != cudaSuccess) {
      if (side.pool != nullptr) cudaMemPoolDestroy(side.pool);
      side.pool = nullptr;
      cudaGetLastError();  // not sticky; cleared so that no later call reports it
    }
    sides_.emplace(device, std::move(side));
    return Status::OK();
  }

  // After the work is enqueued: the event behind it, and the ticket.
  StatusOr<Ticket> Issue(const Slot& slot, CUstream_st* stream, Status enqueued) {
    if (enqueued.ok()) {
      if (cudaError_t err = cudaEventRecord(slot.done, stream); err != cudaSuccess) {
        enqueued = CudaError("cudaEventRecord", err);
      }
    }
    if (!enqueued.ok()) {
      free_[slot.device].push_back(slot);
      return enqueued;
    }
    const Ticket ticket = next_ticket_++;
    in_flight_.emplace(ticket, slot);
    return ticket;
  }

  // A pinned table of at least `words` words for the slot. A smaller one is
  // kept until the end (cudaFreeHost may synchronize the device).
  Status StageTable(Slot* slot, size_t words) {
    if (slot->table_words >= words) return Status::OK();
    void* table = nullptr;
    const size_t grown = std::max(words, 2 * slot->table_words);
    if (cudaError_t err = cudaHostAlloc(&table, grown * sizeof(uint64_t), cudaHostAllocDefault); err != cudaSuccess) {
      return CudaError("cudaHostAlloc of a segment table", err);
    }
    pinned_tables_.push_back(table);
    slot->table = static_cast<uint64_t*>(table);
    slot->table_words = grown;
    return Status::OK();
  }

  Status Copy(void* dst, const void* src, uint64_t bytes, const Placement& where, cudaMemcpyKind kind) {
    if (where.kind != Placement::Kind::kCuda) {
      return Status::InvalidArgument("device copy on " + where.ToString() + ": not CUDA memory");
    }
    if (bytes == 0) return Status::OK();
    DeviceScope scope;
    DGRR_RETURN_IF_ERROR(scope.Enter(where.device));
    auto* stream = static_cast<CUstream_st*>(where.stream);
    if (cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, stream); err != cudaSuccess) {
      return CudaError("cudaMemcpyAsync", err);
    }
    if (cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return CudaError("cudaStreamSynchronize after a copy", err);
    }
    return Status::OK();
  }

  StatusOr<Slot> TakeSlot(int device) {
    std::vector<Slot>& slots = free_[device];
    if (slots.empty()) DGRR_RETURN_IF_ERROR(AddBlock(device, &slots));
    const Slot slot = slots.back();
    slots.pop_back();
    return slot;
  }

  // Called with `device` current: events belong to the device they are made on.
  // The first block of a device also prepares the device (PrepareDevice).
  Status AddBlock(int device, std::vector<Slot>* slots) {
    if (!sides_.contains(device)) DGRR_RETURN_IF_ERROR(PrepareDevice(device));
    void* block = nullptr;
    if (cudaError_t err = cudaHostAlloc(&block, kSlotsPerBlock * sizeof(Fingerprint), cudaHostAllocDefault);
        err != cudaSuccess) {
      return CudaError("cudaHostAlloc", err);
    }
    pinned_blocks_.push_back(static_cast<Fingerprint*>(block));
    for (int i = 0; i < kSlotsPerBlock; ++i) {
      Slot s;
      s.result = static_cast<Fingerprint*>(block) + i;
      s.device = device;
      if (cudaError_t err = cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming); err != cudaSuccess) {
        return CudaError("cudaEventCreateWithFlags", err);
      }
      slots->push_back(s);
    }
    return Status::OK();
  }

  StatusOr<Slot> Find(Ticket ticket) const {
    auto it = in_flight_.find(ticket);
    if (it == in_flight_.end()) {
      return Status::InvalidArgument("device fingerprint: ticket " + std::to_string(ticket) +
                                     " is not in flight (never issued, or already collected)");
    }
    return it->second;
  }

  Fingerprint Collect(Ticket ticket, const Slot& slot) {
    const Fingerprint value = *slot.result;
    in_flight_.erase(ticket);
    free_[slot.device].push_back(slot);
    return value;
  }

  std::vector<Fingerprint*> pinned_blocks_;
  std::vector<void*> pinned_tables_;
  std::unordered_map<int, std::vector<Slot>> free_;  // by device
  std::unordered_map<Ticket, Slot> in_flight_;
  std::unordered_map<int, DeviceSide> sides_;  // by device
  Ticket next_ticket_ = 1;
};

}  // namespace

StatusOr<std::unique_ptr<AsyncFingerprinter>> MakeCudaFingerprinter() {
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0) {
    return Status::FailedPrecondition(std::string("no CUDA device to fingerprint device tensors on") +
                                      (err != cudaSuccess ? std::string(": ") + cudaGetErrorString(err) : ""));
  }
  auto made = std::make_unique<CudaFingerprinter>();
  DGRR_RETURN_IF_ERROR(made->Prepare());
  return std::unique_ptr<AsyncFingerprinter>(std::move(made));
}

#else

StatusOr<std::unique_ptr<AsyncFingerprinter>> MakeCudaFingerprinter() {
  return Status::FailedPrecondition("dgrr was built without CUDA: device tensors cannot be fingerprinted");
}

#endif

}  // namespace dgrr
