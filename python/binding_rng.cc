// dgrr's counter-based randomness for Python (python/binding.h): rng/'s
// streams as the C++ trainer uses them, for dgrr.torch's Dropout (keep-masks
// keyed by example) and PermutationSampler (an epoch's order).
#include "python/binding.h"

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "rng/distributions.h"
#include "rng/rng_streams.h"

namespace dgrr::python {
namespace {

// keep[i, :] = the Bernoulli(1 - p) keep-mask of example examples[i] by
// dgrr's convention (rng::FillDropoutKeepMask, which model/trainer.cc's
// PhiloxMasks uses too), so a row depends on its example's key alone, never
// on the batch it sits in or the thread asking.
void DropoutKeepMask(uint64_t seed, uint64_t step, const std::vector<uint64_t>& examples,
                     uint64_t layer, uint64_t site, double p, const py::handle& out) {
  const uint64_t threshold = Unwrap(rng::BernoulliThreshold(1.0 - p));
  TensorView view = ViewOf(out, "dropout mask", /*need_writable=*/true);
  if (view.ref.dtype != DType::kU8 && view.ref.dtype != DType::kBool) {
    ThrowInvalid("dropout mask: the output must be uint8 or bool");
  }
  if (examples.empty()) {
    if (view.ref.bytes != 0) ThrowInvalid("dropout mask: no examples for a non-empty mask");
    return;
  }
  if (view.ref.bytes % examples.size() != 0) {
    ThrowInvalid("dropout mask: " + std::to_string(view.ref.bytes) + " elements do not split into " +
                 std::to_string(examples.size()) + " equal rows");
  }
  const size_t per_example = view.ref.bytes / examples.size();
  auto* keep = static_cast<uint8_t*>(const_cast<void*>(view.ref.data));
  const rng::RngStreams streams(seed);
  py::gil_scoped_release release;
  for (size_t i = 0; i < examples.size(); ++i) {
    rng::FillDropoutKeepMask(streams, step, examples[i], layer, site, threshold, keep + i * per_example,
                             per_example);
  }
}

// out[i, :] = keep ? 1/(1-p) : 0 for the keep-mask DropoutKeepMask draws,
// in out's dtype (float32: the scale rounded to float once; float64: as
// is): the tensor dgrr.torch's Dropout multiplies its input by, bit for bit
// what `keep.to(dtype) * (1.0 / (1.0 - p))` gives, made in one call instead
// of three tensor operations.
void DropoutScaleMask(uint64_t seed, uint64_t step, const std::vector<uint64_t>& examples,
                      uint64_t layer, uint64_t site, double p, const py::handle& out) {
  const uint64_t threshold = Unwrap(rng::BernoulliThreshold(1.0 - p));
  TensorView view = ViewOf(out, "dropout scale mask", /*need_writable=*/true);
  const size_t width = view.ref.dtype == DType::kF32 ? 4 : view.ref.dtype == DType::kF64 ? 8 : 0;
  if (width == 0) ThrowInvalid("dropout scale mask: the output must be float32 or float64");
  const size_t n = view.ref.bytes / width;
  if (examples.empty()) {
    if (n != 0) ThrowInvalid("dropout scale mask: no examples for a non-empty mask");
    return;
  }
  if (n % examples.size() != 0) {
    ThrowInvalid("dropout scale mask: " + std::to_string(n) + " elements do not split into " +
                 std::to_string(examples.size()) + " equal rows");
  }
  const size_t per_example = n / examples.size();
  const double scale = 1.0 / (1.0 - p);
  void* data = const_cast<void*>(view.ref.data);
  const rng::RngStreams streams(seed);
  py::gil_scoped_release release;
  std::vector<uint8_t> keep(per_example);
  for (size_t i = 0; i < examples.size(); ++i) {
    rng::FillDropoutKeepMask(streams, step, examples[i], layer, site, threshold, keep.data(), per_example);
    if (width == 4) {
      const float s = static_cast<float>(scale);
      float* row = static_cast<float*>(data) + i * per_example;
      for (size_t j = 0; j < per_example; ++j) row[j] = keep[j] ? s : 0.0f;
    } else {
      double* row = static_cast<double*>(data) + i * per_example;
      for (size_t j = 0; j < per_example; ++j) row[j] = keep[j] ? scale : 0.0;
    }
  }
}

// Epoch `epoch`'s order of n examples (RngStreams::EpochPermutation, as
// model/data_order.h uses it), as little-endian uint32 bytes.
py::bytes EpochPermutation(uint64_t seed, uint64_t epoch, uint64_t n) {
  std::vector<uint32_t> order;
  {
    py::gil_scoped_release release;
    StatusOr<std::vector<uint32_t>> result = rng::RngStreams(seed).EpochPermutation(epoch, n);
    if (!result.ok()) {
      py::gil_scoped_acquire acquire;
      Throw(result.status());
    }
    order = std::move(result).value();
  }
  return py::bytes(reinterpret_cast<const char*>(order.data()), order.size() * sizeof(uint32_t));
}

}  // namespace

void BindRng(py::module_& m) {
  m.def("dropout_keep_mask", &DropoutKeepMask, py::arg("seed"), py::arg("step"),
        py::arg("examples"), py::arg("layer"), py::arg("site"), py::arg("p"), py::arg("out"),
        "Fills out (uint8, one row per example) with keep-masks from Philox streams keyed by "
        "(seed, dropout, step, example, layer, site).");
  m.def("dropout_scale_mask", &DropoutScaleMask, py::arg("seed"), py::arg("step"),
        py::arg("examples"), py::arg("layer"), py::arg("site"), py::arg("p"), py::arg("out"),
        "Fills out (float32 or float64, one row per example) with 1/(1-p) where "
        "dropout_keep_mask keeps an element and 0 where it drops it.");
  m.def("epoch_permutation", &EpochPermutation, py::arg("seed"), py::arg("epoch"), py::arg("n"),
        "Epoch `epoch`'s order of n examples, as little-endian uint32 bytes.");
}

}  // namespace dgrr::python
