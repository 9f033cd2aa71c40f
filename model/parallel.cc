#include "model/parallel.h"

#include <algorithm>
#include <exception>
#include <system_error>
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
  // One slot per worker: an exception thrown on a worker thread would
  // otherwise terminate the process; it is rethrown here, on the caller's.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(workers));
  auto run = [&](int worker) {
    try {
      const IndexRange range = StaticPartition(n, workers, worker);
      for (size_t i = range.begin; i < range.end; ++i) fn(i, worker);
    } catch (...) {
      errors[static_cast<size_t>(worker)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  int started = 1;
  for (; started < workers; ++started) {
    try {
      threads.emplace_back(run, started);
    } catch (const std::system_error&) {
      break;  // the system refused a thread: the caller's thread does the rest
    }
  }
  run(0);
  // A worker's block is computed whole by whoever runs it, so results do not
  // depend on how many threads the system granted.
  for (int w = started; w < workers; ++w) run(w);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dgrr::model
