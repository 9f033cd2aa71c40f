// dgrr._torch_access: torch tensors read from their C++ object (see
// python/torch_access.h). Built against torch's headers (Debian's
// libtorch-dev) and linked with the libtorch_python the system
// interpreter's torch uses; imported by dgrr.torch only when the running
// torch is the build recorded at configure time (dgrr/_torch_build.py).
#include <torch/csrc/autograd/python_variable.h>

#include "base/dtype.h"
#include "python/torch_access.h"

namespace dgrr {
namespace {

uint8_t DTypeOf(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return static_cast<uint8_t>(DType::kF32);
    case c10::ScalarType::Double: return static_cast<uint8_t>(DType::kF64);
    case c10::ScalarType::Half: return static_cast<uint8_t>(DType::kF16);
    case c10::ScalarType::BFloat16: return static_cast<uint8_t>(DType::kBF16);
    case c10::ScalarType::Char: return static_cast<uint8_t>(DType::kI8);
    case c10::ScalarType::Byte: return static_cast<uint8_t>(DType::kU8);
    case c10::ScalarType::Int: return static_cast<uint8_t>(DType::kI32);
    case c10::ScalarType::Long: return static_cast<uint8_t>(DType::kI64);
    case c10::ScalarType::Bool: return static_cast<uint8_t>(DType::kBool);
    default: return 0;
  }
}

int ReadTensor(PyObject* obj, TorchTensorFacts* facts) {
  if (!THPVariable_Check(obj)) return 0;
  const at::Tensor& t = THPVariable_Unpack(obj);
  facts->strided = t.layout() == c10::kStrided;
  facts->cpu = t.device().is_cpu();
  facts->dtype = DTypeOf(t.scalar_type());
  facts->ndim = static_cast<int32_t>(t.dim());
  // Sizes, contiguity and the pointer only where they mean what dgrr reads:
  // a dense tensor (a sparse or nested one has no single storage pointer).
  if (facts->strided) {
    const auto sizes = t.sizes();
    for (int32_t i = 0; i < facts->ndim && i < kTorchAccessMaxDims; ++i) facts->dims[i] = sizes[static_cast<size_t>(i)];
    facts->contiguous = t.is_contiguous();
    facts->data = t.data_ptr();
  }
  return 1;
}

const TorchAccess kAccess{kTorchAccessVersion, &ReadTensor};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torch_access",
                       "torch tensors read from their C++ object, for dgrr._dgrr (python/torch_access.h).",
                       -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace dgrr

PyMODINIT_FUNC PyInit__torch_access() {
  PyObject* module = PyModule_Create(&dgrr::kModule);
  if (module == nullptr) return nullptr;
  PyObject* capsule = PyCapsule_New(const_cast<dgrr::TorchAccess*>(&dgrr::kAccess), dgrr::kTorchAccessCapsule, nullptr);
  if (capsule == nullptr || PyModule_AddObject(module, "access", capsule) != 0) {
    Py_XDECREF(capsule);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
