// What dgrr._torch_access hands dgrr._dgrr: a function that reads a torch
// tensor's storage pointer, shape, dtype, device and contiguity from its C++
// object (torch's at::Tensor) instead of through six Python attribute calls,
// and the input-gradient marks of dgrr.torch's module calls (below).
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
inline constexpr uint32_t kTorchAccessVersion = 2;
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

  // The gradient a module passes back to one of its inputs, caught without a
  // view of the input (python/binding_torch_hooks.cc, ModuleCall; issue 30).
  // Before the module's call, input_mark(x) notes the tensor's gradient edge
  // (where its gradient goes: its grad_fn, or a leaf's accumulator) and
  // reserves the autograd sequence number a view made there would have taken;
  // nullptr when x is no tensor that will get a gradient (no error set).
  // After the call, input_hook(mark, output, site) finds the edges into x's
  // edge from the nodes the call created (those numbered after the mark,
  // reachable from the output's tensors: a tensor, or a tuple or list of
  // them). One edge: a post hook of the node that sends it hands the
  // gradient on it to the site. Several: one node, numbered with the
  // reserved number, goes between them and x's edge; its gradient is their
  // sum, accumulated as a view's node would accumulate it, and it hands that
  // to the site before passing it on. Either way the gradient is the one the
  // view's hook saw, at the same point of the backward pass. A gradient goes
  // to the site through the recorder set_grad_recorder installed (GIL held);
  // where that declines it, or none is installed, site.record(gradient) is
  // called. Consumes the mark. Returns the number of edges found,
  // kTorchInputIsOutput when the output is x itself (the call made no node:
  // the caller hooks a view of it), or -1 with a Python error set. Needs the
  // GIL.
  void* (*input_mark)(PyObject* x) = nullptr;
  int (*input_hook)(void* mark, PyObject* output, PyObject* site) = nullptr;
  void (*input_drop)(void* mark) = nullptr;  // a mark not handed to input_hook
  // Whether two marks are of one gradient edge (one tensor passed twice).
  int (*input_same)(const void* a, const void* b) = nullptr;
  // dgrr._dgrr's recorder of a gradient for a site: 1 handled, 0 declined
  // (site.record is called with the tensor instead), -1 a Python error set.
  void (*set_grad_recorder)(int (*recorder)(PyObject* site, const TorchTensorFacts* grad)) = nullptr;
};

inline constexpr int kTorchInputIsOutput = -2;

}  // namespace dgrr
