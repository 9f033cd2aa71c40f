"""Recording through hooks: instrument() and the Instrumentation it returns
(forward outputs, input gradients, parameter gradients, the optimizer's
update, the loss), the hooks themselves (the C++ ones of
python/binding_torch_hooks.cc and the Python ones here) and which modules
get which.

Tests and benchmarks set _INPUT_GRAD_VIEWS, _direct_hooks_work and
_single_input through dgrr.torch, which hands such assignments to this
module, where they are read."""

import inspect as _inspect
import types as _types
import warnings
import weakref as _weakref
from collections.abc import Mapping as _Mapping

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError, _dgrr
from . import controls as _controls
from . import randomness as _randomness
from . import state as _state
from .controls import NondeterminismWarning, _warn_about, current_controls
from .randomness import Dropout
from .state import (_is_compiled, _named_parameters, _optimizer_entries, _parameter_names,
                    _plain_name, _sharded)


_INSTRUMENTED = "_dgrr_instrumentation"


_KINDS = (
    ((_torch.nn.Linear, _torch.nn.Bilinear), "matmul"),
    ((_torch.nn.LayerNorm, _torch.nn.GroupNorm, _torch.nn.modules.batchnorm._BatchNorm), "norm"),
    ((_torch.nn.Embedding, _torch.nn.EmbeddingBag), "embedding"),
    ((_torch.nn.MultiheadAttention,), "attention"),
    ((_torch.nn.ReLU, _torch.nn.GELU, _torch.nn.Tanh, _torch.nn.Sigmoid, _torch.nn.SiLU,
      _torch.nn.Dropout, _torch.nn.Identity), "elementwise"),
)


def _kind_of(module):
    if isinstance(module, Dropout):
        return "elementwise"
    for types, kind in _KINDS:
        if isinstance(module, types):
            return kind
    return "other"



def _tensors(value):
    """The tensors in a module's output, in order: a tensor, or a tuple or
    list of them (other entries, None included, are skipped)."""
    if isinstance(value, _torch.Tensor):
        return [(None, value)]
    if isinstance(value, (tuple, list)):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, _torch.Tensor)]
    return []


_MAX_OUTPUT_DEPTH = 4


def _tensor_leaves(value, path=()):
    """(path, tensor) for each tensor in a module's output, in order: tuples
    and lists by index, mappings by key (in their order), nested up to
    _MAX_OUTPUT_DEPTH deep; other entries (None, numbers) are skipped."""
    if isinstance(value, _torch.Tensor):
        return [(path, value)]
    if len(path) >= _MAX_OUTPUT_DEPTH:
        return []
    if isinstance(value, (tuple, list)):
        items = enumerate(value)
    elif isinstance(value, _Mapping):
        items = value.items()
    else:
        return []
    leaves = []
    for key, item in items:
        leaves.extend(_tensor_leaves(item, path + (key,)))
    return leaves


def _same_referents(refs, objects):
    """Whether weak references (None for None) point at these objects, in order."""
    return len(refs) == len(objects) and all(
        (o is None) if r is None else (r() is o) for r, o in zip(refs, objects))


def _select_modules(model, modules):
    """The (name, module) pairs to hook. A torch.compile'd module is recorded
    at its own boundary, as one leaf (its forward output and the gradients
    of its inputs, outside the compiled code): the modules inside it run in
    compiled code, where a hook would break the graph, so they are never
    hooked, and naming one is refused. A compiled model itself is recorded
    as `model`."""
    named = list(model.named_modules())
    compiled = [n for n, m in named if _is_compiled(m)]

    def inside_compiled(n):
        return any(n != c and (c == "" or n.startswith(c + ".")) for c in compiled)

    def label(n):
        return _plain_name(n) or "model"

    if modules is None:
        # Leaf modules: where the arithmetic happens. Containers would
        # record their last child's output a second time.
        return [(label(n), m) for n, m in named
                if not inside_compiled(n) and (_is_compiled(m) or (n and not any(True for _ in m.children())))]
    if callable(modules):
        chosen = [(label(n), n, m) for n, m in named if modules(n, m)]
    else:
        wanted = list(modules)
        by_name = {}
        for n, m in named:
            by_name.setdefault(n, (n, m))
            by_name.setdefault(_plain_name(n), (n, m))
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise InvalidArgumentError(
                f"dgrr.torch: no module named {', '.join(repr(n) for n in missing)} in the model "
                f"(named_modules() has {', '.join(repr(n) for n in list(by_name)[:12] if n)}...)")
        chosen = [(w, *by_name[w]) for w in wanted]
    for _, n, _ in chosen:
        if inside_compiled(n):
            outer = max((c for c in compiled if c == "" or n.startswith(c + ".")), key=len)
            raise InvalidArgumentError(
                f"dgrr.torch: module {_plain_name(n)!r} runs inside the torch.compile'd module "
                f"{label(outer)!r}: dgrr records a compiled module at its own boundary only; "
                f"record {label(outer)!r}, or compile a smaller part of the model")
    return [(name, m) for name, _, m in chosen]


# Leaf modules whose forward takes a single tensor. For them the gradient
# w.r.t. that input is caught by a tensor hook on a view of it, made in a
# forward pre-hook: the module alone uses the view, so the view's gradient is
# exactly the gradient the module passes back, the same tensor that
# register_full_backward_hook hands over, at the same point of the backward
# pass. It costs one view and one Python call a step instead of the full
# hook's two autograd Functions and their Python calls. Other modules (several
# inputs, unknown types) keep the full backward hook, whose grad_input tuple
# fixes the order of their records.
_SINGLE_INPUT = (
    _torch.nn.Linear, _torch.nn.LayerNorm, _torch.nn.GroupNorm,
    _torch.nn.modules.batchnorm._BatchNorm, _torch.nn.Embedding, _torch.nn.ReLU,
    _torch.nn.GELU, _torch.nn.Tanh, _torch.nn.Sigmoid, _torch.nn.SiLU, _torch.nn.Softmax,
    _torch.nn.LogSoftmax, _torch.nn.Dropout, _torch.nn.Identity,
    _torch.nn.modules.conv._ConvNd, Dropout,
)

# Tests set this False to record every module through the full backward hook
# (the reference the view path must reproduce record for record).
_INPUT_GRAD_VIEWS = True


def _single_input(module):
    """Whether a module's input gradient is caught by the view's tensor hook
    (see _SINGLE_INPUT): a module of those types, or of any other whose own
    forward takes exactly one positional argument (a user's LayerNorm or
    activation class, say; nothing by keyword, no *args). For those the full
    backward hook's grad_input holds that one argument's gradient, so both
    paths record the same tensor, at the same point of the backward pass, as
    the same `<module>.grad_in.0`; the view costs a fraction of the full
    hook's two autograd Functions a call (issue 30)."""
    if not _INPUT_GRAD_VIEWS:
        return False
    if isinstance(module, _SINGLE_INPUT):
        return True
    try:
        # Not following __wrapped__: a decorated forward is judged by what
        # its wrapper accepts.
        params = list(_inspect.signature(module.forward, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) == 1 and params[0].kind in (params[0].POSITIONAL_ONLY,
                                                   params[0].POSITIONAL_OR_KEYWORD)


_direct_hooks_work = None


def _direct_tensor_hooks():
    """Whether a view's gradient hook can be installed the way
    Tensor.register_hook installs it on a tensor with a grad_fn (torch 1.13
    to 2.x: the tensor's _backward_hooks dict, handed to its grad_fn's
    _register_hook_dict), without the handle and the OrderedDict register_hook
    makes on each call: 0.6 us a hooked module call. Private torch API, so it
    is tried once on a probe tensor: used only if the hook then runs exactly
    once with the right gradient; otherwise register_hook it is."""
    global _direct_hooks_work
    if _direct_hooks_work is None:
        seen = []
        try:
            # Autograd on, whatever mode the caller is in (an inference-mode
            # caller would otherwise fix the answer at "no" for the process).
            with _torch.inference_mode(False), _torch.enable_grad():
                x = _torch.ones(3, requires_grad=True)
                v = x.view_as(x)
                v._backward_hooks = {0: lambda g: seen.append(g.clone())}
                v.grad_fn._register_hook_dict(v)
                (v * _torch.tensor([1.0, 2.0, 3.0])).sum().backward()
            _direct_hooks_work = (len(seen) == 1 and seen[0].tolist() == [1.0, 2.0, 3.0]
                                  and x.grad.tolist() == [1.0, 2.0, 3.0])
        except (AttributeError, RuntimeError, TypeError):
            _direct_hooks_work = False
    return _direct_hooks_work


class _FullBackwardHook:
    """A module's full backward hook (modules with several inputs or of
    unknown types): records each gradient of grad_input. Like the C++ hooks
    (python/binding_torch_hooks.cc, PyInertHook), it serves its own module
    only, holds it and the Instrumentation weakly, stays inert on a deepcopy
    of the model and pickles as an InertHook."""

    def __init__(self, inst, name, module):
        self._inst = _weakref.ref(inst)
        self._module = _weakref.ref(module)
        self._name = name

    def __call__(self, module, grad_input, grad_output):
        inst = self._inst()
        if module is not self._module() or inst is None or not inst.session.in_step:
            return
        for i, t in _tensors(grad_input):
            inst._record(f"{self._name}.grad_in.{i}", "backward", "other", t, inst.examples)

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_dgrr.InertHook, ())


# torch >= 2.0: forward pre-hooks can see and replace keyword arguments.
_KWARGS_HOOKS = "with_kwargs" in _inspect.signature(_torch.nn.Module.register_forward_pre_hook).parameters


def _takes_keywords(module):
    """Whether a module's forward can be given a tensor by keyword: any
    parameter past the first, or **kwargs."""
    try:
        params = list(_inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return True
    return len(params) > 1 or any(p.kind == p.VAR_KEYWORD for p in params)


class _KeywordInputGradHook:
    """A forward pre-hook with keyword arguments (torch >= 2.0) for modules
    on the full backward hook's path, whose grad_input holds positional
    inputs only: each keyword tensor input that will get a gradient is
    replaced by a view of itself whose gradient hook records it as
    `<module>.grad_in.<keyword>`. Weak, inert on copies, like _FullBackwardHook."""

    def __init__(self, inst, name, module):
        self._inst = _weakref.ref(inst)
        self._module = _weakref.ref(module)
        self._name = name

    def __call__(self, module, args, kwargs):
        if not kwargs or module is not self._module() or not _torch.is_grad_enabled():
            return None
        inst = self._inst()
        if inst is None or not inst.session.in_step:
            return None
        changed = None
        for key, value in kwargs.items():
            if isinstance(value, _torch.Tensor) and value.requires_grad:
                view = value.view_as(value)
                view.register_hook(self._recorder(f"{self._name}.grad_in.{key}"))
                if changed is None:
                    changed = dict(kwargs)
                changed[key] = view
        return None if changed is None else (args, changed)

    def _recorder(self, boundary):
        inst_ref = self._inst

        def record(grad):
            inst = inst_ref()
            if inst is not None and inst.session.in_step:
                inst._record(boundary, "backward", "other", grad, inst.examples)
        return record

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_dgrr.InertHook, ())


# Tests set this False to record through torch's hooks alone (the
# reference _ModuleCall must reproduce record for record).
_MODULE_CALLS = True


def _module_call_fits(module):
    """Whether a module's call can go through a _ModuleCall: torch >= 2.1
    (Module.__call__ is _wrapped_call_impl, which calls an instance's
    _compiled_call_impl when one is set), a class that keeps that __call__
    (torch.compile's OptimizedModule has its own), no _compiled_call_impl
    already (Module.compile() in place), and no forward hooks or pre-hooks
    placed before dgrr's, on the module or on every module (torch's global
    ones): those ran before dgrr's hooks, and a pre-hook that replaces the
    input, or a forward hook that replaces the output, would change what
    is recorded if they ran after the ModuleCall's view (or before its
    output record). Hooks placed after instrument() run inside the
    ModuleCall: after its views, as they ran after dgrr's pre-hook, and
    before its output record (with torch's hooks dgrr's forward hook ran
    first: a later forward hook that replaces the output is recorded with
    the replacement now)."""
    wrapped = getattr(_torch.nn.Module, "_wrapped_call_impl", None)
    if wrapped is None or "_compiled_call_impl" not in vars(_torch.nn.Module):
        return False
    from torch.nn.modules import module as _module_impl
    return (type(module).__call__ is wrapped
            and module.__dict__.get("_compiled_call_impl") is None
            and not module._forward_hooks and not module._forward_pre_hooks
            and not getattr(_module_impl, "_global_forward_hooks", None)
            and not getattr(_module_impl, "_global_forward_pre_hooks", None))


# torch's own single-input modules, whose forward (theirs, not overridden)
# returns one tensor made from the input by torch operations and keeps
# nothing of it: every use of the input reaches the output, where the
# ModuleCall's search for the edges into the input starts (python/
# torch_access.h). A module of another class may keep a tensor made from
# its input elsewhere (on itself, in a list, in a dict it returns) whose
# gradient a search from the output would miss: it gets views, which see
# every use. (The single-input types above, with their own forward.)
_NODE_PATH_TYPES = _SINGLE_INPUT


def _node_path(module, pure=()):
    """Whether a ModuleCall catches this module's input gradients without
    views: a module of one of _NODE_PATH_TYPES whose forward is that type's
    own (a subclass that overrides forward is judged as any other class), or
    of a class the caller declared pure (instrument's `pure`)."""
    if pure and isinstance(module, pure):
        return True
    for base in type(module).__mro__:
        if base in _NODE_PATH_TYPES:
            return type(module).forward is base.forward
    return False


def _pure_classes(pure):
    """instrument's `pure` as a tuple of nn.Module subclasses, or refused."""
    classes = pure if isinstance(pure, (tuple, list)) else (pure,)
    for c in classes:
        if not (isinstance(c, type) and issubclass(c, _torch.nn.Module)):
            raise InvalidArgumentError(
                f"dgrr.torch: instrument(pure=...) takes module classes (a class or a tuple of them), "
                f"not {c!r}")
    return tuple(classes)


_replicate_patched = False


def _replicas_without_module_calls():
    """nn.DataParallel's replicas copy the module's __dict__
    (Module._replicate_for_data_parallel), the ModuleCall with it; called
    with no `self`, it would run the original module on the replica's
    inputs. So the first ModuleCall wraps that method (of torch.nn.Module,
    which subclasses' overrides call) to leave dgrr's ModuleCall out of a
    replica: replicas run unrecorded, as torch's hooks did nothing on them
    (they serve only their own module)."""
    global _replicate_patched
    if _replicate_patched or not hasattr(_torch.nn.Module, "_replicate_for_data_parallel"):
        return
    original = _torch.nn.Module._replicate_for_data_parallel

    def _replicate_for_data_parallel(self):
        replica = original(self)
        call = replica.__dict__.get("_compiled_call_impl")
        if isinstance(getattr(call, "__self__", None), _dgrr.ModuleCall):
            del replica.__dict__["_compiled_call_impl"]
        return replica

    _replicate_for_data_parallel.__wrapped__ = original
    _torch.nn.Module._replicate_for_data_parallel = _replicate_for_data_parallel
    _replicate_patched = True


class _ModuleCall:
    """A recorded module's call without torch's hook dispatch (issue 30): a
    module with any hook leaves Module._call_impl's fast path for a loop over
    its hook dicts, which cost more than dgrr's hooks themselves on a small
    model. torch's Module.__call__ calls an instance's `_compiled_call_impl`
    when one is set (Module.compile() sets it), so dgrr sets it to a
    dgrr._dgrr.ModuleCall (python/binding_torch_hooks.cc): it marks the
    inputs that will get a gradient, calls the module (its forward directly
    when no hook of anyone's is placed and no TorchScript trace is taken, as
    Module._call_impl does then; _call_impl otherwise), catches each marked
    input's gradient where the call's autograd nodes send it (a post hook of
    the one node that does, or dgrr's node where several do: _torch_access,
    python/torch_access.h), and records the output: the tensors of the
    input-gradient pre-hook and the forward hook, recorded at the same
    points of the forward and backward passes. Without _torch_access (a torch
    other than the one dgrr was built against) the inputs get the pre-hook's
    views. Module.__getstate__ drops `_compiled_call_impl`, so a
    deep copy or a pickled model is not recorded, as with the hooks. Its
    remove() is a hook handle's: it puts the module back as it was."""

    def __init__(self, inst, name, kind, module, output, input_grads, pure=()):
        _replicas_without_module_calls()
        self._module = _weakref.ref(module)
        call = _dgrr.ModuleCall(inst, name, kind, module, output, input_grads,
                                input_grads and _direct_tensor_hooks(), _node_path(module, pure))
        # A builtin function bound to the ModuleCall (called by vectorcall).
        self._entry = call.entry()
        module._compiled_call_impl = self._entry

    def remove(self):
        module = self._module()
        if module is not None and module.__dict__.get("_compiled_call_impl") is self._entry:
            del module._compiled_call_impl


class _Mark:
    """What an instrumented model carries (as _INSTRUMENTED): its
    Instrumentation, which the model so keeps alive while it is, and by
    which instrument() refuses a second one. A copy of the model (deepcopy,
    pickle) gets an empty mark: the copy is not instrumented."""

    def __init__(self, inst=None):
        self.inst = inst

    def __deepcopy__(self, memo):
        return _Mark()

    def __reduce__(self):
        return (_Mark, ())


class Instrumentation:
    """The hooks instrument() placed; remove() takes them all off.

    Only what the session's recording mode records is hooked (`off` and
    `sdc` leave the model without hooks, `trusted` skips the forward outputs
    of matmul and elementwise modules), unless a control file is in force (a
    dump may name any boundary)."""

    def __init__(self, session, model, optimizer, modules, backward, prefix="", pure=()):
        self.session = session
        self.prefix = prefix
        self.model = model
        self.optimizer = optimizer
        # The examples of the step's batch, for the forward and backward
        # records: set it each step when the batch's global example indices
        # are known (first, count); (0, 0): not declared.
        self._examples_cell = _dgrr.Examples()
        self.examples = (0, 0)
        self._boundaries = {}
        self._handles = []
        self._restore_step = None
        # A DataParallel records the gradients after its all-reduce; the
        # optimizer step then leaves them alone.
        self._gradients_recorded_by_all_reduce = False
        self._param_names = _parameter_names(model)
        self._param_boundaries = {}   # (phase, suffix) -> [(boundary, parameter)]
        self._update_cache = None     # see _update_plan
        self._gradient_plans = {}     # phase -> see record_gradients
        self._output_sites = {}       # (module, output index) -> its Site
        records_backward = backward and session.records("backward", "other")
        for name, module in _select_modules(model, modules):
            kind = _kind_of(module)
            output = session.records("forward", kind)
            single = records_backward and _single_input(module)
            if (output or single) and _MODULE_CALLS and _module_call_fits(module):
                # Both in one call instead of torch's hooks (_ModuleCall).
                self._handles.append(_ModuleCall(self, name, kind, module, output, single, pure))
            else:
                if output:
                    self._handles.append(
                        module.register_forward_hook(self._forward_hook(name, kind, module)))
                if single:
                    self._handles.append(
                        module.register_forward_pre_hook(self._input_grad_hook(name, module)))
            if records_backward and not single:
                self._handles.append(
                    module.register_full_backward_hook(self._backward_hook(name, module)))
                if _KWARGS_HOOKS and _takes_keywords(module):
                    self._handles.append(module.register_forward_pre_hook(
                        _KeywordInputGradHook(self, name, module), with_kwargs=True))
        if optimizer is not None:
            self._hook_optimizer(optimizer)

    @property
    def examples(self):
        """(first, count): the global indices of the examples the records
        made now are of. Kept in C++ (a dgrr._dgrr.Examples) for the hooks."""
        return self._examples_cell.get()

    @examples.setter
    def examples(self, value):
        first, count = value
        first, count = int(first), int(count)
        if not 0 <= first < 2 ** 64 or not 0 <= count < 2 ** 32:
            raise InvalidArgumentError(
                f"dgrr.torch: examples ({first}, {count}): 0 <= first < 2**64 and 0 <= count < 2**32")
        self._examples_cell.set(first, count)

    def begin_step(self, step, examples=None):
        """session.begin_step(step), and the step's batch: examples =
        (first, count), the global indices of its examples, for the records'
        example ranges and the default RandomContext of dgrr Dropout."""
        self.session.begin_step(step)
        if examples is not None:
            first, count = examples
            self.examples = (int(first), int(count))
        _randomness.random_context.set(seed=self.session.seed, step=step,
                           examples=self.examples if self.examples[1] > 0 else None)

    def micro_batch(self, first, count):
        """Gradient accumulation: `with inst.micro_batch(first, count):` around
        one micro-batch's forward and backward gives its records (forward
        outputs, input gradients, the loss) and dgrr Dropout's masks the
        micro-batch's global examples [first, first + count); on leaving, the
        step's whole batch (begin_step's examples) is in force again, for the
        gradients and the optimizer's update that follow.

            inst.begin_step(step, (step * 32, 32))
            for k in range(4):
                with inst.micro_batch(step * 32 + 8 * k, 8):
                    loss = loss_fn(model(x[8 * k:8 * k + 8]), y[8 * k:8 * k + 8]) / 4
                    inst.record_loss(loss)
                    loss.backward()
            optimizer.step()"""
        return _MicroBatch(self, int(first), int(count))

    def _set_examples(self, examples):
        self.examples = examples
        _randomness.random_context.set(examples=examples if examples[1] > 0 else None)

    # -- boundaries ---------------------------------------------------------
    def _boundary(self, name, phase, kind):
        key = (name, phase)
        b = self._boundaries.get(key)
        if b is None:
            b = self.session.declare_boundary(self.prefix + name, phase, "output", kind)
            self._boundaries[key] = b
        return b

    def _record(self, name, phase, kind, tensor, examples):
        b = self._boundary(name, phase, kind)
        if not b.recorded:
            return
        if not tensor.is_contiguous():
            with _torch.no_grad():
                tensor = tensor.contiguous()
        self.session.record(b, tensor, examples[0], examples[1])

    def _forward_hook(self, name, kind, module):
        """A module's forward hook: a dgrr._dgrr.Site's, in C++
        (python/binding_torch_hooks.cc); any other output than a tensor comes
        back to _record_output_items."""
        return _dgrr.Site(self, f"{name}.out", "forward", kind, name, module).forward_hook

    def _record_output_items(self, name, kind, output):
        """Each tensor of a module's structured output (tuples, lists and
        dicts of tensors, nested: an LSTM's (output, (h, c)), a Hugging Face
        ModelOutput), as `<name>.out.<path>`: `.out.1.0`, `.out.logits`."""
        for path, t in _tensor_leaves(output):
            site = self._output_sites.get((name, path))
            if site is None:
                site = self._output_sites[(name, path)] = _dgrr.Site(
                    self, f"{name}.out." + ".".join(str(k) for k in path), "forward", kind)
            site.record(t)

    def _input_grad_hook(self, name, module):
        """A forward pre-hook: each tensor input that will get a gradient is
        replaced by a view of itself whose gradient hook records it (a
        dgrr._dgrr.InputGradHook, in C++: python/binding_torch_hooks.cc)."""
        return _dgrr.InputGradHook(self, name, module, _direct_tensor_hooks())

    def _backward_hook(self, name, module):
        return _FullBackwardHook(self, name, module)

    # -- optimizer ----------------------------------------------------------
    def _hook_optimizer(self, optimizer):
        if hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0
            self._handles.append(optimizer.register_step_pre_hook(
                lambda opt, args, kwargs: None if self._gradients_recorded_by_all_reduce
                else self.record_gradients()))
            self._handles.append(optimizer.register_step_post_hook(
                lambda opt, args, kwargs: self.record_update()))
            return
        # torch 1.13 has no step hooks: wrap this optimizer's step, as a
        # method of it (an LR scheduler made later wraps it again through
        # its __self__ and __func__).
        original = optimizer.step

        def step(_optimizer, *args, **kwargs):
            if not self._gradients_recorded_by_all_reduce:
                self.record_gradients()
            result = original(*args, **kwargs)
            self.record_update()
            return result

        # An LR scheduler made before this marks the step it wrapped; keep
        # the mark, or it warns that step() was overridden (it still counts).
        if getattr(original, "_with_counter", False):
            step._with_counter = True
        optimizer.step = _types.MethodType(step, optimizer)
        self._restore_step = original

    def _parameter_boundaries(self, phase, suffix, kind):
        """[(boundary, parameter)] for `<param><suffix>`, declared once."""
        key = (phase, suffix)
        entries = self._param_boundaries.get(key)
        if entries is None:
            entries = self._param_boundaries[key] = [
                (self._boundary(f"{name}{suffix}", phase, kind), p)
                for name, p in _named_parameters(self.model)]
        return entries

    def _record_many(self, records):
        if records:
            first, count = self.examples
            self.session.record_many(records, first, count)

    def record_gradients(self, phase="backward"):
        """Each parameter's gradient as the optimizer will see it (summed
        over the batch; a DataParallel records them after its all-reduce,
        phase collective), in one call into the session. While the
        gradients stay the same tensors from step to step (torch 1.13's
        zero_grad() zeroes them in place) the call goes through a kept
        RecordPlan, made once they are seen to stay (with set_to_none, torch
        2.x's default, they are new each step and no plan holds them)."""
        kind = "collective" if phase == "collective" else "other"
        if not self.session.in_step or not self.session.records(phase, kind):
            return
        entries = self._parameter_boundaries(phase, ".grad", kind)
        grads = [p.grad for _, p in entries]
        seen = self._gradient_plans.get(phase)   # (weak references to them, plan or None)
        same = seen is not None and _same_referents(seen[0], grads)
        if same and seen[1] is not None:
            first, count = self.examples
            seen[1].record(first, count)
            return
        records = [(b, g) for (b, _), g in zip(entries, grads) if g is not None]
        plan = None
        if all(g.is_contiguous() for _, g in records):
            if same:
                plan = self.session.record_plan(records)
        else:
            with _torch.no_grad():
                records = [(b, g.contiguous()) for b, g in records]
        self._gradient_plans[phase] = ([None if g is None else _weakref.ref(g) for g in grads], plan)
        if plan is None:
            self._record_many(records)
        else:
            first, count = self.examples
            plan.record(first, count)

    def record_update(self):
        """The parameters and the optimizer's state after its step, in one
        call into the session."""
        if not self.session.in_step or not self.session.records("optimizer", "optimizer"):
            return
        plan = self._update_plan()
        if plan is None:
            with _torch.no_grad():
                self._record_many([(b, t.contiguous()) for b, t in self._update_records()])
            return
        first, count = self.examples
        plan.record(first, count)

    def _update_plan(self):
        """A RecordPlan of the parameters, then the optimizer's state in
        parameter-group order, kept while the state's entries stay the same
        tensors (Adam updates them in place); made again when an entry is
        added or replaced (torch creates the state in the first step unless
        materialize_optimizer_state did). None while a tensor is not
        contiguous."""
        state = self.optimizer.state if self.optimizer is not None else {}
        cached = self._update_cache
        if cached is not None:
            size, checks, plan = cached
            if size == sum(len(v) for v in state.values()) and all(
                    d.get(k) is t for d, k, t in checks):
                return plan
        self._update_cache = None
        entries = (_optimizer_entries(self.model, self.optimizer)
                   if self.optimizer is not None else [])
        records = self._update_records(entries)
        if not all(t.is_contiguous() for _, t in records):
            return None
        checks = [(state[p], key, t) for p, _, key, t in entries]
        plan = self.session.record_plan(records)
        self._update_cache = (len(entries), checks, plan)
        return plan

    def _update_records(self, entries=None):
        """[(boundary, tensor)] of the parameters, then the optimizer's state."""
        if entries is None:
            entries = (_optimizer_entries(self.model, self.optimizer)
                       if self.optimizer is not None else [])
        return list(self._parameter_boundaries("optimizer", "", "optimizer")) + [
            (self._boundary(f"{pname}.{key}", "optimizer", "optimizer"), t)
            for _, pname, key, t in entries]

    def record_loss(self, loss):
        """The loss tensor (a forward output of kind loss)."""
        if not isinstance(loss, _torch.Tensor):
            raise InvalidArgumentError(
                f"dgrr.torch: record_loss takes the loss tensor, not a {type(loss).__name__}")
        self._record("loss", "forward", "loss", loss.detach(), self.examples)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        # The kept record plans hold the parameters, their gradients, the
        # optimizer's state and the session: a removed Instrumentation that
        # the caller keeps must not keep them alive.
        self._update_cache = None
        self._gradient_plans = {}
        if self._restore_step is not None:
            self.optimizer.step = self._restore_step
            self._restore_step = None
        if _instrumentation_of(self.model) is self:
            delattr(self.model, _INSTRUMENTED)
        _live_instrumentations.get(self.session, set()).discard(self)


class _MicroBatch:
    """Instrumentation.micro_batch's context."""
    __slots__ = ("inst", "examples", "outer")

    def __init__(self, inst, first, count):
        if first < 0 or count < 1:
            raise InvalidArgumentError(
                f"dgrr.torch: micro_batch({first}, {count}): examples are first >= 0, count >= 1")
        self.inst, self.examples, self.outer = inst, (first, count), None

    def __enter__(self):
        self.outer = self.inst.examples
        self.inst._set_examples(self.examples)
        return self

    def __exit__(self, *exc):
        self.inst._set_examples(self.outer)
        return False


def instrument(session, model, optimizer=None, modules=None, backward=True, prefix="", pure=()):
    """Records the model's module boundaries, its parameter gradients and
    the optimizer's update through hooks (see the module docstring).

    modules: None (every leaf module), a list of names from
    model.named_modules(), or a predicate f(name, module) -> bool.
    backward: also record the gradients flowing back through each module.
    prefix: put before every boundary name; several models instrumented in
    one session (a GAN's generator and discriminator) each need their own,
    or their boundaries would share names ("fc.out", "loss"...).
    Instrumenting a model twice is refused (every boundary would be recorded
    twice); remove() the first one.
    pure: module classes of your own (a class, or a tuple of them) whose
    forward takes one tensor and returns one tensor made from it, keeping
    nothing made from it anywhere else (not on the module, not in a list):
    their input gradients are then caught as those of torch's own modules
    are, without a view (cheaper; docs/python.md, "How, at what cost"). A
    class that does keep such a tensor would have only the output's part of
    its input gradient recorded."""
    pure = _pure_classes(pure)
    sharded = _sharded(model, "instrument")       # FSDP2: dgrr/fsdp.py records the shards
    if _instrumentation_of(model) is not None:
        raise FailedPreconditionError(
            "dgrr.torch: this model is already instrumented; call remove() on the first "
            "Instrumentation before instrumenting it again")
    others = _live_instrumentations.setdefault(session, _weakref.WeakSet())
    if any(other.prefix == prefix for other in others):
        raise InvalidArgumentError(
            f"dgrr.torch: another model is instrumented in this session with prefix {prefix!r}: "
            f"their boundaries would share names; give each model its own prefix= "
            f"(say 'generator.' and 'discriminator.'), or remove() the other first")
    if not _controls._applied:
        # The settings in force, named, when determinism() was not called.
        _warn_about(current_controls())
    registered = _state._registered_optimizers.get(session)
    if optimizer is not None and registered is not None and optimizer not in registered:
        # A forgotten optimizer: its moments would start from zero again after
        # every resume, and the run would part from the uninterrupted one.
        warnings.warn(
            f"dgrr.torch: the optimizer instrumented ({type(optimizer).__name__}) is not registered "
            f"as state: checkpoints will not hold it, and a resumed run will differ from the "
            f"uninterrupted one; pass it to register_torch_state(session, model, optimizer)",
            NondeterminismWarning, stacklevel=2)
    if (_torch.distributed.is_available() and _torch.distributed.is_initialized()
            and _torch.distributed.get_world_size() > 1):
        _warn_torch_dropout(model, f"{_torch.distributed.get_world_size()} torch.distributed "
                                   "processes")
    cls = Instrumentation
    if sharded:
        from ..fsdp import ShardedInstrumentation as cls
    inst = cls(session, model, optimizer, modules, backward, prefix, pure)
    setattr(model, _INSTRUMENTED, _Mark(inst))
    others.add(inst)
    return inst


# session -> the Instrumentations on it not yet removed (for their prefixes).
_live_instrumentations = _weakref.WeakKeyDictionary()


def _warn_torch_dropout(model, parallel, stacklevel=3):
    """torch's own Dropout draws its masks from each process's generator in
    the order of that process's batch: under data parallelism they depend on
    the process count, and so does every result after the first step."""
    names = [n for n, m in model.named_modules()
             if isinstance(m, _torch.nn.modules.dropout._DropoutNd) and m.p > 0]
    if names:
        warnings.warn(
            f"dgrr.torch: torch Dropout at {', '.join(names[:4])}{'...' if len(names) > 4 else ''} "
            f"under data parallelism ({parallel}): its masks depend on how the batch is split "
            f"across processes, so results differ between process counts; "
            f"dgrr.torch.replace_dropout(model) keys them by example instead",
            NondeterminismWarning, stacklevel=stacklevel)


def _instrumentation_of(model):
    mark = getattr(model, _INSTRUMENTED, None)
    return mark.inst if isinstance(mark, _Mark) else None
