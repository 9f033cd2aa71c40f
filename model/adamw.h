// AdamW with decoupled weight decay, and gradient clipping by global norm.
//
// Moments m and v are contiguous float arrays with the parameters' layout, so
// the runtime registers and checkpoints them like the parameters. Per element,
// at step t (1-based, after the increment):
//
//   m = fma(beta1, m, (1 - beta1) * g)
//   v = fma(beta2, v, ((1 - beta2) * g) * g)
//   m_hat = m / c1,   v_hat = v / c2,   c1 = 1 - beta1^t,  c2 = 1 - beta2^t
//   u = fma(wd, p, m_hat / (sqrt(v_hat) + eps))    (wd = 0 for tensors
//                                                  without weight_decay)
//   p = fma(-lr, u, p)
//
// in float, evaluated in exactly that order (AdamWUpdateAt, the one element
// function host and device share; fma as in model/numerics.h); c1 and c2 are
// computed in double (beta^t by binary exponentiation, not libm pow) and
// rounded once to float. Elementwise, so thread-independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/adamw_update.h"
#include "model/det_math.h"
#include "model/hooks.h"
#include "model/kernels.h"
#include "model/numerics.h"

namespace dgrr::model {

// AdamWCoefficients and AdamWUpdateAt: model/adamw_update.h.

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

class Launcher;    // model/grid.h
class DeviceAdamW;  // model/device_engine.h
DeviceAdamW* NewDeviceAdamW(Launcher* launcher, size_t n);
void DeleteDeviceAdamW(DeviceAdamW* device);

class AdamW {
 public:
  AdamW(const ParameterLayout& layout, const AdamWOptions& options);

  // One update with learning rate lr. If observer is set, reports per tensor
  // (Phase::kOptimizer, per batch): the input gradient as "<name>.grad"
  // (is_output = false), then the updated "<name>", "adamw.m.<name>",
  // "adamw.v.<name>" (is_output = true).
  void Step(float* params, const float* grad, float lr, BoundaryObserver* observer = nullptr,
            uint64_t first_example = 0, uint32_t example_count = 0);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }  // when restoring a checkpoint
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  const AdamWOptions& options() const { return options_; }
  // ClipGradientsByGlobalNorm (below) of grad[0, total size), on this
  // optimizer's launcher when it has one (its kept device buffers: nothing
  // allocated after the first step), else on the CPU; the same bits.
  float ClipGradients(float* grad, float max_norm);

  // Run the update through `launcher` (cuda-sim, cuda) instead of the CPU
  // loop: every tensor in one launch of model/kernels.h's
  // AdamWSegmentsKernel, over buffers kept on the device between steps
  // (DeviceAdamW); the same bits, and the observer sees the same tensors in
  // the same order. nullptr: CPU. The launcher must outlive this object.
  void set_launcher(Launcher* launcher) {
    launcher_ = launcher;
    device_.reset();
  }

 private:
  ParameterLayout layout_;  // a copy: small, and no lifetime coupling to the model
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<float> m_, v_;
  Launcher* launcher_ = nullptr;
  std::unique_ptr<DeviceAdamW, void (*)(DeviceAdamW*)> device_{nullptr, DeleteDeviceAdamW};
  std::vector<kernels::AdamWSegment> segments_;  // this step's, on the host
  // The names Step reports, per tensor, made once rather than at every step.
  struct ObservedNames {
    std::string grad, param, m, v;
  };
  std::vector<ObservedNames> observed_names_;
};

// Global L2 norm of grad[0..n): squares summed in double in ascending index
// (sum = fma(g, g, sum)), then sqrt. If the norm exceeds max_norm, every element is multiplied by the
// float scale max_norm / (norm + 1e-6). Returns the norm before clipping.
// max_norm <= 0 disables clipping (the norm is still returned).
float ClipGradientsByGlobalNorm(float* grad, size_t n, float max_norm);
// The same on a device (model/kernels.h SumOfSquaresKernel, ScaleKernel,
// through a DeviceAdamW made for the call); grad is host memory; the same
// bits. nullptr: the CPU version. AdamW::ClipGradients keeps the buffers.
float ClipGradientsByGlobalNorm(float* grad, size_t n, float max_norm, Launcher* launcher);

}  // namespace dgrr::model
