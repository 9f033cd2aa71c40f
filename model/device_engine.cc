#include "model/device_engine.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include "fingerprint/fingerprint.h"
#if DGRR_FINGERPRINT_HAVE_CUDA
#include "fingerprint/fingerprint_cuda.h"
#endif
#include "model/adamw.h"
#include "rng/distributions.h"

namespace dgrr::model {

// ---------------------------------------------------------------- launchers

const char* DeviceName(Device device) {
  switch (device) {
    case Device::kCpu: return "cpu";
    case Device::kCudaSim: return "cuda-sim";
    case Device::kCuda: return "cuda";
  }
  return "unknown";
}

StatusOr<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda-sim") return Device::kCudaSim;
  if (name == "cuda") return Device::kCuda;
  return Status::InvalidArgument("unknown device '" + std::string(name) +
                                 "' (known: cpu, cuda-sim, cuda)");
}

void* GridEmulator::Alloc(size_t bytes) {
  void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
  if (p == nullptr) {
    std::fprintf(stderr, "dgrr::model: cuda-sim: out of memory allocating %zu bytes\n", bytes);
    std::abort();
  }
  return p;
}
void GridEmulator::Free(void* p) { std::free(p); }
namespace {
// `f` run and, where kernel times are asked for, timed by the host's clock
// (the emulator runs everything on the calling thread, in order).
template <typename F>
void TimedOnHost(KernelTimes* times, const char* name, uint64_t bytes, F&& f) {
  if (times == nullptr) {
    f();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  f();
  times->Add(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), bytes);
}
}  // namespace

void GridEmulator::CopyToDevice(void* dst, const void* src, size_t bytes) {
  TimedOnHost(times_.get(), "copy to device", bytes, [&] {
    if (bytes) std::memcpy(dst, src, bytes);
  });
}
void GridEmulator::CopyToHost(void* dst, const void* src, size_t bytes) {
  TimedOnHost(times_.get(), "copy to host", bytes, [&] {
    if (bytes) std::memcpy(dst, src, bytes);
  });
}
#define DGRR_DEFINE_LAUNCH(K) \
  void GridEmulator::Launch(const kernels::K& k) { TimedOnHost(times_.get(), #K, 0, [&] { EmulateGrid(k); }); }
DGRR_MODEL_KERNELS(DGRR_DEFINE_LAUNCH)
#undef DGRR_DEFINE_LAUNCH

#if defined(DGRR_MODEL_HAVE_CUDA)
// model/kernels_cuda.cu.
StatusOr<std::unique_ptr<Launcher>> MakeCudaLauncher(GemmBackend gemm);
bool CudaLauncherBuilt() { return true; }
#else
bool CudaLauncherBuilt() { return false; }
#endif

StatusOr<std::unique_ptr<Launcher>> MakeLauncher(Device device, GemmBackend gemm) {
  if (gemm == GemmBackend::kCublas && device != Device::kCuda) {
    return Status::InvalidArgument("--gemm cublas runs on --device cuda only");
  }
  switch (device) {
    case Device::kCudaSim: {
      DGRR_ASSIGN_OR_RETURN(std::unique_ptr<KernelTimes> times,
                            KernelTimes::FromEnvironment(DeviceName(device), kEmulatorClock));
      std::unique_ptr<Launcher> launcher(new GridEmulator());
      launcher->set_kernel_times(std::move(times));
      return launcher;
    }
    case Device::kCuda:
#if defined(DGRR_MODEL_HAVE_CUDA)
    {
      DGRR_ASSIGN_OR_RETURN(std::unique_ptr<Launcher> launcher, MakeCudaLauncher(gemm));
      DGRR_ASSIGN_OR_RETURN(std::unique_ptr<KernelTimes> times,
                            KernelTimes::FromEnvironment(DeviceName(device), kCudaClock));
      launcher->set_kernel_times(std::move(times));
      return launcher;
    }
#else
      return Status::FailedPrecondition(
          "--device cuda: this dgrr was built without CUDA (no nvcc at configure time)");
#endif
    case Device::kCpu: break;
  }
  return Status::InvalidArgument("the cpu device has no kernel launcher");
}

// ---------------------------------------------------------------- engine

namespace {
const Boundary kEmbedOut{"embed.out", Operator::kEmbedding};
const Boundary kLnfOut{"lnf.out", Operator::kNorm};
const Boundary kLogits{"lm_head.logits", Operator::kMatmul};
const Boundary kLoss{"loss", Operator::kLoss};
const Boundary kLossDinp{"loss.dinp", Operator::kLoss};
const Boundary kLmHeadDinp{"lm_head.dinp", Operator::kMatmul};
const Boundary kLnfDinp{"lnf.dinp", Operator::kNorm};

using kernels::View;

// A contiguous row-major matrix with row stride rs.
template <typename P>
View<P> Rows(P* p, ptrdiff_t rs, ptrdiff_t bs1 = 0, ptrdiff_t bs2 = 0) {
  return View<P>{p, rs, 1, bs1, bs2};
}
// A matrix read transposed: element (m, k) at p[k*ld + m].
template <typename P>
View<P> Cols(P* p, ptrdiff_t ld, ptrdiff_t bs1 = 0, ptrdiff_t bs2 = 0) {
  return View<P>{p, 1, ld, bs1, bs2};
}
}  // namespace

DeviceEngine::DeviceEngine(const GptConfig& config, Launcher* launcher, size_t max_examples)
    : config_(config),
      layout_(config),
      names_(config.num_layers),
      launcher_(launcher),
      max_examples_(std::max<size_t>(1, max_examples)),
      attn_keep_scale_(1.0f / (1.0f - config.attn_dropout)),
      resid_keep_scale_(1.0f / (1.0f - config.resid_dropout)) {
  const size_t B = max_examples_;
  const size_t T = static_cast<size_t>(config.seq_len) * B, C = config.channels,
               V = config.vocab_size, NH = config.num_heads;
  const size_t TC = T * C, att = NH * config.seq_len * config.seq_len * B;
  const bool attn_drop = config.attn_dropout > 0, resid_drop = config.resid_dropout > 0;
  Launcher* L = launcher_;
  auto f = [L](size_t n) { return DeviceArray<float>(L, n); };
  auto u8 = [L](size_t n) { return DeviceArray<uint8_t>(L, n); };
  tokens_ = u8((static_cast<size_t>(config.seq_len) + 1) * B);
  encoded_ = f(TC), lnf_ = f(TC), lnf_mean_ = f(T), lnf_rstd_ = f(T);
  logits_ = f(T * V), probs_ = f(T * V), token_losses_ = f(T), losses_ = f(B);
  dencoded_ = f(TC), dlnf_ = f(TC), dlogits_ = f(T * V);
  acts_.resize(config.num_layers);
  grads_.resize(config.num_layers);
  for (LayerActs& a : acts_) {
    a.ln1 = f(TC), a.ln1_mean = f(T), a.ln1_rstd = f(T), a.qkv = f(3 * TC);
    a.preatt = f(att), a.att = f(att), a.atty = f(TC), a.attproj = f(TC);
    a.res2 = f(TC), a.ln2 = f(TC), a.ln2_mean = f(T), a.ln2_rstd = f(T);
    a.fch = f(4 * TC), a.fch_gelu = f(4 * TC), a.fcproj = f(TC), a.res3 = f(TC);
    if (attn_drop) a.att_dropped = f(att), a.keep_att = u8(att);
    if (resid_drop) {
      a.attproj_dropped = f(TC), a.fcproj_dropped = f(TC);
      a.keep_attproj = u8(TC), a.keep_fcproj = u8(TC);
    }
  }
  for (LayerGrads& g : grads_) {
    g.ln1 = f(TC), g.qkv = f(3 * TC), g.preatt = f(att), g.att = f(att);
    g.atty = f(TC), g.attproj = f(TC), g.res2 = f(TC), g.ln2 = f(TC);
    g.fch = f(4 * TC), g.fch_gelu = f(4 * TC), g.fcproj = f(TC), g.res3 = f(TC);
    if (resid_drop) g.attproj_dropped = f(TC), g.fcproj_dropped = f(TC);
  }
  // As ExampleEngine: the parameter gradients that are summed into (biases,
  // layernorms, wpe) are zeroed first; the products write the others.
  for (size_t i = 0; i < layout_.tensors().size(); ++i) {
    const NamedTensor& t = layout_.tensors()[i];
    bool written = t.offset == layout_.wte();
    for (int l = 0; l < config.num_layers; ++l) {
      const BlockOffsets& o = layout_.block(l);
      written = written || t.offset == o.qkv_w || t.offset == o.attn_proj_w ||
                t.offset == o.fc_w || t.offset == o.mlp_proj_w;
    }
    if (!written) accumulated_tensors_.push_back(i);
  }
}

void DeviceEngine::Observe(const Boundary& boundary, Phase phase, float* data,
                           std::initializer_list<int64_t> dims, uint64_t example,
                           const ExampleHooks& hooks) {
  const bool observe = hooks.observer != nullptr && hooks.observer->Wants(boundary.name, phase);
  if (!observe && hooks.mutator == nullptr) return;
  size_t count = 1;
  for (int64_t d : dims) count *= static_cast<size_t>(d);
  if (observe && hooks.mutator == nullptr && hooks.observer->TakesFingerprint(boundary.name, phase)) {
    if (AsyncFingerprinter* f = Fingerprinter(); f != nullptr && dims.size() <= kMaxTensorDims) {
      TensorRef tensor = MakeBytesRef(data, count * sizeof(float));
      tensor.where = Placement::Cuda(launcher_->device_ordinal(), nullptr);  // the launcher's stream
      StatusOr<AsyncFingerprinter::Ticket> ticket = f->Enqueue(tensor);
      if (ticket.ok()) {
        PendingFingerprint p{&boundary, phase, {}, dims.size(), example, hooks.observer, *ticket};
        std::copy(dims.begin(), dims.end(), p.dims);
        pending_.push_back(p);
        return;
      }
    }
    HandOverFingerprints();
    hooks.observer->OnBoundaryFingerprint(boundary.name, phase, boundary.op, /*is_output=*/true,
                                          FingerprintWhereItLives(data, count * sizeof(float)),
                                          std::span<const int64_t>(dims.begin(), dims.size()), example, 1);
    return;
  }
  HandOverFingerprints();
  float* host = data;
  if (!launcher_->host_memory()) {  // a copy for the host's hooks, and back
    host_scratch_.resize(count);
    launcher_->CopyToHost(host_scratch_.data(), data, count * sizeof(float));
    host = host_scratch_.data();
  }
  if (observe) {
    hooks.observer->OnBoundary(boundary.name, phase, boundary.op, /*is_output=*/true, host,
                               std::span<const int64_t>(dims.begin(), dims.size()), example, 1);
  }
  if (hooks.mutator != nullptr) {
    hooks.mutator->AfterBoundary(boundary.name, phase, host, count, example);
    if (host != data) launcher_->CopyToDevice(data, host, count * sizeof(float));
  }
}

AsyncFingerprinter* DeviceEngine::Fingerprinter() {
  if (!fingerprinter_tried_) {
    fingerprinter_tried_ = true;
    if (launcher_->device() == Device::kCuda) {
      StatusOr<std::unique_ptr<AsyncFingerprinter>> made = MakeCudaFingerprinter();
      if (made.ok()) own_fingerprinter_ = std::move(*made);
      fingerprinter_ = own_fingerprinter_.get();
    }
  }
  return fingerprinter_;
}

void DeviceEngine::HandOverFingerprints() {
  for (const PendingFingerprint& p : pending_) {
    StatusOr<Fingerprint> fp = fingerprinter_->Wait(p.ticket);
    if (!fp.ok()) {
      // The tensor may have been overwritten since: nothing to fall back on.
      std::fprintf(stderr, "dgrr::model: device fingerprint of %s: %s\n", std::string(p.boundary->name).c_str(),
                   fp.status().ToString().c_str());
      std::abort();
    }
    p.observer->OnBoundaryFingerprint(p.boundary->name, p.phase, p.boundary->op, /*is_output=*/true, *fp,
                                      std::span<const int64_t>(p.dims, p.ndim), p.example, 1);
  }
  pending_.clear();
}

Fingerprint DeviceEngine::FingerprintWhereItLives(const float* data, size_t bytes) {
  if (launcher_->host_memory()) return FingerprintBytes(data, bytes);
#if DGRR_FINGERPRINT_HAVE_CUDA
  if (launcher_->device() == Device::kCuda) {
    // The CUDA launcher runs its kernels on the legacy default stream: the
    // fingerprint follows them there and only its 16 bytes come back. On a
    // failure the copy below says what is wrong with the device, if anything.
    StatusOr<Fingerprint> fp = FingerprintDevice(data, bytes, nullptr);
    if (fp.ok()) return *fp;
  }
#endif
  host_scratch_.resize(bytes / sizeof(float));
  launcher_->CopyToHost(host_scratch_.data(), data, bytes);
  return FingerprintBytes(host_scratch_.data(), bytes);
}

void DeviceEngine::ObserveEach(const Boundary& boundary, Phase phase, float* data,
                               std::initializer_list<int64_t> dims, const ExampleHooks& hooks) {
  if (hooks.observer == nullptr && hooks.mutator == nullptr) return;
  size_t stride = 1;
  for (int64_t d : dims) stride *= static_cast<size_t>(d);
  for (size_t e = 0; e < count_; ++e) {
    Observe(boundary, phase, data + e * stride, dims, first_example_ + e, hooks);
  }
}

void DeviceEngine::FillMasks(uint8_t* keep, size_t per_example, int layer, DropoutSite site,
                             float p, const ExampleHooks& hooks) {
  uint64_t seed = 0, step = 0;
  if (hooks.masks->PhiloxKey(&seed, &step)) {
    kernels::DropoutMaskKernel k;
    k.keep = keep, k.seed = seed, k.step = step, k.first_example = first_example_;
    k.layer = static_cast<uint64_t>(layer), k.site = static_cast<uint64_t>(site);
    k.threshold = rng::BernoulliThresholdUnchecked(1.0 - p);
    k.per_example = per_example, k.count = count_;
    launcher_->Launch(k);
    return;
  }
  host_keep_.resize(per_example * count_);
  for (size_t e = 0; e < count_; ++e) {
    hooks.masks->FillKeepMask(first_example_ + e, layer, site, p, host_keep_.data() + e * per_example,
                              per_example);
  }
  launcher_->CopyToDevice(keep, host_keep_.data(), host_keep_.size());
}

void DeviceEngine::ZeroRanges() {
  if (zero_ranges_.empty()) return;
  Launcher& L = *launcher_;
  const kernels::ZeroRange* table = zero_ranges_.data();
  if (!L.host_memory()) {
    if (zero_table_.size() < zero_ranges_.size()) zero_table_ = DeviceArray<kernels::ZeroRange>(launcher_, zero_ranges_.size());
    L.CopyToDevice(zero_table_.data(), zero_ranges_.data(), zero_ranges_.size() * sizeof(kernels::ZeroRange));
    table = zero_table_.data();
  }
  L.Launch(kernels::ZeroRangesKernel{table, zero_ranges_.size(), zero_total_});
  zero_ranges_.clear();
  zero_total_ = 0;
}

// out[rows, out_ch] = inp[rows, in] . w[in, out_ch] + b.
void DeviceEngine::Linear(float* out, const float* inp, const float* w, const float* b, int in,
                          int out_ch) {
  kernels::GemmKernel k;
  k.c = Rows(out, out_ch), k.a = Rows(inp, in), k.b = Rows(w, out_ch), k.bias = b;
  k.M = config_.seq_len * static_cast<int>(count_), k.K = in, k.N = out_ch;
  launcher_->Launch(k);
}

void DeviceEngine::LinearBackward(float* dinp, const float* params, size_t w, size_t b,
                                  const float* dout, const float* inp, int in, int out_ch,
                                  float* grad0, size_t grad_stride) {
  const int T = config_.seq_len;
  const ptrdiff_t s = static_cast<ptrdiff_t>(grad_stride);
  // dinp = dout . W^T for all rows (sum over the outputs ascending), written.
  kernels::GemmKernel di;
  di.c = Rows(dinp, in), di.a = Rows(dout, out_ch), di.b = Cols(params + w, out_ch);
  di.M = T * static_cast<int>(count_), di.K = out_ch, di.N = in;
  launcher_->Launch(di);
  // dW of example e = inp_e^T . dout_e (sum over its t ascending), written.
  kernels::GemmKernel dw;
  dw.c = Rows(grad0 + w, out_ch, s);
  dw.a = Cols(inp, in, static_cast<ptrdiff_t>(T) * in);
  dw.b = Rows(dout, out_ch, static_cast<ptrdiff_t>(T) * out_ch);
  dw.M = in, dw.K = T, dw.N = out_ch, dw.nb1 = count_;
  launcher_->Launch(dw);
  kernels::BiasGradKernel db;
  db.dbias = grad0 + b, db.grad_stride = grad_stride, db.dout = dout, db.T = T, db.OC = out_ch;
  db.count = count_;
  launcher_->Launch(db);
}

void DeviceEngine::LayerNormBackward(float* dinp, const float* params, size_t w, size_t b,
                                     const float* dout, const float* inp, const float* mean,
                                     const float* rstd, float* grad0, size_t grad_stride) {
  const int T = config_.seq_len, C = config_.channels;
  kernels::LayerNormBackwardInputKernel di;
  di.dinp = dinp, di.dout = dout, di.inp = inp, di.weight = params + w, di.mean = mean;
  di.rstd = rstd, di.rows = static_cast<size_t>(T) * count_, di.C = C;
  launcher_->Launch(di);
  kernels::LayerNormBackwardParamsKernel dp;
  dp.dweight = grad0 + w, dp.dbias = grad0 + b, dp.grad_stride = grad_stride, dp.dout = dout;
  dp.inp = inp, dp.mean = mean, dp.rstd = rstd, dp.T = T, dp.C = C, dp.count = count_;
  launcher_->Launch(dp);
}

void DeviceEngine::BlockForward(int l, const float* params, const float* block_in,
                                const ExampleHooks& hooks) {
  const int T = config_.seq_len, C = config_.channels, NH = config_.num_heads, hs = C / NH;
  const size_t rows = static_cast<size_t>(T) * count_;
  const ptrdiff_t TC = static_cast<ptrdiff_t>(T) * C, TT = static_cast<ptrdiff_t>(T) * T,
                  att = NH * TT, C3 = 3 * C;
  const size_t all = static_cast<size_t>(TC) * count_;
  const BlockOffsets& o = layout_.block(l);
  const BoundaryNames::Block& n = names_.blocks[l];
  LayerActs& a = acts_[l];
  const bool attn_drop = config_.attn_dropout > 0, resid_drop = config_.resid_dropout > 0;
  const Phase fwd = Phase::kForward;
  Launcher& L = *launcher_;

  L.Launch(kernels::LayerNormForwardKernel{a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(),
                                           block_in, params + o.ln1_w, params + o.ln1_b, rows, C});
  ObserveEach(n.ln1_out, fwd, a.ln1.data(), {T, C}, hooks);
  Linear(a.qkv.data(), a.ln1.data(), params + o.qkv_w, params + o.qkv_b, C, 3 * C);
  ObserveEach(n.qkv_out, fwd, a.qkv.data(), {T, 3 * C}, hooks);

  if (attn_drop) {
    FillMasks(a.keep_att.data(), static_cast<size_t>(att), l, DropoutSite::kAttentionProbs,
              config_.attn_dropout, hooks);
  }
  // Scores q_t . k_t2 for every pair of every head of every example.
  kernels::GemmKernel scores;
  scores.c = Rows(a.preatt.data(), T, att, TT);
  scores.a = Rows<const float>(a.qkv.data(), C3, 3 * TC, hs);
  scores.b = Cols<const float>(a.qkv.data() + C, C3, 3 * TC, hs);
  scores.M = T, scores.K = hs, scores.N = T, scores.nb1 = count_, scores.nb2 = NH;
  L.Launch(scores);
  kernels::SoftmaxForwardKernel sm;
  sm.preatt = a.preatt.data(), sm.att = a.att.data();
  sm.att_dropped = attn_drop ? a.att_dropped.data() : nullptr;
  sm.keep = attn_drop ? a.keep_att.data() : nullptr;
  sm.keep_scale = attn_keep_scale_, sm.scale = 1.0f / Sqrt(static_cast<float>(hs));
  sm.T = T, sm.rows = count_ * NH * T;
  L.Launch(sm);
  const float* used = attn_drop ? a.att_dropped.data() : a.att.data();
  kernels::CausalProductKernel y;
  y.c = Rows(a.atty.data(), C, TC, hs);
  y.a = Rows(used, T, att, TT);
  y.b = Rows<const float>(a.qkv.data() + 2 * C, C3, 3 * TC, hs);
  y.T = T, y.N = hs, y.nb1 = count_, y.nb2 = NH, y.lower = true;
  L.Launch(y);
  if (hooks.observer != nullptr || hooks.mutator != nullptr) {
    for (size_t e = 0; e < count_; ++e) {
      Observe(n.softmax_out, fwd, a.att.data() + e * att, {NH, T, T}, first_example_ + e, hooks);
      if (attn_drop) {
        Observe(n.att_dropout_out, fwd, a.att_dropped.data() + e * att, {NH, T, T},
                first_example_ + e, hooks);
      }
      Observe(n.attn_out, fwd, a.atty.data() + e * TC, {T, C}, first_example_ + e, hooks);
    }
  }

  Linear(a.attproj.data(), a.atty.data(), params + o.attn_proj_w, params + o.attn_proj_b, C, C);
  ObserveEach(n.attn_proj_out, fwd, a.attproj.data(), {T, C}, hooks);
  const float* attn_branch = a.attproj.data();
  if (resid_drop) {
    FillMasks(a.keep_attproj.data(), static_cast<size_t>(TC), l, DropoutSite::kAttentionResidual,
              config_.resid_dropout, hooks);
    L.Launch(kernels::DropoutForwardKernel{a.attproj_dropped.data(), a.attproj.data(),
                                           a.keep_attproj.data(), resid_keep_scale_, all});
    ObserveEach(n.attn_proj_dropout_out, fwd, a.attproj_dropped.data(), {T, C}, hooks);
    attn_branch = a.attproj_dropped.data();
  }
  L.Launch(kernels::ResidualForwardKernel{a.res2.data(), block_in, attn_branch, all});
  ObserveEach(n.attn_residual_out, fwd, a.res2.data(), {T, C}, hooks);

  L.Launch(kernels::LayerNormForwardKernel{a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(),
                                           a.res2.data(), params + o.ln2_w, params + o.ln2_b, rows,
                                           C});
  ObserveEach(n.ln2_out, fwd, a.ln2.data(), {T, C}, hooks);
  Linear(a.fch.data(), a.ln2.data(), params + o.fc_w, params + o.fc_b, C, 4 * C);
  ObserveEach(n.fc_out, fwd, a.fch.data(), {T, 4 * C}, hooks);
  L.Launch(kernels::GeluForwardKernel{a.fch_gelu.data(), a.fch.data(), 4 * all});
  ObserveEach(n.gelu_out, fwd, a.fch_gelu.data(), {T, 4 * C}, hooks);
  Linear(a.fcproj.data(), a.fch_gelu.data(), params + o.mlp_proj_w, params + o.mlp_proj_b, 4 * C, C);
  ObserveEach(n.mlp_proj_out, fwd, a.fcproj.data(), {T, C}, hooks);
  const float* mlp_branch = a.fcproj.data();
  if (resid_drop) {
    FillMasks(a.keep_fcproj.data(), static_cast<size_t>(TC), l, DropoutSite::kMlpResidual,
              config_.resid_dropout, hooks);
    L.Launch(kernels::DropoutForwardKernel{a.fcproj_dropped.data(), a.fcproj.data(),
                                           a.keep_fcproj.data(), resid_keep_scale_, all});
    ObserveEach(n.mlp_proj_dropout_out, fwd, a.fcproj_dropped.data(), {T, C}, hooks);
    mlp_branch = a.fcproj_dropped.data();
  }
  L.Launch(kernels::ResidualForwardKernel{a.res3.data(), a.res2.data(), mlp_branch, all});
  ObserveEach(n.mlp_residual_out, fwd, a.res3.data(), {T, C}, hooks);
}

void DeviceEngine::ForwardBlock(const float* params, const uint8_t* tokens, size_t count,
                                uint64_t first_example, const ExampleHooks& hooks, float* losses) {
  const int T = config_.seq_len, C = config_.channels, V = config_.vocab_size;
  const size_t window = static_cast<size_t>(T) + 1;
  if ((config_.attn_dropout > 0 || config_.resid_dropout > 0) && hooks.masks == nullptr) {
    std::fprintf(stderr, "dgrr::model: dropout is on but ExampleHooks::masks is null\n");
    std::abort();
  }
  if (count == 0 || count > max_examples_) {
    std::fprintf(stderr, "dgrr::model: block of %zu examples; this engine holds 1 to %zu\n", count,
                 max_examples_);
    std::abort();
  }
  count_ = count;
  first_example_ = first_example;
  Launcher& L = *launcher_;
  L.CopyToDevice(tokens_.data(), tokens, count * window);
  const size_t rows = static_cast<size_t>(T) * count;
  L.Launch(kernels::EncoderForwardKernel{encoded_.data(), tokens_.data(), params + layout_.wte(),
                                         params + layout_.wpe(), T, C, count});
  ObserveEach(kEmbedOut, Phase::kForward, encoded_.data(), {T, C}, hooks);
  const float* block_in = encoded_.data();
  for (int l = 0; l < config_.num_layers; ++l) {
    BlockForward(l, params, block_in, hooks);
    block_in = acts_[l].res3.data();
  }
  L.Launch(kernels::LayerNormForwardKernel{lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), block_in,
                                           params + layout_.lnf_w(), params + layout_.lnf_b(), rows,
                                           C});
  ObserveEach(kLnfOut, Phase::kForward, lnf_.data(), {T, C}, hooks);
  kernels::GemmKernel head;  // logits = lnf . wte^T
  head.c = Rows(logits_.data(), V), head.a = Rows<const float>(lnf_.data(), C);
  head.b = Cols(params + layout_.wte(), C);
  head.M = static_cast<int>(rows), head.K = C, head.N = V;
  L.Launch(head);
  ObserveEach(kLogits, Phase::kForward, logits_.data(), {T, V}, hooks);
  L.Launch(kernels::CrossEntropyForwardKernel{probs_.data(), token_losses_.data(), logits_.data(),
                                              tokens_.data(), T, V, rows});
  L.Launch(kernels::MeanLossKernel{losses_.data(), token_losses_.data(), T, count});
  L.CopyToHost(losses, losses_.data(), count * sizeof(float));
  L.Synchronize();
  HandOverFingerprints();
  if (hooks.observer != nullptr || hooks.mutator != nullptr) {
    for (size_t e = 0; e < count; ++e) {
      // The loss is a host value here: the hooks see it where it lives.
      if (hooks.observer != nullptr && hooks.observer->Wants(kLoss.name, Phase::kForward)) {
        hooks.observer->OnBoundary(kLoss.name, Phase::kForward, kLoss.op, true, &losses[e], {},
                                   first_example + e, 1);
      }
      if (hooks.mutator != nullptr) {
        hooks.mutator->AfterBoundary(kLoss.name, Phase::kForward, &losses[e], 1, first_example + e);
      }
    }
  }
}

void DeviceEngine::BlockBackward(int l, const float* params, const float* block_in,
                                 const float* dblock_out, float* dblock_in, float* grad0,
                                 size_t grad_stride, const ExampleHooks& hooks) {
  const int T = config_.seq_len, C = config_.channels, NH = config_.num_heads, hs = C / NH;
  const ptrdiff_t TC = static_cast<ptrdiff_t>(T) * C, TT = static_cast<ptrdiff_t>(T) * T,
                  att = NH * TT, C3 = 3 * C;
  const size_t all = static_cast<size_t>(TC) * count_;
  const BlockOffsets& o = layout_.block(l);
  const BoundaryNames::Block& n = names_.blocks[l];
  LayerActs& a = acts_[l];
  LayerGrads& g = grads_[l];
  const bool attn_drop = config_.attn_dropout > 0, resid_drop = config_.resid_dropout > 0;
  const Phase bwd = Phase::kBackward;
  Launcher& L = *launcher_;

  float* dmlp_branch = resid_drop ? g.fcproj_dropped.data() : g.fcproj.data();
  L.Launch(kernels::ResidualBackwardKernel{g.res2.data(), dmlp_branch, dblock_out, all});
  if (resid_drop) {
    L.Launch(kernels::DropoutBackwardKernel{g.fcproj.data(), g.fcproj_dropped.data(),
                                            a.keep_fcproj.data(), resid_keep_scale_, all});
  }
  LinearBackward(g.fch_gelu.data(), params, o.mlp_proj_w, o.mlp_proj_b, g.fcproj.data(),
                 a.fch_gelu.data(), 4 * C, C, grad0, grad_stride);
  ObserveEach(n.mlp_proj_dinp, bwd, g.fch_gelu.data(), {T, 4 * C}, hooks);
  L.Launch(kernels::GeluBackwardKernel{g.fch.data(), a.fch.data(), g.fch_gelu.data(), 4 * all});
  ObserveEach(n.gelu_dinp, bwd, g.fch.data(), {T, 4 * C}, hooks);
  LinearBackward(g.ln2.data(), params, o.fc_w, o.fc_b, g.fch.data(), a.ln2.data(), C, 4 * C, grad0,
                 grad_stride);
  ObserveEach(n.fc_dinp, bwd, g.ln2.data(), {T, C}, hooks);
  LayerNormBackward(g.res2.data(), params, o.ln2_w, o.ln2_b, g.ln2.data(), a.res2.data(),
                    a.ln2_mean.data(), a.ln2_rstd.data(), grad0, grad_stride);
  ObserveEach(n.ln2_dinp, bwd, g.res2.data(), {T, C}, hooks);

  float* dattn_branch = resid_drop ? g.attproj_dropped.data() : g.attproj.data();
  L.Launch(kernels::ResidualBackwardKernel{dblock_in, dattn_branch, g.res2.data(), all});
  if (resid_drop) {
    L.Launch(kernels::DropoutBackwardKernel{g.attproj.data(), g.attproj_dropped.data(),
                                            a.keep_attproj.data(), resid_keep_scale_, all});
  }
  LinearBackward(g.atty.data(), params, o.attn_proj_w, o.attn_proj_b, g.attproj.data(),
                 a.atty.data(), C, C, grad0, grad_stride);
  ObserveEach(n.attn_proj_dinp, bwd, g.atty.data(), {T, C}, hooks);

  // Attention: d loss / d att_used = dy . v for every pair, then the softmax
  // rows, then the three causal products (AttentionBackward's order).
  kernels::GemmKernel datt;
  datt.c = Rows(g.att.data(), T, att, TT);
  datt.a = Rows<const float>(g.atty.data(), C, TC, hs);
  datt.b = Cols<const float>(a.qkv.data() + 2 * C, C3, 3 * TC, hs);
  datt.M = T, datt.K = hs, datt.N = T, datt.nb1 = count_, datt.nb2 = NH;
  L.Launch(datt);
  kernels::SoftmaxBackwardKernel sb;
  sb.datt = g.att.data(), sb.dpreatt = g.preatt.data(), sb.att = a.att.data();
  sb.keep = attn_drop ? a.keep_att.data() : nullptr;
  sb.keep_scale = attn_keep_scale_, sb.scale = 1.0f / Sqrt(static_cast<float>(hs));
  sb.T = T, sb.rows = count_ * NH * T;
  L.Launch(sb);
  const float* used = attn_drop ? a.att_dropped.data() : a.att.data();
  kernels::CausalProductKernel dq;  // dq_t = sum over t2 <= t of dscore . k_t2
  dq.c = Rows(g.qkv.data(), C3, 3 * TC, hs);
  dq.a = Rows<const float>(g.att.data(), T, att, TT);
  dq.b = Rows<const float>(a.qkv.data() + C, C3, 3 * TC, hs);
  dq.T = T, dq.N = hs, dq.nb1 = count_, dq.nb2 = NH, dq.lower = true;
  L.Launch(dq);
  kernels::CausalProductKernel dk = dq;  // dk_t2 = sum over t >= t2 of dscore . q_t
  dk.c = Rows(g.qkv.data() + C, C3, 3 * TC, hs);
  dk.a = Cols<const float>(g.att.data(), T, att, TT);
  dk.b = Rows<const float>(a.qkv.data(), C3, 3 * TC, hs);
  dk.lower = false;
  L.Launch(dk);
  kernels::CausalProductKernel dv = dk;  // dv_t2 = sum over t >= t2 of att_used . dy_t
  dv.c = Rows(g.qkv.data() + 2 * C, C3, 3 * TC, hs);
  dv.a = Cols(used, T, att, TT);
  dv.b = Rows<const float>(g.atty.data(), C, TC, hs);
  L.Launch(dv);
  if (hooks.observer != nullptr || hooks.mutator != nullptr) {
    for (size_t e = 0; e < count_; ++e) {
      Observe(n.softmax_dinp, bwd, g.preatt.data() + e * att, {NH, T, T}, first_example_ + e, hooks);
      Observe(n.attn_dinp, bwd, g.qkv.data() + 3 * e * TC, {T, 3 * C}, first_example_ + e, hooks);
    }
  }
  LinearBackward(g.ln1.data(), params, o.qkv_w, o.qkv_b, g.qkv.data(), a.ln1.data(), C, 3 * C,
                 grad0, grad_stride);
  ObserveEach(n.qkv_dinp, bwd, g.ln1.data(), {T, C}, hooks);
  LayerNormBackward(dblock_in, params, o.ln1_w, o.ln1_b, g.ln1.data(), block_in, a.ln1_mean.data(),
                    a.ln1_rstd.data(), grad0, grad_stride);
  ObserveEach(n.ln1_dinp, bwd, dblock_in, {T, C}, hooks);
}

void DeviceEngine::BackwardBlock(const float* params, const uint8_t* tokens, size_t count,
                                 uint64_t first_example, float* grad0, size_t grad_stride,
                                 const ExampleHooks& hooks) {
  (void)tokens;  // the block's tokens are on the device since ForwardBlock
  const int T = config_.seq_len, C = config_.channels, V = config_.vocab_size;
  const int L_ = config_.num_layers;
  if (count != count_ || first_example != first_example_) {
    std::fprintf(stderr, "dgrr::model: BackwardBlock is not for the block last run forward\n");
    std::abort();
  }
  const size_t rows = static_cast<size_t>(T) * count;
  const Phase bwd = Phase::kBackward;
  Launcher& L = *launcher_;
  for (size_t e = 0; e < count; ++e) {
    for (size_t i : accumulated_tensors_) {
      const NamedTensor& t = layout_.tensors()[i];
      Zero(grad0 + e * grad_stride + t.offset, t.size);
    }
  }
  const size_t used_rows_c = rows * C;
  Zero(dencoded_.data(), used_rows_c);
  Zero(dlogits_.data(), rows * V);
  for (LayerGrads& g : grads_) {
    for (DeviceArray<float>* v : {&g.attproj, &g.attproj_dropped, &g.res2, &g.fch, &g.fcproj,
                                  &g.fcproj_dropped, &g.res3}) {
      if (v->data() != nullptr) Zero(v->data(), v->size());
    }
  }
  ZeroRanges();  // one launch for all of them (there were ~170 a step for small)
  L.Launch(kernels::CrossEntropyBackwardKernel{dlogits_.data(), probs_.data(), tokens_.data(),
                                               1.0f / static_cast<float>(T), T, V, count});
  ObserveEach(kLossDinp, bwd, dlogits_.data(), {T, V}, hooks);
  kernels::GemmKernel dlnf;  // dlnf = dlogits . wte (sum over v ascending)
  dlnf.c = Rows(dlnf_.data(), C), dlnf.a = Rows<const float>(dlogits_.data(), V);
  dlnf.b = Rows(params + layout_.wte(), C);
  dlnf.M = static_cast<int>(rows), dlnf.K = V, dlnf.N = C;
  L.Launch(dlnf);
  kernels::GemmKernel dwte;  // dwte of example e = dlogits_e^T . lnf_e (t ascending)
  dwte.c = Rows(grad0 + layout_.wte(), C, static_cast<ptrdiff_t>(grad_stride));
  dwte.a = Cols<const float>(dlogits_.data(), V, static_cast<ptrdiff_t>(T) * V);
  dwte.b = Rows<const float>(lnf_.data(), C, static_cast<ptrdiff_t>(T) * C);
  dwte.M = V, dwte.K = T, dwte.N = C, dwte.nb1 = count;
  L.Launch(dwte);
  ObserveEach(kLmHeadDinp, bwd, dlnf_.data(), {T, C}, hooks);
  float* dres = grads_[L_ - 1].res3.data();
  LayerNormBackward(dres, params, layout_.lnf_w(), layout_.lnf_b(), dlnf_.data(),
                    acts_[L_ - 1].res3.data(), lnf_mean_.data(), lnf_rstd_.data(), grad0, grad_stride);
  ObserveEach(kLnfDinp, bwd, dres, {T, C}, hooks);
  for (int l = L_ - 1; l >= 0; --l) {
    const float* block_in = l > 0 ? acts_[l - 1].res3.data() : encoded_.data();
    float* dblock_in = l > 0 ? grads_[l - 1].res3.data() : dencoded_.data();
    BlockBackward(l, params, block_in, grads_[l].res3.data(), dblock_in, grad0, grad_stride, hooks);
  }
  L.Launch(kernels::EncoderBackwardWteKernel{grad0 + layout_.wte(), grad_stride, dencoded_.data(),
                                             tokens_.data(), T, C, V, count});
  L.Launch(kernels::EncoderBackwardWpeKernel{grad0 + layout_.wpe(), grad_stride, dencoded_.data(), T,
                                             C, count});
  L.Synchronize();
  HandOverFingerprints();
}

}  // namespace dgrr::model

// ---------------------------------------------------------------- optimizer

namespace dgrr::model {

DeviceAdamW::DeviceAdamW(Launcher* launcher, size_t n) : launcher_(launcher), n_(n) {
  if (!launcher_->host_memory()) {
    p_ = DeviceArray<float>(launcher_, n), m_ = DeviceArray<float>(launcher_, n);
    v_ = DeviceArray<float>(launcher_, n), g_ = DeviceArray<float>(launcher_, n);
  }
}

void DeviceAdamW::Step(float* p, float* m, float* v, const float* g,
                       const std::vector<kernels::AdamWSegment>& segments) {
  Launcher& L = *launcher_;
  if (L.host_memory()) {
    L.Launch(kernels::AdamWSegmentsKernel{p, m, v, g, segments.data(), segments.size(), n_});
    return;
  }
  const size_t bytes = n_ * sizeof(float);
  if (segments_.size() != segments.size()) segments_ = DeviceArray<kernels::AdamWSegment>(launcher_, segments.size());
  L.CopyToDevice(segments_.data(), segments.data(), segments.size() * sizeof(kernels::AdamWSegment));
  L.CopyToDevice(p_.data(), p, bytes);
  L.CopyToDevice(m_.data(), m, bytes);
  L.CopyToDevice(v_.data(), v, bytes);
  L.CopyToDevice(g_.data(), g, bytes);
  L.Launch(kernels::AdamWSegmentsKernel{p_.data(), m_.data(), v_.data(), g_.data(), segments_.data(),
                                         segments.size(), n_});
  L.CopyToHost(p, p_.data(), bytes);
  L.CopyToHost(m, m_.data(), bytes);
  L.CopyToHost(v, v_.data(), bytes);
}

float DeviceAdamW::ClipGradients(float* grad, float max_norm) {
  Launcher& L = *launcher_;
  if (sum_.size() == 0) sum_ = DeviceArray<double>(launcher_, 1);
  float* g = grad;
  if (!L.host_memory()) {
    L.CopyToDevice(g_.data(), grad, n_ * sizeof(float));
    g = g_.data();
  }
  L.Launch(kernels::SumOfSquaresKernel{sum_.data(), g, n_});
  double sum_sq = 0.0;
  L.CopyToHost(&sum_sq, sum_.data(), sizeof sum_sq);
  // The rest as ClipGradientsByGlobalNorm does it.
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && norm > static_cast<double>(max_norm)) {
    const float scale = static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
    L.Launch(kernels::ScaleKernel{g, scale, n_});
    if (!L.host_memory()) L.CopyToHost(grad, g_.data(), n_ * sizeof(float));
  }
  return static_cast<float>(norm);
}

DeviceAdamW* NewDeviceAdamW(Launcher* launcher, size_t n) { return new DeviceAdamW(launcher, n); }
void DeleteDeviceAdamW(DeviceAdamW* device) { delete device; }

// The one-off form: a DeviceAdamW's buffers for this call only.
float ClipGradientsByGlobalNorm(float* grad, size_t n, float max_norm, Launcher* launcher) {
  if (launcher == nullptr) return ClipGradientsByGlobalNorm(grad, n, max_norm);
  return DeviceAdamW(launcher, n).ClipGradients(grad, max_norm);
}

}  // namespace dgrr::model
