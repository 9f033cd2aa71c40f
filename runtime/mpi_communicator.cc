#include "runtime/mpi_communicator.h"

#include "base/environment.h"
#include "runtime/launch_record.h"

#include <mpi.h>

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dgrr {

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  // Departures (see the header): a second duplicate of the world, so they
  // never match a collective's messages, and the receive kept posted for
  // the next one, from any rank.
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Request departure = MPI_REQUEST_NULL;
  uint64_t departure_count = 0;  // what the posted receive fills in
};

namespace {

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length));
}

Status Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::Internal(std::string(call) + " failed: " + MpiError(rc));
}

Status RefuseDevice(const Placement& where, const char* what) {
  if (where.host()) return Status::OK();
  return Status::FailedPrecondition(std::string(what) + ": the MPI communicator moves host memory only (device " +
                                    std::to_string(where.device) + " given; device buffers need the NCCL backend)");
}

// MPI counts and displacements are int.
Status FitsInt(size_t bytes, const char* what) {
  if (bytes <= static_cast<size_t>(INT_MAX)) return Status::OK();
  return Status::InvalidArgument(std::string(what) + ": " + std::to_string(bytes) +
                                 " bytes exceed MPI's int count limit (" + std::to_string(INT_MAX) + ")");
}

Status ToInts(std::span<const size_t> values, const char* what, std::vector<int>* out) {
  out->clear();
  for (size_t v : values) {
    DGRR_RETURN_IF_ERROR(FitsInt(v, what));
    out->push_back(static_cast<int>(v));
  }
  return Status::OK();
}

std::string Ordinal(uint64_t n) {
  const uint64_t last_two = n % 100, last = n % 10;
  const char* suffix = (last_two >= 11 && last_two <= 13) ? "th"
                       : last == 1                        ? "st"
                       : last == 2                        ? "nd"
                       : last == 3                        ? "rd"
                                                          : "th";
  return std::to_string(n) + suffix;
}

bool IsDecimal(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  return std::strlen(s) <= 9;
}

// NAME_SIZE and NAME_RANK both present, decimal, rank < size.
Status CheckSizeAndRank(const std::function<const char*(const char*)>& getenv, const char* size_var,
                        const char* rank_var, const char* launcher) {
  const char* size = getenv(size_var);
  const char* rank = getenv(rank_var);
  if (!IsDecimal(size) || !IsDecimal(rank) || std::atoi(size) < 1 || std::atoi(rank) >= std::atoi(size)) {
    return Status::FailedPrecondition(std::string("incomplete ") + launcher + " launch environment: " + size_var +
                                      "=" + (size ? size : "(unset)") + ", " + rank_var + "=" +
                                      (rank ? rank : "(unset)") + " (start the ranks with mpirun -np R)");
  }
  return Status::OK();
}

}  // namespace

Status CheckMpiLauncherEnvironment(const std::function<const char*(const char*)>& getenv) {
  // The launchers and their variables: kMpiLaunchers (runtime/launch_record.h).
  const MpiLauncher& openmpi = kOpenMpiLauncher;
  const MpiLauncher& pmix = kPmixLauncher;
  const MpiLauncher& pmi = kPmiLauncher;
  const bool by_openmpi = MpiLauncherPresent(openmpi, getenv);
  const bool by_pmix = MpiLauncherPresent(pmix, getenv);
  const bool by_pmi = MpiLauncherPresent(pmi, getenv);
  if (!by_openmpi && !by_pmix && !by_pmi) {
    std::string markers;
    for (const MpiLauncher& l : kMpiLaunchers) markers += std::string(markers.empty() ? "" : ", ") + l.marker();
    return Status::FailedPrecondition("not started by an MPI launcher (none of " + markers +
                                      " is set): run under mpirun -np R, or use in-process ranks");
  }
  if (by_openmpi) DGRR_RETURN_IF_ERROR(CheckSizeAndRank(getenv, openmpi.size_var, openmpi.rank_var, openmpi.name));
  if (by_openmpi || by_pmix) {
    // Open MPI's mpirun always hands its ranks a PMIx server; without one,
    // MPI_Init would try to reach a launcher that is not there.
    const char* rank = getenv(pmix.rank_var);
    const char* space = getenv(pmix.other_var);
    if (!IsDecimal(rank) || space == nullptr) {
      return Status::FailedPrecondition(std::string("incomplete MPI launch environment: ") + pmix.rank_var + "=" +
                                        (rank ? rank : "(unset)") + ", " + pmix.other_var + " " +
                                        (space ? "set" : "unset") + " (start the ranks with mpirun -np R)");
    }
    if (by_openmpi && std::string(rank) != getenv(openmpi.rank_var)) {
      return Status::FailedPrecondition(std::string("inconsistent MPI launch environment: ") + pmix.rank_var + "=" +
                                        rank + ", " + openmpi.rank_var + "=" + getenv(openmpi.rank_var));
    }
    return Status::OK();
  }
  return CheckSizeAndRank(getenv, pmi.size_var, pmi.rank_var, pmi.name);
}

StatusOr<std::unique_ptr<MpiCommunicator>> OpenMpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::FailedPrecondition("MPI has already been finalized in this process: it cannot be opened again");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool owns_mpi = false;
  if (!initialized) {
    DGRR_RETURN_IF_ERROR(CheckMpiLauncherEnvironment([](const char* name) {
      // The variable's string outlives the lock: setenv of others never frees it.
      auto lock = LockEnvironment();
      return static_cast<const char*>(std::getenv(name));
    }));
    int provided = MPI_THREAD_SINGLE;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return Status::Internal("MPI_Init_thread failed: " + MpiError(rc));
    owns_mpi = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      return Status::FailedPrecondition("this MPI library does not support MPI_THREAD_SERIALIZED (provided level " +
                                        std::to_string(provided) + ")");
    }
  } else {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      return Status::FailedPrecondition(
          "MPI was initialized by the program below MPI_THREAD_SERIALIZED (level " + std::to_string(provided) +
          "); dgrr needs collectives from any one thread at a time");
    }
  }
  auto handle = std::make_unique<MpiCommunicator::Handle>();
  // Errors come back as return codes on our own duplicates of the world, so
  // dgrr's collectives never match messages of the program's own.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Status s = Check(MPI_Comm_dup(MPI_COMM_WORLD, &handle->comm), "MPI_Comm_dup");
  if (s.ok()) s = Check(MPI_Comm_set_errhandler(handle->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (s.ok()) s = Check(MPI_Comm_dup(handle->comm, &handle->control), "MPI_Comm_dup");
  int rank = 0, size = 1;
  if (s.ok()) s = Check(MPI_Comm_rank(handle->comm, &rank), "MPI_Comm_rank");
  if (s.ok()) s = Check(MPI_Comm_size(handle->comm, &size), "MPI_Comm_size");
  if (s.ok()) s = MpiCommunicator::PostDepartureReceive(*handle);
  if (!s.ok()) {
    if (owns_mpi) MPI_Finalize();
    return s;
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(handle), rank, size, owns_mpi));
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle, int rank, int size, bool owns_mpi)
    : handle_(std::move(handle)), rank_(rank), size_(size), owns_mpi_(owns_mpi),
      departed_after_(static_cast<size_t>(size), kStillHere) {}

MpiCommunicator::~MpiCommunicator() {
  if (handle_->comm != MPI_COMM_NULL) {
    AnnounceDeparture();
    AwaitTheOthersDeparture();
    if (handle_->departure != MPI_REQUEST_NULL) {
      MPI_Cancel(&handle_->departure);
      MPI_Wait(&handle_->departure, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&handle_->control);
    // A collective left waiting for a departed rank is still pending on
    // comm: freeing it, or finalizing, could wait for that rank forever.
    // The process is on its way out (the error ends the job), so leave both.
    if (stranded_.ok()) MPI_Comm_free(&handle_->comm);
  }
  if (owns_mpi_ && stranded_.ok()) MPI_Finalize();
}

// A departure is the count of collectives the departing rank completed, sent
// to every other rank. Eight bytes go eagerly in every Open MPI transport,
// so the sends complete whether or not the receivers still listen.
void MpiCommunicator::AnnounceDeparture() {
  uint64_t completed = collectives_;
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&completed, 1, MPI_UINT64_T, r, kDepartureTag, handle_->control, &request) == MPI_SUCCESS) {
      sends.push_back(request);
    }
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
}

// Waits here, not in MPI_Finalize, until every other rank has left too: at
// the normal end that is what MPI_Finalize would wait for anyway, and when
// this rank left early a stranded rank aborts the job while this one polls
// (Open MPI 4.1's mpirun sometimes hangs or crashes when ranks abort while
// another is inside MPI_Finalize).
void MpiCommunicator::AwaitTheOthersDeparture() {
  for (;;) {
    if (!CheckDepartures(0, "close").ok()) return;  // an MPI error: nothing more to wait for
    bool all_left = true;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && departed_after_[static_cast<size_t>(r)] == kStillHere) all_left = false;
    }
    if (all_left) return;
    sched_yield();
  }
}

Status MpiCommunicator::PostDepartureReceive(Handle& handle) {
  return Check(MPI_Irecv(&handle.departure_count, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kDepartureTag,
                         handle.control, &handle.departure),
               "MPI_Irecv");
}

// The departures that have arrived, and whether one of them strands
// collective number `number` (1-based): a rank that completed fewer
// collectives before it left will never join this one.
Status MpiCommunicator::CheckDepartures(uint64_t number, const char* call) {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    DGRR_RETURN_IF_ERROR(Check(MPI_Test(&handle_->departure, &arrived, &status), "MPI_Test"));
    if (!arrived) break;
    if (status.MPI_SOURCE >= 0 && status.MPI_SOURCE < size_) {
      departed_after_[static_cast<size_t>(status.MPI_SOURCE)] = handle_->departure_count;
    }
    DGRR_RETURN_IF_ERROR(PostDepartureReceive(*handle_));
  }
  for (int r = 0; r < size_; ++r) {
    const uint64_t completed = departed_after_[static_cast<size_t>(r)];
    if (completed != kStillHere && completed < number) {
      return Status::FailedPrecondition(
          "rank " + std::to_string(r) + " left the job (closed its communicator: its process is exiting) after " +
          std::to_string(completed) + " collectives, while rank " + std::to_string(rank_) + " waits for it in its " +
          Ordinal(number) + " (" + call + ")");
    }
  }
  return Status::OK();
}

// Waits for a collective this rank started, watching for departures while
// it does: MPI's blocking collectives would wait forever for a rank that
// exited (mpirun ends a job for a rank that dies or aborts, not for one that
// exits normally). The loop tests, as MPI's own blocking wait polls, and
// yields the core between tests for an oversubscribed machine.
Status MpiCommunicator::Complete(int started, void* pending, const char* call) {
  DGRR_RETURN_IF_ERROR(Check(started, call));
  auto* request = static_cast<MPI_Request*>(pending);
  const uint64_t number = collectives_ + 1;
  for (;;) {
    int done = 0;
    DGRR_RETURN_IF_ERROR(Check(MPI_Test(request, &done, MPI_STATUS_IGNORE), call));
    if (done) {
      collectives_ = number;
      return Status::OK();
    }
    Status gone = CheckDepartures(number, call);
    if (!gone.ok()) {
      stranded_ = gone;
      return gone;
    }
    sched_yield();
  }
}

Status MpiCommunicator::Usable() const { return stranded_; }

Status MpiCommunicator::Barrier() {
  DGRR_RETURN_IF_ERROR(Usable());
  MPI_Request request = MPI_REQUEST_NULL;
  return Complete(MPI_Ibarrier(handle_->comm, &request), &request, "MPI_Barrier");
}

Status MpiCommunicator::Broadcast(void* data, size_t count, int root, const Placement& where) {
  DGRR_RETURN_IF_ERROR(RefuseDevice(where, "Broadcast"));
  DGRR_RETURN_IF_ERROR(FitsInt(count, "Broadcast"));
  if (root < 0 || root >= size_) return Status::InvalidArgument("Broadcast: root " + std::to_string(root));
  DGRR_RETURN_IF_ERROR(Usable());
  MPI_Request request = MPI_REQUEST_NULL;
  return Complete(MPI_Ibcast(data, static_cast<int>(count), MPI_BYTE, root, handle_->comm, &request), &request,
                  "MPI_Bcast");
}

Status MpiCommunicator::AllGather(const void* mine, size_t count, void* out, const Placement& where) {
  DGRR_RETURN_IF_ERROR(RefuseDevice(where, "AllGather"));
  // The receive side's last displacement is (size - 1) * count.
  DGRR_RETURN_IF_ERROR(FitsInt(count * static_cast<size_t>(size_), "AllGather"));
  DGRR_RETURN_IF_ERROR(Usable());
  MPI_Request request = MPI_REQUEST_NULL;
  return Complete(MPI_Iallgather(mine, static_cast<int>(count), MPI_BYTE, out, static_cast<int>(count), MPI_BYTE,
                                 handle_->comm, &request),
                  &request, "MPI_Allgather");
}

Status MpiCommunicator::AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                                   const Placement& where) {
  DGRR_RETURN_IF_ERROR(RefuseDevice(where, "AllGatherV"));
  DGRR_RETURN_IF_ERROR(CheckRankArrays(*this, counts, {}, "AllGatherV"));
  std::vector<size_t> offsets(counts.size());
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = at;
    at += counts[r];
  }
  DGRR_RETURN_IF_ERROR(FitsInt(at, "AllGatherV"));
  std::vector<int> icounts, ioffsets;
  DGRR_RETURN_IF_ERROR(ToInts(counts, "AllGatherV", &icounts));
  DGRR_RETURN_IF_ERROR(ToInts(offsets, "AllGatherV", &ioffsets));
  const int my_count = icounts[static_cast<size_t>(rank_)];
  DGRR_RETURN_IF_ERROR(Usable());
  MPI_Request request = MPI_REQUEST_NULL;
  return Complete(MPI_Iallgatherv(mine, my_count, MPI_BYTE, out, icounts.data(), ioffsets.data(), MPI_BYTE,
                                  handle_->comm, &request),
                  &request, "MPI_Allgatherv");
}

Status MpiCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                  std::span<const size_t> send_offsets, void* recv,
                                  std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                                  const Placement& where) {
  DGRR_RETURN_IF_ERROR(RefuseDevice(where, "AllToAllV"));
  DGRR_RETURN_IF_ERROR(CheckRankArrays(*this, send_counts, send_offsets, "AllToAllV send"));
  DGRR_RETURN_IF_ERROR(CheckRankArrays(*this, recv_counts, recv_offsets, "AllToAllV receive"));
  std::vector<int> sc, so, rc, ro;
  DGRR_RETURN_IF_ERROR(ToInts(send_counts, "AllToAllV send", &sc));
  DGRR_RETURN_IF_ERROR(ToInts(send_offsets, "AllToAllV send", &so));
  DGRR_RETURN_IF_ERROR(ToInts(recv_counts, "AllToAllV receive", &rc));
  DGRR_RETURN_IF_ERROR(ToInts(recv_offsets, "AllToAllV receive", &ro));
  DGRR_RETURN_IF_ERROR(Usable());
  MPI_Request request = MPI_REQUEST_NULL;
  return Complete(MPI_Ialltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE,
                                 handle_->comm, &request),
                  &request, "MPI_Alltoallv");
}

void MpiCommunicator::Abort(const Status& why) {
  std::fprintf(stderr, "dgrr: rank %d aborts the MPI job: %s\n", rank_, why.ToString().c_str());
  std::fflush(stderr);
  const int code = std::max(1, ExitCodeFor(why));  // an abort is never a success
  MPI_Abort(handle_->comm != MPI_COMM_NULL ? handle_->comm : MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace dgrr
