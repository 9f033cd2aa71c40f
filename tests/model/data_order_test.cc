#include "model/data_order.h"

#include <gtest/gtest.h>

#include <set>

namespace dgrr::model {
namespace {

TEST(DataOrder, EachEpochVisitsEveryExampleOnceInItsOwnOrder) {
  const rng::RngStreams rng(5);
  DataOrder order(rng, 100);
  std::set<uint64_t> epoch0, epoch1;
  std::vector<uint64_t> first, second;
  for (uint64_t g = 0; g < 200; ++g) {
    const uint64_t i = *order.IndexOf(g);
    (g < 100 ? epoch0 : epoch1).insert(i);
    (g < 100 ? first : second).push_back(i);
  }
  EXPECT_EQ(epoch0.size(), 100u);
  EXPECT_EQ(epoch1.size(), 100u);
  EXPECT_NE(first, second) << "each epoch has its own permutation";
}

TEST(DataOrder, PositioningDirectlyEqualsWalkingFromTheStart) {
  const rng::RngStreams rng(5);
  DataOrder walked(rng, 37);
  std::vector<uint64_t> expected;
  for (uint64_t g = 0; g < 37 * 9; ++g) expected.push_back(*walked.IndexOf(g));
  for (uint64_t g : {0ull, 36ull, 37ull, 200ull, 37ull * 9 - 1}) {
    DataOrder fresh(rng, 37);  // a resumed run: nothing replayed
    EXPECT_EQ(*fresh.IndexOf(g), expected[g]) << g;
  }
  DataOrder empty(rng, 0);
  EXPECT_FALSE(empty.IndexOf(0).ok());
}

}  // namespace
}  // namespace dgrr::model
