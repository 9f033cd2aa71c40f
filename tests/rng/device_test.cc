// Host vs device: the same streams drawn by CUDA threads (rng/device.cu, which
// compiles rng/distributions.h with nvcc) must match the host. Skips, saying
// why, when the build has no CUDA or no device is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "base/coding.h"
#include "rng/device.h"
#include "rng/rng_streams.h"

namespace dgrr::rng {
namespace {

std::vector<PhiloxStream> TestStreams() {
  const RngStreams rng(2718281828);
  std::vector<PhiloxStream> streams;
  for (uint64_t example = 0; example < 256; ++example) {
    PhiloxStream s = rng.Stream(Purpose::kDropout, {5, example, 2, 0});
    s.SkipTo(example % 7);  // unaligned starts as well
    streams.push_back(s);
  }
  streams.push_back(PhiloxStream(0, 0, ~uint64_t{0} - 600));  // near the end of a stream
  return streams;
}

TEST(Device, DrawsMatchHost) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) GTEST_SKIP() << "no CUDA device: " << reason;
  constexpr size_t kPerStream = 513;
  const std::vector<PhiloxStream> streams = TestStreams();
  const uint64_t threshold = *BernoulliThreshold(0.9);
  const DrawSet host = DrawOnHost(streams, kPerStream, threshold);
  StatusOr<DrawSet> device = DrawOnDevice(streams, kPerStream, threshold);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->u32, host.u32);
  EXPECT_EQ(device->mask, host.mask);
  size_t float_mismatches = 0, normal_float_mismatches = 0, normal_double_mismatches = 0;
  double worst_normal_relative = 0;
  for (size_t i = 0; i < host.u32.size(); ++i) {
    float_mismatches += FloatBits(device->uniform_float[i]) != FloatBits(host.uniform_float[i]);
    float_mismatches += DoubleBits(device->uniform_double[i]) != DoubleBits(host.uniform_double[i]);
    normal_float_mismatches += FloatBits(device->normal_float[i]) != FloatBits(host.normal_float[i]);
    if (DoubleBits(device->normal_double[i]) != DoubleBits(host.normal_double[i])) {
      ++normal_double_mismatches;
      const double h = host.normal_double[i];
      worst_normal_relative = std::max(worst_normal_relative,
                                       std::fabs(device->normal_double[i] - h) / std::max(1.0, std::fabs(h)));
    }
  }
  // Integer and correctly rounded mappings: bit-exact.
  EXPECT_EQ(float_mismatches, 0u);
  // Normals go through libm vs CUDA log/cos/sin (docs/rng.md, caveats): the
  // doubles may differ in the last bits, the floats almost never.
  std::printf("normal doubles differing in some bit: %zu of %zu (worst relative %.3g); floats: %zu\n",
              normal_double_mismatches, host.u32.size(), worst_normal_relative, normal_float_mismatches);
  EXPECT_LE(worst_normal_relative, 1e-14);
  EXPECT_LE(normal_float_mismatches, host.u32.size() / 100000 + 1);
}

TEST(Device, AvailabilityReportsAReason) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) {
    EXPECT_FALSE(reason.empty());
    EXPECT_TRUE(DrawOnDevice(TestStreams(), 4, 0).status().code() == StatusCode::kFailedPrecondition);
  } else {
    EXPECT_TRUE(DrawOnDevice(TestStreams(), 4, 0).ok());
  }
}

}  // namespace
}  // namespace dgrr::rng
