// A complete reference training loop without the runtime: the tiny preset on
// the embedded arithmetic corpus, AdamW + warmup/cosine schedule + clipping.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "model/adamw.h"
#include "model/batch.h"
#include "model/corpus.h"
#include "model/gpt.h"
#include "model/schedule.h"

namespace dgrr::model {
namespace {

struct TrainResult {
  std::vector<float> losses;
  std::vector<float> final_params;
  double seconds;
};

TrainResult Train(const Preset& preset, int steps, int threads) {
  auto model = Gpt::Create(preset.model);
  EXPECT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(1));
  auto data = Dataset::Arithmetic(2, preset.model.seq_len);
  EXPECT_TRUE(data.ok());
  const TrainDefaults& d = preset.train;
  const size_t B = d.batch_size, window = data->window();
  BatchGradients batch(preset.model, threads, B);
  AdamW adam(model->layout(), AdamWOptions{.weight_decay = d.weight_decay});
  const LrSchedule schedule{.max_lr = d.learning_rate, .min_lr = d.min_learning_rate,
                            .warmup_steps = d.warmup_steps, .total_steps = steps};
  std::vector<uint8_t> examples(B * window);
  std::vector<float> grad(model->num_parameters());
  SplitMixDropoutMasks masks(3);  // the presets train with dropout
  ExampleHooks hooks;
  hooks.masks = &masks;
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    for (size_t j = 0; j < B; ++j) {  // sequential batches; the trainer shuffles
      const uint8_t* ex = data->Example((step * B + j) % data->num_examples());
      std::copy(ex, ex + window, examples.begin() + j * window);
    }
    auto loss = batch.ComputeMeanGradient(model->parameters(), examples.data(), B, step * B, hooks,
                                          grad.data());
    EXPECT_TRUE(loss.ok()) << loss.status().ToString();
    result.losses.push_back(loss.ok() ? *loss : NAN);
    ClipGradientsByGlobalNorm(grad.data(), grad.size(), d.grad_clip);
    adam.Step(model->parameters(), grad.data(), schedule.At(step));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.final_params.assign(model->parameters(), model->parameters() + model->num_parameters());
  return result;
}

float Mean(const std::vector<float>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return static_cast<float>(s / static_cast<double>(end - begin));
}

TEST(TrainTiny, LossFallsOver200Steps) {
  const Preset tiny = *PresetByName("tiny");
  const TrainResult r = Train(tiny, 200, 1);
  const float first = Mean(r.losses, 0, 10), last = Mean(r.losses, 190, 200);
  std::printf("tiny: 200 steps (batch %d, 1 thread) in %.2f s (%.1f ms/step); loss %.3f -> %.3f\n",
              tiny.train.batch_size, r.seconds, 1e3 * r.seconds / 200, first, last);
  RecordProperty("seconds", std::to_string(r.seconds));
  RecordProperty("first_loss", std::to_string(first));
  RecordProperty("last_loss", std::to_string(last));
  EXPECT_NEAR(r.losses[0], std::log(256.0f), 0.1f);
  // The corpus's byte frequencies alone (unigram entropy) are worth 2.65
  // nats; getting clearly below that means the model uses context.
  EXPECT_LT(last, 2.5f);
  EXPECT_LT(last, first - 2.0f);
}

// The same run with 1 and 2 threads ends in bitwise identical parameters.
TEST(TrainTiny, ShortRunIndependentOfThreads) {
  const Preset tiny = *PresetByName("tiny");
  const TrainResult one = Train(tiny, 5, 1), two = Train(tiny, 5, 2);
  EXPECT_EQ(one.losses, two.losses);
  EXPECT_EQ(one.final_params, two.final_params);
}

}  // namespace
}  // namespace dgrr::model
