// dgrr._dgrr: the Python binding of the C++ session (docs/python.md).
//
// Thin on purpose: every decision is the runtime's. What lives here is only
// what crossing the language boundary needs: turning Python objects that
// hold tensor memory (buffer-protocol objects such as NumPy arrays, objects
// with __array_interface__, CPU torch tensors) into TensorRefs without a
// copy, keeping registered state buffers alive as long as the session, and
// turning a non-OK Status into the exception class of its code.
//
// The GIL is released around the calls that read much tensor memory (a
// record of 256 KiB or more) or write files (Resume, Checkpoint, EndStep,
// Close) or wait for other ranks (collectives). A Session is not
// thread-safe, and neither is this wrapper: one Python thread drives it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dgrr/dgrr.h>

#include "base/dtype.h"
#include "base/environment.h"
#include "base/status.h"
#include "fingerprint/tensor.h"
#include "model/corpus.h"
#include "python/python_communicator.h"
#include "python/torch_access.h"
#include "rng/distributions.h"
#include "rng/rng_streams.h"
#include "runtime/canonical_reduce.h"
#include "runtime/communicator.h"
#include "runtime/determinism.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/launch_record.h"
#include "runtime/rank_group.h"
#include "runtime/recording_mode.h"
#include "runtime/session.h"
#if defined(DGRR_HAVE_MPI)
#include "runtime/mpi_communicator.h"
#endif

namespace py = pybind11;

namespace dgrr::python {
namespace {

// ---------------------------------------------------------------------------
// Errors: dgrr.Error and one subclass per StatusCode.
// ---------------------------------------------------------------------------
constexpr size_t kCodeCount = static_cast<size_t>(StatusCode::kInternal) + 1;
std::array<PyObject*, kCodeCount> g_error_classes{};
PyObject* g_error_base = nullptr;

struct ErrorClass {
  StatusCode code;
  const char* name;
  bool is_value_error;  // also derives from the builtin ValueError
  Status (*make)(std::string_view);
};

const ErrorClass kErrorClasses[] = {
    {StatusCode::kInvalidArgument, "InvalidArgumentError", true, &Status::InvalidArgument},
    {StatusCode::kNotFound, "NotFoundError", false, &Status::NotFound},
    {StatusCode::kIOError, "IoError", false, &Status::IOError},
    {StatusCode::kCorruption, "CorruptionError", false, &Status::Corruption},
    {StatusCode::kDivergence, "DivergenceError", false, &Status::Divergence},
    {StatusCode::kIntegrityFailure, "IntegrityFailureError", false, &Status::IntegrityFailure},
    {StatusCode::kFailedPrecondition, "FailedPreconditionError", false, &Status::FailedPrecondition},
    {StatusCode::kInternal, "InternalError", false, &Status::Internal},
};

[[noreturn]] void Throw(const Status& status) {
  size_t index = static_cast<size_t>(status.code());
  PyObject* cls = index < kCodeCount && g_error_classes[index] ? g_error_classes[index] : g_error_base;
  PyErr_SetString(cls, status.message().c_str());
  throw py::error_already_set();
}

void Check(const Status& status) {
  if (!status.ok()) Throw(status);
}

template <typename T>
T Unwrap(StatusOr<T> result) {
  if (!result.ok()) Throw(result.status());
  return std::move(result).value();
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  Throw(Status::InvalidArgument(message));
}

// The StatusCode names Python passes back (an exception class's `code`).
Status StatusNamed(std::string_view code, std::string_view message) {
  for (const ErrorClass& c : kErrorClasses) {
    if (code == StatusCodeName(c.code)) return c.make(message);
  }
  return Status::Internal(message);
}

void RegisterErrors(py::module_& m) {
  g_error_base = PyErr_NewExceptionWithDoc(
      "dgrr._dgrr.Error", "Base class of every error dgrr raises; .code names the StatusCode.",
      PyExc_Exception, nullptr);
  if (g_error_base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(g_error_base);
  for (const ErrorClass& c : kErrorClasses) {
    std::string qualified = std::string("dgrr._dgrr.") + c.name;
    py::object bases = c.is_value_error ? py::object(py::make_tuple(py::handle(g_error_base),
                                                                    py::handle(PyExc_ValueError)))
                                        : py::reinterpret_borrow<py::object>(g_error_base);
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    py::handle(cls).attr("code") = StatusCodeName(c.code);
    // The exit code the CLI gives this error (docs: 1 usage, 2 I/O, ...).
    py::handle(cls).attr("exit_code") = ExitCodeFor(c.make(""));
    g_error_classes[static_cast<size_t>(c.code)] = cls;
    m.attr(c.name) = py::handle(cls);
  }
}

// ---------------------------------------------------------------------------
// Names for the enums, as Python spells them.
// ---------------------------------------------------------------------------
template <typename E>
E Lookup(std::string_view what, std::string_view name,
         std::initializer_list<std::pair<const char*, E>> table) {
  std::string known;
  for (const auto& [key, value] : table) {
    if (name == key) return value;
    if (!known.empty()) known += ", ";
    known += key;
  }
  ThrowInvalid(std::string("unknown ") + std::string(what) + " '" + std::string(name) +
               "' (one of: " + known + ")");
}

trace::Phase ParsePhase(std::string_view name) {
  using P = trace::Phase;
  return Lookup<P>("phase", name,
                   {{"data", P::kData}, {"forward", P::kForward}, {"backward", P::kBackward},
                    {"collective", P::kCollective}, {"optimizer", P::kOptimizer}});
}

trace::Direction ParseDirection(std::string_view name) {
  using D = trace::Direction;
  return Lookup<D>("direction", name, {{"input", D::kInput}, {"output", D::kOutput}});
}

OpKind ParseKind(std::string_view name) {
  using K = OpKind;
  return Lookup<K>("kind", name,
                   {{"other", K::kOther}, {"matmul", K::kMatmul}, {"elementwise", K::kElementwise},
                    {"norm", K::kNorm}, {"attention", K::kAttention}, {"embedding", K::kEmbedding},
                    {"loss", K::kLoss}, {"collective", K::kCollective},
                    {"optimizer", K::kOptimizer}, {"data", K::kData}});
}

StateRole ParseRole(std::string_view name) {
  using R = StateRole;
  return Lookup<R>("state role", name,
                   {{"parameter", R::kParameter}, {"optimizer", R::kOptimizer},
                    {"counter", R::kCounter}, {"cursor", R::kCursor}, {"rng", R::kRng},
                    {"other", R::kOther}});
}

RecordMode ParseMode(const std::string& name) {
  auto mode = ParseRecordMode(name);
  if (!mode) ThrowInvalid("unknown recording mode '" + name + "' (one of: full, trusted, sdc, off)");
  return *mode;
}

OpenMode ParseOpenMode(std::string_view name) {
  using O = OpenMode;
  return Lookup<O>("open mode", name,
                   {{"create", O::kCreate}, {"overwrite", O::kOverwrite}, {"resume", O::kResume},
                    {"continue", O::kContinue}});
}

// ---------------------------------------------------------------------------
// Tensor memory from Python objects, without a copy.
// ---------------------------------------------------------------------------

// A TensorRef over a Python object's memory, and what keeps that memory
// valid: the object itself and, for a buffer-protocol exporter, the buffer
// (which also stops a NumPy array from being resized while it is held).
class TensorView {
 public:
  TensorView() = default;
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;
  TensorView(TensorView&& other) noexcept { *this = std::move(other); }
  TensorView& operator=(TensorView&& other) noexcept {
    Release();
    ref = other.ref;
    writable = other.writable;
    owner = std::move(other.owner);
    buffer_ = std::move(other.buffer_);
    return *this;
  }
  ~TensorView() { Release(); }  // called with the GIL held (pybind11 owns the objects)

  TensorRef ref;
  bool writable = false;
  py::object owner;

  Py_buffer* AcquireBuffer() {
    buffer_ = std::make_unique<Py_buffer>();
    std::memset(buffer_.get(), 0, sizeof(Py_buffer));
    return buffer_.get();
  }
  void ForgetBuffer() { buffer_.reset(); }  // the acquisition failed: nothing to release

 private:
  void Release() {
    if (buffer_) {
      PyBuffer_Release(buffer_.get());
      buffer_.reset();
    }
  }
  std::unique_ptr<Py_buffer> buffer_;
};

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

bool LooksLikeTorchTensor(const py::handle& obj) {
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous") &&
         py::hasattr(obj, "element_size") && py::hasattr(obj, "device");
}

// The fast path for the tensors dgrr.torch records in every hook: a dense,
// contiguous CPU torch.Tensor of a known dtype, read with as few Python calls
// as possible (the dtype and layout objects are compared by identity with
// ones seen before, no strings are built). Anything else returns false and
// goes the slow way, which names the problem.
struct TorchFastPath {
  PyObject* tensor_type = nullptr;  // torch.Tensor, once a torch tensor was seen
  PyObject* strided = nullptr;      // torch.strided
  std::vector<std::pair<PyObject*, DType>> dtypes;  // torch.float32 -> kF32, ...
  PyObject *is_cpu = nullptr, *layout = nullptr, *dtype = nullptr, *shape = nullptr,
           *is_contiguous = nullptr, *data_ptr = nullptr;
};
TorchFastPath g_torch;  // objects held for the life of the process (never released)

PyObject* Interned(const char* name) { return PyUnicode_InternFromString(name); }

// torch.Tensor, importing torch and the fast path's names on first use.
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

// Called by the slow path once it accepted a torch tensor of this dtype and layout.
void LearnTorchTensor(const py::handle& obj, DType dtype) {
  TorchTensorType();
  py::object dtype_object = obj.attr("dtype");
  for (const auto& [known, value] : g_torch.dtypes) {
    if (known == dtype_object.ptr()) return;
  }
  g_torch.dtypes.emplace_back(dtype_object.release().ptr(), dtype);
}

// Set by dgrr.torch when the running torch is the build dgrr._torch_access
// was compiled against (python/torch_access.h): tensors are then read from
// their C++ object. Never unset: the capsule's module stays imported.
const TorchAccess* g_torch_access = nullptr;

void UseTorchAccess(const py::capsule& capsule) {
  if (capsule.name() == nullptr || std::string(capsule.name()) != kTorchAccessCapsule) {
    ThrowInvalid(std::string("_use_torch_access: not a ") + kTorchAccessCapsule + " capsule");
  }
  const auto* access = capsule.get_pointer<const TorchAccess>();
  if (access == nullptr || access->version != kTorchAccessVersion || access->read == nullptr) {
    ThrowInvalid("_use_torch_access: a torch access of another version (rebuild dgrr)");
  }
  TorchTensorType();  // the names the Python path reads with (a plan keeps each tensor's dtype object)
  g_torch_access = access;
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

// What a view's memory is for: the host reads or writes it (dgrr.fingerprint,
// a dropout mask, the data-parallel buffers), the session records it, or the
// session holds it as registered state. The last two take CUDA tensors: the
// session fingerprints and copies device memory on the device's stream
// (runtime/session.h, StateEntry::where).
enum class TensorUse { kHost, kRecord, kState };

// A torch.Tensor by its storage pointer (no NumPy involved, so bfloat16 works
// and a tensor that requires grad needs no detach). On the CPU for any use; on
// a CUDA device for recording and registered state, placed on the stream
// torch runs that device's work on when it is viewed.
void ViewTorch(const py::handle& obj, const std::string& what, TensorView& view,
               TensorUse use = TensorUse::kHost) {
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

// Any object that holds tensor memory, as a view; InvalidArgumentError names
// what is wrong with anything else.
TensorView ViewOf(const py::handle& obj, const std::string& what, bool need_writable,
                  TensorUse use = TensorUse::kHost) {
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
// Communicators: the ranks of a data-parallel run (docs/python.md).
// ---------------------------------------------------------------------------
class PySession;

// One process's communicator: Open MPI's when an MPI launcher started the
// process (and this build has dgrr::mpi), else a world of one. One rank per
// process: dgrr.torch keeps process-wide state (the default RandomContext,
// torch's generators and thread pool), so ranks as Python threads are not
// offered. The sessions opened over it are closed before it is, because
// their RankGroup talks through it.
class PyCommunicator {
 public:
  explicit PyCommunicator(std::unique_ptr<Communicator> owned) : owned_(std::move(owned)) {
    group_ = std::make_unique<CommunicatorRankGroup>(*owned_);
  }
  PyCommunicator() : alone_(std::make_unique<InProcessGroup>(1)) {
    group_ = std::make_unique<CommunicatorRankGroup>(*alone_->ranks[0]);
  }
  ~PyCommunicator() { Close(); }

  Communicator& Get() {
    if (!group_) Throw(Status::FailedPrecondition("the dgrr communicator is closed"));
    return group_->communicator();
  }
  CommunicatorRankGroup& group() {
    Get();
    return *group_;
  }
  bool closed() const { return group_ == nullptr; }

  void AddUser(PySession* s) { users_.push_back(s); }
  void RemoveUser(PySession* s) { std::erase(users_, s); }

  // Closes the sessions still open over it, then the communicator itself
  // (MPI_Finalize when it initialised MPI). Closing twice is harmless.
  void Close();

  // This rank failed: ends the whole job (MPI_Abort with the CLI's exit code
  // for `code`), so no other rank waits for it in a collective.
  void Abort(const std::string& message, const std::string& code) {
    Communicator& comm = Get();
    comm.Abort(StatusNamed(code, message));
  }

 private:
  std::unique_ptr<InProcessGroup> alone_;
  std::unique_ptr<Communicator> owned_;
  std::unique_ptr<CommunicatorRankGroup> group_;
  std::vector<PySession*> users_;
};

bool StartedByMpiLauncher() {
  for (const char* launcher_variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (GetEnv(launcher_variable)) return true;
  }
  return false;
}

// backend: "auto" (MPI when an MPI launcher started this process, else a
// world of one), "mpi" (MPI or an error) or "single" (a world of one).
std::unique_ptr<PyCommunicator> OpenCommunicator(const std::string& backend) {
  if (backend != "auto" && backend != "mpi" && backend != "single") {
    ThrowInvalid("unknown communicator backend '" + backend + "' (one of: auto, mpi, single)");
  }
  if (backend == "single" || (backend == "auto" && !StartedByMpiLauncher())) {
    return std::make_unique<PyCommunicator>();
  }
#if defined(DGRR_HAVE_MPI)
  StatusOr<std::unique_ptr<MpiCommunicator>> mpi = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    mpi = OpenMpiCommunicator();
  }
  return std::make_unique<PyCommunicator>(Unwrap(std::move(mpi)));
#else
  Throw(Status::FailedPrecondition(
      std::string(backend == "mpi" ? "an MPI communicator was asked for"
                                   : "this process was started by an MPI launcher") +
      ", but this build of dgrr has no MPI support (dgrr::mpi was not built: install "
      "libopenmpi-dev and reconfigure, or run one process without mpirun)"));
#endif
}

// A float32 tensor's memory as `rows` x `cols` (rows: its first dimension).
struct FloatMatrix {
  TensorView view;
  float* data = nullptr;
  size_t rows = 0, cols = 0;
};

FloatMatrix FloatMatrixOf(const py::handle& obj, const std::string& what, int ndim) {
  FloatMatrix m;
  m.view = ViewOf(obj, what, /*need_writable=*/true);
  if (m.view.ref.dtype != DType::kF32 || m.view.ref.ndim != ndim) {
    ThrowInvalid(what + ": must be a " + std::to_string(ndim) + "-dimensional float32 tensor, not " +
                 std::to_string(m.view.ref.ndim) + "-dimensional " + std::string(DTypeName(m.view.ref.dtype)));
  }
  m.data = static_cast<float*>(const_cast<void*>(m.view.ref.data));
  m.rows = ndim == 2 ? static_cast<size_t>(m.view.ref.dims[0]) : 1;
  m.cols = static_cast<size_t>(m.view.ref.dims[ndim - 1]);
  return m;
}

// CanonicalAllReduce over the rows of `leaves` (this rank's leaves
// [first, first + rows) of `total`; clobbered) into `out`: bitwise the
// one-process canonical tree sum whatever the number of ranks.
void CanonicalAllReducePy(PyCommunicator& c, const py::handle& leaves, uint64_t first, uint64_t total,
                          const py::handle& out, int threads) {
  Communicator& comm = c.Get();
  FloatMatrix in = FloatMatrixOf(leaves, "canonical_all_reduce leaves", 2);
  FloatMatrix result = FloatMatrixOf(out, "canonical_all_reduce out", 1);
  if (in.rows > 0 && in.cols != result.cols) {
    ThrowInvalid("canonical_all_reduce: leaves of " + std::to_string(in.cols) + " values, out of " +
                 std::to_string(result.cols));
  }
  std::vector<float*> rows(in.rows);
  for (size_t r = 0; r < in.rows; ++r) rows[r] = in.data + r * result.cols;
  Status status;
  {
    py::gil_scoped_release release;
    status = CanonicalAllReduce(comm, rows, first, total, result.cols, result.data, threads);
  }
  Check(status);
}

std::vector<float> GatherExampleScalarsPy(PyCommunicator& c, const std::vector<float>& mine, uint64_t first,
                                          uint64_t total) {
  Communicator& comm = c.Get();
  std::vector<float> all;
  Status status;
  {
    py::gil_scoped_release release;
    status = GatherExampleScalars(comm, mine, first, total, &all);
  }
  Check(status);
  return all;
}

// ---------------------------------------------------------------------------
// The session.
// ---------------------------------------------------------------------------
// Below this many bytes a record is cheaper than handing the GIL to another
// thread and taking it back (fingerprinting runs at several GB/s): small
// tensors are recorded with the GIL held.
constexpr uint64_t kReleaseGilBytes = 256 << 10;

struct PyBoundary {
  BoundaryHandle handle;
  std::string name;
};

class PySession {
 public:
  PySession(std::unique_ptr<Session> session, py::object communicator)
      : session_(std::move(session)), communicator_(std::move(communicator)) {
    if (PyCommunicator* c = Communicator()) c->AddUser(this);
  }
  ~PySession() {
    // An unclosed session is closed by its destructor (trace flushed); the
    // state buffers are released after it, with the GIL held.
    session_.reset();
    Release();
  }

  Session& Get() {
    if (!session_) Throw(Status::FailedPrecondition("the dgrr session is closed"));
    return *session_;
  }
  bool closed() const { return session_ == nullptr; }

  PyBoundary DeclareBoundary(const std::string& name, const std::string& phase,
                             const std::string& direction, const std::string& kind) {
    BoundaryHandle h = Unwrap(Get().DeclareBoundary(name, ParsePhase(phase),
                                                    ParseDirection(direction), ParseKind(kind)));
    return {h, name};
  }

  py::object Record(const PyBoundary& boundary, const py::handle& array, uint64_t first_example,
                    uint32_t count, bool want_fingerprint) {
    Session& s = Get();
    TensorView view = RecordedView(boundary, array);
    Fingerprint fp;
    Status status;
    {
      std::optional<py::gil_scoped_release> release;
      if (view.ref.bytes >= kReleaseGilBytes) release.emplace();
      status = s.Record(boundary.handle, view.ref, {first_example, count},
                        want_fingerprint ? &fp : nullptr);
    }
    Check(status);
    return want_fingerprint ? py::object(FingerprintTuple(fp)) : py::object(py::none());
  }

  // A record of a tensor already viewed (dgrr.torch's hook sites).
  void RecordView(const PyBoundary& boundary, const TensorView& view, uint64_t first_example, uint32_t count) {
    Session& s = Get();
    Status status;
    {
      std::optional<py::gil_scoped_release> release;
      if (view.ref.bytes >= kReleaseGilBytes) release.emplace();
      status = s.Record(boundary.handle, view.ref, {first_example, count}, nullptr);
    }
    Check(status);
  }

  // Several records in one call, in list order (the program order): one
  // crossing into C++ and one GIL release for a whole optimizer step.
  void RecordMany(const py::list& records, uint64_t first_example, uint32_t count) {
    Get();
    std::vector<std::pair<const PyBoundary*, TensorView>> views;
    views.reserve(records.size());
    for (const py::handle& item : records) {
      auto [boundary, tensor] = RecordPair(item, "record_many");
      if (boundary->handle.recorded) views.emplace_back(boundary, RecordedView(*boundary, tensor));
    }
    std::vector<std::pair<const PyBoundary*, const TensorRef*>> refs;
    refs.reserve(views.size());
    for (const auto& [boundary, view] : views) refs.emplace_back(boundary, &view.ref);
    RecordRefs(refs, first_example, count);
  }

  // The (boundary, tensor) pair of a record_many or record_plan entry.
  static std::pair<const PyBoundary*, py::handle> RecordPair(const py::handle& item, const char* what) {
    auto pair = item.cast<py::tuple>();
    if (pair.size() != 2) ThrowInvalid(std::string(what) + ": each entry is a (boundary, tensor) pair");
    return {&pair[0].cast<const PyBoundary&>(), pair[1]};
  }

  // Records viewed tensors in order, with the GIL released when they are
  // many bytes (the views keep their tensors alive meanwhile).
  void RecordRefs(const std::vector<std::pair<const PyBoundary*, const TensorRef*>>& refs,
                  uint64_t first_example, uint32_t count) {
    Session& s = Get();
    uint64_t bytes = 0;
    for (const auto& [boundary, ref] : refs) bytes += ref->bytes;
    Status status;
    {
      std::optional<py::gil_scoped_release> release;
      if (bytes >= kReleaseGilBytes) release.emplace();
      for (const auto& [boundary, ref] : refs) {
        status = s.Record(boundary->handle, *ref, {first_example, count}, nullptr);
        if (!status.ok()) break;
      }
    }
    Check(status);
  }

  // Whether a boundary of this phase and kind is recorded in this session's
  // mode; always true under a control file (a dump may ask for any name).
  bool Records(const std::string& phase, const std::string& kind) {
    Session& s = Get();
    return s.control() != nullptr || ShouldRecordBoundary(s.options().mode, ParsePhase(phase), ParseKind(kind));
  }

  void RegisterState(const std::string& name, const py::handle& array, const std::string& role,
                     bool replicated) {
    Session& s = Get();
    TensorView view = ViewOf(array, "state '" + name + "'", /*need_writable=*/true, TensorUse::kState);
    StateEntry entry;
    entry.name = name;
    entry.data = const_cast<void*>(view.ref.data);
    entry.bytes = view.ref.bytes;
    entry.dtype = view.ref.dtype;
    entry.shape.assign(view.ref.shape().begin(), view.ref.shape().end());
    entry.role = ParseRole(role);
    entry.replicated = replicated;
    entry.where = view.ref.where;
    const bool parameter = entry.role == StateRole::kParameter;
    Check(s.state().Register(std::move(entry)));
    if (LooksLikeTorchTensor(array)) registered_tensors_.push_back({state_.size(), name, parameter});
    state_.push_back(std::move(view));  // the memory stays valid while the session lives
  }

  // A registered torch tensor keeps its Python object alive, not its
  // memory: model.double(), model.to(...), `param.data = ...` or a resize_
  // give the same Parameter other memory and free the old, which the
  // session would then fingerprint, checkpoint and restore into. So before
  // it does, each such tensor is read again (parameters only at end_step,
  // every one at checkpoint and resume) and must still have the pointer,
  // dtype and size it was registered with.
  void CheckRegisteredMemory(bool parameters_only, const char* when) {
    for (const RegisteredTensor& r : registered_tensors_) {
      if (parameters_only && !r.parameter) continue;
      const TensorView& registered = state_[r.index];
      TensorView now;
      if (!FastViewTorch(registered.owner, now)) {
        ViewTorch(registered.owner, "state '" + r.name + "'", now, TensorUse::kState);
      }
      if (now.ref.data == registered.ref.data && now.ref.bytes == registered.ref.bytes &&
          now.ref.dtype == registered.ref.dtype) {
        continue;
      }
      Throw(Status::FailedPrecondition(
          std::string(when) + ": state '" + r.name + "' is no longer in the memory it was registered with (" +
          std::string(DTypeName(registered.ref.dtype)) + ", " + std::to_string(registered.ref.bytes) + " bytes; now " +
          std::string(DTypeName(now.ref.dtype)) + ", " + std::to_string(now.ref.bytes) +
          " bytes elsewhere): the model or tensor was moved, converted or resized after it was registered "
          "(model.to(), .double(), param.data = ...); register state after such changes"));
    }
  }

  // State that lives outside registered memory (a generator inside torch,
  // Python's `random`, a scheduler's attributes) is mirrored into registered
  // buffers: `capture` copies it in, `restore` copies it back out. Captured
  // before every checkpoint and before a resume (so a fresh start restores
  // what is already there, a no-op), restored after every resume.
  void AddStateHooks(py::function capture, py::function restore) {
    Get();
    hooks_.emplace_back(std::move(capture), std::move(restore));
  }

  uint64_t Resume() {
    Session& s = Get();
    CheckRegisteredMemory(/*parameters_only=*/false, "resume");
    CaptureHooks();
    StatusOr<uint64_t> start = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      start = s.Resume();
    }
    uint64_t first = Unwrap(std::move(start));
    for (auto& [capture, restore] : hooks_) restore();
    return first;
  }

  void Checkpoint(uint64_t step) {
    Get();
    CheckRegisteredMemory(/*parameters_only=*/false, "checkpoint");
    CaptureHooks();
    Released([&](Session& s) { return s.Checkpoint(step); });
  }
  void BeginStep(uint64_t step) { Check(Get().BeginStep(step)); }
  // Inside a step of an open session: what dgrr.torch's hooks ask before
  // they record. A closed session is in no step, so a model used after its
  // session ended (evaluated, saved) runs as if it had no hooks.
  bool InStep() const { return session_ != nullptr && session_->in_step(); }
  void EndStep(uint64_t step, float loss) {
    CheckRegisteredMemory(/*parameters_only=*/true, "end_step");
    Released([&](Session& s) { return s.EndStep(step, loss); });
  }

  void Close() {
    if (!session_) return;  // closing twice is harmless
    Status status;
    {
      py::gil_scoped_release release;
      status = session_->Close();
    }
    session_.reset();
    Release();
    Check(status);
  }

  static TensorView RecordedView(const PyBoundary& boundary, const py::handle& array) {
    TensorView view;
    if (FastViewTorch(array, view)) return view;
    if (LooksLikeTorchTensor(array)) {
      ViewTorch(array, "record '" + boundary.name + "'", view, TensorUse::kRecord);
      return view;
    }
    return ViewOf(array, "record '" + boundary.name + "'", /*need_writable=*/false);
  }

 private:
  PyCommunicator* Communicator() {
    return communicator_.is_none() ? nullptr : communicator_.cast<PyCommunicator*>();
  }
  void Release() {
    hooks_.clear();
    registered_tensors_.clear();
    state_.clear();
    if (PyCommunicator* c = Communicator()) c->RemoveUser(this);
    communicator_ = py::none();
  }

  void CaptureHooks() {
    for (auto& [capture, restore] : hooks_) capture();
  }

  template <typename F>
  void Released(F&& call) {
    Session& s = Get();
    Status status;
    {
      py::gil_scoped_release release;
      status = call(s);
    }
    Check(status);
  }

  std::unique_ptr<Session> session_;
  py::object communicator_;  // the PyCommunicator its RankGroup uses, or None
  std::vector<TensorView> state_;
  struct RegisteredTensor {
    size_t index;  // into state_
    std::string name;
    bool parameter;
  };
  std::vector<RegisteredTensor> registered_tensors_;  // the torch tensors among state_
  std::vector<std::pair<py::function, py::function>> hooks_;
};

// Hooks stay on a module when it is copied (copy.deepcopy copies its hook
// dicts, torch.save pickles them): a copy (an EMA model, a frozen teacher, a
// saved model loaded again) must not record under the original's
// boundaries. So each hook remembers its module weakly and does nothing for
// any other, deepcopy hands back the same hook (inert on the copy), and a
// pickled hook loads as an InertHook, which does nothing.
class PyInertHook {};

// Whether `module` is the one whose weak reference `ref` holds (None: any).
bool IsModuleOf(const py::object& ref, const py::handle& module) {
  return ref.is_none() || PyWeakref_GetObject(ref.ptr()) == module.ptr();
}

py::object WeakModule(const py::object& module) {
  return module.is_none() ? py::none() : py::object(py::weakref(module));
}

// What dgrr.torch's hooks hold of their Instrumentation: a weak reference
// (the model holds its hooks, and a strong reference back would keep the
// model alive through an object Python's collector cannot see into), and
// its session, resolved on first use.
class HookOwner {
 public:
  explicit HookOwner(const py::object& inst) : inst_(inst) {}

  py::object Instrumentation() const {
    py::object inst = inst_();
    if (inst.is_none()) Throw(Status::FailedPrecondition("dgrr.torch: the Instrumentation of this hook is gone"));
    return inst;
  }

  PySession& Session() {
    if (session_ == nullptr) {
      session_object_ = Instrumentation().attr("session");
      session_ = session_object_.cast<PySession*>();
    }
    return *session_;
  }

  // Hooks record only inside a step of an open session (PySession::InStep).
  bool InStep() { return Session().InStep(); }

 private:
  py::weakref inst_;
  py::object session_object_;  // keeps session_ alive
  PySession* session_ = nullptr;
};

// One boundary dgrr.torch's hooks record under (python/dgrr/torch.py): the
// tensor hook of an input gradient is its bound `record`, a module's forward
// hook its bound `forward_hook`, so torch calls into C++ with no Python frame
// between. The boundary is declared by the Instrumentation on the first
// record (Instrumentation._boundary), and each record reads the
// Instrumentation's `examples` then. The Instrumentation is held weakly
// (HookOwner).
class PySite {
 public:
  PySite(const py::object& inst, std::string name, std::string phase, std::string kind, std::string module,
         const py::object& module_object = py::none())
      : owner_(inst), name_(std::move(name)), phase_(std::move(phase)), kind_(std::move(kind)),
        module_(std::move(module)), module_ref_(WeakModule(module_object)) {}

  void Record(const py::handle& tensor) {
    // Outside a step (an evaluation between steps, or after the session
    // closed) nothing is recorded.
    if (!owner_.InStep()) return;
    if (!boundary_) Declare();
    if (!boundary_->handle.recorded) return;
    const auto [first, count] = Examples();
    TensorView view;
    if (!FastViewTorch(tensor, view)) {
      py::object t = py::reinterpret_borrow<py::object>(tensor);
      // A view that is not contiguous is recorded from a contiguous copy
      // (of the values alone: no autograd history).
      if (LooksLikeTorchTensor(t) && !t.attr("is_contiguous")().cast<bool>()) {
        t = t.attr("detach")().attr("contiguous")();
      }
      view = PySession::RecordedView(*boundary_, t);
    }
    owner_.Session().RecordView(*boundary_, view, first, count);
  }

  // A forward hook: a module's tensor output is recorded here; any other
  // output (tuples, lists, dicts of tensors) goes to the Instrumentation,
  // one boundary per tensor in it.
  void ForwardHook(const py::handle& module, const py::handle&, const py::handle& output) {
    if (!IsModuleOf(module_ref_, module)) return;  // a copy of the module
    const int is_tensor = PyObject_IsInstance(output.ptr(), TorchTensorType());
    if (is_tensor < 0) throw py::error_already_set();
    if (is_tensor == 1) {
      Record(output);
      return;
    }
    owner_.Instrumentation().attr("_record_output_items")(module_, kind_, output);
  }

 private:
  void Declare() {
    py::object boundary = owner_.Instrumentation().attr("_boundary")(name_, phase_, kind_);
    boundary_ = boundary.cast<PyBoundary>();
  }

  std::pair<uint64_t, uint32_t> Examples() {
    static PyObject* const kExamples = PyUnicode_InternFromString("examples");
    auto examples = py::reinterpret_steal<py::object>(PyObject_GetAttr(owner_.Instrumentation().ptr(), kExamples));
    if (!examples) throw py::error_already_set();
    auto pair = examples.cast<std::pair<uint64_t, uint32_t>>();
    return pair;
  }

  HookOwner owner_;
  std::string name_, phase_, kind_, module_;
  py::object module_ref_;  // weak reference to the module it serves, or None
  std::optional<PyBoundary> boundary_;
};

// The forward pre-hook that catches the gradient w.r.t. each input of a
// single-input module (dgrr.torch._SINGLE_INPUT): every tensor input that
// will get a gradient is replaced by a view of itself whose gradient hook is
// the bound `record` of the Site `<module>.grad_in.<i>` (i counts the tensor
// inputs). The view is the module's alone, so its gradient is exactly what
// the module passes back. With `direct`, the hook goes in through the view's
// hook dict and its grad_fn, as Tensor.register_hook does inside, without
// the handle it makes (dgrr.torch._direct_tensor_hooks checks that this
// works with the running torch).
class PyInputGradHook {
 public:
  PyInputGradHook(const py::object& inst, std::string module, const py::object& module_object, bool direct)
      : owner_(inst), module_(std::move(module)), module_ref_(WeakModule(module_object)), direct_(direct) {}

  py::object Call(const py::handle& module, const py::tuple& inputs) {
    if (!IsModuleOf(module_ref_, module) || !GradEnabled() || !owner_.InStep()) return py::none();
    const size_t n = inputs.size();
    if (n == 1) {  // the usual case
      if (!IsTensor(inputs[0]) || !RequiresGrad(inputs[0])) return py::none();
      return py::make_tuple(Hooked(inputs[0], 0));
    }
    py::tuple wrapped(n);
    bool changed = false;
    size_t index = 0;
    for (size_t i = 0; i < n; ++i) {
      py::object x = inputs[i];
      if (IsTensor(x)) {
        if (RequiresGrad(x)) {
          x = Hooked(x, index);
          changed = true;
        }
        ++index;
      }
      wrapped[i] = std::move(x);
    }
    return changed ? py::object(std::move(wrapped)) : py::none();
  }

 private:
  static bool GradEnabled() {
    static PyObject* const is_grad_enabled =
        py::object(py::module_::import("torch").attr("is_grad_enabled")).release().ptr();
    auto enabled = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(is_grad_enabled));
    if (!enabled) throw py::error_already_set();
    return enabled.ptr() == Py_True;
  }

  static bool IsTensor(const py::handle& x) {
    const int is_tensor = PyObject_IsInstance(x.ptr(), TorchTensorType());
    if (is_tensor < 0) throw py::error_already_set();
    return is_tensor == 1;
  }

  static bool RequiresGrad(const py::handle& tensor) {
    static PyObject* const kRequiresGrad = PyUnicode_InternFromString("requires_grad");
    auto flag = py::reinterpret_steal<py::object>(PyObject_GetAttr(tensor.ptr(), kRequiresGrad));
    if (!flag) throw py::error_already_set();
    return flag.ptr() == Py_True;
  }

  py::object RecordHook(size_t index) {
    while (records_.size() <= index) {
      py::object site = py::cast(PySite(owner_.Instrumentation(), module_ + ".grad_in." + std::to_string(records_.size()),
                                        "backward", "other", ""));
      records_.push_back(site.attr("record"));
    }
    return records_[index];
  }

  py::object Hooked(const py::handle& x, size_t index) {
    static PyObject* const kViewAs = PyUnicode_InternFromString("view_as");
    static PyObject* const kHooks = PyUnicode_InternFromString("_backward_hooks");
    static PyObject* const kGradFn = PyUnicode_InternFromString("grad_fn");
    static PyObject* const kRegisterDict = PyUnicode_InternFromString("_register_hook_dict");
    static PyObject* const kRegisterHook = PyUnicode_InternFromString("register_hook");
    auto view = py::reinterpret_steal<py::object>(PyObject_CallMethodOneArg(x.ptr(), kViewAs, x.ptr()));
    if (!view) throw py::error_already_set();
    py::object hook = RecordHook(index);
    if (direct_) {
      py::dict hooks;  // each view its own
      hooks[py::int_(0)] = hook;
      if (PyObject_SetAttr(view.ptr(), kHooks, hooks.ptr()) != 0) throw py::error_already_set();
      auto grad_fn = py::reinterpret_steal<py::object>(PyObject_GetAttr(view.ptr(), kGradFn));
      if (!grad_fn) throw py::error_already_set();
      auto done = py::reinterpret_steal<py::object>(PyObject_CallMethodOneArg(grad_fn.ptr(), kRegisterDict, view.ptr()));
      if (!done) throw py::error_already_set();
    } else {
      auto handle = py::reinterpret_steal<py::object>(PyObject_CallMethodOneArg(view.ptr(), kRegisterHook, hook.ptr()));
      if (!handle) throw py::error_already_set();
    }
    return view;
  }

  HookOwner owner_;
  std::string module_;
  py::object module_ref_;  // weak reference to the module it serves
  bool direct_;
  std::vector<py::object> records_;  // Site.record of each tensor input, made on first use
};

// The same (boundary, tensor) pairs recorded step after step (dgrr.torch's
// parameters, gradients and optimizer state): each torch tensor's view is
// kept, and a record re-reads only what can change under the same tensor
// object without a new one being made (its data pointer, by set_, resize_
// or `.data =`; its shape; its contiguity, by an in-place transpose),
// viewing it afresh when any of them differs. That is three attribute reads
// a tensor instead of the fast path's six, and no tuple or boundary casts.
// Entries that are not torch tensors on the fast path are viewed anew on
// every record. Records are made in list order, as record_many makes them.
class PyRecordPlan {
 public:
  PyRecordPlan(const PyRecordPlan&) = delete;
  PyRecordPlan& operator=(const PyRecordPlan&) = delete;
  PyRecordPlan(py::object session, const py::list& records) : session_(std::move(session)) {
    PySession& s = Session();
    s.Get();
    entries_.reserve(records.size());
    for (const py::handle& item : records) {
      auto [boundary, tensor] = PySession::RecordPair(item, "record_plan");
      if (!boundary->handle.recorded) continue;
      Entry e;
      e.boundary = *boundary;
      e.tensor = py::reinterpret_borrow<py::object>(tensor);
      // The slow path first: it checks the tensor now, naming a problem,
      // and teaches the fast path a torch dtype it has not seen.
      TensorView checked = PySession::RecordedView(e.boundary, tensor);
      // Entries that are not planned are viewed afresh on every record, so
      // `checked` is not kept: its buffer export would stop the owner from
      // resizing (a NumPy array, a bytearray) for the plan's lifetime.
      e.planned = FastViewTorch(tensor, e.view);
      if (e.planned) e.dtype = DTypeObject(tensor);
      entries_.push_back(std::move(e));
    }
  }

  size_t size() const { return entries_.size(); }

  void Record(uint64_t first_example, uint32_t count) {
    PySession& s = Session();
    std::vector<TensorView> fresh;  // views made for this call only
    fresh.reserve(entries_.size());
    std::vector<std::pair<const PyBoundary*, const TensorRef*>> refs;
    refs.reserve(entries_.size());
    for (Entry& e : entries_) {
      if (!e.planned || !Unchanged(e)) {
        fresh.push_back(FreshView(e));
        refs.emplace_back(&e.boundary, &fresh.back().ref);
      } else {
        refs.emplace_back(&e.boundary, &e.view.ref);
      }
    }
    s.RecordRefs(refs, first_example, count);
  }

 private:
  struct Entry {
    PyBoundary boundary;
    py::object tensor;
    TensorView view;
    py::object dtype;      // the torch dtype the kept view was made for
    bool planned = false;  // a torch tensor whose view is kept
  };

  static py::object DTypeObject(py::handle tensor) {
    if (g_torch.dtype == nullptr) return py::object();  // no torch tensor seen: nothing to compare
    auto dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(tensor.ptr(), g_torch.dtype));
    if (!dtype) PyErr_Clear();
    return dtype;
  }

  PySession& Session() { return session_.cast<PySession&>(); }

  // Whether the kept view still describes the tensor. The dtype is compared
  // too: `.data = p.data.view(torch.int32)` keeps the pointer and shape, and
  // a storage freed and allocated again for another dtype can come back at
  // the same address, where the kept view's byte count would be wrong.
  static bool Unchanged(const Entry& e) {
    PyObject* obj = e.tensor.ptr();
    if (g_torch_access != nullptr) {
      TorchTensorFacts f;
      const TensorRef& ref = e.view.ref;
      if (g_torch_access->read(obj, &f) != 1 || !f.cpu || !f.strided || !f.contiguous ||
          f.dtype != static_cast<uint8_t>(ref.dtype) || f.ndim != ref.ndim || f.data != ref.data) {
        return false;
      }
      for (int i = 0; i < ref.ndim; ++i) {
        if (f.dims[i] != ref.dims[i]) return false;
      }
      return true;
    }
    auto data = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(obj, g_torch.data_ptr));
    auto contiguous = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(obj, g_torch.is_contiguous));
    auto shape = py::reinterpret_steal<py::object>(PyObject_GetAttr(obj, g_torch.shape));
    auto dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(obj, g_torch.dtype));
    if (!data || !contiguous || !shape || !dtype || !PyTuple_Check(shape.ptr())) {
      PyErr_Clear();
      return false;
    }
    if (!e.dtype || dtype.ptr() != e.dtype.ptr()) return false;
    const TensorRef& ref = e.view.ref;
    if (contiguous.ptr() != Py_True || PyTuple_GET_SIZE(shape.ptr()) != ref.ndim) return false;
    if (PyLong_AsVoidPtr(data.ptr()) != ref.data) {
      PyErr_Clear();
      return false;
    }
    for (int i = 0; i < ref.ndim; ++i) {
      if (PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i)) != ref.dims[i]) {
        PyErr_Clear();
        return false;
      }
    }
    return true;
  }

  // The tensor viewed as record() would view it; a torch tensor that is no
  // longer contiguous is recorded from a contiguous copy, as dgrr.torch's
  // hooks do. A torch tensor's new view is kept for the next records.
  static TensorView FreshView(Entry& e) {
    py::object tensor = e.tensor;
    if (e.planned) {
      TensorView again;
      if (FastViewTorch(tensor, again)) {
        e.view = std::move(again);
        e.dtype = DTypeObject(tensor);
        TensorView copy;
        copy.ref = e.view.ref;
        copy.owner = e.view.owner;
        return copy;
      }
      if (!tensor.attr("is_contiguous")().cast<bool>()) tensor = tensor.attr("contiguous")();
    }
    return PySession::RecordedView(e.boundary, tensor);
  }

  py::object session_;  // the PySession, kept alive by the plan
  std::vector<Entry> entries_;
};

// The launch record of a Python program: what /proc/self says (working
// directory, the interpreter binary and its digest, the environment), with
// the interpreter's argv as Python saw it and the script's path and digest,
// so the re-executor runs `python3 script.py args` and refuses a changed
// script.
LaunchRecord PythonLaunch(const std::vector<std::string>& argv, const std::string& script) {
  LaunchRecord launch = Unwrap(CaptureLaunchRecord());
  if (!argv.empty()) launch.argv = argv;
  if (!script.empty()) {
    launch.script = script;
    launch.script_xxh3 = Unwrap(FileContentDigest(script));
  }
  return launch;
}

std::unique_ptr<PySession> OpenSession(const std::string& run_dir, uint64_t seed, int rank,
                                       int world_size, int threads, const std::string& mode,
                                       const std::string& open_mode, uint64_t checkpoint_every,
                                       uint64_t total_steps, bool resume_fallback,
                                       const std::string& config_json,
                                       const std::string& program_info_json,
                                       const std::vector<std::string>& argv,
                                       const std::string& script, bool reexecutable,
                                       py::object communicator) {
  SessionOptions o;
  o.run_dir = run_dir;
  o.seed = seed;
  o.rank = rank;
  o.world_size = world_size;
  if (!communicator.is_none()) {
    PyCommunicator& c = communicator.cast<PyCommunicator&>();
    Communicator& comm = c.Get();
    if (rank != comm.rank() || world_size != comm.size()) {
      ThrowInvalid("rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                   " given, but the communicator is rank " + std::to_string(comm.rank()) + " of " +
                   std::to_string(comm.size()));
    }
    o.group = &c.group();
  }
  o.threads = threads;
  o.mode = ParseMode(mode);
  o.open_mode = ParseOpenMode(open_mode);
  o.checkpoint_every = checkpoint_every;
  o.total_steps = total_steps;
  o.resume_fallback = resume_fallback;
  o.config_json = config_json;
  o.program_info_json = program_info_json;
  o.reexecutable = reexecutable;
  if (reexecutable) o.launch = PythonLaunch(argv, script);
  StatusOr<std::unique_ptr<Session>> session = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    session = dgrr::Open(o);
  }
  return std::make_unique<PySession>(Unwrap(std::move(session)), std::move(communicator));
}

void PyCommunicator::Close() {
  // Closing a session removes it from users_.
  while (!users_.empty()) {
    PySession* s = users_.back();
    try {
      s->Close();
    } catch (py::error_already_set&) {
      // Its error was raised in Python before; the communicator still closes.
    }
    RemoveUser(s);
  }
  if (!group_) return;
  py::gil_scoped_release release;  // MPI_Finalize waits for the other ranks
  group_.reset();
  owned_.reset();
  alone_.reset();
}

// ---------------------------------------------------------------------------
// Counter-based randomness: rng/'s streams, as the C++ trainer uses them.
// ---------------------------------------------------------------------------

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
}  // namespace dgrr::python

PYBIND11_MODULE(_dgrr, m) {
  using namespace dgrr;
  using namespace dgrr::python;
  m.doc() = "dgrr's C++ session, bound for Python (use the dgrr package, not this module)";
  RegisterErrors(m);

  py::class_<PyBoundary>(m, "Boundary", "A declared boundary (dgrr.Session.declare_boundary).")
      .def_property_readonly("name", [](const PyBoundary& b) { return b.name; })
      .def_property_readonly("recorded", [](const PyBoundary& b) { return b.handle.recorded; })
      .def("__repr__", [](const PyBoundary& b) {
        return "<dgrr.Boundary '" + b.name + "'" + (b.handle.recorded ? "" : " (not recorded)") + ">";
      });

  // What a pickled dgrr.torch hook loads as (see PyInertHook).
  py::class_<PyInertHook>(m, "InertHook", "A dgrr.torch hook of a module copied by pickling: does nothing.")
      .def(py::init<>())
      .def("__call__", [](const PyInertHook&, const py::args&, const py::kwargs&) {})
      .def("record", [](const PyInertHook&, const py::args&) {})
      .def("forward_hook", [](const PyInertHook&, const py::args&) {})
      .def(py::pickle([](const PyInertHook&) { return py::tuple(); },
                      [](const py::tuple&) { return PyInertHook(); }));
  // deepcopy: the same hook, inert on the copy; pickle: an InertHook.
  auto same_hook = [](const py::object& self, const py::object&) { return self; };
  auto inert_hook = [](const py::object&) { return py::make_tuple(py::type::of<PyInertHook>(), py::tuple()); };

  py::class_<PySite>(m, "Site", "A boundary dgrr.torch's hooks record under (python/dgrr/torch.py).")
      .def(py::init<const py::object&, std::string, std::string, std::string, std::string, const py::object&>(),
           py::arg("inst"), py::arg("name"), py::arg("phase"), py::arg("kind"), py::arg("module") = "",
           py::arg("module_object") = py::none())
      .def("record", &PySite::Record, py::arg("tensor"))
      .def("forward_hook", &PySite::ForwardHook, py::arg("module"), py::arg("inputs"), py::arg("output"))
      .def("__deepcopy__", same_hook)
      .def("__reduce__", inert_hook);

  py::class_<PyInputGradHook>(m, "InputGradHook",
                              "dgrr.torch's forward pre-hook for a module's input gradients (python/dgrr/torch.py).")
      .def(py::init<const py::object&, std::string, const py::object&, bool>(), py::arg("inst"), py::arg("module"),
           py::arg("module_object"), py::arg("direct"))
      .def("__call__", &PyInputGradHook::Call, py::arg("module"), py::arg("inputs"))
      .def("__deepcopy__", same_hook)
      .def("__reduce__", inert_hook);

  py::class_<PyRecordPlan>(m, "RecordPlan",
                           "(boundary, tensor) pairs recorded again each call (Session.record_plan).")
      .def("record", &PyRecordPlan::Record, py::arg("first_example") = 0, py::arg("count") = 1,
           "record() of each pair, in order, in one call; a tensor's data pointer, shape and "
           "contiguity are read again, nothing else.")
      .def("__len__", &PyRecordPlan::size);

  py::class_<PySession>(m, "Session", "One rank of one recorded run (docs/python.md).")
      .def("declare_boundary", &PySession::DeclareBoundary, py::arg("name"),
           py::arg("phase") = "forward", py::arg("direction") = "output", py::arg("kind") = "other")
      .def("record", &PySession::Record, py::arg("boundary"), py::arg("array"),
           py::arg("first_example") = 0, py::arg("count") = 1, py::arg("fingerprint") = false)
      .def("record_many", &PySession::RecordMany, py::arg("records"), py::arg("first_example") = 0,
           py::arg("count") = 1, "record() of each (boundary, tensor) pair, in order, in one call.")
      .def(
          "record_plan",
          [](py::object self, const py::list& records) {
            return std::make_unique<PyRecordPlan>(std::move(self), records);
          },
          py::arg("records"),
          "A RecordPlan of (boundary, tensor) pairs to record again and again, in list order.")
      .def("records", &PySession::Records, py::arg("phase"), py::arg("kind"),
           "Whether this session records boundaries of this phase and kind (its mode decides).")
      .def("register_state", &PySession::RegisterState, py::arg("name"), py::arg("array"),
           py::arg("role") = "other", py::arg("replicated") = false)
      .def("resume", &PySession::Resume)
      .def("add_state_hooks", &PySession::AddStateHooks, py::arg("capture"), py::arg("restore"),
           "capture() copies outside state into registered buffers (before each checkpoint "
           "and resume); restore() copies it back (after each resume).")
      .def("begin_step", &PySession::BeginStep, py::arg("step"))
      .def_property_readonly("in_step", &PySession::InStep,
                             "Whether begin_step was called and the step's end_step not yet "
                             "(False once the session is closed).")
      .def("end_step", &PySession::EndStep, py::arg("step"), py::arg("loss"))
      .def("should_checkpoint",
           [](PySession& s, uint64_t step) { return s.Get().ShouldCheckpoint(step); },
           py::arg("step"))
      .def("checkpoint", &PySession::Checkpoint, py::arg("step"))
      .def("should_stop", [](PySession& s, uint64_t step) { return s.Get().ShouldStop(step); },
           py::arg("step"))
      .def("request_stop", [](PySession& s) { s.Get().RequestStop(); })
      .def("close", &PySession::Close)
      .def_property_readonly("closed", &PySession::closed)
      .def_property_readonly("rank", [](PySession& s) { return s.Get().rank(); })
      .def_property_readonly("seed", [](PySession& s) { return s.Get().options().seed; })
      .def_property_readonly("run_dir", [](PySession& s) { return s.Get().options().run_dir; })
      .def_property_readonly("trace_path", [](PySession& s) { return s.Get().trace_path(); })
      .def_property_readonly("current_step", [](PySession& s) { return s.Get().current_step(); })
      .def_property_readonly("controlled",
                             [](PySession& s) { return s.Get().control() != nullptr; })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySession& s, py::handle exc_type, py::handle, py::handle) {
        if (exc_type.is_none()) {
          s.Close();
        } else {
          // An exception is on its way out: close what can be closed, and
          // let that exception, not a secondary one, reach the caller.
          try {
            s.Close();
          } catch (py::error_already_set&) {
          }
        }
        return false;
      });

  m.def("_open", &OpenSession, py::arg("run_dir"), py::arg("seed"), py::arg("rank"),
        py::arg("world_size"), py::arg("threads"), py::arg("mode"), py::arg("open_mode"),
        py::arg("checkpoint_every"), py::arg("total_steps"), py::arg("resume_fallback"),
        py::arg("config_json"), py::arg("program_info_json"), py::arg("argv"), py::arg("script"),
        py::arg("reexecutable"), py::arg("communicator") = py::none());

  py::class_<PyCommunicator>(m, "Communicator",
                             "This process's rank of a data-parallel run (dgrr.communicator()).")
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.Get().rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.Get().size(); })
      .def_property_readonly("backend",
                             [](PyCommunicator& c) { return std::string(c.Get().name()); })
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("barrier",
           [](PyCommunicator& c) {
             Communicator& comm = c.Get();
             Status status;
             {
               py::gil_scoped_release release;
               status = comm.Barrier();
             }
             Check(status);
           })
      .def("canonical_all_reduce", &CanonicalAllReducePy, py::arg("leaves"), py::arg("first"),
           py::arg("total"), py::arg("out"), py::arg("threads") = 1,
           "out = the canonical tree sum of all ranks' leaves (float32 rows; this rank's are "
           "leaves [first, first + rows) of total, and are clobbered): bitwise the one-process "
           "sum whatever the number of ranks.")
      .def("gather_example_scalars", &GatherExampleScalarsPy, py::arg("mine"), py::arg("first"),
           py::arg("total"), "Every leaf's scalar (float32), in leaf order, on every rank.")
      .def("abort", &PyCommunicator::Abort, py::arg("message"), py::arg("code") = "Internal error",
           "Ends the whole job (MPI_Abort with the CLI's exit code for `code`).")
      .def("close", &PyCommunicator::Close);
  m.def("_open_communicator", &OpenCommunicator, py::arg("backend") = "auto");
  m.def(
      "_open_python_communicator",
      [](int rank, int size, const std::string& name, py::object ops) {
        if (size < 1 || rank < 0 || rank >= size) {
          ThrowInvalid("rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank");
        }
        return std::make_unique<PyCommunicator>(MakePythonCommunicator(rank, size, name, std::move(ops)));
      },
      py::arg("rank"), py::arg("size"), py::arg("name"), py::arg("ops"),
      "A communicator whose byte collectives call ops's methods (dgrr.distributed).");
  DefineTreeReduce(m);
  m.attr("have_mpi") =
#if defined(DGRR_HAVE_MPI)
      true;
#else
      false;
#endif

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
  m.def("dropout_keep_mask", &DropoutKeepMask, py::arg("seed"), py::arg("step"),
        py::arg("examples"), py::arg("layer"), py::arg("site"), py::arg("p"), py::arg("out"),
        "Fills out (uint8, one row per example) with keep-masks from Philox streams keyed by "
        "(seed, dropout, step, example, layer, site).");
  m.def("epoch_permutation", &EpochPermutation, py::arg("seed"), py::arg("epoch"), py::arg("n"),
        "Epoch `epoch`'s order of n examples, as little-endian uint32 bytes.");
  m.def("arithmetic_corpus",
        [](uint64_t seed, size_t num_bytes) {
          std::string text;
          {
            py::gil_scoped_release release;
            text = model::ArithmeticCorpus(seed, num_bytes);
          }
          return py::bytes(text);
        },
        py::arg("seed"), py::arg("num_bytes") = model::kDefaultCorpusBytes,
        "The embedded arithmetic corpus dgrr train uses (model/corpus.h).");
  {
    // The runtime's names for where a control's value came from, so the
    // torch controls dgrr.torch records read like the C++ ones.
    py::dict origins;
    origins["environment"] = ControlOriginName(ControlOrigin::kEnvironment);
    origins["dgrr_default"] = ControlOriginName(ControlOrigin::kDgrrDefault);
    origins["session"] = ControlOriginName(ControlOrigin::kSession);
    origins["not_applicable"] = ControlOriginName(ControlOrigin::kNotApplicable);
    m.attr("control_origins") = origins;
  }
  m.def("file_digest", [](const std::string& path) { return Unwrap(FileContentDigest(path)); },
        py::arg("path"), "XXH3-64 of a file's bytes (what the launch record stores).");
}
