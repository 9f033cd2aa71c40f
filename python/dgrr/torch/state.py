"""A torch run's state registered with the session (register_torch_state):
the model's parameters and buffers, the optimizer's state (made early by
materialize_optimizer_state, or SGD's momentum buffers mirrored), its
parameter groups, an LR scheduler, a sampler and the global generators; and
how parameters and optimizer state are named (a torch.compile'd model keeps
its model's names). _registered_optimizers, which instrument() reads, lives
here."""

import weakref as _weakref

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError
from .generators import _GENERATORS, register_generators
from .mirrored import _MirroredState, register_object_state


def _adam_like(optimizer):
    return isinstance(optimizer, (_torch.optim.Adam, _torch.optim.AdamW))


def _sgd_with_momentum(optimizer):
    return isinstance(optimizer, _torch.optim.SGD) and any(
        group.get("momentum", 0) != 0 for group in optimizer.param_groups)


def materialize_optimizer_state(optimizer):
    """Creates the optimizer's per-parameter state now, exactly as its first
    step() would (torch creates it lazily, inside that step), so it can be
    registered before Session.resume() restores it. The first step then
    finds the state present and updates it in place, bitwise as if it had
    made it. Supported: Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad
    (made by its constructor), and SGD without momentum (no state); anything
    else is refused, naming it. (SGD with momentum cannot be made
    early: its first step stores a clone of the gradient, not zeros updated
    in place. register_torch_state registers its buffers another way.)"""
    if isinstance(optimizer, _torch.optim.SGD):
        if _sgd_with_momentum(optimizer):
            raise InvalidArgumentError(
                "dgrr.torch: SGD with momentum creates its buffers in its first step, as "
                "clones of the gradient; they cannot be made early (register_torch_state "
                "registers them without that)")
        return
    if isinstance(optimizer, _torch.optim.Adagrad):
        return   # its constructor makes its state (step, sum)
    if isinstance(optimizer, _torch.optim.RMSprop):
        _materialize_rmsprop_state(optimizer)
        return
    layout = _lazy_state_layout(optimizer)
    if layout is not None:
        _materialize_lazy_state(optimizer, layout)
        return
    if not _adam_like(optimizer):
        raise InvalidArgumentError(
            f"dgrr.torch: optimizer {type(optimizer).__name__} is not supported yet "
            "(Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad, SGD)")
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


def _lazy_state_layout(optimizer):
    """The state the first step() of an Adam-family optimizer makes for each
    parameter, in the order it makes it, as (key, kind): a scalar step at 0,
    NAdam's scalar mu_product at 1, zeros like the parameter (torch 1.13 and
    2.x alike). None for other optimizers."""
    if isinstance(optimizer, _torch.optim.Adamax):
        return [("step", 0.0), ("exp_avg", "zeros"), ("exp_inf", "zeros")]
    if isinstance(optimizer, _torch.optim.NAdam):
        return [("step", 0.0), ("mu_product", 1.0), ("exp_avg", "zeros"), ("exp_avg_sq", "zeros")]
    if isinstance(optimizer, _torch.optim.RAdam):
        return [("step", 0.0), ("exp_avg", "zeros"), ("exp_avg_sq", "zeros")]
    return None


def _materialize_lazy_state(optimizer, layout):
    for group in optimizer.param_groups:
        on_device = group.get("capturable", False)
        for p in group["params"]:
            state = optimizer.state[p]
            if len(state) != 0:
                continue
            for key, kind in layout:
                if kind == "zeros":
                    state[key] = _torch.zeros_like(p, memory_format=_torch.preserve_format)
                elif on_device:
                    state[key] = _torch.full((), kind, dtype=_torch.float, device=p.device)
                else:
                    state[key] = _torch.tensor(kind)


def _materialize_rmsprop_state(optimizer):
    """RMSprop's first step makes square_avg (and momentum_buffer with
    momentum, grad_avg when centered) as zeros, then updates them in place.
    Its step counter enters no arithmetic; torch 1.13 keeps it as a Python
    int, which dgrr cannot register, so it is made here as torch 2.x makes
    it, a float32 scalar tensor, which `step += 1` then updates in place (a
    differentiable RMSprop refuses a tensor step, so it is refused here)."""
    for group in optimizer.param_groups:
        if group.get("differentiable", False):
            raise InvalidArgumentError(
                "dgrr.torch: a differentiable RMSprop keeps an int step, which dgrr cannot "
                "register; use differentiable=False")
        on_device = group.get("capturable", False)
        for p in group["params"]:
            state = optimizer.state[p]
            if len(state) != 0:
                continue
            state["step"] = (_torch.zeros((), dtype=_torch.float, device=p.device) if on_device
                             else _torch.tensor(0.0))
            state["square_avg"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)
            if group["momentum"] > 0:
                state["momentum_buffer"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)
            if group["centered"]:
                state["grad_avg"] = _torch.zeros_like(p, memory_format=_torch.preserve_format)


def _is_compiled(module):
    """A torch.compile'd module (torch._dynamo's OptimizedModule, told by
    its name and attribute so that torch._dynamo is not imported for it)."""
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


def _plain_name(name):
    """A parameter's, buffer's or module's name without torch.compile's
    `_orig_mod.`: a compiled model keeps the names (in traces and
    checkpoints) of the model it compiled."""
    if "_orig_mod" not in name:
        return name
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def _named_parameters(model):
    return [(_plain_name(n), p) for n, p in model.named_parameters()]


def _parameter_names(model):
    return {id(p): name for name, p in _named_parameters(model)}


def _optimizer_entries(model, optimizer):
    """(parameter, name, key, tensor) for every tensor in the optimizer's
    state, in parameter-group order (a stable order: the registration order)."""
    names = _parameter_names(model)
    out = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            pname = names.get(id(p), f"group{gi}.param{pi}")
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, _torch.Tensor):
                    out.append((p, pname, key, value))
                elif value is None:
                    continue   # no state (torch 1.13's SGD stores momentum_buffer=None)
                else:
                    raise InvalidArgumentError(
                        f"dgrr.torch: optimizer state {pname}.{key} is a {type(value).__name__}, "
                        "not a tensor; dgrr restores tensors only")
    return out


def _optimizer_tensors(model, optimizer):
    """(name, key, tensor) for every tensor in the optimizer's state."""
    return [(pname, key, t) for _, pname, key, t in _optimizer_entries(model, optimizer)]


def _sharded(model, what):
    """Whether the model's parameters are DTensors (FSDP2's fully_shard): then
    dgrr/fsdp.py checks them (HSDP and tensor parallelism are refused in one
    line) and registers and records each rank's local shards (docs/ddp.md)."""
    if not any(type(p).__name__ == "DTensor" for p in model.parameters()):
        return False
    from .. import fsdp
    return fsdp.is_sharded(model, what)


def register_torch_state(session, model, optimizer=None, scheduler=None, sampler=None,
                         generators=True, prefix="", replicated=False):
    """Registers a torch run's state with the session, so its checkpoints
    hold it and a resume restores it bitwise. Call it before session.resume().

      model.<name>                     parameters (role parameter: fingerprinted
                                       into every STEP record) and buffers
      optimizer.<param>.<key>          the optimizer's state tensors (Adam's
                                       exp_avg, exp_avg_sq, step; SGD's
                                       momentum_buffer, with
                                       optimizer.momentum_buffer_present)
      optimizer.param_groups.<i>.<key> the groups' hyperparameters (lr, betas...,
                                       which a scheduler changes)
      scheduler.<key>                  an LR scheduler's state_dict()
      sampler                          a PermutationSampler's (epoch, position)
      rng.torch.cpu, rng.torch.cuda.<d>, rng.python.*, rng.numpy.*
                                       the global generators (generators=True, or
                                       some of ("torch", "python", "numpy"))

    replicated=True says that the model's parameters and buffers and the
    optimizer's state tensors are the same on every rank, as under DDP: they
    are registered replicated, so every checkpoint first compares them
    across the ranks (a difference stops it on every rank, naming the entry
    and the rank) and then writes each once, the ranks' shards sharing them
    (docs/checkpoint-format.md, v3), and a resume reads them back on every
    rank. A world of one rank is the same either way; a run must resume
    with the same choice it was checkpointed with.

    The tensors must stay the same objects in the same memory (no
    `p.data = ...`, model.to() or .double(), no load_state_dict after this):
    end_step, checkpoint and resume refuse a registered tensor whose memory
    changed, by name."""
    if not isinstance(replicated, bool):
        raise InvalidArgumentError(
            f"dgrr.torch.register_torch_state: replicated must be True or False, not {replicated!r}")
    if _sharded(model, "register_torch_state"):     # FSDP2: each rank's shards
        if replicated:
            raise InvalidArgumentError(
                "dgrr.torch.register_torch_state: replicated=True with FSDP2 (fully_shard) "
                "parameters: each rank holds its own shards; register them without it")
        from .. import fsdp
        return fsdp.register_torch_state(session, model, optimizer, scheduler, sampler,
                                         generators, prefix)
    for name, p in _named_parameters(model):
        session.register_state(f"{prefix}model.{name}", p, "parameter", replicated)
    for name, b in model.named_buffers():
        if b is not None:
            session.register_state(f"{prefix}model.{_plain_name(name)}", b, "other", replicated)
    if optimizer is not None:
        if _sgd_with_momentum(optimizer):
            _MomentumBuffers(session, model, optimizer, prefix, replicated)
        else:
            materialize_optimizer_state(optimizer)
        for pname, key, tensor in _optimizer_tensors(model, optimizer):
            role = "counter" if key == "step" else "optimizer"
            session.register_state(f"{prefix}optimizer.{pname}.{key}", tensor, role, replicated)
        _MirroredState(session, f"{prefix}optimizer.param_groups", "counter",
                       lambda: [{k: v for k, v in g.items() if k != "params"}
                                for g in optimizer.param_groups],
                       lambda groups: [g.update(s) for g, s in zip(optimizer.param_groups, groups)])
    _registered_optimizers.setdefault(session, _weakref.WeakSet())
    if optimizer is not None:
        _registered_optimizers[session].add(optimizer)
    if scheduler is not None:
        _materialize_scheduler_state(scheduler)
        register_object_state(session, f"{prefix}scheduler", scheduler, role="counter")
    if sampler is not None:
        sampler.register(session, f"{prefix}sampler")
    if generators:
        register_generators(session, prefix=prefix,
                            which=_GENERATORS if generators is True else generators)


class _MomentumBuffers:
    """SGD's momentum buffers, which its first step creates (a clone of the
    gradient) and later steps update in place. Each parameter's buffer is
    registered as optimizer.<param>.momentum_buffer (zeros until there is
    one), with one flag per parameter in optimizer.momentum_buffer_present
    (int8: whether the optimizer held a buffer), so a checkpoint taken
    before the first step restores no buffer and SGD's next step clones
    the gradient as the uninterrupted run's did. Before each checkpoint a
    buffer SGD made is copied in and SGD is handed the registered tensor
    itself, which it then updates in place; a resume hands SGD the restored
    tensors (and takes away the buffers of parameters that had none)."""

    def __init__(self, session, model, optimizer, prefix, replicated=False):
        names = _parameter_names(model)
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups if group.get("momentum", 0) != 0
                       for p in group["params"]]
        self.buffers = []
        for i, p in enumerate(self.params):
            buffer = _torch.zeros_like(p, memory_format=_torch.contiguous_format).detach()
            name = names.get(id(p), f"param{i}")
            session.register_state(f"{prefix}optimizer.{name}.momentum_buffer",
                                   self._registered(buffer), "optimizer", replicated)
            self.buffers.append(buffer)
        self.present = _torch.zeros(len(self.params), dtype=_torch.int8)
        session.register_state(f"{prefix}optimizer.momentum_buffer_present", self.present, "optimizer",
                               replicated)
        session.add_state_hooks(self.capture, self.restore)

    @staticmethod
    def _registered(buffer):
        """The tensor registered for a buffer: itself (dgrr.fsdp registers
        a DTensor buffer's local shard)."""
        return buffer

    def capture(self):
        for i, (p, buffer) in enumerate(zip(self.params, self.buffers)):
            held = self.optimizer.state.get(p, {}).get("momentum_buffer")
            if held is None:
                buffer.zero_()
                self.present[i] = 0
                continue
            if held is not buffer:
                if held.shape != buffer.shape or held.dtype != buffer.dtype:
                    raise FailedPreconditionError(
                        f"dgrr.torch: SGD's momentum buffer of parameter {i} is "
                        f"{held.dtype} {tuple(held.shape)}, the parameter "
                        f"{buffer.dtype} {tuple(buffer.shape)}")
                with _torch.no_grad():
                    buffer.copy_(held)
                self.optimizer.state[p]["momentum_buffer"] = buffer
            self.present[i] = 1

    def restore(self):
        for i, (p, buffer) in enumerate(zip(self.params, self.buffers)):
            if int(self.present[i]):
                self.optimizer.state[p]["momentum_buffer"] = buffer
            else:
                self.optimizer.state.get(p, {}).pop("momentum_buffer", None)


def _materialize_scheduler_state(scheduler):
    """State a scheduler adds in its first step(), made now, as that step
    would make it, so that its registered shape holds: torch 1.13's
    ReduceLROnPlateau sets _last_lr (the groups' rates after the step) only
    then; each step overwrites it."""
    if (isinstance(scheduler, _torch.optim.lr_scheduler.ReduceLROnPlateau)
            and not hasattr(scheduler, "_last_lr")):
        scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]


# session -> the optimizers register_torch_state registered on it.
_registered_optimizers = _weakref.WeakKeyDictionary()
