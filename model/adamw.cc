#include "model/adamw.h"

#include <cmath>
#include <string>

#include "model/det_math.h"
#include "model/device_engine.h"
#include "model/vector_isa.h"

namespace dgrr::model {

AdamW::AdamW(const ParameterLayout& layout, const AdamWOptions& options)
    : layout_(layout),
      options_(options),
      m_(layout.total_size(), 0.0f),
      v_(layout.total_size(), 0.0f) {
  for (const NamedTensor& t : layout_.tensors()) {
    observed_names_.push_back({t.name + ".grad", t.name, "adamw.m." + t.name, "adamw.v." + t.name});
  }
}

namespace {

// One tensor's update; the coefficients arrive by value, so the compiler
// knows no store to p, m or v changes them and vectorises the loop.
inline void UpdateTensor(float* p, float* m, float* v, const float* g, size_t n,
                         const AdamWCoefficients k) {
  for (size_t i = 0; i < n; ++i) AdamWUpdateAt(k, p[i], m[i], v[i], g[i]);
}

}  // namespace

float AdamW::ClipGradients(float* grad, float max_norm) {
  if (launcher_ == nullptr) return ClipGradientsByGlobalNorm(grad, layout_.total_size(), max_norm);
  if (!device_) device_.reset(NewDeviceAdamW(launcher_, layout_.total_size()));
  return device_->ClipGradients(grad, max_norm);
}

void AdamW::Step(float* params, const float* grad, float lr, BoundaryObserver* observer,
                 uint64_t first_example, uint32_t example_count) {
  ++step_;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  const float c1 = static_cast<float>(1.0 - PowInt(b1, step_));
  const float c2 = static_cast<float>(1.0 - PowInt(b2, step_));
  const std::vector<NamedTensor>& tensors = layout_.tensors();
  if (launcher_ != nullptr) {
    // Every tensor at once on the device, then the boundaries in the order
    // the loop below reports them: the gradient is read only, and no
    // tensor's update reads another's, so each is the same bytes.
    segments_.clear();
    for (const NamedTensor& t : tensors) {
      const float wd = t.weight_decay ? options_.weight_decay : 0.0f;
      segments_.push_back(kernels::AdamWSegment{
          t.offset, t.offset + t.size, AdamWCoefficients{b1, b2, one_minus_b1, one_minus_b2, c1, c2, lr, eps, wd}});
    }
    if (!device_) device_.reset(NewDeviceAdamW(launcher_, layout_.total_size()));
    device_->Step(params, m_.data(), v_.data(), grad, segments_);
    if (observer == nullptr) return;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const NamedTensor& t = tensors[k];
      const ObservedNames& names = observed_names_[k];
      observer->OnBoundary(names.grad, Phase::kOptimizer, Operator::kElementwise, false, grad + t.offset, t.shape,
                           first_example, example_count);
      observer->OnBoundary(names.param, Phase::kOptimizer, Operator::kOptimizer, true, params + t.offset, t.shape,
                           first_example, example_count);
      observer->OnBoundary(names.m, Phase::kOptimizer, Operator::kElementwise, true, m_.data() + t.offset, t.shape,
                           first_example, example_count);
      observer->OnBoundary(names.v, Phase::kOptimizer, Operator::kElementwise, true, v_.data() + t.offset, t.shape,
                           first_example, example_count);
    }
    return;
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const NamedTensor& t = tensors[k];
    const ObservedNames& names = observed_names_[k];
    const float wd = t.weight_decay ? options_.weight_decay : 0.0f;
    float* p = params + t.offset;
    const float* g = grad + t.offset;
    float* m = m_.data() + t.offset;
    float* v = v_.data() + t.offset;
    if (observer != nullptr) {
      observer->OnBoundary(names.grad, Phase::kOptimizer, Operator::kElementwise, false, g, t.shape,
                           first_example, example_count);
    }
    // Elementwise (no sum across elements), so the widest vector build runs
    // it with the same operations per element (model/vector_isa.h).
    const AdamWCoefficients coefficients{b1, b2, one_minus_b1, one_minus_b2, c1, c2, lr, eps, wd};
    RunWithBestIsa([&] { UpdateTensor(p, m, v, g, t.size, coefficients); });
    if (observer != nullptr) {
      observer->OnBoundary(names.param, Phase::kOptimizer, Operator::kOptimizer, true, p, t.shape, first_example,
                           example_count);
      observer->OnBoundary(names.m, Phase::kOptimizer, Operator::kElementwise, true, m, t.shape, first_example,
                           example_count);
      observer->OnBoundary(names.v, Phase::kOptimizer, Operator::kElementwise, true, v, t.shape, first_example,
                           example_count);
    }
  }
}

namespace {
// Ascending i, one fma per square. The sum is a chain (no vectorisation can
// reorder it); the widest build only turns each step into one vfmadd231sd
// instead of a call to libm's fma.
inline double SumOfSquares(const float* grad, size_t n) {
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]);
    sum_sq = std::fma(g, g, sum_sq);
  }
  return sum_sq;
}
}  // namespace

float ClipGradientsByGlobalNorm(float* grad, size_t n, float max_norm) {
  double sum_sq = 0.0;
  RunWithBestIsa([&] { sum_sq = SumOfSquares(grad, n); });
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && norm > static_cast<double>(max_norm)) {
    const float scale = static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
    for (size_t i = 0; i < n; ++i) grad[i] *= scale;
  }
  return static_cast<float>(norm);
}

}  // namespace dgrr::model
