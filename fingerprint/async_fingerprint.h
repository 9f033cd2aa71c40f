// AsyncFingerprinter: fingerprints of device tensors that are enqueued on the
// tensor's own stream and collected later, so that recording a boundary never
// makes the host wait for the device.
//
//   auto fp = MakeCudaFingerprinter();                 // or a test's fake
//   auto ticket = (*fp)->Enqueue(tensor);              // returns at once
//   ...                                                // the host goes on
//   auto ready = (*fp)->Poll(*ticket);                 // nullopt until the stream got there
//   auto value = (*fp)->Wait(*ticket);                 // blocks: only where the trace must be whole
//
// Each ticket's result is collected once (by Poll returning a value, or by
// Wait); after that the ticket is unknown. The session (runtime/session.h)
// keeps its records in program order around the tickets.
//
// It is the session's whole window on a device: besides tensors, it
// fingerprints a list of buffers as one stream (the parameters, for the STEP
// record and the SDC check) and copies device memory to and from the host
// (checkpoints, dumps). Tests substitute a fake device for all of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "fingerprint/tensor.h"

namespace dgrr {

class AsyncFingerprinter {
 public:
  using Ticket = uint64_t;

  virtual ~AsyncFingerprinter() = default;

  // Enqueues the fingerprint of `tensor`'s bytes on tensor.where.stream and
  // returns without waiting. The result equals FingerprintBytes over the same
  // bytes. InvalidArgument for a tensor this fingerprinter cannot read (a
  // host tensor, another kind of device).
  virtual StatusOr<Ticket> Enqueue(const TensorRef& tensor) = 0;
  // Never blocks: the result once the stream has reached it, nullopt before.
  virtual StatusOr<std::optional<Fingerprint>> Poll(Ticket ticket) = 0;
  // Blocks until the result is there.
  virtual StatusOr<Fingerprint> Wait(Ticket ticket) = 0;

  // Enqueues ONE fingerprint over the concatenation of `segments` (device
  // memory of where.device, any lengths, empty ones included) on
  // where.stream and returns without waiting: the result equals
  // FingerprintSegments over the same bytes, i.e. FingerprintBytes of them
  // copied together. The list is copied; the memory is read when the stream
  // gets there. InvalidArgument for host placement.
  virtual StatusOr<Ticket> EnqueueSegments(std::span<const MemorySegment> segments, const Placement& where) = 0;
  // Copies `bytes` bytes of device memory at `src` (on where.device) to the
  // host memory at `dst`, in order on where.stream (behind the work queued
  // there), and waits for that copy: the one wait is the caller's choice
  // (a checkpoint, a dump), never the recording path's.
  virtual Status CopyToHost(const void* src, uint64_t bytes, const Placement& where, void* dst) = 0;
  // Copies `bytes` bytes of host memory at `src` to device memory at `dst`,
  // in order on where.stream, and waits for the copy (the host buffer may go).
  virtual Status CopyToDevice(const void* src, uint64_t bytes, const Placement& where, void* dst) = 0;
};

// Fingerprints CUDA tensors with dgrr's kernel (fingerprint_cuda.h): one
// kernel launch and one 16-byte copy into pinned host memory per tensor, an
// event recorded behind them; Poll queries the event, Wait synchronizes on
// it. The tensor's device is made current for the enqueue and restored after.
// Segment lists go the same way, their table through pinned memory kept with
// the ticket (FingerprintSegmentsDeviceAsync); copies are cudaMemcpyAsync on
// the stream followed by cudaStreamSynchronize.
// FailedPrecondition when dgrr was built without CUDA, or no device is there.
StatusOr<std::unique_ptr<AsyncFingerprinter>> MakeCudaFingerprinter();

}  // namespace dgrr
