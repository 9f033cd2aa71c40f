// MpiCommunicator: one rank per process, over MPI (Open MPI from Debian).
//
// Built as its own library, dgrr::mpi (runtime/CMakeLists.txt, when CMake
// finds MPI and DGRR_ENABLE_MPI is on; it defines DGRR_HAVE_MPI=1 for what
// links it), so programs that never use MPI never link it. This header does
// not include <mpi.h>.
//
// Every collective is an MPI_BYTE collective on a duplicate of
// MPI_COMM_WORLD: MPI moves bytes and never adds them, so no result depends
// on Open MPI's algorithm, protocol or tuning (docs/communicator.md).
//
// Limits: MPI counts and displacements are `int`, so a single count, and any
// offset of a V-collective, above INT_MAX bytes (2 GiB - 1) is refused with
// InvalidArgument, before MPI is called; nothing is chunked.
//
// Failures: MPI errors are returned as a Status (the communicator uses
// MPI_ERRORS_RETURN) carrying MPI_Error_string. Abort() prints one line and
// calls MPI_Abort, which ends the whole job: no surviving rank waits for the
// failed one. A rank that leaves without an error (its process exits
// normally, after sys.exit(1) in Python, say) announces it when its
// communicator is destroyed, with the number of collectives it completed; a
// rank waiting for it in a later collective gets FailedPrecondition naming
// it instead of waiting forever, and the communicator is unusable after
// that (the collective stays pending: the caller's error should end the
// job, as dgrr's callers do through Abort). Host memory only: device placements are refused
// (FailedPrecondition) and left to a device backend (NCCL).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/communicator.h"

namespace dgrr {

class MpiCommunicator final : public Communicator {
 public:
  ~MpiCommunicator() override;  // frees the communicator; MPI_Finalize if it initialized MPI
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

  Status Barrier() override;
  Status Broadcast(void* data, size_t count, int root, const Placement& where = {}) override;
  Status AllGather(const void* mine, size_t count, void* out, const Placement& where = {}) override;
  Status AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                    const Placement& where = {}) override;
  Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, const Placement& where = {}) override;
  // Prints "dgrr: rank R aborts the MPI job: <why>" and calls MPI_Abort with
  // the CLI's exit code for why (ExitCodeFor, base/status.h; never 0 here);
  // mpirun then ends every rank.
  [[noreturn]] void Abort(const Status& why) override;

 private:
  friend StatusOr<std::unique_ptr<MpiCommunicator>> OpenMpiCommunicator();
  struct Handle;  // the MPI_Comm, kept out of this header
  MpiCommunicator(std::unique_ptr<Handle> handle, int rank, int size, bool owns_mpi);

  static constexpr int kDepartureTag = 1;
  static constexpr uint64_t kStillHere = ~uint64_t{0};
  static Status PostDepartureReceive(Handle& handle);
  void AnnounceDeparture();
  void AwaitTheOthersDeparture();
  Status CheckDepartures(uint64_t number, const char* call);
  // Waits for the collective `started` (an MPI_I* return code) began.
  Status Complete(int started, void* request, const char* call);
  Status Usable() const;

  std::unique_ptr<Handle> handle_;
  int rank_ = 0;
  int size_ = 1;
  bool owns_mpi_ = false;  // this communicator called MPI_Init_thread
  uint64_t collectives_ = 0;              // completed by this rank
  std::vector<uint64_t> departed_after_;  // per rank: collectives it completed before leaving
  Status stranded_;                       // a collective left waiting for a departed rank
};

// Which launcher started this process, from its environment: OK when it
// looks like a complete launch by mpirun/orterun (OMPI_COMM_WORLD_SIZE and
// _RANK, PMIX_NAMESPACE and PMIX_RANK), by a PMIx launcher (srun --mpi=pmix:
// PMIX_NAMESPACE, PMIX_RANK) or by a PMI-2 launcher (PMI_SIZE, PMI_RANK);
// FailedPrecondition naming the problem when there is no launcher, or when
// some variables are there and others missing or inconsistent. `getenv` is
// a parameter so tests can give any environment.
Status CheckMpiLauncherEnvironment(const std::function<const char*(const char*)>& getenv);

// Opens the MPI communicator of this process. A process not started by an
// MPI launcher gets FailedPrecondition (no singleton world: "dgrr train
// --ranks R" is the single-process path), as does a launcher environment that
// is incomplete; both are checked before MPI is touched, so they never hang.
// Initializes MPI with MPI_THREAD_SERIALIZED (collectives may come from any
// one thread at a time) and refuses a library that cannot give it; when the
// program has initialized MPI itself, uses it and leaves finalizing to it.
// One communicator per process: MPI cannot be initialized twice.
StatusOr<std::unique_ptr<MpiCommunicator>> OpenMpiCommunicator();

}  // namespace dgrr
