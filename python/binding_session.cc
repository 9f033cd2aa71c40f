// The session (python/binding.h): dgrr.Session over the C++ Session, its
// Boundary handles, RecordPlan (the same pairs recorded step after step),
// and dgrr._dgrr._open, which opens one with the Python program's launch
// record; the names Python spells the runtime's enums with.
#include "python/binding.h"

#include <dgrr/dgrr.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "fingerprint/tensor.h"
#include "python/torch_access.h"
#include "runtime/launch_record.h"
#include "runtime/recording_mode.h"
#include "runtime/session.h"

namespace dgrr::python {
namespace {

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

// Below this many bytes a record is cheaper than handing the GIL to another
// thread and taking it back (fingerprinting runs at several GB/s): small
// tensors are recorded with the GIL held.
constexpr uint64_t kReleaseGilBytes = 256 << 10;

}  // namespace

PySession::PySession(std::unique_ptr<Session> session, py::object communicator)
    : session_(std::move(session)), communicator_(std::move(communicator)) {
  if (PyCommunicator* c = Communicator()) c->AddUser(this);
}

PySession::~PySession() {
  // An unclosed session is closed by its destructor (trace flushed); the
  // state buffers are released after it, with the GIL held.
  session_.reset();
  Release();
}

PyBoundary PySession::DeclareBoundary(const std::string& name, const std::string& phase,
                                      const std::string& direction, const std::string& kind) {
  BoundaryHandle h = Unwrap(Get().DeclareBoundary(name, ParsePhase(phase),
                                                  ParseDirection(direction), ParseKind(kind)));
  return {h, name};
}

py::object PySession::Record(const PyBoundary& boundary, const py::handle& array, uint64_t first_example,
                             uint32_t count, bool want_fingerprint) {
  Get();  // refuses a closed session
  TensorView view = RecordedView(boundary, array);
  Fingerprint fp;
  Status status;
  {
    std::optional<py::gil_scoped_release> release;
    if (view.ref.bytes >= kReleaseGilBytes) release.emplace();
    status = RecordOne(boundary, view.ref, {first_example, count}, want_fingerprint ? &fp : nullptr);
  }
  Check(status);
  return want_fingerprint ? py::object(FingerprintTuple(fp)) : py::object(py::none());
}

void PySession::RecordView(const PyBoundary& boundary, const TensorView& view, uint64_t first_example,
                           uint32_t count) {
  Get();  // refuses a closed session
  Status status;
  {
    std::optional<py::gil_scoped_release> release;
    if (view.ref.bytes >= kReleaseGilBytes) release.emplace();
    status = RecordOne(boundary, view.ref, {first_example, count}, nullptr);
  }
  Check(status);
}

void PySession::RecordMany(const py::list& records, uint64_t first_example, uint32_t count) {
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

std::pair<const PyBoundary*, py::handle> PySession::RecordPair(const py::handle& item, const char* what) {
  auto pair = item.cast<py::tuple>();
  if (pair.size() != 2) ThrowInvalid(std::string(what) + ": each entry is a (boundary, tensor) pair");
  return {&pair[0].cast<const PyBoundary&>(), pair[1]};
}

void PySession::RecordRefs(const std::vector<std::pair<const PyBoundary*, const TensorRef*>>& refs,
                           uint64_t first_example, uint32_t count) {
  Get();  // refuses a closed session
  uint64_t bytes = 0;
  for (const auto& [boundary, ref] : refs) bytes += ref->bytes;
  Status status;
  {
    std::optional<py::gil_scoped_release> release;
    if (bytes >= kReleaseGilBytes) release.emplace();
    for (const auto& [boundary, ref] : refs) {
      status = RecordOne(*boundary, *ref, {first_example, count}, nullptr);
      if (!status.ok()) break;
    }
  }
  Check(status);
}

Status PySession::RecordOne(const PyBoundary& boundary, const TensorRef& ref, ExampleRange examples,
                            Fingerprint* out) {
  const AuditTap tap = tap_.load(std::memory_order_relaxed);
  if (tap == AuditTap::kOff) return Get().Record(boundary.handle, ref, examples, out);
  const bool audited =
      boundary.handle.phase == trace::Phase::kForward || boundary.handle.phase == trace::Phase::kBackward;
  Fingerprint fp;
  if (tap == AuditTap::kDivert) {
    if (!audited) return Status::OK();
    if (!ref.where.host()) {
      return Status::FailedPrecondition("dgrr.torch.NeighbourAudit: " + boundary.name +
                                        " is on a device; the audit recomputes host tensors only");
    }
    DGRR_RETURN_IF_ERROR(ref.Validate());
    fp = FingerprintBytes(ref.data, ref.bytes);  // what Session::Record computes for a host tensor
  } else {
    DGRR_RETURN_IF_ERROR(Get().Record(boundary.handle, ref, examples, &fp));
  }
  if (out != nullptr) *out = fp;
  if (audited) {
    std::lock_guard<std::mutex> lock(audited_mu_);
    audited_.push_back({boundary.name, examples, fp});
  }
  return Status::OK();
}

void PySession::SetAuditTap(const std::string& mode) {
  Get();
  if (mode == "off") {
    tap_ = AuditTap::kOff;
  } else if (mode == "keep") {
    tap_ = AuditTap::kKeep;
  } else if (mode == "divert") {
    tap_ = AuditTap::kDivert;
  } else {
    ThrowInvalid("audit tap '" + mode + "': expected off, keep or divert");
  }
}

py::list PySession::TakeAudited() {
  std::vector<Audited> taken;
  {
    std::lock_guard<std::mutex> lock(audited_mu_);
    taken.swap(audited_);
  }
  py::list out;
  for (const Audited& a : taken) {
    out.append(py::make_tuple(a.name, a.examples.first, a.examples.count, a.fp.xor64, a.fp.xxh3));
  }
  return out;
}

void PySession::RecordEvent(const std::string& kind, const std::string& payload) {
  trace::EventKind k;
  if (kind == "sdc_mismatch") {
    k = trace::EventKind::kSdcMismatch;
  } else if (kind == "user") {
    k = trace::EventKind::kUser;
  } else {
    ThrowInvalid("record_event: kind '" + kind + "': expected sdc_mismatch or user");
  }
  Check(Get().RecordEvent(k, payload));
}

bool PySession::Records(const std::string& phase, const std::string& kind) {
  Session& s = Get();
  return s.control() != nullptr || ShouldRecordBoundary(s.options().mode, ParsePhase(phase), ParseKind(kind));
}

void PySession::RegisterState(const std::string& name, const py::handle& array, const std::string& role,
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
void PySession::CheckRegisteredMemory(bool parameters_only, const char* when) {
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
void PySession::AddStateHooks(py::function capture, py::function restore) {
  Get();
  hooks_.emplace_back(std::move(capture), std::move(restore));
}

template <typename F>
void PySession::Released(F&& call) {
  Session& s = Get();
  Status status;
  {
    py::gil_scoped_release release;
    status = call(s);
  }
  Check(status);
}

uint64_t PySession::Resume() {
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

void PySession::Checkpoint(uint64_t step) {
  Get();
  CheckRegisteredMemory(/*parameters_only=*/false, "checkpoint");
  CaptureHooks();
  Released([&](Session& s) { return s.Checkpoint(step); });
}

void PySession::EndStep(uint64_t step, float loss) {
  CheckRegisteredMemory(/*parameters_only=*/true, "end_step");
  Released([&](Session& s) { return s.EndStep(step, loss); });
}

void PySession::Close() {
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

TensorView PySession::RecordedView(const PyBoundary& boundary, const py::handle& array) {
  TensorView view;
  if (FastViewTorch(array, view)) return view;
  if (LooksLikeTorchTensor(array)) {
    ViewTorch(array, "record '" + boundary.name + "'", view, TensorUse::kRecord);
    return view;
  }
  return ViewOf(array, "record '" + boundary.name + "'", /*need_writable=*/false);
}

void PySession::Release() {
  hooks_.clear();
  registered_tensors_.clear();
  state_.clear();
  if (PyCommunicator* c = Communicator()) c->RemoveUser(this);
  communicator_ = py::none();
}

namespace {

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
    o.communicator = &comm;
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

}  // namespace

void BindSession(py::module_& m) {
  py::class_<PyBoundary>(m, "Boundary", "A declared boundary (dgrr.Session.declare_boundary).")
      .def_property_readonly("name", [](const PyBoundary& b) { return b.name; })
      .def_property_readonly("recorded", [](const PyBoundary& b) { return b.handle.recorded; })
      .def("__repr__", [](const PyBoundary& b) {
        return "<dgrr.Boundary '" + b.name + "'" + (b.handle.recorded ? "" : " (not recorded)") + ">";
      });

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
      .def("record_event", &PySession::RecordEvent, py::arg("kind"), py::arg("payload"),
           "An EVENT record (kind sdc_mismatch or user; payload at most 100 bytes) at this point "
           "of the trace.")
      .def("_audit_tap", &PySession::SetAuditTap, py::arg("mode"),
           "dgrr.torch.NeighbourAudit's tap: off, keep (record and keep each forward and backward "
           "record's fingerprint) or divert (keep them, record nothing).")
      .def("_audit_take", &PySession::TakeAudited,
           "[(name, first_example, count, xor64, xxh3)] kept by the audit tap since the last call.")
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
}

}  // namespace dgrr::python
