#include "model/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace dgrr::model {

IndexRange StaticPartition(size_t n, int num_threads, int worker) {
  const size_t t = static_cast<size_t>(num_threads), w = static_cast<size_t>(worker);
  return {w * n / t, (w + 1) * n / t};
}

void ParallelFor(size_t n, int num_threads,
                 const std::function<void(size_t index, int worker)>& fn) {
  const int workers = static_cast<int>(std::max<size_t>(1, std::min<size_t>(n, std::max(1, num_threads))));
  auto run = [&](int worker) {
    const IndexRange range = StaticPartition(n, workers, worker);
    for (size_t i = range.begin; i < range.end; ++i) fn(i, worker);
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (int w = 1; w < workers; ++w) threads.emplace_back(run, w);
  run(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace dgrr::model
