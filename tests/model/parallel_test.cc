#include "model/parallel.h"

#include <gtest/gtest.h>

#include <vector>

namespace dgrr::model {
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

}  // namespace
}  // namespace dgrr::model
