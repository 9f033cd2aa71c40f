// CanonicalAllReduce against MPI_Allreduce(MPI_SUM) on the same gradient
// sizes, in the same run, under `mpirun -np R` (bench/collective/run.sh runs
// R = 1, 2, 4). A batch of 8 examples is split over the ranks as the trainer
// splits it; both sides start from the rank's per-example buffers, so both
// include the rank's local sum of its shard:
//   canonical: CanonicalAllReduce (local canonical nodes, one AllToAllV of
//              node slices, tree combine of a slice, one AllGatherV);
//   baseline:  local left-to-right sum of the shard, then MPI_Allreduce
//              (Open MPI picks the algorithm; its bits may vary with R).
// Each figure is the median of timed iterations, each bracketed by barriers,
// as rank 0 sees it. Prints one line per size.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/canonical_reduce.h"
#include "runtime/mpi_communicator.h"

namespace {

constexpr uint64_t kBatch = 8;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimeMedianSeconds(dgrr::Communicator& comm, int iterations, F&& op) {
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    (void)comm.Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    (void)comm.Barrier();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(times);
}

}  // namespace

int main() {
  auto opened = dgrr::OpenMpiCommunicator();
  if (!opened.ok()) {
    std::fprintf(stderr, "collective_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  dgrr::Communicator& comm = *opened.value();
  const int R = comm.size(), me = comm.rank();
  const uint64_t first = kBatch * static_cast<uint64_t>(me) / static_cast<uint64_t>(R);
  const uint64_t count = kBatch * static_cast<uint64_t>(me + 1) / static_cast<uint64_t>(R) - first;
  const int threads = 1;  // the ranks already share the machine's cores

  if (me == 0) {
    std::printf("%-10s %5s %14s %14s %8s\n", "gradient", "ranks", "canonical_ms", "allreduce_ms", "ratio");
  }
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{3460} << 10, size_t{16} << 20}) {
    const size_t n = bytes / sizeof(float);
    std::vector<std::vector<float>> pristine(count, std::vector<float>(n)), work = pristine;
    for (uint64_t i = 0; i < count; ++i) {
      for (size_t e = 0; e < n; ++e) pristine[i][e] = static_cast<float>((first + i) * 131 + e % 977) * 1e-3f;
    }
    std::vector<float*> ptrs;
    for (auto& b : work) ptrs.push_back(b.data());
    std::vector<float> out(n), local(n);
    const int iterations = bytes <= (size_t{1} << 20) ? 41 : 11;

    const double canonical = TimeMedianSeconds(comm, iterations, [&] {
      for (uint64_t i = 0; i < count; ++i) std::memcpy(work[i].data(), pristine[i].data(), bytes);
      dgrr::Status s = dgrr::CanonicalAllReduce(comm, ptrs, first, kBatch, n, out.data(), threads);
      if (!s.ok()) comm.Abort(s);
    });
    const double baseline = TimeMedianSeconds(comm, iterations, [&] {
      for (uint64_t i = 0; i < count; ++i) std::memcpy(work[i].data(), pristine[i].data(), bytes);
      std::fill(local.begin(), local.end(), 0.0f);
      for (uint64_t i = 0; i < count; ++i) {
        for (size_t e = 0; e < n; ++e) local[e] += work[i][e];
      }
      MPI_Allreduce(local.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    if (me == 0) {
      std::printf("%7.2f MiB %5d %14.3f %14.3f %8.2f\n", static_cast<double>(bytes) / (1 << 20), R, canonical * 1e3,
                  baseline * 1e3, canonical / baseline);
    }
  }
  return 0;
}
