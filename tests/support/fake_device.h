// A device for tests on machines without one, behind the interface the
// session uses for devices (AsyncFingerprinter: fingerprints of tensors and of
// segment lists, copies to and from the host).
//
// Its memory is a range of addresses the host cannot touch (reserved with
// PROT_NONE: any host read or write there faults and fails the test), whose
// bytes the fake keeps in a buffer of its own at the same offsets. So a test
// passes only if every access to device state goes through this interface.
// Work "on a stream" happens when it is enqueued, in order, as a stream runs
// it; a fingerprint is handed out by Poll once the test completes it (or at
// once with `complete_on_enqueue`); Wait completes it, as a device would.
// Not thread-safe: one per rank.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fingerprint/async_fingerprint.h"
#include "fingerprint/tensor.h"

namespace dgrr::test_support {

class FakeDevice final : public AsyncFingerprinter {
 public:
  explicit FakeDevice(size_t capacity = size_t{64} << 20) : capacity_(capacity) {
    void* range = ::mmap(nullptr, capacity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = range == MAP_FAILED ? nullptr : static_cast<uint8_t*>(range);
  }
  ~FakeDevice() override {
    if (base_ != nullptr) ::munmap(base_, capacity_);
  }
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  // `bytes` of device memory, starting `misalign` bytes past a 64-byte
  // boundary; null when the range is used up.
  void* Allocate(size_t bytes, size_t misalign = 0) {
    const size_t at = (used_ + 63) / 64 * 64 + misalign;
    if (base_ == nullptr || at + bytes > capacity_) return nullptr;
    used_ = at + bytes;
    if (backing_.size() < used_) backing_.resize(used_);
    return base_ + at;
  }
  void Upload(void* device, const void* host, size_t bytes) {
    if (bytes > 0) std::memcpy(Bytes(device, bytes), host, bytes);
  }
  void Download(const void* device, void* host, size_t bytes) {
    if (bytes > 0) std::memcpy(host, Bytes(device, bytes), bytes);
  }
  // A copy of a host tensor in device memory, on this device's stream.
  TensorRef Put(const TensorRef& host) {
    TensorRef t = host;
    void* device = Allocate(host.bytes);
    Upload(device, host.data, host.bytes);
    t.data = device;
    t.where = where();
    return t;
  }
  Placement where() const { return Placement::Cuda(0, stream_); }
  // The device's own view of its memory (a test's "kernel", a bit flip).
  uint8_t* Bytes(const void* device, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(device);
    if (base_ == nullptr || p < base_ || p + bytes > base_ + used_) return nullptr;
    return backing_.data() + (p - base_);
  }

  StatusOr<Ticket> Enqueue(const TensorRef& tensor) override {
    if (tensor.where.host()) return Status::InvalidArgument("fake device: host tensor");
    const uint8_t* bytes = Bytes(tensor.data, tensor.bytes);
    if (bytes == nullptr && tensor.bytes > 0) return Status::InvalidArgument("fake device: not its memory");
    return Issue(FingerprintBytes(bytes, tensor.bytes));
  }
  StatusOr<Ticket> EnqueueSegments(std::span<const MemorySegment> segments, const Placement& where) override {
    if (where.host()) return Status::InvalidArgument("fake device: host segments");
    std::vector<MemorySegment> mine;
    for (const MemorySegment& s : segments) {
      const uint8_t* bytes = Bytes(s.data, s.bytes);
      if (bytes == nullptr && s.bytes > 0) return Status::InvalidArgument("fake device: not its memory");
      mine.push_back({bytes, s.bytes});
    }
    ++segment_fingerprints;
    return Issue(FingerprintSegments(mine.data(), mine.size()));
  }
  StatusOr<std::optional<Fingerprint>> Poll(Ticket t) override {
    ++polls;
    auto it = results_.find(t);
    if (it == results_.end()) return Status::InvalidArgument("fake device: unknown ticket");
    if (!it->second.done) return std::optional<Fingerprint>();
    const Fingerprint fp = it->second.fp;
    results_.erase(it);
    return std::optional<Fingerprint>(fp);
  }
  StatusOr<Fingerprint> Wait(Ticket t) override {
    ++waits;
    auto it = results_.find(t);
    if (it == results_.end()) return Status::InvalidArgument("fake device: unknown ticket");
    const Fingerprint fp = it->second.fp;
    results_.erase(it);
    return fp;
  }
  Status CopyToHost(const void* src, uint64_t bytes, const Placement& where, void* dst) override {
    if (where.host()) return Status::InvalidArgument("fake device: a host copy");
    const uint8_t* from = Bytes(src, bytes);
    if (from == nullptr && bytes > 0) return Status::InvalidArgument("fake device: not its memory");
    ++copies_to_host;
    if (bytes > 0) std::memcpy(dst, from, bytes);
    return Status::OK();
  }
  Status CopyToDevice(const void* src, uint64_t bytes, const Placement& where, void* dst) override {
    if (where.host()) return Status::InvalidArgument("fake device: a host copy");
    uint8_t* to = Bytes(dst, bytes);
    if (to == nullptr && bytes > 0) return Status::InvalidArgument("fake device: not its memory");
    ++copies_to_device;
    if (bytes > 0) std::memcpy(to, src, bytes);
    return Status::OK();
  }

  void Complete(Ticket t) { results_.at(t).done = true; }
  void CompleteAll() {
    for (auto& [t, r] : results_) r.done = true;
  }
  size_t in_flight() const { return results_.size(); }

  bool complete_on_enqueue = false;
  int polls = 0;
  int waits = 0;
  int segment_fingerprints = 0;
  int copies_to_host = 0;
  int copies_to_device = 0;

 private:
  Ticket Issue(const Fingerprint& fp) {
    const Ticket t = next_++;
    results_[t] = {fp, complete_on_enqueue};
    return t;
  }

  struct Result {
    Fingerprint fp;
    bool done = false;
  };
  const size_t capacity_;
  uint8_t* base_ = nullptr;
  size_t used_ = 0;
  std::vector<uint8_t> backing_;
  void* stream_ = reinterpret_cast<void*>(uintptr_t{0x5ea});  // any non-null stream id
  std::map<Ticket, Result> results_;
  Ticket next_ = 1;
};

}  // namespace dgrr::test_support
