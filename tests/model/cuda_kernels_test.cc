// The model's __global__ kernel entries (model/kernels_cuda.cu) on a real
// GPU against the CPU: the batch's mean gradient and loss through the device
// engine, and clipping and AdamW through the CUDA launcher, bitwise equal to
// the CPU code. Built where nvcc is; skips, saying why, without a device
// (scripts/gpu-checks.sh runs it by its name on a GPU machine).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "model/adamw.h"
#include "model/batch.h"
#include "model/grid.h"
#include "model/splitmix.h"
#include "model/philox_masks.h"
#include "rng/rng_streams.h"
#include "tests/support/cuda_device.h"

namespace dgrr::model {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaKernels, BatchGradientOnTheGpuEqualsTheCpu) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  GptConfig config;
  config.seq_len = 7, config.num_layers = 2, config.channels = 12, config.num_heads = 3;
  config.attn_dropout = config.resid_dropout = 0.1f;
  Gpt model = *Gpt::Create(config);
  model.Initialize(SplitMixNormalFill(3));
  const size_t count = 5, window = config.seq_len + 1, np = model.num_parameters();
  std::vector<uint8_t> tokens(count * window);
  SplitMixStream s(80);
  for (uint8_t& t : tokens) t = static_cast<uint8_t>(s.Below(256));
  PhiloxDropoutMasks masks(1, 2);
  ExampleHooks hooks{nullptr, nullptr, &masks};
  BatchGradients cpu(config, 1, count), gpu(config, 1, count, Device::kCuda);
  ASSERT_TRUE(gpu.device_status().ok()) << gpu.device_status().ToString();
  std::vector<float> want(np), got(np);
  auto loss = cpu.ComputeMeanGradient(model.parameters(), tokens.data(), count, 0, hooks, want.data());
  auto loss2 = gpu.ComputeMeanGradient(model.parameters(), tokens.data(), count, 0, hooks, got.data());
  ASSERT_TRUE(loss.ok() && loss2.ok());
  EXPECT_EQ(std::memcmp(&*loss, &*loss2, sizeof(float)), 0);
  EXPECT_TRUE(SameBits(want, got));
}

TEST(CudaKernels, ClippingAndAdamWOnTheGpuEqualTheCpu) {
  DGRR_SKIP_WITHOUT_CUDA_DEVICE();
  auto launcher = MakeLauncher(Device::kCuda);
  ASSERT_TRUE(launcher.ok()) << launcher.status().ToString();
  GptConfig config;
  config.seq_len = 5, config.num_layers = 1, config.channels = 6, config.num_heads = 2;
  const ParameterLayout layout(config);
  const size_t n = layout.total_size();
  std::vector<float> params(n), grad(n);
  SplitMixStream s(9);
  for (float& x : params) x = static_cast<float>(s.Below(2001)) / 1000.0f - 1.0f;
  for (float& x : grad) x = static_cast<float>(s.Below(2001)) / 250.0f - 4.0f;
  auto g = grad, g2 = grad;
  const float norm = ClipGradientsByGlobalNorm(g.data(), n, 0.5f);
  const float norm2 = ClipGradientsByGlobalNorm(g2.data(), n, 0.5f, launcher->get());
  EXPECT_EQ(std::memcmp(&norm, &norm2, sizeof norm), 0);
  EXPECT_TRUE(SameBits(g, g2));
  auto params2 = params;
  AdamW cpu(layout, AdamWOptions{0.9f, 0.95f, 1e-8f, 0.1f}), dev(layout, AdamWOptions{0.9f, 0.95f, 1e-8f, 0.1f});
  dev.set_launcher(launcher->get());
  for (int step = 0; step < 3; ++step) {
    cpu.Step(params.data(), g.data(), 1e-2f);
    dev.Step(params2.data(), g2.data(), 1e-2f);
  }
  EXPECT_TRUE(SameBits(params, params2));
  EXPECT_TRUE(SameBits(cpu.m(), dev.m()));
  EXPECT_TRUE(SameBits(cpu.v(), dev.v()));
}

}  // namespace
}  // namespace dgrr::model
