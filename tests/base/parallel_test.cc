#include "base/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <vector>

namespace dgrr {
namespace {

TEST(ParallelFor, EveryIndexOnceByItsStaticWorker) {
  for (int threads : {1, 2, 3, 8}) {
    for (size_t n : {0u, 1u, 5u, 17u}) {
      std::vector<int> visits(n, 0), worker_of(n, -1);
      ParallelFor(n, threads, [&](size_t i, int worker) {
        ++visits[i];  // distinct i per call: no race
        worker_of[i] = worker;
      });
      const int workers = static_cast<int>(std::min<size_t>(n, threads));
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(visits[i], 1);
        const IndexRange r = StaticPartition(n, workers, worker_of[i]);
        EXPECT_GE(i, r.begin);
        EXPECT_LT(i, r.end);
      }
    }
  }
}

TEST(ParallelFor, PartitionIsContiguousAndCovers) {
  size_t next = 0;
  for (int w = 0; w < 3; ++w) {
    const IndexRange r = StaticPartition(10, 3, w);
    EXPECT_EQ(r.begin, next);
    next = r.end;
  }
  EXPECT_EQ(next, 10u);
}

// Worker threads persist: a second call with the same thread count runs on
// the same threads as the first instead of starting new ones.
TEST(ParallelFor, ReusesWorkerThreadsAcrossCalls) {
  auto thread_ids = [] {
    std::vector<std::thread::id> ids(3);
    ParallelFor(3, 3, [&](size_t i, int) { ids[i] = std::this_thread::get_id(); });
    return ids;
  };
  const auto first = thread_ids(), second = thread_ids();
  EXPECT_EQ(first, second);
  EXPECT_EQ(first[0], std::this_thread::get_id());
  EXPECT_NE(first[1], first[0]);
  EXPECT_NE(first[2], first[1]);
}

// A ParallelFor inside a worker uses that worker's own pool (no deadlock),
// several threads may each drive their own, and a worker's exception reaches
// the caller.
TEST(ParallelFor, NestedConcurrentAndThrowing) {
  std::vector<std::atomic<int>> hits(4 * 5);
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 50; ++round) {
        ParallelFor(2, 2, [&](size_t outer, int) {
          ParallelFor(5, 3, [&](size_t inner, int) { ++hits[(2 * c + outer) * 5 + inner]; });
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (const auto& h : hits) EXPECT_EQ(h.load(), 50);
  EXPECT_THROW(ParallelFor(4, 4, [](size_t i, int) {
                 if (i == 3) throw std::runtime_error("worker failed");
               }),
               std::runtime_error);
  int after = 0;  // the pool still works after a throw
  ParallelFor(4, 4, [&](size_t, int worker) {
    if (worker == 0) ++after;
  });
  EXPECT_EQ(after, 1);
}

}  // namespace
}  // namespace dgrr
