// The hooks dgrr.torch places on a model, in C++ (python/binding.h), so
// torch calls into the binding with no Python frame between: Site (a
// boundary's tensor hook and a module's forward hook), InputGradHook (the
// forward pre-hook of a module's input gradients), ModuleCall (both in one
// call, in place of torch's hook dispatch) and InertHook (what a pickled hook
// loads as). python/dgrr/torch/recorder.py places them.
#include "python/binding.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "python/torch_access.h"

namespace dgrr::python {
namespace {

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

// An Instrumentation's `examples` (first, count), kept in C++ so that each
// record reads it without a Python attribute call
// (python/dgrr/torch/recorder.py: Instrumentation.examples is a property
// over it).
struct PyExamples {
  uint64_t first = 0;
  uint32_t count = 0;
};

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

  // The Instrumentation's examples now.
  std::pair<uint64_t, uint32_t> Examples() {
    if (examples_ == nullptr) {
      static PyObject* const kCell = PyUnicode_InternFromString("_examples_cell");
      examples_object_ = py::reinterpret_steal<py::object>(PyObject_GetAttr(Instrumentation().ptr(), kCell));
      if (!examples_object_) throw py::error_already_set();
      examples_ = examples_object_.cast<PyExamples*>();
    }
    return {examples_->first, examples_->count};
  }

 private:
  py::weakref inst_;
  py::object session_object_;  // keeps session_ alive
  PySession* session_ = nullptr;
  py::object examples_object_;  // keeps examples_ alive
  PyExamples* examples_ = nullptr;
};

// One boundary dgrr.torch's hooks record under
// (python/dgrr/torch/recorder.py): the tensor hook of an input gradient is
// its bound `record`, a module's forward hook its bound `forward_hook`, so
// torch calls into C++ with no Python frame between. The boundary is
// declared by the Instrumentation on the first record
// (Instrumentation._boundary), and each record reads the Instrumentation's
// `examples` then (from its PyExamples). The Instrumentation is held weakly
// (HookOwner).
class PySite {
 public:
  PySite(const py::object& inst, std::string name, std::string phase, std::string kind, std::string module,
         const py::object& module_object = py::none())
      : owner_(inst), name_(std::move(name)), phase_(std::move(phase)), kind_(std::move(kind)),
        module_(std::move(module)), module_ref_(WeakModule(module_object)) {}

  // A gradient from dgrr._torch_access (RecordGradientFacts): recorded as
  // Record would record the tensor; false where Record's slower path is
  // needed (a tensor not read in place).
  bool RecordFacts(const TorchTensorFacts& facts) {
    if (!owner_.InStep()) return true;
    if (!boundary_) Declare();
    if (!boundary_->handle.recorded) return true;
    TensorView view;
    if (!FastViewFromTorchFacts(facts, view)) return false;
    const auto [first, count] = owner_.Examples();
    owner_.Session().RecordView(*boundary_, view, first, count);
    return true;
  }

  void Record(const py::handle& tensor) {
    // Outside a step (an evaluation between steps, or after the session
    // closed) nothing is recorded.
    if (!owner_.InStep()) return;
    if (!boundary_) Declare();
    if (!boundary_->handle.recorded) return;
    const auto [first, count] = owner_.Examples();
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

  // Whether the hook would wrap inputs of this call of `module` (its own
  // module, autograd on, inside a step).
  bool Active(const py::handle& module) { return IsModuleOf(module_ref_, module) && GradEnabled() && owner_.InStep(); }

  static bool IsTensor(const py::handle& x) {
    const int is_tensor = PyObject_IsInstance(x.ptr(), TorchTensorType());
    if (is_tensor < 0) throw py::error_already_set();
    return is_tensor == 1;
  }

  // The Site of the index-th tensor input, and its bound `record`.
  const py::object& SiteOf(size_t index) {
    while (sites_.size() <= index) {
      py::object site = py::cast(PySite(owner_.Instrumentation(), module_ + ".grad_in." + std::to_string(sites_.size()),
                                        "backward", "other", ""));
      records_.push_back(site.attr("record"));
      sites_.push_back(std::move(site));
    }
    return sites_[index];
  }

  py::object RecordHook(size_t index) {
    SiteOf(index);
    return records_[index];
  }

  // A view of x whose gradient hook is RecordHook(index).
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

 private:
  static bool GradEnabled() {
    static PyObject* const is_grad_enabled =
        py::object(py::module_::import("torch").attr("is_grad_enabled")).release().ptr();
    auto enabled = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(is_grad_enabled));
    if (!enabled) throw py::error_already_set();
    return enabled.ptr() == Py_True;
  }

  static bool RequiresGrad(const py::handle& tensor) {
    static PyObject* const kRequiresGrad = PyUnicode_InternFromString("requires_grad");
    auto flag = py::reinterpret_steal<py::object>(PyObject_GetAttr(tensor.ptr(), kRequiresGrad));
    if (!flag) throw py::error_already_set();
    return flag.ptr() == Py_True;
  }

  HookOwner owner_;
  std::string module_;
  py::object module_ref_;  // weak reference to the module it serves
  bool direct_;
  std::vector<py::object> sites_;    // the Site of each tensor input, made on first use
  std::vector<py::object> records_;  // and its bound `record`
};

// What a module dgrr.torch records calls in place of torch's hook dispatch
// (python/dgrr/torch/recorder.py, _ModuleCall): torch's Module.__call__
// calls the module's `_compiled_call_impl` when one is set, so set to this,
// a call of the module runs the input-gradient views (InputGradHook), then
// the module's own `_call_impl` (its forward, and any hooks of others, on
// torch's path), then records the output (Site.forward_hook): the same
// tensors at the same points as the two hooks, without the hook loop torch
// enters for a module with any hook (issue 30). Module.__getstate__ drops
// `_compiled_call_impl`, so a pickled or deep-copied module comes back
// without it (unrecorded, like a copy's inert hooks).
// Tests turn the marks off (dgrr._dgrr._input_marks(False)) to run the
// views' path a torch without _torch_access takes.
bool g_input_marks = true;

class PyModuleCall {
 public:
  PyModuleCall(const py::object& module_object, std::optional<PySite> output, std::optional<PyInputGradHook> input,
               bool marks)
      : module_ref_(WeakModule(module_object)), output_(std::move(output)), input_(std::move(input)), marks_(marks) {}

  // The call, with its arguments as Python's vectorcall hands them over.
  py::object Call(PyObject* const* args, size_t nargs, PyObject* kwnames) {
    PyObject* module = PyWeakref_GetObject(module_ref_.ptr());
    if (module == nullptr) throw py::error_already_set();
    if (module == Py_None) Throw(Status::FailedPrecondition("dgrr.torch: the module of this call is gone"));
    py::handle module_handle(module);
    Marks marks;
    py::object wrapped;  // the views' arguments, when the views' path is taken
    if (input_ && input_->Active(module_handle) && !(marks_ && MarkInputs(args, nargs, marks))) {
      auto positional = py::reinterpret_steal<py::tuple>(PyTuple_New(static_cast<Py_ssize_t>(nargs)));
      if (!positional) throw py::error_already_set();
      for (size_t i = 0; i < nargs; ++i) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(positional.ptr(), static_cast<Py_ssize_t>(i), args[i]);
      }
      py::object views = input_->Call(module_handle, positional);
      if (!views.is_none()) wrapped = std::move(views);
    }
    std::vector<PyObject*> call_args;  // the views and the keyword values after them
    if (wrapped) {
      const size_t nkw = kwnames == nullptr ? 0 : static_cast<size_t>(PyTuple_GET_SIZE(kwnames));
      for (size_t i = 0; i < nargs; ++i) call_args.push_back(PyTuple_GET_ITEM(wrapped.ptr(), static_cast<Py_ssize_t>(i)));
      for (size_t i = 0; i < nkw; ++i) call_args.push_back(args[nargs + i]);
      args = call_args.data();
    }
    auto output = py::reinterpret_steal<py::object>(CallModule(module, args, nargs, kwnames));
    if (!output) throw py::error_already_set();
    for (auto& [index, mark] : marks.list) {
      const py::object& site = input_->SiteOf(index);  // before the mark is handed over: it may throw
      const int rc = g_torch_access->input_hook(std::exchange(mark, nullptr), output.ptr(), site.ptr());
      if (rc == -1) throw py::error_already_set();
      // The module returned its input: no node of its own to stand between,
      // so the caller gets a view of it that records, as before.
      if (rc == kTorchInputIsOutput) output = input_->Hooked(output, index);
    }
    if (output_) output_->ForwardHook(module_handle, py::none(), output);
    return output;
  }

 private:
  // torch's Module._call_impl does no more than call forward when neither
  // the module nor every module has a hook and no TorchScript trace is being
  // taken: then forward is called here directly (a Python frame less a
  // call); otherwise _call_impl. The names are resolved once; a torch
  // without them gets _call_impl always.
  struct CallImplFacts {
    bool known = false;
    PyObject* tracing_state = nullptr;       // torch._C._get_tracing_state
    std::vector<PyObject*> global_hooks;     // torch.nn.modules.module._global_*_hooks
  };

  static const CallImplFacts& Facts() {
    static const CallImplFacts facts = [] {
      CallImplFacts f;
      try {
        py::module_ module_impl = py::module_::import("torch.nn.modules.module");
        for (const char* name : {"_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks",
                                 "_global_forward_pre_hooks"}) {
          f.global_hooks.push_back(py::object(module_impl.attr(name)).release().ptr());
        }
        f.tracing_state = py::object(py::module_::import("torch._C").attr("_get_tracing_state")).release().ptr();
        f.known = true;
      } catch (const py::error_already_set&) {
        f.known = false;  // (the references taken stay: a few objects)
      }
      return f;
    }();
    return facts;
  }

  // Whether `obj` is a non-empty container (a hook dict), -1 on error.
  static int NonEmpty(PyObject* obj) { return PyObject_IsTrue(obj); }

  static bool NoHooks(PyObject* module) {
    static PyObject* const kNames[] = {
        PyUnicode_InternFromString("_backward_hooks"), PyUnicode_InternFromString("_backward_pre_hooks"),
        PyUnicode_InternFromString("_forward_hooks"), PyUnicode_InternFromString("_forward_pre_hooks")};
    const CallImplFacts& facts = Facts();
    if (!facts.known) return false;
    for (PyObject* name : kNames) {
      auto hooks = py::reinterpret_steal<py::object>(PyObject_GetAttr(module, name));
      if (!hooks) throw py::error_already_set();
      const int any = NonEmpty(hooks.ptr());
      if (any != 0) {
        if (any < 0) throw py::error_already_set();
        return false;
      }
    }
    for (PyObject* hooks : facts.global_hooks) {
      const int any = NonEmpty(hooks);
      if (any != 0) {
        if (any < 0) throw py::error_already_set();
        return false;
      }
    }
    auto tracing = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(facts.tracing_state));
    if (!tracing) throw py::error_already_set();
    return tracing.is_none();
  }

  static PyObject* CallModule(PyObject* module, PyObject* const* args, size_t nargs, PyObject* kwnames) {
    static PyObject* const kForward = PyUnicode_InternFromString("forward");
    static PyObject* const kCallImpl = PyUnicode_InternFromString("_call_impl");
    auto callable = py::reinterpret_steal<py::object>(PyObject_GetAttr(module, NoHooks(module) ? kForward : kCallImpl));
    if (!callable) throw py::error_already_set();
    return PyObject_Vectorcall(callable.ptr(), args, nargs, kwnames);
  }

  // The marks of a call's inputs (torch_access.h), dropped if the call fails.
  struct Marks {
    std::vector<std::pair<size_t, void*>> list;  // (tensor input index, mark)
    ~Marks() {
      for (auto& [index, mark] : list) {
        if (mark != nullptr) g_torch_access->input_drop(mark);
      }
    }
  };

  // Marks each tensor input that will get a gradient, to catch its gradient
  // without a view (torch_access.h: the input's node gets the module's
  // gradient through one node of dgrr's put in after the call). False when
  // that cannot be done for this call: no _torch_access of that version, or
  // one tensor passed twice (each occurrence has a gradient of its own,
  // which only views tell apart); the views of InputGradHook then.
  static bool MarkInputs(PyObject* const* args, size_t nargs, Marks& marks) {
    if (!g_input_marks || g_torch_access == nullptr || g_torch_access->input_mark == nullptr) return false;
    size_t index = 0;
    for (size_t a = 0; a < nargs; ++a) {
      py::handle x(args[a]);
      if (!PyInputGradHook::IsTensor(x)) continue;
      void* mark = g_torch_access->input_mark(x.ptr());
      if (mark != nullptr) {
        for (const auto& [other_index, other] : marks.list) {
          if (g_torch_access->input_same(mark, other)) {
            g_torch_access->input_drop(mark);
            for (auto& [i, m] : marks.list) g_torch_access->input_drop(std::exchange(m, nullptr));
            marks.list.clear();
            return false;
          }
        }
        marks.list.emplace_back(index, mark);
      }
      ++index;
    }
    return true;
  }

  py::object module_ref_;  // weak reference to the module it serves
  std::optional<PySite> output_;
  std::optional<PyInputGradHook> input_;
  bool marks_;  // input gradients without views, for modules whose every use of the input reaches the output
};

// Runs `body` for a C entry point called by CPython or by _torch_access:
// an exception becomes the Python error it stands for, and `failed` is
// returned.
template <typename Result, typename Body>
Result AsPythonError(Result failed, Body body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return failed;
}

// What a module's _compiled_call_impl is set to: a builtin function whose
// self is the ModuleCall, called by vectorcall (no argument tuple made).
PyObject* ModuleCallEntry(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return AsPythonError<PyObject*>(nullptr, [&] {
    auto* call = py::handle(self).cast<PyModuleCall*>();
    return call->Call(args, static_cast<size_t>(PyVectorcall_NARGS(nargsf)), kwnames).release().ptr();
  });
}

PyMethodDef kModuleCallEntry = {"dgrr_module_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ModuleCallEntry)),
                                METH_FASTCALL | METH_KEYWORDS,
                                "A module's call recorded by dgrr.torch (python/binding_torch_hooks.cc, ModuleCall)."};

}  // namespace

int RecordGradientFacts(PyObject* site, const TorchTensorFacts* grad) {
  return AsPythonError(-1, [&] { return py::handle(site).cast<PySite&>().RecordFacts(*grad) ? 1 : 0; });
}

void BindTorchHooks(py::module_& m) {
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

  py::class_<PySite>(m, "Site",
                     "A boundary dgrr.torch's hooks record under (python/dgrr/torch/recorder.py).")
      .def(py::init<const py::object&, std::string, std::string, std::string, std::string, const py::object&>(),
           py::arg("inst"), py::arg("name"), py::arg("phase"), py::arg("kind"), py::arg("module") = "",
           py::arg("module_object") = py::none())
      .def("record", &PySite::Record, py::arg("tensor"))
      .def("forward_hook", &PySite::ForwardHook, py::arg("module"), py::arg("inputs"), py::arg("output"))
      .def("__deepcopy__", same_hook)
      .def("__reduce__", inert_hook);

  py::class_<PyInputGradHook>(
      m, "InputGradHook",
      "dgrr.torch's forward pre-hook for a module's input gradients (python/dgrr/torch/recorder.py).")
      .def(py::init<const py::object&, std::string, const py::object&, bool>(), py::arg("inst"), py::arg("module"),
           py::arg("module_object"), py::arg("direct"))
      .def("__call__", &PyInputGradHook::Call, py::arg("module"), py::arg("inputs"))
      .def("__deepcopy__", same_hook)
      .def("__reduce__", inert_hook);

  m.def("_input_marks", [](bool enabled) { g_input_marks = enabled; }, py::arg("enabled"),
        "Tests: whether ModuleCalls catch input gradients without views (the default).");

  py::class_<PyExamples>(m, "Examples", "An Instrumentation's examples (first, count), read by its hooks in C++.")
      .def(py::init<>())
      .def("get", [](const PyExamples& e) { return py::make_tuple(e.first, e.count); })
      .def("set", [](PyExamples& e, uint64_t first, uint32_t count) {
        e.first = first;
        e.count = count;
      }, py::arg("first"), py::arg("count"));

  py::class_<PyModuleCall>(
      m, "ModuleCall",
      "A recorded module's call in place of torch's hook dispatch, set as its _compiled_call_impl "
      "(python/dgrr/torch/recorder.py).")
      .def(py::init([](const py::object& inst, const std::string& name, const std::string& kind,
                       const py::object& module_object, bool output, bool input_grads, bool direct, bool marks) {
             std::optional<PySite> out;
             if (output) out.emplace(inst, name + ".out", "forward", kind, name, module_object);
             std::optional<PyInputGradHook> in;
             if (input_grads) in.emplace(inst, name, module_object, direct);
             return PyModuleCall(module_object, std::move(out), std::move(in), marks);
           }),
           py::arg("inst"), py::arg("name"), py::arg("kind"), py::arg("module_object"), py::arg("output"),
           py::arg("input_grads"), py::arg("direct"), py::arg("marks"))
      .def("entry", [](const py::object& self) {
        return py::reinterpret_steal<py::object>(PyCFunction_New(&kModuleCallEntry, self.ptr()));
      }, "The builtin function to set as the module's _compiled_call_impl.");
}

}  // namespace dgrr::python
