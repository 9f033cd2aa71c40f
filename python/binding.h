// Internal to python/: what the files of the dgrr._dgrr extension share.
//
// The extension (docs/python.md) is one file per part, each with a Bind*(m)
// function that binding.cc's PYBIND11_MODULE calls:
//   binding_errors.cc        dgrr.Error and one subclass per StatusCode; Throw
//   binding_tensors.cc       Python objects' tensor memory as TensorViews, without a copy
//   binding_session.cc       Session, Boundary and RecordPlan
//   binding_communicator.cc  Communicator: the ranks of a data-parallel run
//   binding_torch_hooks.cc   the hooks dgrr.torch places on a model, in C++
//   binding_rng.cc           dgrr's counter-based randomness (dropout masks, epoch orders)
// python/CMakeLists.txt compiles them as one translation unit (a unity build):
// each part alone would parse pybind11 again, which costs more than the
// part's own code (docs/architecture.md, "python/"). Each still compiles on
// its own (DGRR_PYTHON_UNITY_BUILD=OFF), so names local to a part go in an
// anonymous namespace and must not repeat another part's.
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
#pragma once

#include <pybind11/pybind11.h>
// In every part: pybind11 asks that the STL casters be seen by all or none.
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "base/status.h"
#include "fingerprint/tensor.h"
#include "python/torch_access.h"
#include "runtime/communicator.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/session.h"

namespace py = pybind11;

namespace dgrr::python {

// ---------------------------------------------------------------------------
// Errors (binding_errors.cc).
// ---------------------------------------------------------------------------
// Raises the dgrr exception of the status's code (a py::error_already_set).
[[noreturn]] void Throw(const Status& status);

inline void Check(const Status& status) {
  if (!status.ok()) Throw(status);
}

template <typename T>
T Unwrap(StatusOr<T> result) {
  if (!result.ok()) Throw(result.status());
  return std::move(result).value();
}

[[noreturn]] void ThrowInvalid(const std::string& message);

// The StatusCode names Python passes back (an exception class's `code`).
Status StatusNamed(std::string_view code, std::string_view message);

// ---------------------------------------------------------------------------
// Tensor memory from Python objects, without a copy (binding_tensors.cc).
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

// What a view's memory is for: the host reads or writes it (dgrr.fingerprint,
// a dropout mask, the data-parallel buffers), the session records it, or the
// session holds it as registered state. The last two take CUDA tensors: the
// session fingerprints and copies device memory on the device's stream
// (runtime/session.h, StateEntry::where).
enum class TensorUse { kHost, kRecord, kState };

// Any object that holds tensor memory, as a view; InvalidArgumentError names
// what is wrong with anything else.
TensorView ViewOf(const py::handle& obj, const std::string& what, bool need_writable,
                  TensorUse use = TensorUse::kHost);

// A torch.Tensor by its storage pointer (the slow path, which names what it
// refuses). On the CPU for any use; on a CUDA device for recording and
// registered state.
void ViewTorch(const py::handle& obj, const std::string& what, TensorView& view,
               TensorUse use = TensorUse::kHost);

// The fast path: a dense, contiguous CPU torch.Tensor of a dtype seen before,
// in few Python calls (or none, through dgrr._torch_access); false for
// anything else, which then goes the slow way.
bool FastViewTorch(const py::handle& obj, TensorView& view);
// The same from a tensor's facts read by dgrr._torch_access (the tensor
// kept alive by the caller).
bool FastViewFromTorchFacts(const TorchTensorFacts& facts, TensorView& view);

// dgrr._torch_access's recorder of a gradient for a dgrr._dgrr.Site
// (TorchAccess::set_grad_recorder; binding_torch_hooks.cc).
int RecordGradientFacts(PyObject* site, const TorchTensorFacts* grad);

bool LooksLikeTorchTensor(const py::handle& obj);

// torch.Tensor, importing torch and the fast path's names on first use.
PyObject* TorchTensorType();

// What the fast path compares by identity: objects held for the life of the
// process (never released). A record plan (binding_session.cc) reads
// through them too.
struct TorchFastPath {
  PyObject* tensor_type = nullptr;  // torch.Tensor, once a torch tensor was seen
  PyObject* strided = nullptr;      // torch.strided
  std::vector<std::pair<PyObject*, DType>> dtypes;  // torch.float32 -> kF32, ...
  PyObject *is_cpu = nullptr, *layout = nullptr, *dtype = nullptr, *shape = nullptr,
           *is_contiguous = nullptr, *data_ptr = nullptr;
};
extern TorchFastPath g_torch;

// Set by dgrr.torch when the running torch is the build dgrr._torch_access
// was compiled against (python/torch_access.h): tensors are then read from
// their C++ object. Never unset: the capsule's module stays imported.
extern const TorchAccess* g_torch_access;

py::tuple FingerprintTuple(const Fingerprint& fp);

// ---------------------------------------------------------------------------
// Communicators (binding_communicator.cc).
// ---------------------------------------------------------------------------
class PySession;

// One process's communicator: Open MPI's when an MPI launcher started the
// process (and this build has dgrr::mpi), else a world of one. One rank per
// process: dgrr.torch keeps process-wide state (the default RandomContext,
// torch's generators and thread pool), so ranks as Python threads are not
// offered. The sessions opened over it are closed before it is, because
// they talk through it.
class PyCommunicator {
 public:
  explicit PyCommunicator(std::unique_ptr<Communicator> owned) : owned_(std::move(owned)), comm_(owned_.get()) {}
  PyCommunicator() : alone_(std::make_unique<InProcessGroup>(1)), comm_(alone_->ranks[0].get()) {}
  ~PyCommunicator() { Close(); }

  Communicator& Get() {
    if (comm_ == nullptr) Throw(Status::FailedPrecondition("the dgrr communicator is closed"));
    return *comm_;
  }
  bool closed() const { return comm_ == nullptr; }

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
  Communicator* comm_ = nullptr;  // owned_'s or alone_'s rank; null once closed
  std::vector<PySession*> users_;
};

// ---------------------------------------------------------------------------
// The session (binding_session.cc).
// ---------------------------------------------------------------------------
struct PyBoundary {
  BoundaryHandle handle;
  std::string name;
};

class PySession {
 public:
  PySession(std::unique_ptr<Session> session, py::object communicator);
  ~PySession();

  Session& Get() {
    if (!session_) Throw(Status::FailedPrecondition("the dgrr session is closed"));
    return *session_;
  }
  bool closed() const { return session_ == nullptr; }

  PyBoundary DeclareBoundary(const std::string& name, const std::string& phase,
                             const std::string& direction, const std::string& kind);
  py::object Record(const PyBoundary& boundary, const py::handle& array, uint64_t first_example,
                    uint32_t count, bool want_fingerprint);
  // A record of a tensor already viewed (dgrr.torch's hook sites).
  void RecordView(const PyBoundary& boundary, const TensorView& view, uint64_t first_example, uint32_t count);
  // Several records in one call, in list order (the program order): one
  // crossing into C++ and one GIL release for a whole optimizer step.
  void RecordMany(const py::list& records, uint64_t first_example, uint32_t count);
  // The (boundary, tensor) pair of a record_many or record_plan entry.
  static std::pair<const PyBoundary*, py::handle> RecordPair(const py::handle& item, const char* what);
  // Records viewed tensors in order, with the GIL released when they are
  // many bytes (the views keep their tensors alive meanwhile).
  void RecordRefs(const std::vector<std::pair<const PyBoundary*, const TensorRef*>>& refs,
                  uint64_t first_example, uint32_t count);
  // Whether a boundary of this phase and kind is recorded in this session's
  // mode; always true under a control file (a dump may ask for any name).
  bool Records(const std::string& phase, const std::string& kind);

  void RegisterState(const std::string& name, const py::handle& array, const std::string& role,
                     bool replicated);
  void CheckRegisteredMemory(bool parameters_only, const char* when);
  void AddStateHooks(py::function capture, py::function restore);

  uint64_t Resume();
  void Checkpoint(uint64_t step);
  void BeginStep(uint64_t step) { Check(Get().BeginStep(step)); }
  // Inside a step of an open session: what dgrr.torch's hooks ask before
  // they record. A closed session is in no step, so a model used after its
  // session ended (evaluated, saved) runs as if it had no hooks.
  bool InStep() const { return session_ != nullptr && session_->in_step(); }
  void EndStep(uint64_t step, float loss);
  void Close();

  // How record() views an array: a torch tensor by the fast path, else the
  // slow one; CUDA tensors on their device.
  static TensorView RecordedView(const PyBoundary& boundary, const py::handle& array);

  // Every record of every path (record, record_many, plans, the hook sites)
  // goes through here, for the neighbour audit's tap (dgrr.torch.
  // NeighbourAudit, docs/python.md): "keep" records as usual and also keeps
  // each forward and backward record's (name, examples, fingerprint) in
  // record order; "divert" records nothing, only fingerprints the forward
  // and backward records of host tensors and keeps them (an auditor's
  // recomputation of its neighbour's share must not enter its own trace);
  // "off" is plain recording. Safe from several threads (a kept list has
  // its own lock).
  Status RecordOne(const PyBoundary& boundary, const TensorRef& ref, ExampleRange examples, Fingerprint* out);
  void SetAuditTap(const std::string& mode);
  // [(name, first_example, count, xor64, xxh3)] kept since the last call.
  py::list TakeAudited();
  // An EVENT record of kind "sdc_mismatch" or "user" (payload at most 100 bytes).
  void RecordEvent(const std::string& kind, const std::string& payload);

 private:
  PyCommunicator* Communicator() {
    return communicator_.is_none() ? nullptr : communicator_.cast<PyCommunicator*>();
  }
  void Release();
  void CaptureHooks() {
    for (auto& [capture, restore] : hooks_) capture();
  }
  template <typename F>
  void Released(F&& call);

  std::unique_ptr<Session> session_;
  py::object communicator_;  // the PyCommunicator its session exchanges over, or None
  std::vector<TensorView> state_;
  struct RegisteredTensor {
    size_t index;  // into state_
    std::string name;
    bool parameter;
  };
  std::vector<RegisteredTensor> registered_tensors_;  // the torch tensors among state_
  std::vector<std::pair<py::function, py::function>> hooks_;
  enum class AuditTap { kOff, kKeep, kDivert };
  std::atomic<AuditTap> tap_{AuditTap::kOff};
  struct Audited {
    std::string name;
    ExampleRange examples;
    Fingerprint fp;
  };
  std::mutex audited_mu_;
  std::vector<Audited> audited_;
};

// ---------------------------------------------------------------------------
// Each part's bindings, called in this order by PYBIND11_MODULE (binding.cc).
// ---------------------------------------------------------------------------
void BindErrors(py::module_& m);
void BindTorchHooks(py::module_& m);
void BindSession(py::module_& m);
void BindCommunicator(py::module_& m);
void BindTensors(py::module_& m);
void BindRng(py::module_& m);

}  // namespace dgrr::python
