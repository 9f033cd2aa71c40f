// The MPI communicator and the canonical reduction over processes: run by
// CTest as `mpirun -np N mpi_collectives` for N = 1, 2, 4. Every rank runs the
// same checks as the in-process tests (tests/runtime/collective_checks.h),
// the ranks agree on the outcome, and every rank exits 0 only when every
// check passed on every rank; each failure is one line on the rank that saw it.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/mpi_communicator.h"
#include "tests/runtime/collective_checks.h"

namespace dgrr {
namespace {

using namespace testing_collectives;

Status CheckBackendFacts(Communicator& c) {
  if (c.name() != "mpi") return Status::Internal("name is " + std::string(c.name()));
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (world != nullptr && std::atoi(world) != c.size()) {
    return Status::Internal("size " + std::to_string(c.size()) + ", mpirun started " + world);
  }
  Placement device;
  device.kind = Placement::Kind::kCuda;
  device.device = 0;
  uint8_t byte = 0;
  Status s = c.Broadcast(&byte, 1, 0, device);
  if (s.code() != StatusCode::kFailedPrecondition) return Status::Internal("device buffer gave " + s.ToString());
  // Above MPI's int counts: refused on every rank before MPI sees it.
  s = c.Broadcast(nullptr, size_t{1} << 31, 0);
  if (s.code() != StatusCode::kInvalidArgument) return Status::Internal("a 2 GiB broadcast gave " + s.ToString());
  return c.Barrier();
}

// `mpi_collectives --abort`: the last rank aborts while the others wait in a
// barrier for it; MPI must end the whole job (CTest checks the line and the
// exit, and its timeout would catch a hang).
int AbortTheJob(Communicator& c) {
  if (c.rank() == c.size() - 1) c.Abort(Status::IOError("rank " + std::to_string(c.rank()) + " lost its disk"));
  Status s = c.Barrier();
  std::fprintf(stderr, "rank %d: the barrier returned without the aborted rank: %s\n", c.rank(), s.ToString().c_str());
  return 0;
}

// `mpi_collectives --depart`: after one barrier the last rank closes its
// communicator and exits 0, as a Python rank does after sys.exit(0) before a
// collective the others enter. Their next barrier must not wait forever: it
// fails naming the rank that left, so does every later call, and each
// survivor then aborts with that error (CTest matches the line; its timeout
// would catch a hang).
int DepartFromTheJob(std::unique_ptr<MpiCommunicator> owned) {
  Communicator& c = *owned;
  const int leaver = c.size() - 1, me = c.rank();
  if (Status s = c.Barrier(); !s.ok()) {
    std::fprintf(stderr, "rank %d: first barrier: %s\n", me, s.ToString().c_str());
    return 1;
  }
  if (me == leaver) {
    owned.reset();  // announces the departure, then MPI_Finalize
    return 0;
  }
  Status stranded = c.Barrier();
  const std::string expected = "rank " + std::to_string(leaver) + " left the job";
  Status again = c.AllGather(&me, sizeof me, nullptr);
  if (stranded.code() != StatusCode::kFailedPrecondition ||
      stranded.message().find(expected) == std::string::npos ||
      stranded.message().find("after 1 collectives") == std::string::npos || again.ToString() != stranded.ToString()) {
    c.Abort(Status::Internal("rank " + std::to_string(me) + ": expected '" + expected + "' twice, got '" +
                             stranded.ToString() + "' then '" + again.ToString() + "'"));
  }
  c.Abort(stranded);
  return 1;  // not reached: Abort ends the job
}

int Run(const std::string& mode) {
  auto opened = OpenMpiCommunicator();
  if (!opened.ok()) {
    std::fprintf(stderr, "mpi_collectives: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  if (mode == "--depart") return DepartFromTheJob(std::move(opened).value());
  Communicator& c = *opened.value();
  if (mode == "--abort") return AbortTheJob(c);
  int failures = 0, checks = 0;
  auto run = [&](const std::string& what, Status s) {
    ++checks;
    if (!s.ok()) {
      ++failures;
      std::fprintf(stderr, "rank %d: %s: %s\n", c.rank(), what.c_str(), s.ToString().c_str());
    }
  };
  run("backend", CheckBackendFacts(c));
  run("Broadcast", CheckBroadcast(c));
  run("AllGather(V)", CheckAllGathers(c));
  run("AllToAllV", CheckAllToAllV(c));
  run("rounds", CheckRepeatedRounds(c));
  for (int threads : {1, 3}) {
    for (size_t n : {size_t{3}, size_t{37}, size_t{9000}}) {
      for (uint64_t total = 1; total <= 40; ++total) {
        if (n == 9000 && total % 7 != 0) continue;
        for (Cut cut : kAllCuts) {
          run("CanonicalAllReduce", CheckCanonicalAllReduce(c, total, cut, n, threads));
        }
      }
    }
  }
  for (uint64_t total = 1; total <= 40; ++total) {
    for (Cut cut : kAllCuts) run("GatherExampleScalars", CheckGatherExampleScalars(c, total, cut));
  }
  if (c.size() >= 2) run("bad shards", CheckBadShardsRefused(c));

  // Every rank reports the same verdict: the number of ranks that failed.
  std::vector<int> all(static_cast<size_t>(c.size()));
  const int mine = failures > 0 ? 1 : 0;
  if (Status s = c.AllGather(&mine, sizeof mine, all.data()); !s.ok()) {
    std::fprintf(stderr, "rank %d: verdict: %s\n", c.rank(), s.ToString().c_str());
    return 1;
  }
  int failed_ranks = 0;
  for (int f : all) failed_ranks += f;
  if (c.rank() == 0) {
    std::printf("mpi_collectives: %d ranks, %d checks each, %d ranks failed\n", c.size(), checks, failed_ranks);
  }
  return failed_ranks == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dgrr

int main(int argc, char** argv) { return dgrr::Run(argc > 1 ? argv[1] : ""); }
