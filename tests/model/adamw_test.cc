#include "model/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/schedule.h"

namespace dgrr::model {
namespace {

GptConfig TinyShape() {
  GptConfig c;
  c.seq_len = 2;
  c.num_layers = 1;
  c.channels = 2;
  c.num_heads = 1;
  return c;
}

// Hand-computed: beta1 0.9, beta2 0.95, lr 0.1, wd 0.1, p = 1, g = 0.5 then -0.5.
// Step 1: m = 0.05, v = 0.0125, m_hat = 0.5, v_hat = 0.25, update ~ 1
//   decayed:  p = 1 - 0.1 * (1 + 0.1 * 1) = 0.89;  not decayed: p = 0.9
// Step 2 (not decayed): m = -0.005, v = 0.024375, c1 = 0.19, c2 = 0.0975,
//   m_hat = -0.0263158, v_hat = 0.25, p = 0.9 + 0.1 * 0.0526316 = 0.9052632
TEST(AdamW, MatchesHandComputedSteps) {
  ParameterLayout layout(TinyShape());
  AdamW adam(layout, AdamWOptions{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f});
  std::vector<float> params(layout.total_size(), 1.0f), grad(layout.total_size(), 0.5f);
  const size_t decayed = layout.wte(), plain = layout.lnf_b();
  adam.Step(params.data(), grad.data(), 0.1f);
  EXPECT_EQ(adam.step(), 1);
  EXPECT_NEAR(adam.m()[plain], 0.05f, 5e-8);  // float rounding of 1 - 0.9f
  EXPECT_NEAR(adam.v()[plain], 0.0125f, 5e-8);
  EXPECT_NEAR(params[decayed], 0.89f, 1e-6);
  EXPECT_NEAR(params[plain], 0.9f, 1e-6);
  for (float& g : grad) g = -0.5f;
  adam.Step(params.data(), grad.data(), 0.1f);
  EXPECT_NEAR(adam.m()[plain], -0.005f, 5e-8);
  EXPECT_NEAR(adam.v()[plain], 0.024375f, 5e-8);
  EXPECT_NEAR(params[plain], 0.9052632f, 1e-6);
}

TEST(AdamW, ZeroGradientOnlyDecays) {
  ParameterLayout layout(TinyShape());
  AdamW adam(layout, AdamWOptions{.weight_decay = 0.5f});
  std::vector<float> params(layout.total_size(), 2.0f), grad(layout.total_size(), 0.0f);
  adam.Step(params.data(), grad.data(), 0.1f);
  EXPECT_FLOAT_EQ(params[layout.wte()], 2.0f - 0.1f * 0.5f * 2.0f);
  EXPECT_EQ(params[layout.lnf_w()], 2.0f);
}

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{.max_lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10, .total_steps = 110};
  EXPECT_FLOAT_EQ(s.At(0), 0.1f);
  EXPECT_FLOAT_EQ(s.At(4), 0.5f);
  EXPECT_FLOAT_EQ(s.At(9), 1.0f);
  EXPECT_FLOAT_EQ(s.At(10), 1.0f);
  EXPECT_FLOAT_EQ(s.At(35), 0.1f + 0.9f * 0.5f * (1.0f + std::sqrt(0.5f)));  // r = 1/4
  EXPECT_FLOAT_EQ(s.At(60), 0.55f);                                         // r = 1/2
  EXPECT_FLOAT_EQ(s.At(110), 0.1f);
  EXPECT_FLOAT_EQ(s.At(1000), 0.1f);
}

TEST(ClipGradients, ScalesToMaxNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_FLOAT_EQ(ClipGradientsByGlobalNorm(g.data(), g.size(), 10.0f), 5.0f);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_FLOAT_EQ(ClipGradientsByGlobalNorm(g.data(), g.size(), 1.0f), 5.0f);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], 0.8f, 1e-6);
  EXPECT_NEAR(ClipGradientsByGlobalNorm(g.data(), g.size(), 0.0f), 1.0f, 1e-6);
}

}  // namespace
}  // namespace dgrr::model
