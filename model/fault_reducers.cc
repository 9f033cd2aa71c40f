#include "model/fault_reducers.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

namespace dgrr::model {
namespace {

// Every example's values [lo, hi) of the batch, in example order, on every
// rank: the ranks' equal shards (the trainer's Validate: the batch divides by
// the ranks) packed and all-gathered.
Status GatherExampleRange(Communicator& comm, std::span<float* const> shard, size_t lo, size_t hi,
                          std::vector<float>* all) {
  const size_t n = hi - lo;
  std::vector<float> mine(shard.size() * n);
  for (size_t i = 0; i < shard.size(); ++i) {
    std::memcpy(mine.data() + i * n, shard[i] + lo, n * sizeof(float));
  }
  all->assign(mine.size() * static_cast<size_t>(comm.size()), 0.0f);
  return comm.AllGather(mine.data(), mine.size() * sizeof(float), all->data());
}

}  // namespace

Status ReduceInExampleOrder(Communicator& comm, std::span<float* const> shard, size_t n, uint64_t batch,
                            float* out) {
  std::vector<float> all;
  DGRR_RETURN_IF_ERROR(GatherExampleRange(comm, shard, 0, n, &all));
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), out);
  for (uint64_t e = 1; e < batch; ++e) {
    const float* g = all.data() + e * n;
    for (size_t k = 0; k < n; ++k) out[k] += g[k];
  }
  return Status::OK();
}

Status RacyReduceRange(Communicator& comm, std::span<float* const> shard, size_t offset, size_t count,
                       uint64_t batch, int threads, std::vector<float>* sum) {
  const size_t n = count;  // values per example in `all`
  std::vector<float> all;
  DGRR_RETURN_IF_ERROR(GatherExampleRange(comm, shard, offset, offset + n, &all));
  std::vector<float>& acc = *sum;
  acc.assign(n, 0.0f);
  if (comm.rank() == 0) {
    std::mutex mu;
    std::atomic<uint64_t> next{0};
    std::vector<std::thread> racers;
    std::random_device entropy;
    std::vector<unsigned> jitter_seeds(static_cast<size_t>(std::max(2, threads)));
    for (unsigned& s : jitter_seeds) s = entropy();
    auto race_worker = [&](unsigned seed) {
      std::minstd_rand jitter(seed);
      for (uint64_t e; (e = next.fetch_add(1)) < batch;) {
        std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 200));
        std::lock_guard<std::mutex> lock(mu);
        for (size_t k = 0; k < n; ++k) acc[k] += all[e * n + k];
      }
    };
    for (unsigned seed : jitter_seeds) {
      try {
        racers.emplace_back(race_worker, seed);
      } catch (const std::system_error&) {
        break;  // fewer racers still race; this thread joins in below
      }
    }
    race_worker(jitter_seeds[0]);
    for (auto& th : racers) th.join();
  }
  return comm.Broadcast(acc.data(), n * sizeof(float), 0);
}

}  // namespace dgrr::model
