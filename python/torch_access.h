// What dgrr._torch_access hands dgrr._dgrr: a function that reads a torch
// tensor's storage pointer, shape, dtype, device and contiguity from its C++
// object (torch's at::Tensor) instead of through six Python attribute calls.
//
// Two modules because only _torch_access is built against torch's C++
// headers and libraries, and so is tied to the one torch build it was
// compiled with: dgrr.torch imports it only when the running torch is that
// build (python/dgrr/torch/support.py), and _dgrr, which works with any
// torch, reads tensors through Python otherwise. The function crosses
// between them in a PyCapsule named kTorchAccessCapsule; its layout is
// versioned.
#pragma once

#include <Python.h>

#include <cstdint>

namespace dgrr {

inline constexpr const char* kTorchAccessCapsule = "dgrr._torch_access.TorchAccess";
inline constexpr uint32_t kTorchAccessVersion = 1;
inline constexpr int kTorchAccessMaxDims = 8;

// A tensor as its C++ object describes it. dtype: a dgrr DType value
// (base/dtype.h), 0 for a torch dtype dgrr does not record.
struct TorchTensorFacts {
  const void* data = nullptr;
  int64_t dims[kTorchAccessMaxDims] = {};
  int32_t ndim = 0;  // may exceed kTorchAccessMaxDims: then dims holds the first ones
  uint8_t dtype = 0;
  bool cpu = false;
  bool strided = false;
  bool contiguous = false;
};

struct TorchAccess {
  uint32_t version = kTorchAccessVersion;
  // 1: obj is a torch.Tensor (or a subclass) and *facts describes it; 0: it
  // is not one (*facts untouched). Never raises; needs the GIL.
  int (*read)(PyObject* obj, TorchTensorFacts* facts) = nullptr;
};

}  // namespace dgrr
