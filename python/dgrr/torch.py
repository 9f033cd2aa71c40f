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
  <param>.grad          each parameter's accumulated gradient    (backward, output;
                        after a DataParallel's all-reduce:        collective, output)
  <param>               each parameter after the optimizer step  (optimizer, output)
  <param>.<key>         the optimizer's state after the step     (optimizer, output)
  loss                  the loss tensor                          (forward, output)

CPU tensors are fingerprinted in place from their storage (no copy unless
a module's output is not contiguous); CUDA tensors on their device, on
torch's current stream, without the host waiting; registered CUDA state
stays on its device (DataParallel is CPU-only so far). Only what the
session's mode records is hooked. DataParallel sums per-micro-batch
gradients across the processes of an `mpirun` job in dgrr's canonical tree,
so the run has the bits of one process.
"""

import base64 as _base64
import inspect as _inspect
import json as _json
import os
import random as _random
import sys as _sys
import types as _types
import weakref as _weakref
import warnings
from collections.abc import Mapping as _Mapping

import torch as _torch

from . import FailedPreconditionError, InvalidArgumentError, _dgrr

# The torch versions dgrr.torch supports: 2.x (tested on 2.11, the GPU
# machines' version) and 1.13 (Debian 12's; a smoke test). Older ones lack
# hooks it relies on (full backward hooks on every module, _register_hook_dict).
SUPPORTED_TORCH = "1.13 or 2.x (tested: 2.11.0, and 1.13.0 as a smoke test)"


def _torch_version(text):
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


if not (1, 13) <= _torch_version(_torch.__version__) < (3, 0):
    raise ImportError(f"dgrr.torch: torch {_torch.__version__} is not supported; "
                      f"dgrr.torch needs torch {SUPPORTED_TORCH}")

__all__ = ["instrument", "register_torch_state", "determinism", "deterministic", "Instrumentation",
           "materialize_optimizer_state", "register_generators", "register_object_state",
           "Dropout", "RandomContext", "random_context", "replace_dropout", "PermutationSampler",
           "NondeterminismWarning", "torch_info", "current_controls", "DataParallel",
           "EndlessBatches", "register_numpy_generator", "register_torch_generator",
           "register_encoded_state", "register_data_loader"]

_INSTRUMENTED = "_dgrr_instrumentation"


def _use_torch_access():
    """Has the binding read tensors from their C++ object through
    dgrr._torch_access, when it was built (python/CMakeLists.txt) for the
    torch running here: the same version from the same directory. Any other
    torch (another version, a virtual environment's) is read through Python,
    which gives the same bytes and so the same trace. DGRR_TORCH_ACCESS=0
    turns it off."""
    if os.environ.get("DGRR_TORCH_ACCESS", "1") == "0":
        return False
    try:
        from . import _torch_build
    except ImportError:
        return False
    here = os.path.realpath(os.path.dirname(_torch.__file__))
    if _torch.__version__ != _torch_build.torch_version or here != _torch_build.torch_dir:
        return False
    from . import _torch_access
    _dgrr._use_torch_access(_torch_access.access)
    return True


# Whether tensors are read from their C++ object (see _use_torch_access).
fast_tensor_access = _use_torch_access()


# ---------------------------------------------------------------------------
# Determinism controls
# ---------------------------------------------------------------------------
class NondeterminismWarning(UserWarning):
    """A torch setting in force that endangers bitwise reproducibility; the
    message names it, its value and who set it."""


# Where a control's value came from: the runtime's names (runtime/determinism.h)
# for the origins it knows, and two that only a Python script has.
ORIGIN_DGRR = _dgrr.control_origins["dgrr_default"]      # dgrr set it
ORIGIN_ENVIRONMENT = _dgrr.control_origins["environment"]
ORIGIN_SESSION = _dgrr.control_origins["session"]        # an argument to determinism()
ORIGIN_USER = "user"                  # the script set it (an argument, or before dgrr)
ORIGIN_TORCH_DEFAULT = "torch default"

# torch's own defaults (1.12 and later), to tell a value the script set
# from one nobody touched.
_TORCH_DEFAULTS = {
    "torch.use_deterministic_algorithms": False,
    "torch.backends.cudnn.deterministic": False,
    "torch.backends.cudnn.benchmark": False,
    "torch.backends.cuda.matmul.allow_tf32": False,
    "torch.backends.cudnn.allow_tf32": True,
}
# The value each must have for bitwise-reproducible results, and why.
_DETERMINISTIC = {
    "torch.use_deterministic_algorithms": (
        True, "nondeterministic kernels (scatter_add, index_add, CUDA atomics) may run"),
    "torch.backends.cudnn.deterministic": (
        True, "cuDNN may pick nondeterministic convolution algorithms"),
    "torch.backends.cudnn.benchmark": (
        False, "cuDNN benchmarks and picks the fastest algorithm per run, which may differ"),
    "torch.backends.cuda.matmul.allow_tf32": (
        False, "matmuls round inputs to TF32 on Ampere and later: results differ from FP32 "
               "and between GPU generations"),
    "torch.backends.cudnn.allow_tf32": (
        False, "convolutions round inputs to TF32 on Ampere and later: results differ from "
               "FP32 and between GPU generations"),
}
_CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")
_set_by_dgrr = {}   # what an earlier determinism() of this process set itself
_applied = False


def _read(name):
    if name == "torch.use_deterministic_algorithms":
        return bool(_torch.are_deterministic_algorithms_enabled())
    if name == "torch.backends.cudnn.deterministic":
        return bool(_torch.backends.cudnn.deterministic)
    if name == "torch.backends.cudnn.benchmark":
        return bool(_torch.backends.cudnn.benchmark)
    if name == "torch.backends.cuda.matmul.allow_tf32":
        return bool(_torch.backends.cuda.matmul.allow_tf32)
    if name == "torch.backends.cudnn.allow_tf32":
        return bool(_torch.backends.cudnn.allow_tf32)
    raise KeyError(name)


def _write(name, value):
    if name == "torch.use_deterministic_algorithms":
        _torch.use_deterministic_algorithms(bool(value))
    elif name == "torch.backends.cudnn.deterministic":
        _torch.backends.cudnn.deterministic = bool(value)
    elif name == "torch.backends.cudnn.benchmark":
        _torch.backends.cudnn.benchmark = bool(value)
    elif name == "torch.backends.cuda.matmul.allow_tf32":
        _torch.backends.cuda.matmul.allow_tf32 = bool(value)
    elif name == "torch.backends.cudnn.allow_tf32":
        _torch.backends.cudnn.allow_tf32 = bool(value)
    _set_by_dgrr[name] = bool(value)


def _text(value):
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def determinism(threads=None, warn=True, **overrides):
    """Applies torch's determinism settings, records each with its origin,
    warns by name about any left nondeterministic, and returns the record
    for dgrr.open(program_info=...) (it lands in rank<R>.env.json under
    "program", so `dgrr compare` names a differing setting). Call it before
    the session opens and before anything initialises CUDA
    (CUBLAS_WORKSPACE_CONFIG is read then).

    Like the runtime's own controls, a value the script chose is respected:
    one passed here (overrides, by the setting's name with dots as
    underscores and the "torch." prefix dropped, e.g. backends_cudnn_benchmark=True)
    or one set before this call that differs from torch's default is kept
    and recorded with origin "user"; everything else is set to its
    deterministic value with origin "dgrr default".

    threads: the intra-op thread count to set (origin "session option");
    None leaves it (origin "environment" when OMP_NUM_THREADS is set, else
    "torch default"). Results of the deterministic settings do not depend on it."""
    global _applied
    known = {n[len("torch."):].replace(".", "_"): n for n in _DETERMINISTIC}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise InvalidArgumentError(
            f"dgrr.torch.determinism: unknown setting {', '.join(unknown)} "
            f"(one of: {', '.join(sorted(known))})")
    chosen = {known[k]: bool(v) for k, v in overrides.items()}
    controls = {}
    for name, (wanted, why) in _DETERMINISTIC.items():
        current = _read(name)
        if name in chosen:
            _write(name, chosen[name])
            _set_by_dgrr.pop(name, None)
            origin = ORIGIN_USER
        elif current != _TORCH_DEFAULTS[name] and _set_by_dgrr.get(name) != current:
            origin = ORIGIN_USER        # the script set it before: respected
        else:
            _write(name, wanted)
            origin = ORIGIN_DGRR
        value = _read(name)
        controls[name] = {"value": _text(value), "origin": origin}
        if value != wanted:
            controls[name]["warning"] = why

    if threads is not None:
        if int(threads) < 1:
            raise InvalidArgumentError(f"threads must be at least 1, not {threads}")
        _torch.set_num_threads(int(threads))
        _set_by_dgrr["threads"] = int(threads)
        origin = ORIGIN_SESSION
    elif _set_by_dgrr.get("threads") == _torch.get_num_threads():
        origin = ORIGIN_SESSION
    else:
        origin = ORIGIN_ENVIRONMENT if "OMP_NUM_THREADS" in os.environ else ORIGIN_TORCH_DEFAULT
    controls["torch.intra_op_threads"] = {"value": str(_torch.get_num_threads()), "origin": origin}

    name = "CUBLAS_WORKSPACE_CONFIG"
    value = os.environ.get(name)
    if value is not None and _set_by_dgrr.get(name) != value:
        origin = ORIGIN_ENVIRONMENT
    else:
        # cuBLAS is deterministic with a fixed workspace per stream; torch's
        # deterministic mode refuses CUDA matmuls without it.
        value = _CUBLAS_DETERMINISTIC[0]
        os.environ[name] = value
        _set_by_dgrr[name] = value
        origin = ORIGIN_DGRR
    controls[name] = {"value": value, "origin": origin}
    if value not in _CUBLAS_DETERMINISTIC:
        controls[name]["warning"] = (f"cuBLAS may pick nondeterministic reductions (use "
                                     f"{' or '.join(_CUBLAS_DETERMINISTIC)})")

    _applied = True
    if warn:
        _warn_about(controls)
    return torch_info(controls)


deterministic = determinism   # the first slice's name


def _warn_about(controls, stacklevel=3):
    for name, c in controls.items():
        if "warning" in c:
            warnings.warn(f"dgrr.torch: {name}={c['value']} (origin: {c['origin']}) is not "
                          f"deterministic: {c['warning']}", NondeterminismWarning,
                          stacklevel=stacklevel)


def current_controls():
    """The determinism settings in force now, as determinism() records them
    (origins "dgrr default" for what dgrr set, else "user" or "torch default")."""
    controls = {}
    for name, (wanted, why) in _DETERMINISTIC.items():
        value = _read(name)
        if _set_by_dgrr.get(name) == value:
            origin = ORIGIN_DGRR
        elif value != _TORCH_DEFAULTS[name]:
            origin = ORIGIN_USER
        else:
            origin = ORIGIN_TORCH_DEFAULT
        controls[name] = {"value": _text(value), "origin": origin}
        if value != wanted:
            controls[name]["warning"] = why
    return controls


def torch_info(controls=None):
    """torch's versions and determinism controls (name -> value, origin and,
    for a setting that endangers reproducibility, warning), recorded under
    "program" in the environment fingerprint."""
    cudnn = _torch.backends.cudnn
    return {
        "torch.version": _torch.__version__,
        "torch.cuda": _torch.version.cuda or "none",
        "torch.cudnn": str(cudnn.version()) if cudnn.is_available() else "none",
        "torch.controls": controls if controls is not None else current_controls(),
        # How the hooks read tensors (the same bytes either way).
        "dgrr.tensor_access": "c++" if fast_tensor_access else "python",
    }


# ---------------------------------------------------------------------------
# State: parameters and optimizer state, restored bitwise by a resume
# ---------------------------------------------------------------------------
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
    from . import fsdp
    return fsdp.is_sharded(model, what)


def register_torch_state(session, model, optimizer=None, scheduler=None, sampler=None,
                         generators=True, prefix=""):
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

    The tensors must stay the same objects in the same memory (no
    `p.data = ...`, model.to() or .double(), no load_state_dict after this):
    end_step, checkpoint and resume refuse a registered tensor whose memory
    changed, by name."""
    if _sharded(model, "register_torch_state"):     # FSDP2: each rank's shards
        from . import fsdp
        return fsdp.register_torch_state(session, model, optimizer, scheduler, sampler,
                                         generators, prefix)
    for name, p in _named_parameters(model):
        session.register_state(f"{prefix}model.{name}", p, "parameter")
    for name, b in model.named_buffers():
        if b is not None:
            session.register_state(f"{prefix}model.{_plain_name(name)}", b, "other")
    if optimizer is not None:
        if _sgd_with_momentum(optimizer):
            _MomentumBuffers(session, model, optimizer, prefix)
        else:
            materialize_optimizer_state(optimizer)
        for pname, key, tensor in _optimizer_tensors(model, optimizer):
            role = "counter" if key == "step" else "optimizer"
            session.register_state(f"{prefix}optimizer.{pname}.{key}", tensor, role)
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


# ---------------------------------------------------------------------------
# State that lives outside registered memory, mirrored into it
# ---------------------------------------------------------------------------
def _leaves(value, path=()):
    """(path, value) of every number, tensor and NumPy array in a nested
    state (dicts by sorted key, lists and tuples by index). Anything else
    (None, strings, functions) is configuration, not state: left where it is."""
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            yield from _leaves(value[k], path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    elif isinstance(value, (bool, int, float, _torch.Tensor)) or _is_ndarray(value):
        yield path, value


def _is_ndarray(value):
    np = _sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _int_limbs(value):
    """How many 64-bit limbs an int's magnitude takes: 1 when it fits int64
    (kept as one int64, as every int was before); otherwise a multiple of 2,
    so that a 128-bit state (a NumPy PCG64's) keeps its width whatever its
    value. Such an int is kept as [sign, limbs...] (int64 words holding the
    magnitude's bits, least significant first)."""
    if -(1 << 63) <= value < (1 << 63):
        return 1
    limbs = (abs(value).bit_length() + 63) // 64
    return max(2, limbs + (limbs % 2))


def _leaf_kind(value):
    if isinstance(value, _torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape))
    if _is_ndarray(value):
        return ("ndarray", value.dtype.str, tuple(value.shape))
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return ("int", _int_limbs(value))
    return type(value).__name__


def _fits(kind, value):
    """Whether value can be held by a leaf registered as kind: the same kind,
    or an int whose magnitude fits the registered number of limbs."""
    now = _leaf_kind(value)
    if now == kind:
        return True
    return (isinstance(kind, tuple) and kind[0] == "int" and isinstance(now, tuple)
            and now[0] == "int" and kind[1] > 1 and abs(value).bit_length() <= 64 * kind[1])


def _signed64(word):
    return word - (1 << 64) if word >= (1 << 63) else word


def _int_to_words(value, limbs):
    if limbs == 1:
        return [value]
    magnitude = abs(value)
    return [1 if value < 0 else 0] + [
        _signed64((magnitude >> (64 * i)) & 0xFFFFFFFFFFFFFFFF) for i in range(limbs)]


def _int_from_words(words):
    if len(words) == 1:
        return int(words[0])
    magnitude = 0
    for i, w in enumerate(words[1:]):
        magnitude |= (int(w) & 0xFFFFFFFFFFFFFFFF) << (64 * i)
    return -magnitude if words[0] else magnitude


def _buffer_for(value, kind, label="a value"):
    if isinstance(value, _torch.Tensor):
        if value.device.type != "cpu":
            value = value.cpu()
        return value.detach().clone().contiguous()
    if _is_ndarray(value):
        # Unsigned NumPy types wider than a byte (a bit generator's uint32 and
        # uint64 words), which torch has few operations for, are kept in the
        # signed type of their width: the same bytes, viewed back on restore.
        import numpy as np
        array = np.ascontiguousarray(value)
        if array.dtype.kind not in "biuf":
            raise InvalidArgumentError(
                f"dgrr.torch: state {label} is a NumPy {array.dtype} array; "
                "only bool, integer and float arrays can be registered")
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        if array.dtype.kind == "u" and array.dtype.itemsize > 1:
            array = array.view(f"i{array.dtype.itemsize}")
        return _torch.from_numpy(array.copy())
    if isinstance(value, bool):
        return _torch.tensor([value], dtype=_torch.bool)
    if isinstance(value, int):
        return _torch.tensor(_int_to_words(value, kind[1]), dtype=_torch.int64)
    return _torch.tensor([value], dtype=_torch.float64)


def _fill(buffer, value, kind):
    """Copies a leaf's value into its registered buffer, in place."""
    if isinstance(value, _torch.Tensor):
        buffer.copy_(value.detach())
    elif _is_ndarray(value):
        buffer.copy_(_buffer_for(value, kind))
    elif isinstance(value, bool):
        buffer[0] = value
    elif isinstance(value, int):
        buffer.copy_(_torch.tensor(_int_to_words(value, kind[1]), dtype=_torch.int64))
    else:
        buffer[0] = value


def _value_from(buffer, template):
    if isinstance(template, _torch.Tensor):
        return buffer.clone().to(template.device)
    if _is_ndarray(template):
        native = template.dtype.newbyteorder("=")
        return buffer.numpy().view(native).astype(template.dtype).reshape(template.shape)
    if isinstance(template, bool):
        return bool(buffer[0])
    if isinstance(template, int):
        return _int_from_words(buffer.tolist())
    return float(buffer[0])


def _rebuild(template, values, path=()):
    """template with each leaf replaced by values[path]."""
    if isinstance(template, dict):
        return {k: _rebuild(v, values, path + (k,)) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        items = [_rebuild(v, values, path + (i,)) for i, v in enumerate(template)]
        return items if isinstance(template, list) else type(template)(items)
    return values.get(path, template)


def _kind_text(kind):
    if isinstance(kind, tuple) and kind[0] == "int":
        return f"a {64 * kind[1]}-bit int"
    return str(kind)


class _MirroredState:
    """A Python object's numeric state (a nested structure of numbers and
    tensors, from `get`) mirrored into registered tensors, one per leaf,
    named <name>.<key>.<key>...: copied in before each checkpoint, handed
    back to `put` after each resume. Its shape is fixed when registered; a
    state that grows or changes a type later is refused by name."""

    def __init__(self, session, name, role, get, put):
        self.name, self._get, self._put = name, get, put
        self._kinds = {}
        self._buffers = {}
        for path, value in _leaves(get()):
            label = self._label(path)
            kind = _leaf_kind(value)
            buffer = _buffer_for(value, kind, label)
            self._kinds[path] = kind
            self._buffers[path] = buffer
            session.register_state(label, buffer, role)
        session.add_state_hooks(self.capture, self.restore)

    def _label(self, path):
        return ".".join([self.name] + [str(k) for k in path])

    def capture(self):
        now = dict(_leaves(self._get()))
        if now.keys() != self._buffers.keys():
            changed = sorted(self._label(p) for p in now.keys() ^ self._buffers.keys())
            raise FailedPreconditionError(
                f"dgrr: the state of {self.name} changed shape since it was registered "
                f"({', '.join(changed[:6])}); register state whose entries stay the same")
        for path, value in now.items():
            kind = self._kinds[path]
            if not _fits(kind, value):
                raise FailedPreconditionError(
                    f"dgrr: {self._label(path)} changed from {_kind_text(kind)} to "
                    f"{_kind_text(_leaf_kind(value))} since it was registered")
            _fill(self._buffers[path], value, kind)

    def restore(self):
        template = self._get()
        values = {path: _value_from(self._buffers[path], leaf) for path, leaf in _leaves(template)
                  if path in self._buffers}
        self._put(_rebuild(template, values))


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

    def __init__(self, session, model, optimizer, prefix):
        names = _parameter_names(model)
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups if group.get("momentum", 0) != 0
                       for p in group["params"]]
        self.buffers = []
        for i, p in enumerate(self.params):
            buffer = _torch.zeros_like(p, memory_format=_torch.contiguous_format).detach()
            name = names.get(id(p), f"param{i}")
            session.register_state(f"{prefix}optimizer.{name}.momentum_buffer", buffer, "optimizer")
            self.buffers.append(buffer)
        self.present = _torch.zeros(len(self.params), dtype=_torch.int8)
        session.register_state(f"{prefix}optimizer.momentum_buffer_present", self.present, "optimizer")
        session.add_state_hooks(self.capture, self.restore)

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


def _state_accessors(what, obj, get, put):
    if obj is not None:
        if get is not None or put is not None:
            raise InvalidArgumentError(f"{what}: pass obj or get/put, not both")
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise InvalidArgumentError(
                f"{what}: {type(obj).__name__} has no state_dict/load_state_dict; "
                "pass get= and put= callables")
        return obj.state_dict, obj.load_state_dict
    if get is None or put is None:
        raise InvalidArgumentError(f"{what}: pass obj, or both get= and put=")
    return get, put


def register_object_state(session, name, obj=None, role="other", get=None, put=None):
    """Registers any object with state_dict()/load_state_dict() (an LR
    scheduler, a GradScaler, a user's own class), or a pair of callables
    get() -> state and put(state): every number (ints of any size), tensor
    and NumPy array of its state is checkpointed as <name>.<key>... and
    restored, bitwise, on resume. The state's entries must stay the same
    from registration on (register_encoded_state takes state that changes
    shape). Call it before session.resume()."""
    get, put = _state_accessors("register_object_state", obj, get, put)
    return _MirroredState(session, name, role, get, put)


def register_numpy_generator(session, name, generator, role="rng"):
    """Registers a NumPy Generator (np.random.default_rng(...)) or a bit
    generator (PCG64, PCG64DXSM, MT19937, Philox, SFC64): its whole state,
    128-bit integers included, is checkpointed as <name>.state... and given
    back on resume, so the resumed run draws what the uninterrupted one drew.
    Call it before session.resume()."""
    bit_generator = getattr(generator, "bit_generator", generator)
    if not hasattr(bit_generator, "state"):
        raise InvalidArgumentError(
            f"register_numpy_generator: {type(generator).__name__} is not a NumPy Generator or "
            "bit generator")
    kind = bit_generator.state.get("bit_generator")

    def put(state):
        if state.get("bit_generator") != kind:
            raise FailedPreconditionError(
                f"dgrr.torch: {name} is a {state.get('bit_generator')} now, registered as {kind}")
        bit_generator.state = state

    return _MirroredState(session, name, role, lambda: bit_generator.state, put)


def register_torch_generator(session, name, generator, role="rng"):
    """Registers a torch.Generator a script made itself (a DataLoader's or a
    sampler's generator=, a CUDA one): its state is checkpointed as
    <name>.state and set back on resume. The global generators are
    register_generators()'s."""
    if not isinstance(generator, _torch.Generator):
        raise InvalidArgumentError(
            f"register_torch_generator: {type(generator).__name__} is not a torch.Generator")
    return _MirroredState(session, name, role, lambda: {"state": generator.get_state()},
                          lambda s: generator.set_state(s["state"]))


# ---------------------------------------------------------------------------
# State whose shape changes: encoded into a registered byte buffer
# ---------------------------------------------------------------------------
def _encode(value, path):
    """value as JSON-able data that _decode turns back into an equal value
    with the same types: tuples, non-string keys, non-finite floats, tensors
    and NumPy arrays tagged. Anything else is refused by its path: a
    checkpoint holds data, never code (nothing is unpickled)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {"$float": repr(value)}
        return value
    if isinstance(value, list):
        return [_encode(v, path + (i,)) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, path + (i,)) for i, v in enumerate(value)]}
    if isinstance(value, dict):
        return {"$dict": [[_encode(k, path + ("<key>",)), _encode(v, path + (k,))]
                          for k, v in value.items()]}
    if isinstance(value, _torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.view(_torch.uint8) if t.numel() and t.dtype != _torch.bool else t.to(_torch.uint8)
        return {"$tensor": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                "data": _base64.b64encode(bytes(raw.numpy().tobytes())).decode("ascii")}
    if _is_ndarray(value):
        import numpy as np
        a = np.ascontiguousarray(value)
        if a.dtype.kind not in "biuf":
            raise InvalidArgumentError(
                f"dgrr.torch: state {'.'.join(map(str, path))} is a NumPy {a.dtype} array")
        return {"$ndarray": a.dtype.str, "shape": list(a.shape),
                "data": _base64.b64encode(a.tobytes()).decode("ascii")}
    raise InvalidArgumentError(
        f"dgrr.torch: state {'.'.join(map(str, path)) or '(the whole state)'} is a "
        f"{type(value).__name__}: only None, bool, int, float, str, lists, tuples, dicts, "
        "tensors and NumPy arrays can be checkpointed")


def _decode(data, where):
    if isinstance(data, list):
        return [_decode(v, where) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) == 1 and "$float" in data:
        return float(data["$float"])
    if len(data) == 1 and "$tuple" in data:
        return tuple(_decode(v, where) for v in data["$tuple"])
    if len(data) == 1 and "$dict" in data:
        return {_decode(k, where): _decode(v, where) for k, v in data["$dict"]}
    if set(data) == {"$tensor", "shape", "data"}:
        dtype = getattr(_torch, str(data["$tensor"]), None)
        if not isinstance(dtype, _torch.dtype):
            raise FailedPreconditionError(f"dgrr.torch: {where}: unknown tensor dtype {data['$tensor']!r}")
        raw = bytearray(_base64.b64decode(data["data"]))
        flat = _torch.frombuffer(raw, dtype=_torch.uint8) if raw else _torch.zeros(0, dtype=_torch.uint8)
        t = flat.to(_torch.bool) if dtype == _torch.bool else flat.view(dtype)
        return t.reshape(data["shape"]).clone()
    if set(data) == {"$ndarray", "shape", "data"}:
        import numpy as np
        return np.frombuffer(_base64.b64decode(data["data"]),
                             dtype=np.dtype(data["$ndarray"])).reshape(data["shape"]).copy()
    raise FailedPreconditionError(f"dgrr.torch: {where}: unknown encoded value {sorted(data)[:3]}")


class _EncodedState:
    """An object's state of any shape (a StatefulDataLoader's: it grows worker
    snapshots and iterator positions as it runs) kept in one registered uint8
    tensor of `capacity` bytes, <name>.encoded: 8 bytes of little-endian
    length, then the state as UTF-8 JSON (docs/python.md, "Encoded state").
    Copied in before each checkpoint, decoded and handed to `put` after each
    resume."""

    def __init__(self, session, name, role, get, put, capacity):
        capacity = int(capacity)
        if capacity < 16:
            raise InvalidArgumentError(f"dgrr.torch: {name}: capacity {capacity} is under 16 bytes")
        self.name, self._get, self._put = name, get, put
        self.buffer = _torch.zeros(capacity, dtype=_torch.uint8)
        self.capture()      # refuses an unencodable state now, not at the first checkpoint
        session.register_state(f"{name}.encoded", self.buffer, role)
        session.add_state_hooks(self.capture, self.restore)

    def capture(self):
        text = _json.dumps(_encode(self._get(), ()), separators=(",", ":"),
                           allow_nan=False).encode("utf-8")
        capacity = self.buffer.numel() - 8
        if len(text) > capacity:
            raise FailedPreconditionError(
                f"dgrr.torch: the state of {self.name} takes {len(text)} bytes encoded, over its "
                f"capacity of {capacity}; register it with a larger capacity=")
        payload = len(text).to_bytes(8, "little") + text
        self.buffer.zero_()
        self.buffer[:len(payload)] = _torch.frombuffer(bytearray(payload), dtype=_torch.uint8)
        self._captured = payload

    def restore(self):
        raw = bytes(self.buffer.numpy().tobytes())
        if raw[:len(self._captured)] == self._captured and not any(raw[len(self._captured):]):
            # What the object holds already (a run starting fresh: resume()
            # captures, finds no checkpoint, restores): not handed back, as
            # load_state_dict is not always a no-op (a StatefulDataLoader's).
            return
        length = int.from_bytes(raw[:8], "little")
        where = f"{self.name}.encoded"
        if length > len(raw) - 8:
            raise FailedPreconditionError(
                f"dgrr.torch: {where}: length {length} is over the buffer's {len(raw) - 8} bytes")
        try:
            data = _json.loads(raw[8:8 + length].decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise FailedPreconditionError(f"dgrr.torch: {where}: not an encoded state ({e})") from None
        self._put(_decode(data, where))


def register_encoded_state(session, name, obj=None, role="other", get=None, put=None,
                           capacity=1 << 16):
    """Like register_object_state, for state whose shape changes as the
    program runs (entries that appear, lists that grow, strings): the whole
    state is encoded into one registered byte buffer of `capacity` bytes
    (refused by name at a checkpoint when it no longer fits). Only data is
    kept (None, bool, int of any size, float, str, lists, tuples, dicts,
    tensors, NumPy arrays): a checkpoint never holds code."""
    get, put = _state_accessors("register_encoded_state", obj, get, put)
    return _EncodedState(session, name, role, get, put, capacity)


def register_data_loader(session, loader, name="data_loader", capacity=1 << 16):
    """Registers a torchdata StatefulDataLoader (or any loader with
    state_dict()/load_state_dict()): where it is in its epoch, its sampler's
    generator and its workers' positions are checkpointed, and a resumed
    run's loader continues with the batch the uninterrupted run took next.
    Call it before session.resume(), and start iterating after it. torch's
    own DataLoader keeps no such state: use StatefulDataLoader, or dgrr's
    PermutationSampler with EndlessBatches."""
    if not (hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict")):
        raise InvalidArgumentError(
            f"register_data_loader: a {type(loader).__name__} has no state_dict(): use "
            "torchdata.stateful_dataloader.StatefulDataLoader, or dgrr.torch.PermutationSampler "
            "with EndlessBatches")
    generator = getattr(loader, "generator", None)
    if not isinstance(generator, _torch.Generator):
        generator = None

    def get():
        return {"loader": loader.state_dict(),
                "generator": None if generator is None else generator.get_state()}

    def put(state):
        loader.load_state_dict(state["loader"])
        if generator is None or state["generator"] is None or not hasattr(loader, "_get_iterator"):
            return
        # torchdata 0.11's StatefulDataLoader restores its sampler's
        # generator to where the epoch began and draws the epoch's order
        # again, but the iterator it makes draws its base seed first, so the
        # generator ends one draw ahead of the uninterrupted run's and every
        # later epoch's order differs (single-process loading; measured in
        # tests/python/test_torch_state.py). The first iterator made after
        # the resume is given the generator's state as it was at the checkpoint.
        saved = state["generator"]
        original = loader._get_iterator

        def first_iterator():
            loader.__dict__.pop("_get_iterator", None)
            iterator = original()
            generator.set_state(saved)
            return iterator

        loader._get_iterator = first_iterator

    return register_encoded_state(session, name, get=get, put=put, role="cursor",
                                  capacity=capacity)


def _python_random_state():
    version, internal, gauss_next = _random.getstate()
    if version != 3:
        raise InvalidArgumentError(f"dgrr.torch: Python's random state version {version} is not 3")
    return {"mt": _torch.tensor(internal, dtype=_torch.int64),
            "has_gauss": gauss_next is not None,
            "gauss": float(gauss_next or 0.0)}


def _set_python_random(state):
    gauss = state["gauss"] if state["has_gauss"] else None
    _random.setstate((3, tuple(int(x) for x in state["mt"].tolist()), gauss))


_GENERATORS = ("torch", "python", "numpy")


def register_generators(session, prefix="", which=_GENERATORS):
    """Registers the global generators a script draws from behind dgrr's
    back: torch's CPU generator (rng.torch.cpu), each initialised CUDA
    device's (rng.torch.cuda.<d>), Python's `random` (rng.python.*) and
    NumPy's legacy global RandomState (rng.numpy.*, when NumPy is present),
    so a resumed run draws what the uninterrupted one drew.

    Seed each one registered: Python and NumPy seed theirs from the OS at
    start, so an unseeded one differs between two runs of the same script,
    and so do their checkpoints (which `dgrr bisect` compares), even if it is
    never drawn from. `which` names the ones to register."""
    which = set(which)
    unknown = which - set(_GENERATORS)
    if unknown:
        raise InvalidArgumentError(f"dgrr.torch: unknown generators {sorted(unknown)} "
                                   f"(one of: {', '.join(_GENERATORS)})")
    if "torch" in which:
        _register_torch_generators(session, prefix)
    if "python" in which:
        _MirroredState(session, f"{prefix}rng.python", "rng", _python_random_state,
                       _set_python_random)
    if "numpy" in which:
        _register_numpy_generator(session, prefix)


def _register_torch_generators(session, prefix):
    _MirroredState(session, f"{prefix}rng.torch", "rng",
                   lambda: {"cpu": _torch.get_rng_state()},
                   lambda s: _torch.set_rng_state(s["cpu"]))
    if _torch.cuda.is_available() and _torch.cuda.is_initialized():
        devices = range(_torch.cuda.device_count())
        _MirroredState(session, f"{prefix}rng.torch.cuda", "rng",
                       lambda: {d: _torch.cuda.get_rng_state(d) for d in devices},
                       lambda s: [_torch.cuda.set_rng_state(s[d], d) for d in devices])


def _register_numpy_generator(session, prefix):
    try:
        import numpy as np
    except ImportError:
        return

    def numpy_state():
        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        return {"keys": _torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}

    def set_numpy(state):
        np.random.set_state(("MT19937", state["keys"].numpy().astype(np.uint32), state["pos"],
                             state["has_gauss"], state["cached_gaussian"]))

    _MirroredState(session, f"{prefix}rng.numpy", "rng", numpy_state, set_numpy)


# ---------------------------------------------------------------------------
# Counter-based randomness: dropout and data order from dgrr's Philox streams
# ---------------------------------------------------------------------------
class RandomContext:
    """What a dgrr Dropout keys its masks by besides layer and site: the
    run's seed, the step, and the global index of each example in the batch
    (row i of the batch is example examples[i]). Instrumentation.begin_step
    sets the default context; set it yourself otherwise."""

    def __init__(self, seed=None, step=None, examples=None):
        self.seed, self.step, self.examples = seed, step, examples

    def set(self, seed=None, step=None, examples=None):
        if seed is not None:
            self.seed = int(seed)
        if step is not None:
            self.step = int(step)
        if examples is not None:
            if isinstance(examples, tuple) and len(examples) == 2:
                first, count = examples
                examples = range(int(first), int(first) + int(count))
            self.examples = [int(e) for e in examples]
        return self


random_context = RandomContext()   # the default one


class Dropout(_torch.nn.Module):
    """nn.Dropout with masks from dgrr's Philox streams keyed by
    (seed, step, example, layer, site): row i of the input is masked by
    example context.examples[i]'s stream alone, so a mask is the same
    whatever the batch it sits in, the thread count or the device, and a
    resumed run draws exactly what the uninterrupted one drew, with no
    generator state to save. The batch is dimension 0. Same scaling as
    nn.Dropout: kept elements are multiplied by 1/(1-p)."""

    def __init__(self, p=0.5, layer=0, site=0, context=None):
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise InvalidArgumentError(f"dgrr.torch.Dropout: p={p} is not in [0, 1]")
        self.p, self.layer, self.site = float(p), int(layer), int(site)
        self.context = context

    def extra_repr(self):
        return f"p={self.p}, layer={self.layer}, site={self.site}"

    def keep_mask(self, shape):
        """The uint8 keep-mask for an input of `shape` under the context."""
        ctx = self.context or random_context
        if ctx.seed is None or ctx.step is None or ctx.examples is None:
            raise FailedPreconditionError(
                "dgrr.torch.Dropout: no seed, step or examples in its RandomContext; call "
                "Instrumentation.begin_step(step, (first, count)) or random_context.set(...)")
        if len(shape) == 0 or shape[0] != len(ctx.examples):
            raise InvalidArgumentError(
                f"dgrr.torch.Dropout (layer {self.layer}, site {self.site}): input of shape "
                f"{tuple(shape)} but {len(ctx.examples)} examples in the context; dimension 0 "
                "must be the batch")
        mask = _torch.empty(tuple(shape), dtype=_torch.uint8)
        _dgrr.dropout_keep_mask(ctx.seed, ctx.step, ctx.examples, self.layer, self.site,
                                self.p, mask)
        return mask

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0
        keep = self.keep_mask(x.shape).to(device=x.device, dtype=x.dtype)
        return x * (keep * (1.0 / (1.0 - self.p)))


def replace_dropout(model, context=None):
    """Swaps every nn.Dropout in the model for a dgrr Dropout with the same
    p; layer is the module's index among the model's dropouts in
    named_modules() order (stable for a given architecture). Returns the
    names replaced."""
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is _torch.nn.Dropout:
                full = f"{name}.{child_name}" if name else child_name
                setattr(module, child_name, Dropout(child.p, len(replaced), 0, context))
                replaced.append(full)
    return replaced


class PermutationSampler(_torch.utils.data.Sampler):
    """The data order as dgrr's trainer has it: epoch e visits the
    num_examples examples in the Philox permutation of (seed, shuffle, e)
    (rng RngStreams::EpochPermutation). Its state is two integers, `state` =
    [epoch, position] (position: indices handed out in this epoch), updated
    as indices are handed out and registered as "sampler" by
    register_torch_state, so resuming costs one permutation of one epoch,
    however far the run had come. Each iter() yields the rest of the current
    epoch; once it is exhausted the next iter() starts the next epoch.

    A DataLoader with workers takes indices ahead of the step that consumes
    them (prefetch). Read through EndlessBatches, `state` is what the steps
    consumed instead (EndlessBatches moves it batch by batch), and a resume
    is exact with any num_workers; iterated directly, it is what was handed
    out: use num_workers=0 then, or seek() to the consumed position before
    checkpointing."""

    def __init__(self, num_examples, seed, epoch=0):
        if not 0 < int(num_examples) < (1 << 32):
            raise InvalidArgumentError(
                f"PermutationSampler: num_examples={num_examples} is not in [1, 2^32)")
        self.num_examples, self.seed = int(num_examples), int(seed)
        self.state = _torch.tensor([int(epoch), 0], dtype=_torch.int64)
        self._order_epoch, self._order = None, None
        # Set by EndlessBatches: then it moves `state` as batches are
        # consumed, and an iteration only reads where to start.
        self.consumer_moves_state = False
        self.pass_start = (int(epoch), 0)

    @property
    def epoch(self):
        return int(self.state[0])

    @property
    def position(self):
        return int(self.state[1])

    def seek(self, global_example):
        """Positions the sampler at global example g: epoch g // n, position g % n."""
        g = int(global_example)
        self.state[0], self.state[1] = g // self.num_examples, g % self.num_examples

    def order(self, epoch):
        """Epoch `epoch`'s permutation (an int64 tensor); the last one is kept."""
        if self._order_epoch != epoch:
            raw = _dgrr.epoch_permutation(self.seed, epoch, self.num_examples)
            self._order = _torch.frombuffer(bytearray(raw), dtype=_torch.int32).to(_torch.int64)
            self._order_epoch = epoch
        return self._order

    def register(self, session, name="sampler"):
        session.register_state(name, self.state, "cursor")

    def __iter__(self):
        if self.position >= self.num_examples:
            self.state[0], self.state[1] = self.epoch + 1, 0
        epoch, first = self.epoch, self.position
        self.pass_start = (epoch, first)
        order = self.order(epoch)
        for i in range(first, self.num_examples):
            if not self.consumer_moves_state:
                self.state[1] = i + 1
            yield int(order[i])

    def __len__(self):
        left = self.num_examples - self.position
        return left if left > 0 else self.num_examples


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


class EndlessBatches:
    """Endless batches from a DataLoader over a PermutationSampler: a new pass
    (the sampler's next epoch) when one ends. A run resumed near the end of
    an epoch may find the rest too short for a batch (drop_last) before the
    next epoch starts, so a pass may be retried once."""

    def __init__(self, loader):
        self.loader, self.it = loader, None
        # A PermutationSampler's state follows the batches handed to the
        # steps, not the indices the loader (its workers' prefetch) took.
        sampler = loader.sampler
        self.sampler = (sampler if isinstance(sampler, PermutationSampler)
                        and loader.batch_size is not None else None)
        if self.sampler is not None:
            self.sampler.consumer_moves_state = True
        self.batches_this_pass = 0

    def next(self):
        for _ in range(3):
            if self.it is not None:
                try:
                    batch = next(self.it)
                except StopIteration:
                    if self.sampler is not None:   # the pass is over; a short rest was dropped
                        self.sampler.state[1] = self.sampler.num_examples
                else:
                    self.batches_this_pass += 1
                    self._consumed()
                    return batch
            self.it = iter(self.loader)
            self.batches_this_pass = 0
        raise RuntimeError("the data loader yields no batch")

    def _consumed(self):
        """The sampler's state: where the batches handed out in this pass end
        (the pass started where its iteration did; each batch is batch_size
        examples, the last of an epoch possibly fewer)."""
        if self.sampler is None:
            return
        epoch, first = self.sampler.pass_start
        end = min(first + self.batches_this_pass * self.loader.batch_size, self.sampler.num_examples)
        self.sampler.state[0], self.sampler.state[1] = epoch, end


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
    (python/binding.cc, PyInertHook), it serves its own module only, holds
    it and the Instrumentation weakly, stays inert on a deepcopy of the model
    and pickles as an InertHook."""

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

    def __init__(self, session, model, optimizer, modules, backward, prefix=""):
        self.session = session
        self.prefix = prefix
        self.model = model
        self.optimizer = optimizer
        # The examples of the step's batch, for the forward and backward
        # records: set it each step when the batch's global example indices
        # are known (first, count); (0, 0): not declared.
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
            if session.records("forward", kind):
                self._handles.append(
                    module.register_forward_hook(self._forward_hook(name, kind, module)))
            if not records_backward:
                continue
            if _single_input(module):
                self._handles.append(
                    module.register_forward_pre_hook(self._input_grad_hook(name, module)))
            else:
                self._handles.append(
                    module.register_full_backward_hook(self._backward_hook(name, module)))
                if _KWARGS_HOOKS and _takes_keywords(module):
                    self._handles.append(module.register_forward_pre_hook(
                        _KeywordInputGradHook(self, name, module), with_kwargs=True))
        if optimizer is not None:
            self._hook_optimizer(optimizer)

    def begin_step(self, step, examples=None):
        """session.begin_step(step), and the step's batch: examples =
        (first, count), the global indices of its examples, for the records'
        example ranges and the default RandomContext of dgrr Dropout."""
        self.session.begin_step(step)
        if examples is not None:
            first, count = examples
            self.examples = (int(first), int(count))
        random_context.set(seed=self.session.seed, step=step,
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
        random_context.set(examples=examples if examples[1] > 0 else None)

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
        """A module's forward hook: a dgrr._dgrr.Site's, in C++ (python/binding.cc);
        any other output than a tensor comes back to _record_output_items."""
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
        dgrr._dgrr.InputGradHook, in C++: python/binding.cc)."""
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


def instrument(session, model, optimizer=None, modules=None, backward=True, prefix=""):
    """Records the model's module boundaries, its parameter gradients and
    the optimizer's update through hooks (see the module docstring).

    modules: None (every leaf module), a list of names from
    model.named_modules(), or a predicate f(name, module) -> bool.
    backward: also record the gradients flowing back through each module.
    prefix: put before every boundary name; several models instrumented in
    one session (a GAN's generator and discriminator) each need their own,
    or their boundaries would share names ("fc.out", "loss"...).
    Instrumenting a model twice is refused (every boundary would be recorded
    twice); remove() the first one."""
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
    if not _applied:
        # The settings in force, named, when determinism() was not called.
        _warn_about(current_controls())
    registered = _registered_optimizers.get(session)
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
        from .fsdp import ShardedInstrumentation as cls
    inst = cls(session, model, optimizer, modules, backward, prefix)
    setattr(model, _INSTRUMENTED, _Mark(inst))
    others.add(inst)
    return inst


# session -> the Instrumentations on it not yet removed (for their prefixes).
_live_instrumentations = _weakref.WeakKeyDictionary()
# session -> the optimizers register_torch_state registered on it.
_registered_optimizers = _weakref.WeakKeyDictionary()


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


# ---------------------------------------------------------------------------
# Data parallelism: gradients summed in dgrr's canonical tree across ranks
# ---------------------------------------------------------------------------
class DataParallel:
    """Data-parallel gradients that are bitwise those of one process.

    The step's batch of `batch` examples is cut into micro-batches of
    `micro_batch` examples, the leaves of dgrr's canonical reduction tree
    (runtime/canonical_reduce.h). The ranks split the micro-batches into
    contiguous shards in rank order; each rank runs one forward and backward
    per micro-batch of its shard and keeps that micro-batch's gradient as
    one leaf, and all_reduce() sums the leaves of all ranks in the tree's
    fixed order (dgrr adds, MPI only moves bytes). A micro-batch's gradient
    is computed alike whichever rank holds it, so the sum, the optimizer
    step and the parameters have the same bits for any number of processes
    (that divides nothing: empty shards are allowed).

        dp = dgrr.torch.DataParallel(inst, comm, batch=16)   # micro_batch=1
        for step in ...:
            inst.begin_step(step, (step * 16, 16))
            x, y = the step's whole batch (every rank reads it, or its part)
            for lo, hi in dp.micro_batches():
                dp.backward(loss_fn(model(x[lo:hi]), y[lo:hi]))
            loss = dp.all_reduce()       # p.grad = the mean over micro-batches
            optimizer.step()
            session.end_step(step, loss)

    Records: each micro-batch's forward, backward and loss with its own
    example range (micro_batch=1: per example, which `dgrr compare` pairs
    across world sizes), the reduced gradients as `<param>.grad` (phase
    collective) and the optimizer's update with the whole batch's range.

    Cost: one forward and backward per micro-batch instead of one per rank
    (micro_batch=1: per example, the price of exact per-example leaves), and
    a (micro-batches of this rank) x (parameters) float32 buffer of leaves.
    Parameters must be float32 CPU tensors (the canonical sum is float32)."""

    def __init__(self, inst, communicator, batch, micro_batch=1, threads=1):
        batch, micro_batch = int(batch), int(micro_batch)
        if micro_batch < 1 or batch < 1 or batch % micro_batch != 0:
            raise InvalidArgumentError(
                f"dgrr.torch.DataParallel: a batch of {batch} does not split into micro-batches "
                f"of {micro_batch}")
        self.inst, self.communicator = inst, communicator
        self.batch, self.micro_batch, self.threads = batch, micro_batch, int(threads)
        if communicator.size > 1:
            _warn_torch_dropout(inst.model, f"{communicator.size} processes")
        self.params = [(n, p) for n, p in _named_parameters(inst.model) if p.requires_grad]
        for name, p in self.params:
            if p.dtype != _torch.float32 or p.device.type != "cpu":
                raise InvalidArgumentError(
                    f"dgrr.torch.DataParallel: parameter {name} is {p.dtype} on {p.device}; the "
                    "canonical reduction sums float32 CPU tensors")
        self.leaves_total = batch // micro_batch
        rank, size = communicator.rank, communicator.size
        self.first_leaf = self.leaves_total * rank // size
        self.end_leaf = self.leaves_total * (rank + 1) // size
        numel = sum(p.numel() for _, p in self.params)
        self._leaves = _torch.zeros((self.end_leaf - self.first_leaf, numel), dtype=_torch.float32)
        self._sum = _torch.zeros((numel,), dtype=_torch.float32)
        self._losses = []
        self._batch_examples = None
        inst._gradients_recorded_by_all_reduce = True

    def micro_batches(self):
        """This rank's micro-batches of the step's batch as (lo, hi) offsets
        into it. Each sets the records' example range and dgrr Dropout's
        examples to the micro-batch's global examples, and clears the
        parameters' gradients (a leaf is one micro-batch's gradient alone)."""
        first, count = self.inst.examples
        if count != self.batch:
            raise FailedPreconditionError(
                f"dgrr.torch.DataParallel: the step's batch has {count} examples, not {self.batch}; "
                "call Instrumentation.begin_step(step, (first, batch)) first")
        self._batch_examples = (first, count)
        self._losses = []
        for leaf in range(self.first_leaf, self.end_leaf):
            lo = leaf * self.micro_batch
            self._set_examples((first + lo, self.micro_batch))
            for _, p in self.params:
                p.grad = None
            yield lo, lo + self.micro_batch

    def backward(self, loss):
        """Records the micro-batch's loss, runs its backward and keeps its
        gradient as this micro-batch's leaf."""
        row = len(self._losses)
        if self._batch_examples is None or row >= self._leaves.shape[0]:
            raise FailedPreconditionError(
                "dgrr.torch.DataParallel: backward() outside a micro-batch of micro_batches()")
        self.inst.record_loss(loss)
        loss.backward()
        leaf, offset = self._leaves[row], 0
        with _torch.no_grad():
            for _, p in self.params:
                n = p.numel()
                if p.grad is None:
                    leaf[offset:offset + n].zero_()     # not in this micro-batch's graph
                else:
                    leaf[offset:offset + n].copy_(p.grad.reshape(-1))
                offset += n
        self._losses.append(float(loss.detach()))

    def all_reduce(self, mean=True):
        """Sums every rank's micro-batch gradients in the canonical tree
        (bitwise the one-process sum), times 1/(micro-batches) when mean,
        into each parameter's .grad, and records them (phase collective,
        the whole batch's examples). Returns the batch's loss: the mean of
        the micro-batch losses, summed in micro-batch order on every rank."""
        if self._batch_examples is None or len(self._losses) != self._leaves.shape[0]:
            raise FailedPreconditionError(
                f"dgrr.torch.DataParallel: {len(self._losses)} of this rank's "
                f"{self._leaves.shape[0]} micro-batches had backward() before all_reduce()")
        self.communicator.canonical_all_reduce(self._leaves, self.first_leaf, self.leaves_total,
                                               self._sum, self.threads)
        losses = self.communicator.gather_example_scalars(self._losses, self.first_leaf,
                                                          self.leaves_total)
        with _torch.no_grad():
            if mean:
                self._sum.mul_(1.0 / self.leaves_total)
            offset = 0
            for _, p in self.params:
                n = p.numel()
                p.grad = self._sum[offset:offset + n].view_as(p)
                offset += n
        self._set_examples(self._batch_examples)
        self._batch_examples = None
        self.inst.record_gradients(phase="collective")
        total = 0.0
        for value in losses:
            total += value
        return total / len(losses) if mean else total

    def _set_examples(self, examples):
        self.inst._set_examples(examples)
