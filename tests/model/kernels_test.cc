// The device kernels (model/kernels.h) run over the emulated grid
// (model/grid.h, cuda-sim) against the CPU layers they mirror: every output
// bit equal, on random inputs and odd sizes; then the whole device engine
// against ExampleEngine<float>, every boundary, loss and gradient; then the
// batch-level kernels (canonical tree sum, clipping, AdamW, dropout masks)
// against the CPU code the trainer runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fingerprint/async_fingerprint.h"
#include "model/adamw.h"
#include "model/batch.h"
#include "model/device_engine.h"
#include "model/gpt.h"
#include "model/grid.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/philox_masks.h"
#include "model/splitmix.h"
#include "rng/rng_streams.h"
#include "runtime/tree_reduce.h"

namespace dgrr::model {
namespace {

using kernels::View;

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  SplitMixStream s(seed);
  for (float& x : v) {
    const double u = static_cast<double>(s.Next() >> 11) * 0x1.0p-53;
    x = static_cast<float>((2 * u - 1) * scale);
  }
  return v;
}

std::vector<uint8_t> Bytes(size_t n, uint64_t seed, unsigned below = 256) {
  std::vector<uint8_t> v(n);
  SplitMixStream s(seed);
  for (uint8_t& x : v) x = static_cast<uint8_t>(s.Below(below));
  return v;
}

// Bitwise equality, naming the first differing element.
void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " cpu " << want[i] << " cuda-sim " << got[i];
      return;
    }
  }
}

class GridKernels : public ::testing::Test {
 protected:
  GridEmulator sim;
};

TEST_F(GridKernels, EmulatorRunsEveryThreadOfEveryBlockOnce) {
  // 300 threads: three blocks of 128, the last partly past the end.
  std::vector<float> out(300, 0.0f);
  sim.Launch(kernels::FillKernel{out.data(), 2.5f, out.size()});
  for (float x : out) ASSERT_EQ(x, 2.5f);
  std::vector<float> none(4, 1.0f);
  sim.Launch(kernels::FillKernel{none.data(), 0.0f, 0});  // an empty grid launches nothing
  EXPECT_EQ(none[0], 1.0f);
}

TEST_F(GridKernels, GemmFormsEqualTheCpuProducts) {
  const int M = 7, K = 13, N = 11;
  const auto a = Random(M * K, 1), b = Random(K * N, 2), bias = Random(N, 3), c0 = Random(M * N, 4);
  // c = a . b + bias (MatmulForward), written.
  std::vector<float> want(M * N), got(M * N, 9.0f);
  MatmulForward(want.data(), a.data(), b.data(), bias.data(), M, K, N);
  kernels::GemmKernel k;
  k.c = {got.data(), N}, k.a = {a.data(), K}, k.b = {b.data(), N}, k.bias = bias.data();
  k.M = M, k.K = K, k.N = N;
  sim.Launch(k);
  ExpectSameBits(want, got, "MatmulForward");
  // c += a^T . b with a stored [K, M] (GemmTransA), accumulated.
  const auto at = Random(K * M, 5);
  want = c0, got = c0;
  GemmTransA(want.data(), at.data(), b.data(), M, K, N, /*accumulate=*/true);
  k = {};
  k.c = {got.data(), N}, k.a = {at.data(), 1, M}, k.b = {b.data(), N};
  k.M = M, k.K = K, k.N = N, k.accumulate = true;
  sim.Launch(k);
  ExpectSameBits(want, got, "GemmTransA");
  // c = a . b^T with b stored [N, K] (GemmTransB).
  const auto bt = Random(N * K, 6);
  GemmTransB(want.data(), a.data(), bt.data(), M, K, N, /*accumulate=*/false);
  k = {};
  k.c = {got.data(), N}, k.a = {a.data(), K}, k.b = {bt.data(), 1, K};
  k.M = M, k.K = K, k.N = N;
  sim.Launch(k);
  ExpectSameBits(want, got, "GemmTransB");
}

TEST_F(GridKernels, LayerNormForwardAndBackwardEqualTheCpu) {
  const int T = 11, C = 19;  // more rows than the CPU's 8-row blocks, and a remainder
  const auto x = Random(T * C, 10, 3.0f), w = Random(C, 11), b = Random(C, 12), dy = Random(T * C, 13);
  std::vector<float> out(T * C), mean(T), rstd(T), out2(T * C), mean2(T), rstd2(T);
  LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), T, C);
  sim.Launch(kernels::LayerNormForwardKernel{out2.data(), mean2.data(), rstd2.data(), x.data(), w.data(),
                                             b.data(), static_cast<size_t>(T), C});
  ExpectSameBits(out, out2, "ln out");
  ExpectSameBits(mean, mean2, "ln mean");
  ExpectSameBits(rstd, rstd2, "ln rstd");
  auto dx = Random(T * C, 14), dw = Random(C, 15), db = Random(C, 16);
  auto dx2 = dx, dw2 = dw, db2 = db;
  LayerNormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), T, C);
  sim.Launch(kernels::LayerNormBackwardInputKernel{dx2.data(), dy.data(), x.data(), w.data(), mean.data(),
                                                   rstd.data(), static_cast<size_t>(T), C});
  sim.Launch(kernels::LayerNormBackwardParamsKernel{dw2.data(), db2.data(), 0, dy.data(), x.data(),
                                                    mean.data(), rstd.data(), T, C, 1});
  ExpectSameBits(dx, dx2, "ln dinp");
  ExpectSameBits(dw, dw2, "ln dweight");
  ExpectSameBits(db, db2, "ln dbias");
}

// AttentionForward/Backward of one example against the score products,
// softmax rows and causal products the device engine launches for it.
TEST_F(GridKernels, AttentionForwardAndBackwardEqualTheCpu) {
  for (bool dropout : {false, true}) {
    SCOPED_TRACE(dropout ? "dropout" : "no dropout");
    const int T = 19, NH = 3, hs = 5, C = NH * hs, C3 = 3 * C;  // T past the CPU's 16-row blocks
    const ptrdiff_t TT = T * T;
    const auto qkv = Random(T * C3, 20, 2.0f), dout = Random(T * C, 21);
    const auto keep = Bytes(NH * TT, 22, 2);
    const float keep_scale = 1.0f / (1.0f - 0.25f), scale = 1.0f / Sqrt(static_cast<float>(hs));
    std::vector<float> out(T * C), pre(NH * TT), att(NH * TT), drop(NH * TT);
    AttentionForward(out.data(), pre.data(), att.data(), dropout ? drop.data() : nullptr, qkv.data(),
                     dropout ? keep.data() : nullptr, keep_scale, T, C, NH);
    std::vector<float> out2(T * C), pre2(NH * TT), att2(NH * TT), drop2(NH * TT);
    kernels::GemmKernel s;
    s.c = {pre2.data(), T, 1, 0, TT}, s.a = {qkv.data(), C3, 1, 0, hs}, s.b = {qkv.data() + C, 1, C3, 0, hs};
    s.M = T, s.K = hs, s.N = T, s.nb2 = NH;
    sim.Launch(s);
    kernels::SoftmaxForwardKernel sm{pre2.data(), att2.data(), dropout ? drop2.data() : nullptr,
                                     dropout ? keep.data() : nullptr, keep_scale, scale, T,
                                     static_cast<size_t>(NH * T)};
    sim.Launch(sm);
    const float* used2 = dropout ? drop2.data() : att2.data();
    kernels::CausalProductKernel y;
    y.c = {out2.data(), C, 1, 0, hs}, y.a = {used2, T, 1, 0, TT}, y.b = {qkv.data() + 2 * C, C3, 1, 0, hs};
    y.T = T, y.N = hs, y.nb2 = NH;
    sim.Launch(y);
    ExpectSameBits(pre, pre2, "preatt");
    ExpectSameBits(att, att2, "att");
    if (dropout) ExpectSameBits(drop, drop2, "att dropped");
    ExpectSameBits(out, out2, "attention out");

    std::vector<float> dqkv(T * C3), datt(NH * TT), dpre(NH * TT);
    AttentionBackward(dqkv.data(), datt.data(), dpre.data(), dout.data(), qkv.data(), att.data(),
                      dropout ? drop.data() : nullptr, dropout ? keep.data() : nullptr, keep_scale, T, C, NH);
    std::vector<float> dqkv2(T * C3, 7.0f), datt2(NH * TT), dpre2(NH * TT);
    kernels::GemmKernel d;
    d.c = {datt2.data(), T, 1, 0, TT}, d.a = {dout.data(), C, 1, 0, hs};
    d.b = {qkv.data() + 2 * C, 1, C3, 0, hs};
    d.M = T, d.K = hs, d.N = T, d.nb2 = NH;
    sim.Launch(d);
    sim.Launch(kernels::SoftmaxBackwardKernel{datt2.data(), dpre2.data(), att.data(),
                                              dropout ? keep.data() : nullptr, keep_scale, scale, T,
                                              static_cast<size_t>(NH * T)});
    kernels::CausalProductKernel p;
    p.T = T, p.N = hs, p.nb2 = NH;
    p.c = {dqkv2.data(), C3, 1, 0, hs}, p.a = {datt2.data(), T, 1, 0, TT}, p.b = {qkv.data() + C, C3, 1, 0, hs};
    p.lower = true;
    sim.Launch(p);
    p.c = {dqkv2.data() + C, C3, 1, 0, hs}, p.a = {datt2.data(), 1, T, 0, TT}, p.b = {qkv.data(), C3, 1, 0, hs};
    p.lower = false;
    sim.Launch(p);
    p.c = {dqkv2.data() + 2 * C, C3, 1, 0, hs}, p.a = {dropout ? drop.data() : att.data(), 1, T, 0, TT};
    p.b = {dout.data(), C, 1, 0, hs};
    sim.Launch(p);
    ExpectSameBits(dpre, dpre2, "dpreatt");
    ExpectSameBits(dqkv, dqkv2, "dqkv");
  }
}

TEST_F(GridKernels, ElementwiseAndLossKernelsEqualTheCpu) {
  const size_t n = 1001;
  const auto x = Random(n, 30, 6.0f), dy = Random(n, 31), acc = Random(n, 32);
  const auto keep = Bytes(n, 33, 2);
  std::vector<float> want(n), got(n);
  GeluForward(want.data(), x.data(), n);
  sim.Launch(kernels::GeluForwardKernel{got.data(), x.data(), n});
  ExpectSameBits(want, got, "gelu");
  want = acc, got = acc;
  GeluBackward(want.data(), x.data(), dy.data(), n);
  sim.Launch(kernels::GeluBackwardKernel{got.data(), x.data(), dy.data(), n});
  ExpectSameBits(want, got, "gelu backward");
  DropoutForward(want.data(), x.data(), keep.data(), 1.25f, n);
  sim.Launch(kernels::DropoutForwardKernel{got.data(), x.data(), keep.data(), 1.25f, n});
  ExpectSameBits(want, got, "dropout");
  want = acc, got = acc;
  DropoutBackward(want.data(), dy.data(), keep.data(), 1.25f, n);
  sim.Launch(kernels::DropoutBackwardKernel{got.data(), dy.data(), keep.data(), 1.25f, n});
  ExpectSameBits(want, got, "dropout backward");
  ResidualForward(want.data(), x.data(), dy.data(), n);
  sim.Launch(kernels::ResidualForwardKernel{got.data(), x.data(), dy.data(), n});
  ExpectSameBits(want, got, "residual");
  auto want2 = dy, got2 = dy;
  want = acc, got = acc;
  ResidualBackward(want.data(), want2.data(), x.data(), n);
  sim.Launch(kernels::ResidualBackwardKernel{got.data(), got2.data(), x.data(), n});
  ExpectSameBits(want, got, "residual backward 1");
  ExpectSameBits(want2, got2, "residual backward 2");

  // Cross-entropy of two examples of T = 5 (windows of T + 1 tokens).
  const int T = 5, V = 256;
  const auto logits = Random(2 * T * V, 34, 8.0f);
  const auto tokens = Bytes(2 * (T + 1), 35);
  std::vector<float> probs(2 * T * V), losses(2 * T), probs2(2 * T * V), losses2(2 * T);
  for (int e = 0; e < 2; ++e) {
    CrossEntropyForward(probs.data() + e * T * V, losses.data() + e * T, logits.data() + e * T * V,
                        tokens.data() + e * (T + 1) + 1, T, V);
  }
  sim.Launch(kernels::CrossEntropyForwardKernel{probs2.data(), losses2.data(), logits.data(), tokens.data(),
                                                T, V, 2 * T});
  ExpectSameBits(probs, probs2, "probs");
  ExpectSameBits(losses, losses2, "token losses");
  std::vector<float> dl(2 * T * V, 0.0f), dl2(2 * T * V, 0.0f), dloss(2 * T, 1.0f / T);
  for (int e = 0; e < 2; ++e) {
    CrossEntropyBackward(dl.data() + e * T * V, probs.data() + e * T * V, tokens.data() + e * (T + 1) + 1,
                         dloss.data() + e * T, T, V);
  }
  sim.Launch(kernels::CrossEntropyBackwardKernel{dl2.data(), probs.data(), tokens.data(), 1.0f / T, T, V, 2});
  ExpectSameBits(dl, dl2, "dlogits");
}

TEST_F(GridKernels, EncoderEqualsTheCpuWithRepeatedTokens) {
  const int T = 9, C = 7, V = 256;
  auto tokens = Bytes(2 * (T + 1), 40, 4);  // few distinct tokens: many repeats
  const auto wte = Random(V * C, 41), wpe = Random(T * C, 42), dout = Random(2 * T * C, 43);
  std::vector<float> out(2 * T * C), out2(2 * T * C);
  for (int e = 0; e < 2; ++e) {
    EncoderForward(out.data() + e * T * C, tokens.data() + e * (T + 1), wte.data(), wpe.data(), T, C);
  }
  sim.Launch(kernels::EncoderForwardKernel{out2.data(), tokens.data(), wte.data(), wpe.data(), T, C, 2});
  ExpectSameBits(out, out2, "encoded");
  // Gradients of two examples in one array of stride V*C + T*C.
  const size_t stride = V * C + T * C;
  auto grads = Random(2 * stride, 44), grads2 = grads;
  for (int e = 0; e < 2; ++e) {
    std::fill(grads.begin() + e * stride + V * C, grads.begin() + (e + 1) * stride, 0.0f);
    std::fill(grads2.begin() + e * stride + V * C, grads2.begin() + (e + 1) * stride, 0.0f);
    EncoderBackward(grads.data() + e * stride, grads.data() + e * stride + V * C, dout.data() + e * T * C,
                    tokens.data() + e * (T + 1), T, C);
  }
  sim.Launch(kernels::EncoderBackwardWteKernel{grads2.data(), stride, dout.data(), tokens.data(), T, C, V, 2});
  sim.Launch(kernels::EncoderBackwardWpeKernel{grads2.data() + V * C, stride, dout.data(), T, C, 2});
  ExpectSameBits(grads, grads2, "dwte, dwpe");
}

TEST_F(GridKernels, TreeSumEqualsTheCanonicalTreeForEveryCount) {
  const size_t n = 37;
  for (size_t count = 1; count <= 21; ++count) {
    SCOPED_TRACE(count);
    auto data = Random(count * n, 50 + count, 1e3f), data2 = data;
    std::vector<float*> buffers;
    for (size_t i = 0; i < count; ++i) buffers.push_back(data.data() + i * n);
    TreeReduceInPlace(buffers, n, 1);
    sim.Launch(kernels::TreeSumKernel{data2.data(), n, count, n});
    ExpectSameBits(std::vector<float>(data.begin(), data.begin() + n),
                   std::vector<float>(data2.begin(), data2.begin() + n), "tree sum");
  }
}

// The sum of squares loads a batch ahead of its chain; every length around
// the batch (empty, shorter, exact multiples, tails) gives the plain loop's
// double bit for bit, including gradients whose squares underflow or are
// huge.
TEST_F(GridKernels, SumOfSquaresIsThePlainChainForEveryLengthAroundTheBatch) {
  constexpr size_t kBatch = kernels::SumOfSquaresKernel::kBatch;
  // Exponents spread over 2^-20..2^20, so that partial sums round and any
  // other order of the terms would show.
  auto grad = Random(5 * kBatch + 7, 62, 3.0f);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = std::ldexp(grad[i], static_cast<int>((i * 7919) % 41) - 20);
  grad[3] = 1e-30f, grad[kBatch + 2] = -2e-45f;
  DeviceArray<double> out(&sim, 1);
  for (size_t n : {size_t{0}, size_t{1}, kBatch - 1, kBatch, kBatch + 1, 2 * kBatch - 1, 2 * kBatch,
                   2 * kBatch + 1, 3 * kBatch + 5, 5 * kBatch + 7}) {
    double plain = 0.0;
    for (size_t i = 0; i < n; ++i) plain = std::fma(double{grad[i]}, double{grad[i]}, plain);
    sim.Launch(kernels::SumOfSquaresKernel{out.data(), grad.data(), n});
    double got = -1.0;
    sim.CopyToHost(&got, out.data(), sizeof got);
    EXPECT_EQ(std::memcmp(&got, &plain, sizeof got), 0) << "n = " << n << ": " << got << " vs " << plain;
  }
}

TEST_F(GridKernels, ClippingAndAdamWEqualTheCpu) {
  GptConfig config;
  config.seq_len = 5, config.num_layers = 1, config.channels = 6, config.num_heads = 2;
  const ParameterLayout layout(config);
  const size_t n = layout.total_size();
  auto params = Random(n, 60), grad = Random(n, 61, 4.0f);
  auto params2 = params, grad2 = grad;
  for (float max_norm : {0.5f, 1e9f}) {  // clipping and not
    auto g = grad, g2 = grad;
    const float norm = ClipGradientsByGlobalNorm(g.data(), n, max_norm);
    const float norm2 = ClipGradientsByGlobalNorm(g2.data(), n, max_norm, &sim);
    EXPECT_EQ(std::memcmp(&norm, &norm2, sizeof norm), 0);
    ExpectSameBits(g, g2, "clipped gradient");
  }
  AdamW cpu(layout, AdamWOptions{0.9f, 0.95f, 1e-8f, 0.1f}), dev(layout, AdamWOptions{0.9f, 0.95f, 1e-8f, 0.1f});
  dev.set_launcher(&sim);
  for (int step = 0; step < 3; ++step) {
    cpu.Step(params.data(), grad.data(), 1e-2f);
    dev.Step(params2.data(), grad2.data(), 1e-2f);
  }
  ExpectSameBits(params, params2, "AdamW parameters");
  ExpectSameBits(cpu.m(), dev.m(), "AdamW m");
  ExpectSameBits(cpu.v(), dev.v(), "AdamW v");
}

TEST_F(GridKernels, DropoutMasksDrawnPerElementEqualTheSequentialStream) {
  const rng::RngStreams streams(1234);
  const size_t per_example = 301;  // not a multiple of Philox's four words
  for (double p : {0.0, 0.1, 0.5}) {
    const uint64_t threshold = rng::BernoulliThresholdUnchecked(1.0 - p);
    std::vector<uint8_t> want(3 * per_example), got(3 * per_example, 7);
    for (int e = 0; e < 3; ++e) {
      rng::FillDropoutKeepMask(streams, 5, 10 + e, 1, 2, threshold, want.data() + e * per_example, per_example);
    }
    kernels::DropoutMaskKernel k;
    k.keep = got.data(), k.seed = 1234, k.step = 5, k.first_example = 10, k.layer = 1, k.site = 2;
    k.threshold = threshold, k.per_example = per_example, k.count = 3;
    sim.Launch(k);
    EXPECT_EQ(want, got) << "p = " << p;
  }
}

// ---------------------------------------------------------------- the engine

// Every boundary's bytes, by (example, name); thread-safe.
class BytesObserver : public BoundaryObserver {
 public:
  void OnBoundary(std::string_view name, Phase, Operator, bool, const float* data, std::span<const int64_t> dims,
                  uint64_t first_example, uint32_t) override {
    size_t count = 1;
    for (int64_t d : dims) count *= static_cast<size_t>(d);
    std::lock_guard<std::mutex> lock(mu_);
    seen[{first_example, std::string(name)}] = std::vector<float>(data, data + count);
    order.push_back(std::string(name));
  }
  std::mutex mu_;
  std::map<std::pair<uint64_t, std::string>, std::vector<float>> seen;
  std::vector<std::string> order;
};

void ExpectEngineEqualsCpu(const GptConfig& config, const DropoutMaskSource* masks, size_t count) {
  Gpt model = *Gpt::Create(config);
  model.Initialize(SplitMixNormalFill(7));
  const size_t np = model.num_parameters(), window = config.seq_len + 1;
  const auto tokens = Bytes(count * window, 70);
  ExampleEngine<float> cpu(config, count);
  GridEmulator sim;
  DeviceEngine dev(config, &sim, count);
  BytesObserver seen_cpu, seen_dev;
  ExampleHooks hooks_cpu{&seen_cpu, nullptr, masks}, hooks_dev{&seen_dev, nullptr, masks};
  std::vector<float> losses(count), losses2(count), grads(count * np, 5.0f), grads2(count * np, 6.0f);
  std::vector<float*> pointers;
  for (size_t e = 0; e < count; ++e) pointers.push_back(grads.data() + e * np);
  cpu.ForwardBlock(model.parameters(), tokens.data(), count, 100, hooks_cpu, losses.data());
  cpu.BackwardBlock(model.parameters(), tokens.data(), count, 100, pointers.data(), hooks_cpu);
  dev.ForwardBlock(model.parameters(), tokens.data(), count, 100, hooks_dev, losses2.data());
  dev.BackwardBlock(model.parameters(), tokens.data(), count, 100, grads2.data(), np, hooks_dev);
  ExpectSameBits(losses, losses2, "losses");
  ExpectSameBits(grads, grads2, "parameter gradients");
  EXPECT_EQ(seen_cpu.order, seen_dev.order);
  ASSERT_GT(seen_cpu.seen.size(), 40u * count);  // every per-example boundary, each example
  ASSERT_EQ(seen_cpu.seen.size(), seen_dev.seen.size());
  for (const auto& [key, want] : seen_cpu.seen) {
    ExpectSameBits(want, seen_dev.seen[key], key.second.c_str());
  }
}

// The emulator, seen as a device whose memory the host does not read: every
// tensor the engine hands to the host goes through CopyToHost, counted.
class CountingDevice final : public Launcher {
 public:
  Device device() const override { return Device::kCudaSim; }
  bool host_memory() const override { return false; }
  void* Alloc(size_t bytes) override {
    ++allocations;
    return sim_.Alloc(bytes);
  }
  void Free(void* p) override { sim_.Free(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    ++copies_to_device;
    sim_.CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    ++copies_to_host;
    sim_.CopyToHost(dst, src, bytes);
  }
  void Synchronize() override {}
#define DGRR_FORWARD_LAUNCH(K) \
  void Launch(const kernels::K& k) override { sim_.Launch(k); }
  DGRR_MODEL_KERNELS(DGRR_FORWARD_LAUNCH)
#undef DGRR_FORWARD_LAUNCH
  int copies_to_host = 0, copies_to_device = 0, allocations = 0;

 private:
  GridEmulator sim_;
};

// Clipping and AdamW on a device whose memory the host does not read: each
// step the CPU's bits and the CPU's boundaries in the CPU's order, one
// launch, the arrays up once and back once (5 copies up with the segment
// table, 3 back), and no allocation after the first step.
TEST(DeviceAdamWTest, EveryTensorInOneLaunchWithTheCpusBitsAndBoundaries) {
  GptConfig config;
  config.seq_len = 5, config.num_layers = 2, config.channels = 6, config.num_heads = 2;
  const ParameterLayout layout(config);
  const size_t n = layout.total_size();
  auto params = Random(n, 80), grad = Random(n, 81, 2.0f);
  auto params2 = params;
  const AdamWOptions options{0.9f, 0.95f, 1e-8f, 0.1f};
  CountingDevice device;  // outlives the AdamW that keeps buffers of its
  AdamW cpu(layout, options), dev(layout, options);
  dev.set_launcher(&device);
  int allocations_after_first = -1;
  for (int step = 0; step < 3; ++step) {
    BytesObserver seen_cpu, seen_dev;
    // Clipping in the same buffers: one copy up, the sum back, the clipped
    // gradient back; the CPU's norm and gradient.
    auto g_cpu = grad, g_dev = grad;
    int up = device.copies_to_device, down = device.copies_to_host;
    const float norm_cpu = cpu.ClipGradients(g_cpu.data(), 0.5f), norm_dev = dev.ClipGradients(g_dev.data(), 0.5f);
    EXPECT_EQ(std::memcmp(&norm_cpu, &norm_dev, sizeof norm_cpu), 0);
    ExpectSameBits(g_cpu, g_dev, "clipped gradient");
    EXPECT_EQ(device.copies_to_device - up, 1);
    EXPECT_EQ(device.copies_to_host - down, 2);
    up = device.copies_to_device, down = device.copies_to_host;
    cpu.Step(params.data(), g_cpu.data(), 1e-2f, &seen_cpu, 8, 4);
    dev.Step(params2.data(), g_dev.data(), 1e-2f, &seen_dev, 8, 4);
    EXPECT_EQ(device.copies_to_device - up, 5);
    EXPECT_EQ(device.copies_to_host - down, 3);
    ExpectSameBits(params, params2, "AdamW parameters");
    ExpectSameBits(cpu.m(), dev.m(), "AdamW m");
    ExpectSameBits(cpu.v(), dev.v(), "AdamW v");
    EXPECT_EQ(seen_cpu.order, seen_dev.order);
    ASSERT_EQ(seen_cpu.order.size(), 4 * layout.tensors().size());
    for (const auto& [key, want] : seen_cpu.seen) ExpectSameBits(want, seen_dev.seen[key], key.second.c_str());
    if (step == 0) allocations_after_first = device.allocations;
  }
  EXPECT_EQ(device.allocations, allocations_after_first) << "buffers kept from the first step";
}

// Ranges of every length (empty ones included) in separate buffers, zeroed
// in one launch; the floats around them untouched.
TEST_F(GridKernels, ZeroRangesZeroesExactlyItsRanges) {
  std::vector<float> a(50, 7.0f), b(9, 8.0f);
  std::vector<kernels::ZeroRange> ranges;
  size_t total = 0;
  for (auto [p, n] : {std::pair{a.data() + 3, size_t{10}}, std::pair{a.data() + 20, size_t{0}},
                      std::pair{a.data() + 20, size_t{1}}, std::pair{b.data(), size_t{9}},
                      std::pair{a.data() + 30, size_t{19}}}) {
    ranges.push_back(kernels::ZeroRange{p, n, total});
    total += n;
  }
  sim.Launch(kernels::ZeroRangesKernel{ranges.data(), ranges.size(), total});
  for (size_t i = 0; i < a.size(); ++i) {
    const bool zeroed = (i >= 3 && i < 13) || i == 20 || (i >= 30 && i < 49);
    EXPECT_EQ(a[i], zeroed ? 0.0f : 7.0f) << i;
    if (zeroed) EXPECT_FALSE(std::signbit(a[i])) << i;
  }
  for (float x : b) EXPECT_EQ(x, 0.0f);
}

// A segment table with a gap and one-element segments: elements outside
// every segment are left alone, the others get their segment's coefficients.
TEST_F(GridKernels, AdamWSegmentsLeaveGapsAloneAndUseEachSegmentsCoefficients) {
  const size_t n = 40;
  auto p = Random(n, 90), m = Random(n, 91, 0.1f), v = Random(n, 92, 0.1f), g = Random(n, 93);
  for (float& x : v) x = std::fabs(x);
  const AdamWCoefficients a{0.9f, 0.95f, 0.1f, 0.05f, 0.5f, 0.25f, 1e-2f, 1e-8f, 0.0f};
  AdamWCoefficients b = a;
  b.wd = 0.3f;
  const std::vector<kernels::AdamWSegment> segments = {{0, 10, a}, {10, 11, b}, {15, 16, a}, {16, 40, b}};
  auto want_p = p, want_m = m, want_v = v;
  for (size_t i = 0; i < n; ++i) {
    if (i >= 11 && i < 15) continue;  // the gap
    AdamWUpdateAt((i < 10 || i == 15) ? a : b, want_p[i], want_m[i], want_v[i], g[i]);
  }
  sim.Launch(kernels::AdamWSegmentsKernel{p.data(), m.data(), v.data(), g.data(), segments.data(), segments.size(), n});
  ExpectSameBits(want_p, p, "p");
  ExpectSameBits(want_m, m, "m");
  ExpectSameBits(want_v, v, "v");
}

// Wants the boundaries whose names contain `part` ("" for all); counts the
// calls it gets and refuses nothing it was not asked for.
class PickyObserver final : public BoundaryObserver {
 public:
  explicit PickyObserver(std::string part) : part_(std::move(part)) {}
  bool Wants(std::string_view name, Phase) const override { return name.find(part_) != std::string_view::npos; }
  void OnBoundary(std::string_view name, Phase phase, Operator, bool, const float*, std::span<const int64_t>,
                  uint64_t, uint32_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls;
    if (!Wants(name, phase)) ++unwanted;
  }
  int calls = 0;
  int unwanted = 0;

 private:
  std::mutex mu_;
  std::string part_;
};

GptConfig OddConfig(float dropout);

// A two-layer model with `count` examples of tokens, run through a
// DeviceEngine on any launcher with any observer.
struct EngineRun {
  EngineRun(uint64_t seed, size_t examples) : config(OddConfig(0)), model(*Gpt::Create(config)), count(examples) {
    model.Initialize(SplitMixNormalFill(seed));
    np = model.num_parameters();
    tokens = Bytes(count * (config.seq_len + 1), 60 + seed);
  }
  // Forward and backward of every example; the losses and gradients.
  std::pair<std::vector<float>, std::vector<float>> Run(Launcher* device, BoundaryObserver* observer,
                                                        AsyncFingerprinter* fingerprinter = nullptr) {
    DeviceEngine engine(config, device, count);
    if (fingerprinter != nullptr) engine.set_fingerprinter(fingerprinter);
    ExampleHooks hooks{observer, nullptr, nullptr};
    std::vector<float> losses(count), grads(count * np);
    engine.ForwardBlock(model.parameters(), tokens.data(), count, 0, hooks, losses.data());
    engine.BackwardBlock(model.parameters(), tokens.data(), count, 0, grads.data(), np, hooks);
    return {losses, grads};
  }
  GptConfig config;
  Gpt model;
  size_t count, np = 0;
  std::vector<uint8_t> tokens;
};

// On a device, a boundary the observer does not want is not copied to the
// host at all (a recording mode that skips it costs nothing there), and the
// arithmetic is the same whatever the observer wants.
TEST(DeviceEngineObserver, ABoundaryTheObserverDoesNotWantIsNeverCopiedToTheHost) {
  EngineRun setup(11, 2);
  const int count = static_cast<int>(setup.count);
  struct Result {
    int copies, calls, unwanted;
    std::vector<float> losses, grads;
  };
  auto run = [&](const char* part) {
    CountingDevice device;
    PickyObserver observer(part);
    auto [losses, grads] = setup.Run(&device, &observer);
    return Result{device.copies_to_host, observer.calls, observer.unwanted, losses, grads};
  };
  const Result all = run(""), some = run("ln"), none = run("no boundary is called this");
  ASSERT_GT(all.calls, 40 * count);
  EXPECT_EQ(none.calls, 0);
  EXPECT_GT(some.calls, 0);
  EXPECT_LT(some.calls, all.calls);
  EXPECT_EQ(all.unwanted + some.unwanted + none.unwanted, 0);
  // One copy to the host per boundary handed over, and none for the others;
  // the loss, a host value already, is handed over without one (per example).
  EXPECT_EQ(all.copies - none.copies, all.calls - count);
  EXPECT_EQ(some.copies - none.copies, some.calls);
  ExpectSameBits(all.losses, none.losses, "losses");
  ExpectSameBits(all.grads, none.grads, "parameter gradients");
  ExpectSameBits(all.losses, some.losses, "losses");
}

// Takes fingerprints where it can; keeps what it got by (example, name).
class FingerprintObserver final : public BoundaryObserver {
 public:
  bool TakesFingerprint(std::string_view, Phase) const override { return true; }
  void OnBoundaryFingerprint(std::string_view name, Phase, Operator, bool, const Fingerprint& fp,
                             std::span<const int64_t>, uint64_t first_example, uint32_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    got[{first_example, std::string(name)}] = fp;
    order.push_back(std::to_string(first_example) + " " + std::string(name));
  }
  void OnBoundary(std::string_view name, Phase, Operator, bool, const float* data, std::span<const int64_t> dims,
                  uint64_t first_example, uint32_t) override {
    size_t count = 1;
    for (int64_t d : dims) count *= static_cast<size_t>(d);
    std::lock_guard<std::mutex> lock(mu_);
    got[{first_example, std::string(name)}] = FingerprintBytes(data, count * sizeof(float));
    order.push_back(std::to_string(first_example) + " " + std::string(name));
    ++handed_bytes;
  }
  std::map<std::pair<uint64_t, std::string>, Fingerprint> got;
  std::vector<std::string> order;  // every call, in order
  int handed_bytes = 0;

 private:
  std::mutex mu_;
};

// An observer that takes fingerprints gets, for every boundary, the
// fingerprint of exactly the bytes another observer is handed, on the
// emulator (fingerprinted in place) and on a device whose memory the host
// does not read (here: from a copy; on CUDA, on the device).
TEST(DeviceEngineObserver, FingerprintsHandedOverAreThoseOfTheBytes) {
  EngineRun setup(12, 2);
  GridEmulator reference_device;
  BytesObserver bytes;
  setup.Run(&reference_device, &bytes);
  ASSERT_GT(bytes.seen.size(), 40u * setup.count);
  GridEmulator sim;
  CountingDevice opaque;
  for (Launcher* device : {static_cast<Launcher*>(&sim), static_cast<Launcher*>(&opaque)}) {
    FingerprintObserver fps;
    setup.Run(device, &fps);
    EXPECT_EQ(fps.handed_bytes, static_cast<int>(setup.count)) << "only the loss, a host value, comes as bytes";
    ASSERT_EQ(fps.got.size(), bytes.seen.size());
    for (const auto& [key, data] : bytes.seen) {
      EXPECT_EQ(fps.got[key], FingerprintBytes(data.data(), data.size() * sizeof(float))) << key.second;
    }
  }
}

// A device fingerprinter for memory the host can read (the counting
// device's): computes each fingerprint when it is enqueued, hands it out at
// Wait, and notes how many were waiting when each wait came.
class EagerFingerprinter final : public AsyncFingerprinter {
 public:
  StatusOr<Ticket> Enqueue(const TensorRef& tensor) override {
    results_[next_] = FingerprintBytes(tensor.data, tensor.bytes);
    ++enqueued;
    return next_++;
  }
  StatusOr<std::optional<Fingerprint>> Poll(Ticket ticket) override { return std::optional<Fingerprint>(*Wait(ticket)); }
  StatusOr<Fingerprint> Wait(Ticket ticket) override {
    auto it = results_.find(ticket);
    if (it == results_.end()) return Status::InvalidArgument("unknown ticket");
    max_waiting = std::max(max_waiting, results_.size());
    const Fingerprint fp = it->second;
    results_.erase(it);
    ++waited;
    return fp;
  }
  StatusOr<Ticket> EnqueueSegments(std::span<const MemorySegment>, const Placement&) override {
    return Status::InvalidArgument("not used here");
  }
  Status CopyToHost(const void*, uint64_t, const Placement&, void*) override { return Status::InvalidArgument("unused"); }
  Status CopyToDevice(const void*, uint64_t, const Placement&, void*) override {
    return Status::InvalidArgument("unused");
  }
  size_t enqueued = 0, waited = 0, max_waiting = 0;
  size_t pending() const { return results_.size(); }

 private:
  std::map<Ticket, Fingerprint> results_;
  Ticket next_ = 1;
};

// With a device fingerprinter, the engine enqueues each boundary's
// fingerprint behind the kernel that wrote it and hands them over in a batch
// when the block's work is done: the observer gets the same fingerprints in
// the same order as when each is computed at once, no boundary tensor comes
// to the host, and the host waits once a block, not once a boundary.
TEST(DeviceEngineObserver, FingerprintsEnqueuedOnTheDeviceComeInTheSameOrderInOneWaitABlock) {
  EngineRun setup(13, 2);
  CountingDevice at_once_device, deferred_device;
  FingerprintObserver at_once, deferred;
  EagerFingerprinter device_fingerprints;
  const auto plain = setup.Run(&at_once_device, &at_once);
  const auto timed = setup.Run(&deferred_device, &deferred, &device_fingerprints);
  ASSERT_GT(at_once.got.size(), 40u * setup.count);
  EXPECT_EQ(deferred.order, at_once.order);
  EXPECT_EQ(deferred.got, at_once.got);
  EXPECT_EQ(device_fingerprints.enqueued, at_once.got.size() - setup.count) << "every boundary but the losses";
  EXPECT_EQ(device_fingerprints.waited, device_fingerprints.enqueued);
  EXPECT_EQ(device_fingerprints.pending(), 0u);
  // Each block's boundaries wait together: the forward's and the backward's.
  EXPECT_GT(device_fingerprints.max_waiting, 15u * setup.count);
  // Only the losses come to the host (one copy a block), none of the tensors.
  EXPECT_EQ(deferred_device.copies_to_host, 1);
  EXPECT_GT(at_once_device.copies_to_host, 40 * static_cast<int>(setup.count));
  ExpectSameBits(plain.first, timed.first, "losses");
  ExpectSameBits(plain.second, timed.second, "parameter gradients");
}

GptConfig OddConfig(float dropout) {
  GptConfig c;
  c.seq_len = 7, c.num_layers = 2, c.channels = 12, c.num_heads = 3;
  c.attn_dropout = c.resid_dropout = dropout;
  return c;
}

TEST(GridEngine, EqualsTheCpuEngineEveryBoundaryWithoutDropout) {
  ExpectEngineEqualsCpu(OddConfig(0), nullptr, 3);
}

TEST(GridEngine, EqualsTheCpuEngineWithMasksDrawnOnTheDevice) {
  PhiloxDropoutMasks masks(99, 4);
  ExpectEngineEqualsCpu(OddConfig(0.2f), &masks, 3);
}

TEST(GridEngine, EqualsTheCpuEngineWithMasksFilledOnTheHost) {
  SplitMixDropoutMasks masks(5);
  ExpectEngineEqualsCpu(OddConfig(0.2f), &masks, 2);
}

TEST(GridEngine, BatchGradientsOnCudaSimEqualTheCpuForAnyThreadCount) {
  GptConfig config = OddConfig(0.1f);
  Gpt model = *Gpt::Create(config);
  model.Initialize(SplitMixNormalFill(3));
  const size_t count = 5, window = config.seq_len + 1, np = model.num_parameters();
  const auto tokens = Bytes(count * window, 80);
  PhiloxDropoutMasks masks(1, 2);
  ExampleHooks hooks{nullptr, nullptr, &masks};
  BatchGradients cpu(config, 1, count);
  std::vector<float> want(np), got(np);
  auto loss = cpu.ComputeMeanGradient(model.parameters(), tokens.data(), count, 0, hooks, want.data());
  ASSERT_TRUE(loss.ok());
  for (int threads : {1, 2}) {
    BatchGradients sim(config, threads, count, Device::kCudaSim);
    ASSERT_TRUE(sim.device_status().ok());
    auto loss2 = sim.ComputeMeanGradient(model.parameters(), tokens.data(), count, 0, hooks, got.data());
    ASSERT_TRUE(loss2.ok());
    EXPECT_EQ(std::memcmp(&*loss, &*loss2, sizeof(float)), 0);
    ExpectSameBits(want, got, "mean gradient");
  }
}

// The canonical reduction's node sums on the device: for every sub-range of
// a batch, the tree-sum kernel's sum is the host tree's, and a bad range is
// refused.
TEST(GridEngine, ReduceNodeOnCudaSimEqualsTheHostTreeForEveryRange) {
  GptConfig config = OddConfig(0.0f);
  Gpt model = *Gpt::Create(config);
  model.Initialize(SplitMixNormalFill(4));
  const size_t count = 6, window = config.seq_len + 1, np = model.num_parameters();
  const auto tokens = Bytes(count * window, 81);
  ExampleHooks hooks;
  BatchGradients cpu(config, 1, count), sim(config, 2, count, Device::kCudaSim);
  for (size_t begin = 0; begin < count; ++begin) {
    for (size_t n = 1; begin + n <= count; ++n) {
      SCOPED_TRACE(testing::Message() << "examples [" << begin << ", " << begin + n << ")");
      ASSERT_TRUE(cpu.ComputeExamples(model.parameters(), tokens.data(), count, 0, hooks).ok());
      ASSERT_TRUE(sim.ComputeExamples(model.parameters(), tokens.data(), count, 0, hooks).ok());
      std::vector<float*> buffers(cpu.gradients().begin() + static_cast<std::ptrdiff_t>(begin),
                                  cpu.gradients().begin() + static_cast<std::ptrdiff_t>(begin + n));
      TreeReduceInPlace(buffers, np, 1);
      const std::vector<float> want(buffers[0], buffers[0] + np);
      auto got = sim.ReduceNode(begin, n);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ExpectSameBits(want, std::vector<float>(*got, *got + np), "node sum");
    }
  }
  EXPECT_FALSE(sim.ReduceNode(4, 3).ok());
  EXPECT_FALSE(sim.ReduceNode(0, 0).ok());
}

TEST(GridEngine, DeviceNamesParse) {
  EXPECT_EQ(*ParseDevice("cpu"), Device::kCpu);
  EXPECT_EQ(*ParseDevice("cuda-sim"), Device::kCudaSim);
  EXPECT_EQ(*ParseDevice("cuda"), Device::kCuda);
  EXPECT_FALSE(ParseDevice("gpu").ok());
  EXPECT_STREQ(DeviceName(Device::kCudaSim), "cuda-sim");
}

}  // namespace
}  // namespace dgrr::model
