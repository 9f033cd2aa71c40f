"""Determinism controls: torch's settings that bitwise reproducibility
needs, applied by determinism() and recorded with their origins, named by a
NondeterminismWarning when left nondeterministic, and torch_info() for the
environment fingerprint. What determinism() set is this module's state
(_set_by_dgrr, _applied): read it through this module."""

import os
import warnings

import torch as _torch

from .. import InvalidArgumentError, _dgrr
from . import support as _support


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
        "dgrr.tensor_access": "c++" if _support.fast_tensor_access else "python",
    }
