// Tensor memory from Python objects, without a copy (python/binding.h):
// buffer-protocol exporters (NumPy arrays), objects with __array_interface__
// and torch tensors as TensorViews; the fast path for the CPU torch tensors
// dgrr.torch records in every hook, through dgrr._torch_access when it was
// built for the running torch; dgrr._dgrr.fingerprint.
#include "python/binding.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "fingerprint/tensor.h"
#include "python/torch_access.h"

namespace dgrr::python {

TorchFastPath g_torch;
const TorchAccess* g_torch_access = nullptr;

namespace {

std::string Describe(const py::handle& obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

void FillShape(TensorRef& ref, const std::vector<int64_t>& shape, const std::string& what) {
  if (shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    ThrowInvalid(what + ": " + std::to_string(shape.size()) + " dimensions; dgrr records at most " +
                 std::to_string(kMaxTensorDims));
  }
  ref.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) ref.dims[i] = shape[i];
}

uint64_t ElementCount(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// A struct-module format character (with its item size) as a dgrr dtype.
std::optional<DType> DTypeFromFormat(std::string format, size_t itemsize) {
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format.erase(0, 1);
  }
  if (format.size() != 1) return std::nullopt;  // big-endian, structured, complex ("Zf")...
  switch (format[0]) {
    case 'f': return DType::kF32;
    case 'd': return DType::kF64;
    case 'e': return DType::kF16;
    case 'b': return DType::kI8;
    case 'B': return DType::kU8;
    case '?': return DType::kBool;
    case 'i': case 'l': case 'q':
      if (itemsize == 4) return DType::kI32;
      if (itemsize == 8) return DType::kI64;
      return std::nullopt;
    case 'I': case 'L': case 'Q':
      if (itemsize == 4) return DType::kU32;
      if (itemsize == 8) return DType::kU64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// NumPy's __array_interface__ typestr ("<f4", "|u1") as a dgrr dtype.
std::optional<DType> DTypeFromTypestr(const std::string& typestr) {
  static const std::pair<const char*, DType> kTable[] = {
      {"<f4", DType::kF32}, {"<f8", DType::kF64}, {"<f2", DType::kF16}, {"|i1", DType::kI8},
      {"|u1", DType::kU8},  {"<i4", DType::kI32}, {"<u4", DType::kU32}, {"<i8", DType::kI64},
      {"<u8", DType::kU64}, {"|b1", DType::kBool}};
  for (const auto& [key, value] : kTable) {
    if (typestr == key) return value;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromTorch(const std::string& name) {
  static const std::pair<const char*, DType> kTable[] = {
      {"torch.float32", DType::kF32}, {"torch.float64", DType::kF64},
      {"torch.float16", DType::kF16}, {"torch.bfloat16", DType::kBF16},
      {"torch.int8", DType::kI8},     {"torch.uint8", DType::kU8},
      {"torch.int32", DType::kI32},   {"torch.int64", DType::kI64},
      {"torch.bool", DType::kBool}};
  for (const auto& [key, value] : kTable) {
    if (name == key) return value;
  }
  return std::nullopt;
}

const char* kSupported = "float32, float64, float16, bfloat16 (torch), int8, uint8, int32, uint32, "
                         "int64, uint64, bool";

PyObject* Interned(const char* name) { return PyUnicode_InternFromString(name); }

// Called by the slow path once it accepted a torch tensor of this dtype and layout.
void LearnTorchTensor(const py::handle& obj, DType dtype) {
  TorchTensorType();
  py::object dtype_object = obj.attr("dtype");
  for (const auto& [known, value] : g_torch.dtypes) {
    if (known == dtype_object.ptr()) return;
  }
  g_torch.dtypes.emplace_back(dtype_object.release().ptr(), dtype);
}

void UseTorchAccess(const py::capsule& capsule) {
  if (capsule.name() == nullptr || std::string(capsule.name()) != kTorchAccessCapsule) {
    ThrowInvalid(std::string("_use_torch_access: not a ") + kTorchAccessCapsule + " capsule");
  }
  const auto* access = capsule.get_pointer<const TorchAccess>();
  if (access == nullptr || access->version != kTorchAccessVersion || access->read == nullptr ||
      access->set_grad_recorder == nullptr) {
    ThrowInvalid("_use_torch_access: a torch access of another version (rebuild dgrr)");
  }
  TorchTensorType();  // the names the Python path reads with (a plan keeps each tensor's dtype object)
  g_torch_access = access;
  access->set_grad_recorder(&RecordGradientFacts);
}

// The fast path through the C++ object: what FastViewTorch accepts.
bool FastViewFromFacts(const py::handle& obj, const TorchTensorFacts& f, TensorView& view) {
  if (!f.cpu || !f.strided || !f.contiguous || f.dtype == 0 || f.ndim > kMaxTensorDims) return false;
  const auto dtype = static_cast<DType>(f.dtype);
  uint64_t elements = 1;
  view.ref.ndim = f.ndim;
  for (int i = 0; i < f.ndim; ++i) {
    view.ref.dims[i] = f.dims[i];
    elements *= static_cast<uint64_t>(f.dims[i]);
  }
  view.ref.dtype = dtype;
  view.ref.bytes = elements * DTypeSize(dtype);
  view.ref.data = f.data;
  view.writable = true;
  view.owner = py::reinterpret_borrow<py::object>(obj);
  return true;
}

// Where a CUDA tensor is recorded: its device, on the stream torch runs that
// device's work on now, so the fingerprint kernel queues behind the operator
// that produced the tensor (runtime/session.h: the host does not wait).
Placement CurrentStreamOf(const py::handle& obj, const std::string& what) {
#if DGRR_FINGERPRINT_HAVE_CUDA
  py::object device = obj.attr("device");
  const int index = device.attr("index").cast<int>();
  try {
    py::object stream = py::module_::import("torch.cuda").attr("current_stream")(device);
    return Placement::Cuda(index, reinterpret_cast<void*>(stream.attr("cuda_stream").cast<uintptr_t>()));
  } catch (const py::error_already_set& e) {  // a torch without CUDA, say
    ThrowInvalid(what + ": torch cannot name the current stream of cuda:" + std::to_string(index) + " (" +
                 e.what() + ")");
  }
#else
  (void)obj;
  ThrowInvalid(what + ": a CUDA tensor, and this dgrr was built without CUDA; move it with .cpu() or leave it out");
#endif
}

void ViewBuffer(const py::handle& obj, const std::string& what, bool need_writable,
                TensorView& view) {
  Py_buffer* buffer = view.AcquireBuffer();
  int flags = PyBUF_STRIDES | PyBUF_FORMAT | (need_writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), buffer, flags) != 0) {
    view.ForgetBuffer();
    PyErr_Clear();
    if (need_writable) {
      ThrowInvalid(what + ": a read-only " + Describe(obj) +
                   "; registered state must be writable (a resume restores into it)");
    }
    ThrowInvalid(what + ": " + Describe(obj) + " does not export its memory");
  }
  std::string format = buffer->format ? buffer->format : "B";
  auto dtype = DTypeFromFormat(format, static_cast<size_t>(buffer->itemsize));
  if (!dtype) {
    ThrowInvalid(what + ": element format '" + format + "' (" + std::to_string(buffer->itemsize) +
                 " bytes) is not a dtype dgrr records (" + kSupported + ")");
  }
  if (!PyBuffer_IsContiguous(buffer, 'C')) {
    ThrowInvalid(what + ": a non-contiguous " + Describe(obj) +
                 " (a transpose or strided slice, say); dgrr fingerprints C-contiguous memory "
                 "only: pass numpy.ascontiguousarray(x)");
  }
  std::vector<int64_t> shape(buffer->shape, buffer->shape + buffer->ndim);
  FillShape(view.ref, shape, what);
  view.ref.dtype = *dtype;
  view.ref.bytes = static_cast<uint64_t>(buffer->len);
  view.ref.data = buffer->buf;
  view.writable = !buffer->readonly;
  view.owner = py::reinterpret_borrow<py::object>(obj);
}

void ViewArrayInterface(const py::handle& obj, const std::string& what, TensorView& view) {
  py::dict iface = obj.attr("__array_interface__");
  std::string typestr = iface["typestr"].cast<std::string>();
  auto dtype = DTypeFromTypestr(typestr);
  if (!dtype) {
    ThrowInvalid(what + ": typestr '" + typestr + "' is not a dtype dgrr records (" + kSupported + ")");
  }
  if (!iface.contains("data") || iface["data"].is_none()) {
    ThrowInvalid(what + ": __array_interface__ without a data pointer");
  }
  py::tuple data = iface["data"];
  std::vector<int64_t> shape = iface["shape"].cast<std::vector<int64_t>>();
  if (iface.contains("strides") && !iface["strides"].is_none()) {
    // Strides given: C-contiguous only if they are exactly the packed ones.
    std::vector<int64_t> strides = iface["strides"].cast<std::vector<int64_t>>();
    int64_t expected = static_cast<int64_t>(DTypeSize(*dtype));
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expected) {
        ThrowInvalid(what + ": non-contiguous memory (strides); dgrr fingerprints C-contiguous "
                     "memory only");
      }
      expected *= shape[i];
    }
  }
  FillShape(view.ref, shape, what);
  view.ref.dtype = *dtype;
  view.ref.bytes = ElementCount(shape) * DTypeSize(*dtype);
  view.ref.data = reinterpret_cast<const void*>(data[0].cast<uintptr_t>());
  view.writable = !data[1].cast<bool>();
  view.owner = py::reinterpret_borrow<py::object>(obj);
}

}  // namespace

bool LooksLikeTorchTensor(const py::handle& obj) {
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous") &&
         py::hasattr(obj, "element_size") && py::hasattr(obj, "device");
}

PyObject* TorchTensorType() {
  if (g_torch.tensor_type == nullptr) {
    py::object torch = py::module_::import("torch");
    g_torch.tensor_type = py::object(torch.attr("Tensor")).release().ptr();
    g_torch.strided = py::object(torch.attr("strided")).release().ptr();
    g_torch.is_cpu = Interned("is_cpu");
    g_torch.layout = Interned("layout");
    g_torch.dtype = Interned("dtype");
    g_torch.shape = Interned("shape");
    g_torch.is_contiguous = Interned("is_contiguous");
    g_torch.data_ptr = Interned("data_ptr");
  }
  return g_torch.tensor_type;
}

bool FastViewFromTorchFacts(const TorchTensorFacts& facts, TensorView& view) {
  return FastViewFromFacts(py::none(), facts, view);
}

bool FastViewTorch(const py::handle& obj, TensorView& view) {
  if (g_torch_access != nullptr) {
    TorchTensorFacts facts;
    return g_torch_access->read(obj.ptr(), &facts) == 1 && FastViewFromFacts(obj, facts, view);
  }
  if (g_torch.tensor_type == nullptr) return false;
  const int is_tensor = PyObject_IsInstance(obj.ptr(), g_torch.tensor_type);
  if (is_tensor != 1) {
    if (is_tensor < 0) PyErr_Clear();
    return false;
  }
  auto attr = [&](PyObject* name) { return py::reinterpret_steal<py::object>(PyObject_GetAttr(obj.ptr(), name)); };
  auto call = [&](PyObject* name) {
    return py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(obj.ptr(), name));
  };
  py::object is_cpu = attr(g_torch.is_cpu), layout = attr(g_torch.layout), dtype_object = attr(g_torch.dtype);
  if (!is_cpu || !layout || !dtype_object) {
    PyErr_Clear();
    return false;
  }
  if (is_cpu.ptr() != Py_True || layout.ptr() != g_torch.strided) return false;
  std::optional<DType> dtype;
  for (const auto& [known, value] : g_torch.dtypes) {
    if (known == dtype_object.ptr()) dtype = value;
  }
  if (!dtype) return false;
  py::object contiguous = call(g_torch.is_contiguous), shape = attr(g_torch.shape), data = call(g_torch.data_ptr);
  if (!contiguous || !shape || !data || !PyTuple_Check(shape.ptr())) {
    PyErr_Clear();
    return false;
  }
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape.ptr());
  if (contiguous.ptr() != Py_True || ndim > kMaxTensorDims) return false;
  uint64_t elements = 1;
  view.ref.ndim = static_cast<int>(ndim);
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    const long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
    if (d < 0) {
      PyErr_Clear();
      return false;
    }
    view.ref.dims[i] = d;
    elements *= static_cast<uint64_t>(d);
  }
  const unsigned long long address = PyLong_AsUnsignedLongLong(data.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  view.ref.dtype = *dtype;
  view.ref.bytes = elements * DTypeSize(*dtype);
  view.ref.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
  view.writable = true;
  view.owner = py::reinterpret_borrow<py::object>(obj);
  return true;
}

// A torch.Tensor by its storage pointer (no NumPy involved, so bfloat16 works
// and a tensor that requires grad needs no detach). On the CPU for any use; on
// a CUDA device for recording and registered state, placed on the stream
// torch runs that device's work on when it is viewed.
void ViewTorch(const py::handle& obj, const std::string& what, TensorView& view, TensorUse use) {
  std::string device = py::str(obj.attr("device").attr("type")).cast<std::string>();
  const bool cuda = device == "cuda" && use != TensorUse::kHost;
  if (device != "cpu" && !cuda) {
    ThrowInvalid(what + ": a tensor on device '" + device + "': " +
                 (device == "cuda" ? "CUDA tensors can be recorded and registered as state, not read "
                                     "on the host"
                                   : "dgrr reads CPU tensors and records or registers CUDA ones") +
                 "; move it with .cpu() or leave it out");
  }
  std::string layout = py::str(obj.attr("layout")).cast<std::string>();
  if (layout != "torch.strided") ThrowInvalid(what + ": a " + layout + " tensor; only dense tensors");
  std::string dtype_name = py::str(obj.attr("dtype")).cast<std::string>();
  auto dtype = DTypeFromTorch(dtype_name);
  if (!dtype) {
    ThrowInvalid(what + ": dtype " + dtype_name + " is not one dgrr records (" + kSupported + ")");
  }
  if (!obj.attr("is_contiguous")().cast<bool>()) {
    ThrowInvalid(what + ": a non-contiguous tensor (a transpose or slice view, say); "
                 "dgrr fingerprints contiguous memory only: pass .contiguous()");
  }
  std::vector<int64_t> shape = obj.attr("shape").cast<std::vector<int64_t>>();
  FillShape(view.ref, shape, what);
  view.ref.dtype = *dtype;
  view.ref.bytes = ElementCount(shape) * obj.attr("element_size")().cast<uint64_t>();
  view.ref.data = reinterpret_cast<const void*>(obj.attr("data_ptr")().cast<uintptr_t>());
  // Device memory is written by the session's device copies (a resume),
  // never by the host.
  view.writable = !cuda || use == TensorUse::kState;
  view.owner = py::reinterpret_borrow<py::object>(obj);
  if (cuda) {
    view.ref.where = CurrentStreamOf(obj, what);
    return;  // the fast path knows CPU tensors only
  }
  LearnTorchTensor(obj, *dtype);
}

TensorView ViewOf(const py::handle& obj, const std::string& what, bool need_writable, TensorUse use) {
  TensorView view;
  if (LooksLikeTorchTensor(obj)) {
    ViewTorch(obj, what, view, use);
  } else if (PyObject_CheckBuffer(obj.ptr())) {
    ViewBuffer(obj, what, need_writable, view);
  } else if (py::hasattr(obj, "__array_interface__")) {
    ViewArrayInterface(obj, what, view);
  } else {
    ThrowInvalid(what + ": a " + Describe(obj) +
                 " holds no tensor memory dgrr can read (pass a NumPy array, a CPU torch "
                 "tensor, or an object with the buffer protocol or __array_interface__)");
  }
  if (need_writable && !view.writable) {
    ThrowInvalid(what + ": read-only memory; registered state must be writable (a resume "
                 "restores into it)");
  }
  Check(view.ref.Validate());
  return view;
}

py::tuple FingerprintTuple(const Fingerprint& fp) { return py::make_tuple(fp.xor64, fp.xxh3); }

// ---------------------------------------------------------------------------

void BindTensors(py::module_& m) {
  m.def("_use_torch_access", &UseTorchAccess, py::arg("capsule"),
        "Reads torch tensors through dgrr._torch_access's capsule from now on (dgrr.torch calls it "
        "when the running torch is the build that module was compiled against).");
  m.def("_uses_torch_access", []() { return g_torch_access != nullptr; });
  m.def(
      "fingerprint",
      [](py::handle array) {
        TensorView view = ViewOf(array, "fingerprint", /*need_writable=*/false);
        return FingerprintTuple(Unwrap(FingerprintTensor(view.ref)));
      },
      py::arg("array"), "(xor64, xxh3) of a tensor's bytes, as a BOUNDARY record stores them.");
}

}  // namespace dgrr::python
