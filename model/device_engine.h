// The reference GPT's forward and backward as launches of the device kernels
// (model/kernels.h) through a Launcher (model/grid.h): the same work, in the
// same per-element order, as ExampleEngine<float> (model/gpt.h), so its
// losses, gradients and every boundary tensor are bitwise the CPU engine's.
//
// ForwardBlock/BackwardBlock mirror ExampleEngine's: a block of `count`
// examples whose rows are stacked into each product, per-example gradients
// into per-example buffers, boundaries reported per example in the
// documented order. Memory: `params` and `grads` are kernel memory (the
// launcher's: on cuda-sim, host memory); tokens and losses are host memory.
// The per-example gradient buffers must be one array, example e's at
// grads[0] + e * grad_stride. Dropout masks from a DropoutMaskSource with a
// Philox key (DropoutMaskSource::PhiloxKey) are drawn per element by a
// kernel; other sources (tests' SplitMix masks, the shared-rng fault) fill
// them on the host, and they are copied in.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fingerprint/async_fingerprint.h"

#include "model/config.h"
#include "model/gpt.h"
#include "model/grid.h"
#include "model/hooks.h"

namespace dgrr::model {

// Kernel memory of n elements of T, freed with its launcher (which must
// outlive it).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Launcher* launcher, size_t n)
      : launcher_(launcher), n_(n), p_(n ? static_cast<T*>(launcher->Alloc(n * sizeof(T))) : nullptr) {}
  ~DeviceArray() {
    if (p_ != nullptr) launcher_->Free(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : launcher_(o.launcher_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      if (p_ != nullptr) launcher_->Free(p_);
      launcher_ = o.launcher_, n_ = o.n_, p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  Launcher* launcher_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

// AdamW's update of every tensor in one launch (AdamWSegmentsKernel) over
// buffers kept on the device between steps: on a GPU the parameters,
// moments and gradient go up once a step and the parameters and moments come
// back once, instead of per tensor through a fresh allocation each; on the
// emulator the kernel runs on the host arrays themselves. model/adamw.h's
// AdamW holds one while it has a launcher.
class DeviceAdamW {
 public:
  DeviceAdamW(Launcher* launcher, size_t n);
  // p, m, v (updated) and g: host arrays of n floats.
  void Step(float* p, float* m, float* v, const float* g, const std::vector<kernels::AdamWSegment>& segments);
  // ClipGradientsByGlobalNorm of the host array grad[0, n) on the device
  // (SumOfSquaresKernel, ScaleKernel), in the same buffers.
  float ClipGradients(float* grad, float max_norm);

 private:
  Launcher* launcher_;
  size_t n_;
  DeviceArray<float> p_, m_, v_, g_;
  DeviceArray<double> sum_;
  DeviceArray<kernels::AdamWSegment> segments_;
};

class DeviceEngine {
 public:
  DeviceEngine(const GptConfig& config, Launcher* launcher, size_t max_examples = 1);

  void ForwardBlock(const float* params, const uint8_t* tokens, size_t count,
                    uint64_t first_example, const ExampleHooks& hooks, float* losses);
  void BackwardBlock(const float* params, const uint8_t* tokens, size_t count,
                     uint64_t first_example, float* grad0, size_t grad_stride,
                     const ExampleHooks& hooks);

  size_t max_examples() const { return max_examples_; }
  Launcher& launcher() const { return *launcher_; }

  // Where the fingerprints of boundaries the observer takes as fingerprints
  // (BoundaryObserver::TakesFingerprint) are computed: each is enqueued
  // behind the kernel that wrote the tensor and handed to the observer, in
  // the order the boundaries came, when something else is handed over or
  // the block ends, so the host waits for the device about once a block
  // instead of once a boundary. On --device cuda the engine makes a CUDA
  // fingerprinter (fingerprint/async_fingerprint.h) on the launcher's
  // stream the first time it needs one; where that fails, and on the
  // emulator, each fingerprint is computed at once as before. Tests set one
  // (not owned; it must outlive the engine's blocks).
  void set_fingerprinter(AsyncFingerprinter* fingerprinter) {
    fingerprinter_ = fingerprinter;
    fingerprinter_tried_ = true;
  }

 private:
  struct LayerActs {
    DeviceArray<float> ln1, ln1_mean, ln1_rstd, qkv, preatt, att, att_dropped, atty, attproj,
        attproj_dropped, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, fcproj_dropped,
        res3;
    DeviceArray<uint8_t> keep_att, keep_attproj, keep_fcproj;
  };
  struct LayerGrads {
    DeviceArray<float> ln1, qkv, preatt, att, atty, attproj, attproj_dropped, res2, ln2, fch,
        fch_gelu, fcproj, fcproj_dropped, res3;
  };

  void ObserveEach(const Boundary& boundary, Phase phase, float* data,
                   std::initializer_list<int64_t> dims, const ExampleHooks& hooks);
  void Observe(const Boundary& boundary, Phase phase, float* data,
               std::initializer_list<int64_t> dims, uint64_t example, const ExampleHooks& hooks);
  // FingerprintBytes of `bytes` at `data` in kernel memory, computed where
  // they live: on the host for the emulator, on the device for CUDA (16
  // bytes come back), else from a copy.
  Fingerprint FingerprintWhereItLives(const float* data, size_t bytes);
  // The fingerprinter boundaries' fingerprints are enqueued on, or null.
  AsyncFingerprinter* Fingerprinter();
  // Waits for the enqueued fingerprints and hands them to their observer,
  // in order. Called before anything else reaches an observer, and at the
  // end of each block.
  void HandOverFingerprints();
  void FillMasks(uint8_t* keep, size_t per_example, int layer, DropoutSite site, float p,
                 const ExampleHooks& hooks);
  // Every buffer in `zero_ranges_` set to +0.0 in one launch (their table
  // goes up first where kernel memory is not the host's), then the table
  // emptied.
  void ZeroRanges();
  void Zero(float* p, size_t n) {
    if (n > 0) zero_ranges_.push_back(kernels::ZeroRange{p, n, zero_total_}), zero_total_ += n;
  }
  void Linear(float* out, const float* inp, const float* w, const float* b, int in, int out_ch);
  void LinearBackward(float* dinp, const float* params, size_t w, size_t b, const float* dout,
                      const float* inp, int in, int out_ch, float* grad0, size_t grad_stride);
  void LayerNormBackward(float* dinp, const float* params, size_t w, size_t b, const float* dout,
                         const float* inp, const float* mean, const float* rstd, float* grad0,
                         size_t grad_stride);
  void BlockForward(int l, const float* params, const float* block_in, const ExampleHooks& hooks);
  void BlockBackward(int l, const float* params, const float* block_in, const float* dblock_out,
                     float* dblock_in, float* grad0, size_t grad_stride, const ExampleHooks& hooks);

  GptConfig config_;
  ParameterLayout layout_;
  BoundaryNames names_;
  Launcher* launcher_;
  size_t max_examples_;
  size_t count_ = 0;
  uint64_t first_example_ = 0;
  float attn_keep_scale_, resid_keep_scale_;
  DeviceArray<uint8_t> tokens_;
  DeviceArray<float> encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, token_losses_,
      losses_, dencoded_, dlnf_, dlogits_;
  std::vector<LayerActs> acts_;
  std::vector<LayerGrads> grads_;
  std::vector<size_t> accumulated_tensors_;
  std::vector<float> host_scratch_;     // boundary tensors of a launcher without host memory
  std::vector<uint8_t> host_keep_;      // masks filled on the host
  // Fingerprints enqueued and not yet handed over (HandOverFingerprints).
  struct PendingFingerprint {
    const Boundary* boundary;
    Phase phase;
    int64_t dims[kMaxTensorDims];
    size_t ndim;
    uint64_t example;
    BoundaryObserver* observer;
    AsyncFingerprinter::Ticket ticket;
  };
  std::vector<PendingFingerprint> pending_;
  std::vector<kernels::ZeroRange> zero_ranges_;  // Zero's ranges, for ZeroRanges
  size_t zero_total_ = 0;
  DeviceArray<kernels::ZeroRange> zero_table_;
  AsyncFingerprinter* fingerprinter_ = nullptr;
  std::unique_ptr<AsyncFingerprinter> own_fingerprinter_;
  bool fingerprinter_tried_ = false;
};

}  // namespace dgrr::model
