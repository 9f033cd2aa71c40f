#include "model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "fd_check.h"
#include "model/adamw.h"
#include "model/batch.h"
#include "model/corpus.h"
#include "runtime/tree_reduce.h"

namespace dgrr::model {
namespace {

using testing::RandomDoubles;

GptConfig SmallTestConfig(float dropout) {
  GptConfig c;
  c.seq_len = 6;
  c.num_layers = 2;
  c.channels = 8;
  c.num_heads = 2;
  c.attn_dropout = dropout;
  c.resid_dropout = dropout;
  return c;
}

std::vector<uint8_t> Tokens(int count, uint64_t seed) {
  std::vector<uint8_t> t(count);
  SplitMixStream rng(seed);
  for (uint8_t& x : t) x = static_cast<uint8_t>(rng.Below(256));
  return t;
}

TEST(GptLayout, PresetParameterCounts) {
  // V*C + T*C + L*(12*C*C + 13*C) + 2*C
  auto count = [](int T, int L, int C) { return 256 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C; };
  auto tiny = PresetByName("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(ParameterLayout(tiny->model).total_size(), static_cast<size_t>(count(16, 2, 64)));
  auto small = PresetByName("small");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(ParameterLayout(small->model).total_size(), static_cast<size_t>(count(64, 4, 128)));
  EXPECT_FALSE(PresetByName("huge").ok());
}

TEST(GptLayout, TensorsAreContiguousAndNamed) {
  ParameterLayout layout(SmallTestConfig(0));
  size_t next = 0;
  for (const NamedTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.size;
  }
  EXPECT_EQ(next, layout.total_size());
  ASSERT_NE(layout.Find("block1.attn.qkv.w"), nullptr);
  EXPECT_EQ(layout.Find("block1.attn.qkv.w")->shape, (std::vector<int64_t>{8, 24}));
  EXPECT_TRUE(layout.Find("block1.attn.qkv.w")->weight_decay);
  EXPECT_FALSE(layout.Find("lnf.w")->weight_decay);
  EXPECT_EQ(layout.Find("nope"), nullptr);
  EXPECT_EQ(GradientName("block0.mlp.fc.w"), "block0.mlp.fc.dw");
  EXPECT_EQ(GradientName("wte"), "dwte");
}

TEST(GptConfig, ValidateRejectsBadShapes) {
  GptConfig c = SmallTestConfig(0);
  c.num_heads = 3;
  EXPECT_TRUE(c.Validate().IsInvalidArgument());
  c = SmallTestConfig(0);
  c.attn_dropout = 1.0f;
  EXPECT_TRUE(c.Validate().IsInvalidArgument());
  EXPECT_FALSE(Gpt::Create(c).ok());
}

TEST(Gpt, InitialLossIsNearUniform) {
  GptConfig no_dropout = PresetByName("tiny")->model;  // the loss at init, undisturbed
  no_dropout.attn_dropout = no_dropout.resid_dropout = 0;
  auto model = Gpt::Create(no_dropout);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(7));
  const float* wte = model->parameters() + model->layout().wte();
  EXPECT_NE(wte[0], 0.0f);
  EXPECT_LT(std::abs(wte[0]), 0.2f);
  EXPECT_EQ(model->parameters()[model->layout().lnf_w()], 1.0f);
  ExampleEngine<float> engine(model->config());
  const auto tokens = Tokens(model->config().seq_len + 1, 3);
  const float loss = engine.Forward(model->parameters(), tokens.data(), 0, {});
  EXPECT_NEAR(loss, std::log(256.0f), 0.05f);
}

// The whole model's gradient in double against central differences, for a
// sample of parameters from every tensor, with dropout active (the masks are
// a pure function of (example, layer, site), so they are identical in every
// evaluation).
TEST(GptGradient, WholeModelMatchesFiniteDifferences) {
  const GptConfig config = SmallTestConfig(0.2f);
  ExampleEngine<double> engine(config);
  const ParameterLayout& layout = engine.layout();
  std::vector<double> params = RandomDoubles(layout.total_size(), 31, 0.4);
  for (const NamedTensor& t : layout.tensors()) {  // keep layernorm gains near 1
    if (!t.weight_decay && t.name.back() == 'w') {
      for (size_t i = 0; i < t.size; ++i) params[t.offset + i] += 1.0;
    }
  }
  const auto tokens = Tokens(config.seq_len + 1, 32);
  SplitMixDropoutMasks masks(33);
  ExampleHooks hooks;
  hooks.masks = &masks;
  const uint64_t example = 5;
  std::vector<double> grad(layout.total_size());
  engine.Forward(params.data(), tokens.data(), example, hooks);
  engine.Backward(params.data(), tokens.data(), example, grad.data(), hooks);
  std::vector<size_t> sample;
  SplitMixStream rng(34);
  for (const NamedTensor& t : layout.tensors()) {
    for (int k = 0; k < 2; ++k) sample.push_back(t.offset + rng.Below(static_cast<uint32_t>(t.size)));
  }
  // The token embedding is used twice (input and tied head): check the rows
  // of tokens that occur.
  sample.push_back(layout.wte() + tokens[0] * config.channels + 1);
  sample.push_back(layout.wte() + tokens[3] * config.channels + 2);
  auto loss = [&] { return engine.Forward(params.data(), tokens.data(), example, hooks); };
  const double worst = testing::CheckGradient("whole model", params, grad, loss, sample);
  RecordProperty("worst_scaled_error", std::to_string(worst));
}

// The float path agrees with the double reference to float accuracy.
TEST(GptGradient, FloatPathTracksDoubleReference) {
  GptConfig config = PresetByName("tiny")->model;
  config.attn_dropout = config.resid_dropout = 0;  // compares float and double paths only
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(41));
  std::vector<double> params_d(model->parameters(), model->parameters() + model->num_parameters());
  const auto tokens = Tokens(config.seq_len + 1, 42);
  ExampleEngine<float> engine_f(config);
  ExampleEngine<double> engine_d(config);
  std::vector<float> grad_f(model->num_parameters());
  std::vector<double> grad_d(model->num_parameters());
  const float loss_f = engine_f.Forward(model->parameters(), tokens.data(), 0, {});
  engine_f.Backward(model->parameters(), tokens.data(), 0, grad_f.data(), {});
  const double loss_d = engine_d.Forward(params_d.data(), tokens.data(), 0, {});
  engine_d.Backward(params_d.data(), tokens.data(), 0, grad_d.data(), {});
  EXPECT_NEAR(loss_f, loss_d, 1e-5);
  double max_grad = 0, max_err = 0;
  for (size_t i = 0; i < grad_d.size(); ++i) {
    max_grad = std::max(max_grad, std::abs(grad_d[i]));
    max_err = std::max(max_err, std::abs(grad_d[i] - static_cast<double>(grad_f[i])));
  }
  EXPECT_GT(max_grad, 0.0);
  EXPECT_LT(max_err, 1e-4 * max_grad);
}

struct Call {
  std::string name;
  Phase phase;
  std::vector<int64_t> dims;
  uint64_t first_example;
  uint32_t count;
  bool is_output;
  float first_value;
  double sum;  // of all elements: a cheap whole-tensor fingerprint
};

class RecordingObserver : public BoundaryObserver {
 public:
  void OnBoundary(std::string_view name, Phase phase, Operator, bool is_output, const float* data,
                  std::span<const int64_t> dims, uint64_t first_example,
                  uint32_t example_count) override {
    size_t count = 1;
    for (int64_t d : dims) count *= static_cast<size_t>(d);
    double sum = 0;
    for (size_t i = 0; i < count; ++i) sum += data[i];
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back({std::string(name), phase, {dims.begin(), dims.end()}, first_example,
                     example_count, is_output, data[0], sum});
  }
  const Call* Find(const std::string& name) const {
    for (const Call& c : calls) {
      if (c.name == name) return &c;
    }
    return nullptr;
  }
  std::vector<Call> calls;

 private:
  std::mutex mu_;
};

TEST(GptBoundaries, NamesShapesAndOrder) {
  const GptConfig config = SmallTestConfig(0);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(51));
  ExampleEngine<float> engine(config);
  RecordingObserver observer;
  ExampleHooks hooks;
  hooks.observer = &observer;
  const auto tokens = Tokens(config.seq_len + 1, 52);
  std::vector<float> grad(model->num_parameters());
  const float loss = engine.Forward(model->parameters(), tokens.data(), 9, hooks);
  engine.Backward(model->parameters(), tokens.data(), 9, grad.data(), hooks);

  ASSERT_FALSE(observer.calls.empty());
  EXPECT_EQ(observer.calls.front().name, "embed.out");
  EXPECT_EQ(observer.calls.back().name, "block0.ln1.dinp");
  for (const char* name : {"block1.attn.qkv.out", "block1.attn.softmax.out", "block1.mlp.gelu.out",
                           "lnf.out", "lm_head.logits", "loss", "block1.mlp.fc.dinp",
                           "loss.dinp", "block0.attn.softmax.dinp"}) {
    EXPECT_NE(observer.Find(name), nullptr) << name;
  }
  EXPECT_EQ(observer.Find("block0.attn.softmax.dropout.out"), nullptr);  // p == 0: no dropout
  const Call* qkv = observer.Find("block1.attn.qkv.out");
  EXPECT_EQ(qkv->dims, (std::vector<int64_t>{6, 24}));
  EXPECT_EQ(qkv->phase, Phase::kForward);
  EXPECT_EQ(qkv->first_example, 9u);
  EXPECT_EQ(qkv->count, 1u);
  const Call* loss_call = observer.Find("loss");
  EXPECT_TRUE(loss_call->dims.empty());
  EXPECT_EQ(loss_call->first_value, loss);
  EXPECT_EQ(observer.Find("block1.mlp.fc.dinp")->phase, Phase::kBackward);
  // Forward boundaries come in layer order.
  size_t pos0 = 0, pos1 = 0;
  for (size_t i = 0; i < observer.calls.size(); ++i) {
    if (observer.calls[i].name == "block0.mlp.residual.out") pos0 = i;
    if (observer.calls[i].name == "block1.ln1.out") pos1 = i;
  }
  EXPECT_LT(pos0, pos1);

  // With dropout the dropout outputs are reported too.
  ExampleEngine<float> dropout_engine(SmallTestConfig(0.1f));
  SplitMixDropoutMasks masks(1);
  RecordingObserver observer2;
  ExampleHooks hooks2{&observer2, nullptr, &masks};
  dropout_engine.Forward(model->parameters(), tokens.data(), 0, hooks2);
  EXPECT_NE(observer2.Find("block0.attn.softmax.dropout.out"), nullptr);
  EXPECT_NE(observer2.Find("block1.mlp.proj.dropout.out"), nullptr);
}

class BitFlipper : public TensorMutator {
 public:
  BitFlipper(std::string target, size_t index) : target_(std::move(target)), index_(index) {}
  void AfterBoundary(std::string_view name, Phase, float* data, size_t count, uint64_t) override {
    if (name != target_ || index_ >= count) return;
    uint32_t bits;
    std::memcpy(&bits, &data[index_], 4);
    bits ^= 1u << 30;  // the top exponent bit: a fault no rounding can hide
    std::memcpy(&data[index_], &bits, 4);
  }

 private:
  std::string target_;
  size_t index_;
};

TEST(GptBoundaries, ObserverDoesNotChangeResultsAndMutatorActsAfterObserver) {
  const GptConfig config = SmallTestConfig(0);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(61));
  const auto tokens = Tokens(config.seq_len + 1, 62);
  ExampleEngine<float> engine(config);
  std::vector<float> grad_plain(model->num_parameters()), grad_observed(model->num_parameters());
  const float plain = engine.Forward(model->parameters(), tokens.data(), 0, {});
  engine.Backward(model->parameters(), tokens.data(), 0, grad_plain.data(), {});

  RecordingObserver clean;
  ExampleHooks observed{&clean, nullptr, nullptr};
  EXPECT_EQ(engine.Forward(model->parameters(), tokens.data(), 0, observed), plain);
  engine.Backward(model->parameters(), tokens.data(), 0, grad_observed.data(), observed);
  EXPECT_EQ(grad_plain, grad_observed);

  RecordingObserver faulty;
  BitFlipper flip("block0.attn.qkv.out", config.channels);  // a key every later query sees
  ExampleHooks faulty_hooks{&faulty, &flip, nullptr};
  const float flipped = engine.Forward(model->parameters(), tokens.data(), 0, faulty_hooks);
  EXPECT_NE(flipped, plain);
  // The boundary itself shows the clean value; the next one the fault.
  EXPECT_EQ(faulty.Find("block0.attn.qkv.out")->sum, clean.Find("block0.attn.qkv.out")->sum);
  EXPECT_NE(faulty.Find("block0.attn.softmax.out")->sum, clean.Find("block0.attn.softmax.out")->sum);
  EXPECT_NE(faulty.Find("block0.attn.out")->sum, clean.Find("block0.attn.out")->sum);
}

// The float engine's layers run in the widest vector build the CPU has
// (model/vector_isa.h); every build gives the SSE2 build's bits. Sizes fill
// whole 16-lane vectors and leave remainders (head size 32, seq_len 20). The
// engine also runs another block first and the gradient buffers start as
// NaN, so nothing may depend on what an earlier block left behind or on
// buffers being zeroed by the caller.
TEST(GptDeterminism, EveryVectorBuildGivesTheSameBits) {
  GptConfig config;
  config.seq_len = 20;
  config.num_layers = 2;
  config.channels = 64;
  config.num_heads = 2;
  config.attn_dropout = 0.1f;
  config.resid_dropout = 0.1f;
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(81));
  const size_t count = 3, window = config.seq_len + 1, n = model->num_parameters();
  const auto earlier = Tokens(static_cast<int>(count * window), 82);
  const auto examples = Tokens(static_cast<int>(count * window), 83);
  SplitMixDropoutMasks masks(84);
  const ExampleHooks hooks{nullptr, nullptr, &masks};
  struct Result {
    std::vector<float> losses, grads;
  };
  auto run = [&](GemmIsa isa, bool run_earlier_block) {
    ExampleEngine<float> engine(config, count);
    engine.set_vector_isa(isa);
    Result r{std::vector<float>(count), std::vector<float>(count * n, NAN)};
    std::vector<float*> grads;
    for (size_t e = 0; e < count; ++e) grads.push_back(r.grads.data() + e * n);
    if (run_earlier_block) {
      engine.ForwardBlock(model->parameters(), earlier.data(), count, 100, hooks, r.losses.data());
      engine.BackwardBlock(model->parameters(), earlier.data(), count, 100, grads.data(), hooks);
      std::fill(r.grads.begin(), r.grads.end(), NAN);
    }
    engine.ForwardBlock(model->parameters(), examples.data(), count, 0, hooks, r.losses.data());
    engine.BackwardBlock(model->parameters(), examples.data(), count, 0, grads.data(), hooks);
    return r;
  };
  const Result want = run(GemmIsa::kSse2, false);
  for (float g : want.grads) ASSERT_FALSE(std::isnan(g));
  for (GemmIsa isa : {GemmIsa::kSse2, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    const Result got = run(isa, true);
    EXPECT_EQ(0, std::memcmp(want.losses.data(), got.losses.data(), count * 4)) << GemmIsaName(isa);
    EXPECT_EQ(0, std::memcmp(want.grads.data(), got.grads.data(), count * n * 4)) << GemmIsaName(isa);
  }
}

// A CPU worker takes its examples in blocks of at most kCpuBlockRows rows
// (2 of seq_len 48 here: blocks of 2, 2 and 1): every example's gradient and
// loss are bitwise what one block of all five gives.
TEST(GptDeterminism, BatchBlocksOfAtMostKCpuBlockRowsGiveTheBitsOfOneBlock) {
  GptConfig config = SmallTestConfig(0.1f);
  config.seq_len = static_cast<int>(kCpuBlockRows / 2 - kCpuBlockRows / 8);  // 48: two fit, three do not
  ASSERT_EQ(kCpuBlockRows / static_cast<size_t>(config.seq_len), 2u);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(75));
  const size_t B = 5, window = config.seq_len + 1, n = model->num_parameters();
  const auto examples = Tokens(static_cast<int>(B * window), 76);
  SplitMixDropoutMasks masks(77);
  ExampleHooks hooks{nullptr, nullptr, &masks};
  BatchGradients batch(config, 1, B);
  ASSERT_TRUE(batch.ComputeExamples(model->parameters(), examples.data(), B, 40, hooks).ok());
  ExampleEngine<float> whole(config, B);
  std::vector<float> grads(B * n), losses(B);
  std::vector<float*> pointers;
  for (size_t e = 0; e < B; ++e) pointers.push_back(grads.data() + e * n);
  whole.ForwardBlock(model->parameters(), examples.data(), B, 40, hooks, losses.data());
  whole.BackwardBlock(model->parameters(), examples.data(), B, 40, pointers.data(), hooks);
  for (size_t e = 0; e < B; ++e) {
    EXPECT_EQ(0, std::memcmp(batch.gradients()[e], pointers[e], n * 4)) << "example " << e;
    EXPECT_EQ(batch.losses()[e], losses[e]) << "example " << e;
  }
}

// Gradients and loss of a batch are bitwise identical for any thread count,
// and for any split into aligned shards (ranks) combined by the same tree.
TEST(GptDeterminism, BatchGradientIndependentOfThreadsAndShards) {
  for (float dropout : {0.0f, 0.1f}) {
    const GptConfig config = SmallTestConfig(dropout);
    auto model = Gpt::Create(config);
    ASSERT_TRUE(model.ok());
    model->Initialize(SplitMixNormalFill(71));
    const size_t B = 8, window = config.seq_len + 1;
    const auto examples = Tokens(static_cast<int>(B * window), 72);
    SplitMixDropoutMasks masks(73);
    ExampleHooks hooks{nullptr, nullptr, &masks};
    std::vector<std::vector<float>> grads;
    std::vector<float> losses;
    for (int threads : {1, 2, 3, 4}) {
      BatchGradients batch(config, threads, B);
      std::vector<float> grad(model->num_parameters());
      auto loss = batch.ComputeMeanGradient(model->parameters(), examples.data(), B, 0, hooks,
                                            grad.data());
      ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      losses.push_back(*loss);
      grads.push_back(std::move(grad));
    }
    for (size_t i = 1; i < grads.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[i].data(), grads[0].size() * 4)) << i;
      EXPECT_EQ(losses[0], losses[i]);
    }
    // Two "ranks" of 4 examples each, pre-reducing their aligned shard.
    std::vector<std::vector<float>> shard_sums;
    for (uint64_t rank = 0; rank < 2; ++rank) {
      BatchGradients shard(config, 2, 4);
      ASSERT_TRUE(shard.ComputeExamples(model->parameters(), examples.data() + rank * 4 * window, 4,
                                        rank * 4, hooks).ok());
      ASSERT_TRUE(TreeReduceAlignedBlock(shard.gradients(), rank * 4, shard.num_parameters(), 1).ok());
      shard_sums.emplace_back(shard.gradients()[0], shard.gradients()[0] + shard.num_parameters());
    }
    std::vector<float*> leaves = {shard_sums[0].data(), shard_sums[1].data()};
    TreeReduceInPlace(leaves, shard_sums[0].size(), 1);
    for (float& g : shard_sums[0]) g = g / static_cast<float>(B);
    EXPECT_EQ(0, std::memcmp(grads[0].data(), shard_sums[0].data(), grads[0].size() * 4));
  }
}

// Summing pairs as the batch goes (pairs_at) changes no bit of any node sum:
// the whole batch's and the canonical nodes of shards that start at even and
// at odd tree positions, for blocks of 2 (seq_len 48) and of 8 (seq_len 16),
// any thread count (3 workers split 8 examples at odd places, so some blocks
// hold no whole pair). A node that would split a summed pair is refused, and
// the per-example buffers are not handed out.
TEST(BatchGradients, SummedPairsGiveTheTreesBits) {
  for (int seq_len : {48, 16, 40}) {  // blocks of 2, 8 and 3 examples
    GptConfig config = SmallTestConfig(seq_len == 16 ? 0.0f : 0.1f);
    config.seq_len = seq_len;
    auto model = Gpt::Create(config);
    ASSERT_TRUE(model.ok());
    model->Initialize(SplitMixNormalFill(81));
    const size_t B = 8, window = config.seq_len + 1, n = model->num_parameters();
    const auto examples = Tokens(static_cast<int>(B * window), 82);
    SplitMixDropoutMasks masks(83);
    ExampleHooks hooks{nullptr, nullptr, &masks};
    // Nodes of the tree over [0, 8) and of a shard's own positions.
    struct Case {
      uint64_t position;  // of the call's first example in the batch's tree
      size_t count;
      std::vector<std::pair<size_t, size_t>> nodes;  // local [begin, begin + count)
    };
    const std::vector<Case> cases = {
        {0, 8, {{0, 8}}}, {0, 8, {{0, 4}, {4, 2}, {6, 2}}}, {3, 5, {{0, 1}, {1, 4}}}, {2, 6, {{0, 2}, {2, 4}}}};
    for (const Case& c : cases) {
      for (int threads : {1, 2, 3}) {
        BatchGradients plain(config, threads, c.count), paired(config, threads, c.count);
        const uint8_t* tokens = examples.data() + c.position * window;
        ASSERT_TRUE(plain.ComputeExamples(model->parameters(), tokens, c.count, c.position, hooks).ok());
        ASSERT_TRUE(paired.ComputeExamples(model->parameters(), tokens, c.count, c.position, hooks,
                                           c.position).ok());
        EXPECT_GT(paired.summed_pairs(), 0u) << seq_len << " " << c.position << " " << threads;
        EXPECT_EQ(plain.summed_pairs(), 0u);
        for (auto [begin, count] : c.nodes) {
          auto want = plain.ReduceNode(begin, count);
          auto got = paired.ReduceNode(begin, count);
          ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
          EXPECT_EQ(0, std::memcmp(*want, *got, n * sizeof(float)))
              << "seq_len " << seq_len << " position " << c.position << " node [" << begin << ", "
              << begin + count << ") threads " << threads;
        }
      }
    }
    BatchGradients paired(config, 1, B);
    ASSERT_TRUE(paired.ComputeExamples(model->parameters(), examples.data(), B, 0, hooks, 0).ok());
    EXPECT_EQ(paired.summed_pairs(), 4u);  // every pair, whatever the block size
    EXPECT_TRUE(paired.ReduceNode(1, 2).status().IsInvalidArgument());  // starts inside (0, 1)
    EXPECT_TRUE(paired.ReduceNode(0, 3).status().IsInvalidArgument());  // [0, 3) is no node here
    EXPECT_DEATH(paired.gradients(), "summed them in pairs");
    // Asked for pairs, none held: the per-example buffers are still refused.
    BatchGradients single(config, 1, 1);
    ASSERT_TRUE(single.ComputeExamples(model->parameters(), examples.data(), 1, 0, hooks, 0).ok());
    EXPECT_EQ(single.summed_pairs(), 0u);
    EXPECT_DEATH(single.gradients(), "summed them in pairs");
    EXPECT_TRUE(single.ReduceNode(0, 1).ok());  // the node sums still come
  }
}

// Parameter gradients are reported once per batch, after the reduction; the
// optimizer reports its input gradient and its outputs per tensor.
TEST(GptBoundaries, PerBatchGradientAndOptimizerBoundaries) {
  const GptConfig config = SmallTestConfig(0);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(91));
  const size_t B = 4;
  const auto examples = Tokens(static_cast<int>(B * (config.seq_len + 1)), 92);
  BatchGradients batch(config, 2, B);
  RecordingObserver observer;
  std::vector<float> grad(batch.num_parameters());
  ASSERT_TRUE(batch.ComputeMeanGradient(model->parameters(), examples.data(), B, 12,
                                        {&observer, nullptr, nullptr}, grad.data()).ok());
  const Call* dw = observer.Find("block1.mlp.fc.dw");
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(dw->phase, Phase::kBackward);
  EXPECT_EQ(dw->first_example, 12u);
  EXPECT_EQ(dw->count, B);
  EXPECT_EQ(dw->dims, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(dw->first_value, grad[model->layout().Find("block1.mlp.fc.w")->offset]);
  EXPECT_NE(observer.Find("dwte"), nullptr);
  size_t per_example = 0;
  for (const Call& c : observer.calls) per_example += c.name == "block0.ln1.out";
  EXPECT_EQ(per_example, B);

  AdamW adam(model->layout(), AdamWOptions{});
  RecordingObserver opt;
  adam.Step(model->parameters(), grad.data(), 1e-3f, &opt, 12, B);
  ASSERT_NE(opt.Find("lnf.b.grad"), nullptr);
  EXPECT_FALSE(opt.Find("lnf.b.grad")->is_output);
  EXPECT_EQ(opt.Find("lnf.b")->phase, Phase::kOptimizer);
  EXPECT_TRUE(opt.Find("adamw.v.wte")->is_output);
  EXPECT_EQ(opt.calls.size(), 4 * model->layout().tensors().size());
}

class ForbiddenMasks : public DropoutMaskSource {
 public:
  void FillKeepMask(uint64_t, int, DropoutSite, float, uint8_t*, size_t) const override {
    ADD_FAILURE() << "a mask was requested with dropout off";
  }
};

// p == 0 skips dropout entirely: no mask is requested, even when a source is given.
TEST(GptDeterminism, NoDropoutRequestsNoMasks) {
  const GptConfig config = SmallTestConfig(0);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(95));
  const auto tokens = Tokens(config.seq_len + 1, 96);
  ForbiddenMasks forbidden;
  ExampleEngine<float> engine(config);
  std::vector<float> grad(model->num_parameters());
  const float with_source = engine.Forward(model->parameters(), tokens.data(), 0, {nullptr, nullptr, &forbidden});
  engine.Backward(model->parameters(), tokens.data(), 0, grad.data(), {nullptr, nullptr, &forbidden});
  EXPECT_EQ(with_source, engine.Forward(model->parameters(), tokens.data(), 0, {}));
}

TEST(BatchGradients, RejectsBadBatches) {
  const GptConfig config = SmallTestConfig(0.1f);
  BatchGradients batch(config, 1, 2);
  std::vector<float> params(batch.num_parameters(), 0.01f), grad(batch.num_parameters());
  const auto examples = Tokens(3 * (config.seq_len + 1), 90);
  SplitMixDropoutMasks masks(1);
  EXPECT_TRUE(batch.ComputeExamples(params.data(), examples.data(), 3, 0, {nullptr, nullptr, &masks})
                  .IsInvalidArgument());
  EXPECT_TRUE(batch.ComputeExamples(params.data(), examples.data(), 0, 0, {nullptr, nullptr, &masks})
                  .IsInvalidArgument());
  EXPECT_TRUE(batch.ComputeExamples(params.data(), examples.data(), 2, 0, {}).IsInvalidArgument());
  EXPECT_TRUE(batch.ComputeMeanGradient(params.data(), examples.data(), 2, 0,
                                        {nullptr, nullptr, &masks}, grad.data()).ok());
}

TEST(GptDeterminism, DropoutRequiresMasksAndChangesLoss) {
  const GptConfig config = SmallTestConfig(0.3f);
  auto model = Gpt::Create(config);
  ASSERT_TRUE(model.ok());
  model->Initialize(SplitMixNormalFill(81));
  const auto tokens = Tokens(config.seq_len + 1, 82);
  ExampleEngine<float> engine(config);
  SplitMixDropoutMasks masks(83);
  ExampleHooks hooks{nullptr, nullptr, &masks};
  const float a = engine.Forward(model->parameters(), tokens.data(), 0, hooks);
  const float again = engine.Forward(model->parameters(), tokens.data(), 0, hooks);
  const float other_example = engine.Forward(model->parameters(), tokens.data(), 1, hooks);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, other_example);  // masks are keyed by the example index
  std::vector<uint8_t> keep(100000);
  masks.FillKeepMask(0, 0, DropoutSite::kMlpResidual, 0.3f, keep.data(), keep.size());
  size_t kept = 0;
  for (uint8_t k : keep) kept += k;
  EXPECT_NEAR(static_cast<double>(kept) / keep.size(), 0.7, 0.01);
}

}  // namespace
}  // namespace dgrr::model
