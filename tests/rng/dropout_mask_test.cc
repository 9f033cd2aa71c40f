// rng::FillDropoutKeepMask: the keep-mask convention the reference trainer
// and dgrr.torch share.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "rng/rng_streams.h"

namespace dgrr::rng {
namespace {

TEST(DropoutKeepMaskTest, IsTheBernoulliMaskOfTheExamplesOwnStream) {
  const RngStreams rng(42);
  const uint64_t threshold = *BernoulliThreshold(0.9);
  std::vector<uint8_t> mask(1000), expected(1000);
  FillDropoutKeepMask(rng, /*step=*/3, /*example=*/17, /*layer=*/1, /*site=*/2, threshold, mask.data(), mask.size());
  PhiloxStream s = rng.Stream(Purpose::kDropout, {3, 17, 1, 2});
  FillBernoulliMask(s, expected.data(), expected.size(), threshold);
  EXPECT_EQ(mask, expected);
  size_t kept = 0;
  for (uint8_t k : mask) {
    ASSERT_LE(k, 1);
    kept += k;
  }
  EXPECT_GT(kept, 850u);
  EXPECT_LT(kept, 950u);
  // Every coordinate of the key selects another stream.
  for (auto [step, example, layer, site] : {std::tuple{4, 17, 1, 2}, std::tuple{3, 18, 1, 2},
                                            std::tuple{3, 17, 0, 2}, std::tuple{3, 17, 1, 1}}) {
    std::vector<uint8_t> other(1000);
    FillDropoutKeepMask(rng, step, example, layer, site, threshold, other.data(), other.size());
    EXPECT_NE(other, mask) << step << " " << example << " " << layer << " " << site;
  }
  // A prefix is the same whatever the mask's length (a row never depends on its neighbours).
  std::vector<uint8_t> shorter(100);
  FillDropoutKeepMask(rng, 3, 17, 1, 2, threshold, shorter.data(), shorter.size());
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), mask.begin()));
}

}  // namespace
}  // namespace dgrr::rng
