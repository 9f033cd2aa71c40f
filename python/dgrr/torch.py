"""dgrr.torch: record a torch.nn.Module and its optimizer (docs/python.md).

    import dgrr, dgrr.torch
    info = dgrr.torch.deterministic(threads=2)          # before the session opens
    with dgrr.open(run_dir=..., seed=..., program_info=info, ...) as session:
        dgrr.torch.register_torch_state(session, model, optimizer)
        inst = dgrr.torch.instrument(session, model, optimizer)
        for step in range(session.resume(), steps):
            session.begin_step(step)
            loss = loss_fn(model(x), y)
            inst.record_loss(loss)
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            session.end_step(step, loss.item())
            ...

What it records, without editing the model:
  <module>.out[.i]      forward output of each selected module   (forward, output)
  <module>.grad_in.i    gradient w.r.t. the module's inputs      (backward, output)
  <param>.grad          each parameter's accumulated gradient    (backward, output)
  <param>               each parameter after the optimizer step  (optimizer, output)
  <param>.<key>         the optimizer's state after the step     (optimizer, output)
  loss                  the loss tensor                          (forward, output)

CPU tensors are fingerprinted in place from their storage (no copy unless
a module's output is not contiguous). CUDA tensors are refused with a
clear error: this slice has no device fingerprint path yet.
"""

import os

import torch as _torch

from . import FailedPreconditionError, InvalidArgumentError

__all__ = ["instrument", "register_torch_state", "deterministic", "Instrumentation",
           "materialize_optimizer_state"]

_INSTRUMENTED = "_dgrr_instrumentation"


# ---------------------------------------------------------------------------
# Determinism controls
# ---------------------------------------------------------------------------
def deterministic(threads=None):
    """Applies torch's determinism settings and returns what they are, as a
    dict for dgrr.open(program_info=...) so the environment fingerprint (and
    `dgrr compare`) sees them. Call it before the session opens and before
    anything initialises CUDA (CUBLAS_WORKSPACE_CONFIG is read then).

    threads: the intra-op thread count to set (None: leave torch's choice,
    which is recorded either way)."""
    origins = {}
    _torch.use_deterministic_algorithms(True)
    if threads is not None:
        if int(threads) < 1:
            raise InvalidArgumentError(f"threads must be at least 1, not {threads}")
        _torch.set_num_threads(int(threads))
        origins["intra_op_threads"] = "dgrr.torch.deterministic(threads=...)"
    else:
        origins["intra_op_threads"] = "torch default"
    _torch.backends.cudnn.deterministic = True
    _torch.backends.cudnn.benchmark = False
    _torch.backends.cuda.matmul.allow_tf32 = False
    _torch.backends.cudnn.allow_tf32 = False
    if "CUBLAS_WORKSPACE_CONFIG" in os.environ:
        origins["CUBLAS_WORKSPACE_CONFIG"] = "environment"
    else:
        # cuBLAS is deterministic with a fixed workspace per stream; torch's
        # deterministic mode refuses CUDA matmuls without it.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        origins["CUBLAS_WORKSPACE_CONFIG"] = "dgrr.torch.deterministic"
    return torch_info(origins)


def torch_info(origins=None):
    """torch's versions and determinism settings as a flat dict (recorded
    under "program" in the environment fingerprint)."""
    cudnn = _torch.backends.cudnn
    info = {
        "torch.version": _torch.__version__,
        "torch.cuda": _torch.version.cuda or "none",
        "torch.cudnn": str(cudnn.version()) if cudnn.is_available() else "none",
        "torch.deterministic_algorithms": bool(_torch.are_deterministic_algorithms_enabled()),
        "torch.cudnn.deterministic": bool(cudnn.deterministic),
        "torch.cudnn.benchmark": bool(cudnn.benchmark),
        "torch.cuda.matmul.allow_tf32": bool(_torch.backends.cuda.matmul.allow_tf32),
        "torch.cudnn.allow_tf32": bool(cudnn.allow_tf32),
        "torch.intra_op_threads": int(_torch.get_num_threads()),
        "torch.CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
    }
    for key, origin in (origins or {}).items():
        info[f"torch.{key}.origin"] = origin
    return info


# ---------------------------------------------------------------------------
# State: parameters and optimizer state, restored bitwise by a resume
# ---------------------------------------------------------------------------
def _adam_like(optimizer):
    return isinstance(optimizer, (_torch.optim.Adam, _torch.optim.AdamW))


def materialize_optimizer_state(optimizer):
    """Creates the optimizer's per-parameter state now, exactly as its first
    step() would (torch creates it lazily, inside that step), so it can be
    registered before Session.resume() restores it. The first step then
    finds the state present and updates it in place, bitwise as if it had
    made it. Supported: Adam, AdamW, and SGD without momentum (no state);
    anything else is refused, naming it."""
    if isinstance(optimizer, _torch.optim.SGD):
        if any(group.get("momentum", 0) != 0 for group in optimizer.param_groups):
            # SGD's first step stores a clone of the gradient as a new
            # tensor (not zeros updated in place), so no buffer registered
            # beforehand would ever hold it.
            raise InvalidArgumentError(
                "dgrr.torch: SGD with momentum keeps a buffer created by its first step; "
                "not supported yet (use Adam/AdamW or momentum=0)")
        return
    if not _adam_like(optimizer):
        raise InvalidArgumentError(
            f"dgrr.torch: optimizer {type(optimizer).__name__} is not supported yet "
            "(Adam, AdamW, SGD without momentum)")
    for group in optimizer.param_groups:
        # torch 1.13 and 2.x: a float32 step tensor, (1,)-shaped on the
        # parameter's device when capturable or fused.
        on_device = group.get("capturable", False) or group.get("fused", False)
        for p in group["params"]:
            state = optimizer.state[p]
            if len(state) != 0:
                continue
            if on_device:
                state["step"] = _torch.zeros((1,), dtype=_torch.float, device=p.device)
            else:
                state["step"] = _torch.tensor(0.0)
            state["exp_avg"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)
            state["exp_avg_sq"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)
            if group.get("amsgrad", False):
                state["max_exp_avg_sq"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)


def _parameter_names(model):
    return {id(p): name for name, p in model.named_parameters()}


def _optimizer_tensors(model, optimizer):
    """(name, key, tensor) for every tensor in the optimizer's state, in
    parameter-group order (a stable order: the registration order)."""
    names = _parameter_names(model)
    out = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            pname = names.get(id(p), f"group{gi}.param{pi}")
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, _torch.Tensor):
                    out.append((pname, key, value))
                else:
                    raise InvalidArgumentError(
                        f"dgrr.torch: optimizer state {pname}.{key} is a {type(value).__name__}, "
                        "not a tensor; dgrr restores tensors only")
    return out


def register_torch_state(session, model, optimizer=None, prefix=""):
    """Registers the model's parameters ("model.<name>", role parameter:
    fingerprinted into every STEP record) and the optimizer's state
    ("optimizer.<param>.<key>": Adam's exp_avg, exp_avg_sq and step) with the
    session, so its checkpoints hold them and a resume restores them in
    place, bitwise. Call it before session.resume(). The tensors must stay
    the same objects (no `p.data = ...`, no load_state_dict after this)."""
    for name, p in model.named_parameters():
        session.register_state(f"{prefix}model.{name}", p, "parameter")
    for name, b in model.named_buffers():
        if b is not None:
            session.register_state(f"{prefix}model.{name}", b, "other")
    if optimizer is None:
        return
    materialize_optimizer_state(optimizer)
    for pname, key, tensor in _optimizer_tensors(model, optimizer):
        role = "counter" if key == "step" else "optimizer"
        session.register_state(f"{prefix}optimizer.{pname}.{key}", tensor, role)


# ---------------------------------------------------------------------------
# Instrumentation: boundaries recorded through hooks
# ---------------------------------------------------------------------------
_KINDS = (
    ((_torch.nn.Linear, _torch.nn.Bilinear), "matmul"),
    ((_torch.nn.LayerNorm, _torch.nn.GroupNorm, _torch.nn.modules.batchnorm._BatchNorm), "norm"),
    ((_torch.nn.Embedding, _torch.nn.EmbeddingBag), "embedding"),
    ((_torch.nn.MultiheadAttention,), "attention"),
    ((_torch.nn.ReLU, _torch.nn.GELU, _torch.nn.Tanh, _torch.nn.Sigmoid, _torch.nn.SiLU,
      _torch.nn.Dropout, _torch.nn.Identity), "elementwise"),
)


def _kind_of(module):
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


def _select_modules(model, modules):
    named = list(model.named_modules())
    if modules is None:
        # Leaf modules: where the arithmetic happens. Containers would
        # record their last child's output a second time.
        return [(n, m) for n, m in named if n and not any(True for _ in m.children())]
    if callable(modules):
        return [(n, m) for n, m in named if modules(n, m)]
    wanted = list(modules)
    by_name = dict(named)
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise InvalidArgumentError(
            f"dgrr.torch: no module named {', '.join(repr(n) for n in missing)} in the model "
            f"(named_modules() has {', '.join(repr(n) for n in list(by_name)[:12] if n)}...)")
    return [(n, by_name[n]) for n in wanted]


class Instrumentation:
    """The hooks instrument() placed; remove() takes them all off."""

    def __init__(self, session, model, optimizer, modules, backward):
        self.session = session
        self.model = model
        self.optimizer = optimizer
        # The examples of the step's batch, for the forward and backward
        # records: set it each step when the batch's global example indices
        # are known (first, count); (0, 0): not declared.
        self.examples = (0, 0)
        self._boundaries = {}
        self._handles = []
        self._restore_step = None
        self._param_names = _parameter_names(model)
        for name, module in _select_modules(model, modules):
            kind = _kind_of(module)
            self._handles.append(module.register_forward_hook(self._forward_hook(name, kind)))
            if backward:
                self._handles.append(module.register_full_backward_hook(self._backward_hook(name)))
        if optimizer is not None:
            self._hook_optimizer(optimizer)

    # -- boundaries ---------------------------------------------------------
    def _boundary(self, name, phase, kind):
        key = (name, phase)
        b = self._boundaries.get(key)
        if b is None:
            b = self.session.declare_boundary(name, phase, "output", kind)
            self._boundaries[key] = b
        return b

    def _record(self, name, phase, kind, tensor, examples):
        b = self._boundary(name, phase, kind)
        if not b.recorded:
            return
        if tensor.device.type != "cpu":
            raise InvalidArgumentError(
                f"dgrr.torch: {name}: a tensor on {tensor.device}; this build records CPU "
                "tensors only (CUDA fingerprinting from Python is not implemented yet)")
        if not tensor.is_contiguous():
            with _torch.no_grad():
                tensor = tensor.contiguous()
        self.session.record(b, tensor, examples[0], examples[1])

    def _forward_hook(self, name, kind):
        def hook(module, inputs, output):
            for i, t in _tensors(output):
                label = f"{name}.out" if i is None else f"{name}.out.{i}"
                self._record(label, "forward", kind, t, self.examples)
        return hook

    def _backward_hook(self, name):
        def hook(module, grad_input, grad_output):
            for i, t in _tensors(grad_input):
                self._record(f"{name}.grad_in.{i}", "backward", "other", t, self.examples)
        return hook

    # -- optimizer ----------------------------------------------------------
    def _hook_optimizer(self, optimizer):
        if hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0
            self._handles.append(optimizer.register_step_pre_hook(
                lambda opt, args, kwargs: self.record_gradients()))
            self._handles.append(optimizer.register_step_post_hook(
                lambda opt, args, kwargs: self.record_update()))
            return
        # torch 1.13 has no step hooks: wrap this optimizer's step.
        original = optimizer.step

        def step(*args, **kwargs):
            self.record_gradients()
            result = original(*args, **kwargs)
            self.record_update()
            return result

        optimizer.step = step
        self._restore_step = original

    def record_gradients(self):
        """Each parameter's gradient as the optimizer will see it (summed
        over the batch; after an all-reduce, where the loop has one)."""
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                self._record(f"{name}.grad", "backward", "other", p.grad, self.examples)

    def record_update(self):
        """The parameters and the optimizer's state after its step."""
        with _torch.no_grad():
            for name, p in self.model.named_parameters():
                self._record(name, "optimizer", "optimizer", p, self.examples)
            if self.optimizer is not None:
                for pname, key, t in _optimizer_tensors(self.model, self.optimizer):
                    self._record(f"{pname}.{key}", "optimizer", "optimizer", t, self.examples)

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
        if self._restore_step is not None:
            self.optimizer.step = self._restore_step
            self._restore_step = None
        if getattr(self.model, _INSTRUMENTED, None) is self:
            delattr(self.model, _INSTRUMENTED)


def instrument(session, model, optimizer=None, modules=None, backward=True):
    """Records the model's module boundaries, its parameter gradients and
    the optimizer's update through hooks (see the module docstring).

    modules: None (every leaf module), a list of names from
    model.named_modules(), or a predicate f(name, module) -> bool.
    backward: also record the gradients flowing back through each module.
    Instrumenting a model twice is refused (every boundary would be recorded
    twice); remove() the first one."""
    if getattr(model, _INSTRUMENTED, None) is not None:
        raise FailedPreconditionError(
            "dgrr.torch: this model is already instrumented; call remove() on the first "
            "Instrumentation before instrumenting it again")
    inst = Instrumentation(session, model, optimizer, modules, backward)
    setattr(model, _INSTRUMENTED, inst)
    return inst
