// dgrr._torch_access: torch tensors read from their C++ object (see
// python/torch_access.h). Built against torch's headers (Debian's
// libtorch-dev) and linked with the libtorch_python the system
// interpreter's torch uses; imported by dgrr.torch only when the running
// torch is the build recorded at configure time (dgrr/_torch_build.py).
#include <ATen/SequenceNumber.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

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

void FactsOf(const at::Tensor& t, TorchTensorFacts* facts) {
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
}

int ReadTensor(PyObject* obj, TorchTensorFacts* facts) {
  if (!THPVariable_Check(obj)) return 0;
  FactsOf(THPVariable_Unpack(obj), facts);
  return 1;
}

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

int (*g_grad_recorder)(PyObject* site, const TorchTensorFacts* grad) = nullptr;

void SetGradRecorder(int (*recorder)(PyObject* site, const TorchTensorFacts* grad)) { g_grad_recorder = recorder; }

// Hands a gradient to a site (dgrr._dgrr.Site), with the GIL: to the
// recorder _dgrr installed, or to the site's `record` where it declines (a
// tensor it does not read in place: not dense, not contiguous, not on the
// CPU). A Python error the record raises reaches the caller of backward(),
// as from torch's own tensor hooks.
void CallHook(PyObject* site, const at::Tensor& grad) {
  if (!grad.defined()) return;
  pybind11::gil_scoped_acquire gil;  // backward runs without it
  static PyObject* const kRecord = PyUnicode_InternFromString("record");
  int rc = 0;
  if (g_grad_recorder != nullptr) {
    TorchTensorFacts facts;
    FactsOf(grad, &facts);
    rc = g_grad_recorder(site, &facts);
  }
  if (rc == 0) {
    PyObject* wrapped = THPVariable_Wrap(grad);
    PyObject* result = wrapped == nullptr ? nullptr : PyObject_CallMethodOneArg(site, kRecord, wrapped);
    Py_XDECREF(wrapped);
    rc = result == nullptr ? -1 : 1;
    Py_XDECREF(result);
  }
  if (rc < 0) {
    ::python_error error;
    error.persist();
    throw error;
  }
}

// Holds a Python object; lets go of it with the GIL, from whichever thread
// frees the graph, and not at all once the interpreter is gone.
class HookRef {
 public:
  explicit HookRef(PyObject* hook) : hook_(hook) { Py_INCREF(hook_); }
  HookRef(const HookRef&) = delete;
  HookRef& operator=(const HookRef&) = delete;
  ~HookRef() {
    if (!Py_IsInitialized()) return;
    pybind11::gil_scoped_acquire gil;
    Py_DECREF(hook_);
  }
  PyObject* get() const { return hook_; }

 private:
  PyObject* hook_;
};

// When one edge alone leads from the call's nodes into the input, the
// gradient on it is the module's whole gradient for the input: a post hook
// of the node that sends it reads it there, with no node added.
class RecordEdgeGradient final : public torch::autograd::FunctionPostHook {
 public:
  RecordEdgeGradient(size_t edge, PyObject* hook) : edge_(edge), hook_(hook) {}

  variable_list operator()(const variable_list& outputs, const variable_list&) override {
    if (edge_ < outputs.size()) CallHook(hook_.get(), outputs[edge_]);
    return outputs;
  }

 private:
  size_t edge_;
  HookRef hook_;
};

// The node input_hook puts between a module and its input (torch_access.h):
// it passes the gradient on unchanged, after handing it to the hook.
class RecordGradient final : public Node {
 public:
  RecordGradient(uint64_t sequence_nr, Edge next, const at::Tensor& input, PyObject* hook)
      : Node(sequence_nr, torch::autograd::edge_list{std::move(next)}), hook_(hook) {
    add_input_metadata(input);
  }

  std::string name() const override { return "dgrr::RecordGradient"; }

  variable_list apply(variable_list&& grads) override {
    if (!grads.empty()) CallHook(hook_.get(), grads[0]);
    return std::move(grads);
  }

 private:
  HookRef hook_;
};

struct InputMark {
  Edge edge;           // where the input's gradient goes
  uint64_t sequence_nr;  // reserved for the RecordGradient node
  at::Tensor input;    // for the node's input metadata
};

void* InputMarkOf(PyObject* obj) {
  if (!THPVariable_Check(obj) || !at::GradMode::is_enabled()) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.requires_grad()) return nullptr;
  auto mark = std::make_unique<InputMark>();
  mark->edge = torch::autograd::impl::gradient_edge(t);
  if (!mark->edge.is_valid()) return nullptr;
  mark->sequence_nr = at::sequence_number::get_and_increment();
  mark->input = t;
  return mark.release();
}

void DropInputMark(void* mark) { delete static_cast<InputMark*>(mark); }

int SameInput(const void* a, const void* b) {
  const auto& x = static_cast<const InputMark*>(a)->edge;
  const auto& y = static_cast<const InputMark*>(b)->edge;
  return x.function == y.function && x.input_nr == y.input_nr;
}

// A parameter's gradient accumulator that runs nothing but the
// accumulation: no hook of any kind (DDP's bucket hooks are post hooks of
// it; a user's tensor hook or post-accumulate hook on the parameter may
// record).
bool QuietAccumulator(Node& n) {
  auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(&n);
  return acc != nullptr && acc->pre_hooks().empty() && acc->post_hooks().empty() &&
         acc->tensor_pre_hooks().empty() && acc->retains_grad_hooks().empty() &&
         acc->tensor_post_acc_grad_hooks() == nullptr;
}

// Whether a post hook of n, the one node sending the input its gradient
// (on edge `edge`), records at the point of the backward pass where the
// node input_hook would put in (numbered `reserved`) would, as far as any
// record can tell. The engine runs the ready node with the highest number
// first. When n completes, that node would be ready; it would run after
// every ready node numbered above it: the call's other nodes (none is
// numbered below n when n is the call's lowest) and the nodes n itself makes
// ready. Of those, the ones numbered below the reserved number run after it
// either way; an accumulator (numbered the highest) runs before it, which
// only matters if the accumulator runs a hook, which may record (DDP's
// bucket hooks do). So: n is the call's lowest node and every other edge of
// n leads below the reserved number or to a quiet accumulator.
bool PostHookKeepsTheOrder(const Node& n, size_t edge, uint64_t lowest, uint64_t reserved) {
  if (n.sequence_nr() != lowest) return false;
  const auto& edges = n.next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    if (i == edge || !edges[i].function) continue;
    if (edges[i].function->sequence_nr() >= reserved && !QuietAccumulator(*edges[i].function)) return false;
  }
  return true;
}

// A leaf module makes a handful of nodes; a module named by the caller (a
// whole block, say) some hundreds. Past this the call is left alone.
constexpr size_t kMaxRegionNodes = 1 << 16;

int HookInput(void* mark_ptr, PyObject* output, PyObject* site) {
  std::unique_ptr<InputMark> mark(static_cast<InputMark*>(mark_ptr));
  try {
    const uint64_t end = at::sequence_number::peek();
    // The nodes of the call: numbered after the mark, on this thread (the
    // numbers are per thread; an accumulator's is the largest there is).
    auto made_by_call = [&](const Node* n) {
      const uint64_t s = n->sequence_nr();
      return s > mark->sequence_nr && s < end;
    };
    auto is_input = [&](const Edge& e) {
      return e.function == mark->edge.function && e.input_nr == mark->edge.input_nr;
    };
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    bool input_is_output = false;
    auto start = [&](PyObject* item) {
      if (!THPVariable_Check(item)) return;
      const at::Tensor& t = THPVariable_Unpack(item);
      if (!t.requires_grad()) return;
      const Edge e = torch::autograd::impl::gradient_edge(t);
      if (is_input(e)) {
        input_is_output = true;
      } else if (e.function && made_by_call(e.function.get()) && seen.insert(e.function.get()).second) {
        stack.push_back(e.function.get());
      }
    };
    if (PyTuple_Check(output) || PyList_Check(output)) {
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(output);
      PyObject** items = PySequence_Fast_ITEMS(output);
      for (Py_ssize_t i = 0; i < n; ++i) start(items[i]);
    } else {
      start(output);
    }
    if (input_is_output && stack.empty() && !PyTuple_Check(output) && !PyList_Check(output)) {
      return kTorchInputIsOutput;
    }
    std::vector<std::pair<Node*, size_t>> into_input;
    uint64_t lowest = end;  // the lowest number among the call's nodes (each is popped once)
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      lowest = std::min(lowest, n->sequence_nr());
      const auto& edges = n->next_edges();
      for (size_t i = 0; i < edges.size(); ++i) {
        const Edge& e = edges[i];
        if (!e.function) continue;
        if (is_input(e)) {
          into_input.emplace_back(n, i);
        } else if (made_by_call(e.function.get()) && seen.insert(e.function.get()).second) {
          if (seen.size() > kMaxRegionNodes) return 0;
          stack.push_back(e.function.get());
        }
      }
    }
    if (into_input.empty()) return 0;
    if (into_input.size() == 1 && PostHookKeepsTheOrder(*into_input[0].first, into_input[0].second, lowest,
                                                         mark->sequence_nr)) {
      auto [n, i] = into_input[0];
      n->add_post_hook(std::make_unique<RecordEdgeGradient>(i, site));
      return 1;
    }
    auto node = std::make_shared<RecordGradient>(mark->sequence_nr, mark->edge, mark->input, site);
    for (const auto& [n, i] : into_input) {
      // Written in place: set_next_edge would refuse a node that already
      // has a parent (its topological number is fixed then). The node put
      // in has the topological number one above the input's node; a node of
      // the call pointing to it may have the same one (it had the input's as
      // a child), which only the pruning of autograd.grad(inputs=...) reads,
      // and no input of such a call is reached through dgrr's node alone.
      n->next_edges()[i] = Edge(node, 0);
    }
    return static_cast<int>(into_input.size());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return -1;
  }
}

const TorchAccess kAccess{kTorchAccessVersion, &ReadTensor, &InputMarkOf, &HookInput, &DropInputMark, &SameInput,
                          &SetGradRecorder};

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
