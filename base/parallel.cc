#include "base/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace dgrr {

IndexRange StaticPartition(size_t n, int num_threads, int worker) {
  const size_t t = static_cast<size_t>(num_threads), w = static_cast<size_t>(worker);
  return {w * n / t, (w + 1) * n / t};
}

namespace {

// Worker threads kept across ParallelFor calls. Each calling thread owns its
// pools (thread_local, one per nesting depth), so in-process ranks, and a
// ParallelFor nested inside a worker, never share or wait on one another's
// workers. Workers only run the
// blocks they are given; which thread runs a block never changes a result.
class WorkerPool {
 public:
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Runs run(w) for w in [1, workers) on pool threads and w = 0 on the
  // caller; blocks the system refuses a thread for run on the caller too.
  void Run(int workers, const std::function<void(int)>& run) {
    const int helpers = Grow(workers - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &run;
      active_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    start_.notify_all();
    run(0);
    for (int w = helpers + 1; w < workers; ++w) run(w);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  // Makes sure `wanted` helper threads exist; returns how many do.
  int Grow(int wanted) {
    while (static_cast<int>(threads_.size()) < wanted) {
      const int index = static_cast<int>(threads_.size());
      try {
        threads_.emplace_back([this, index] { Loop(index + 1); });
      } catch (const std::system_error&) {
        break;  // the caller's thread does the rest
      }
    }
    return std::min(wanted, static_cast<int>(threads_.size()));
  }

  void Loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (worker > active_) continue;  // not needed for this job
        job = job_;
      }
      (*job)(worker);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int active_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

// The pool for a call at the given nesting depth on this thread: a
// ParallelFor inside worker 0 (the caller's own thread) must not reenter the
// pool that is running it.
WorkerPool& ThisThreadsPool(size_t depth) {
  thread_local std::vector<std::unique_ptr<WorkerPool>> pools;
  while (pools.size() <= depth) pools.push_back(std::make_unique<WorkerPool>());
  return *pools[depth];
}
thread_local size_t nesting_depth = 0;

}  // namespace

void ParallelFor(size_t n, int num_threads,
                 const std::function<void(size_t index, int worker)>& fn) {
  const int workers = static_cast<int>(std::max<size_t>(1, std::min<size_t>(n, std::max(1, num_threads))));
  // One slot per worker: an exception thrown on a worker thread would
  // otherwise terminate the process; it is rethrown here, on the caller's.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(workers));
  const std::function<void(int)> run = [&](int worker) {
    try {
      const IndexRange range = StaticPartition(n, workers, worker);
      for (size_t i = range.begin; i < range.end; ++i) fn(i, worker);
    } catch (...) {
      errors[static_cast<size_t>(worker)] = std::current_exception();
    }
  };
  if (workers == 1) {
    run(0);
  } else {
    WorkerPool& pool = ThisThreadsPool(nesting_depth);
    ++nesting_depth;  // run() catches everything, so this is undone below
    pool.Run(workers, run);
    --nesting_depth;
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dgrr
