// Communicator: the collectives dgrr needs between ranks, on bytes.
//
// A communicator moves data and never adds it: no collective here has an
// operation argument, so no recorded value can depend on a library's
// reduction algorithm, protocol or ring order. Sums that must be exact are
// built on top (runtime/canonical_reduce.h) from data movement and dgrr's own
// canonical tree.
//
// Every rank of the group calls the same collectives in the same order (as
// with MPI). A collective either completes on every rank or fails; a rank
// that fails calls Abort() so that its peers get an error instead of waiting
// for it forever.
//
// Backends: InProcessCommunicator (ranks that are threads of one process,
// runtime/inprocess_communicator.h) and MpiCommunicator (one rank per
// process, runtime/mpi_communicator.h, built when Open MPI is found). Buffers
// carry a Placement: host memory everywhere; a device backend (NCCL) accepts
// device memory on a stream and the host backends refuse it
// (FailedPrecondition), so callers pass a tensor's placement through and never
// branch on the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/placement.h"
#include "base/status.h"

namespace dgrr {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The backend, for records and messages: "in-process", "mpi", "nccl".
  virtual std::string_view name() const = 0;

  // Returns once every rank has entered.
  virtual Status Barrier() = 0;

  // root's `count` bytes at `data` are copied to every rank's `data`.
  virtual Status Broadcast(void* data, size_t count, int root, const Placement& where = {}) = 0;

  // Every rank contributes `count` bytes; `out` receives size() * count bytes,
  // rank r's at r * count.
  virtual Status AllGather(const void* mine, size_t count, void* out, const Placement& where = {}) = 0;

  // Rank r contributes counts[r] bytes (every rank passes the same `counts`);
  // `out` receives them concatenated in rank order.
  virtual Status AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                            const Placement& where = {}) = 0;

  // Rank r sends send_counts[d] bytes from send + send_offsets[d] to each
  // rank d, and receives recv_counts[s] bytes from each rank s at recv +
  // recv_offsets[s]. What s sends to r must be what r expects from s.
  virtual Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                           std::span<const size_t> send_offsets, void* recv,
                           std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                           const Placement& where = {}) = 0;

  // This rank has failed with `why`: its pending and later collectives
  // return an error, and peers waiting on it get one too, as far as the
  // backend can tell them (MPI ends the job: see the backend).
  virtual void Abort(const Status& why) = 0;
};

// Checks shared by the backends: every count array has size() entries and
// the spans a rank reads or writes fit the offsets given.
Status CheckRankArrays(const Communicator& comm, std::span<const size_t> counts,
                       std::span<const size_t> offsets, const char* what);

}  // namespace dgrr
