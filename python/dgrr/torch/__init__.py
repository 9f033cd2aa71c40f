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

import sys as _sys
import types as _types

# The package's modules, in the order of their dependencies (each imports
# only from those before it); importing support first refuses an unsupported
# torch before anything else touches it.
from . import support as _support
from . import controls as _controls
from . import mirrored as _mirrored
from . import encoded as _encoded
from . import generators as _generators
from . import state as _state
from . import randomness as _randomness
from . import data as _data
from . import recorder as _recorder
from . import parallel as _parallel
from . import audit as _audit
# The public names (and the constants scripts read) re-exported.
from .controls import (  # noqa: F401
    ORIGIN_DGRR, ORIGIN_ENVIRONMENT, ORIGIN_SESSION, ORIGIN_TORCH_DEFAULT, ORIGIN_USER,
    NondeterminismWarning, current_controls, determinism, deterministic, torch_info)
from .audit import NeighbourAudit
from .data import EndlessBatches, PermutationSampler, register_data_loader
from .encoded import register_encoded_state
from .generators import register_generators, register_numpy_generator, register_torch_generator
from .mirrored import register_object_state
from .parallel import DataParallel
from .randomness import Dropout, RandomContext, random_context, replace_dropout
from .recorder import Instrumentation, instrument
from .state import materialize_optimizer_state, register_torch_state
from .support import SUPPORTED_TORCH, fast_tensor_access  # noqa: F401

__all__ = ["instrument", "register_torch_state", "determinism", "deterministic", "Instrumentation",
           "materialize_optimizer_state", "register_generators", "register_object_state",
           "Dropout", "RandomContext", "random_context", "replace_dropout", "PermutationSampler",
           "NondeterminismWarning", "torch_info", "current_controls", "DataParallel",
           "EndlessBatches", "register_numpy_generator", "register_torch_generator",
           "register_encoded_state", "register_data_loader", "NeighbourAudit"]

# dgrr.torch was one module until the modules above were split out of it;
# scripts, tests and benchmarks still use its private names through it
# (dgrr.torch._optimizer_tensors, or monkeypatch.setattr(dgrr.torch,
# "_INPUT_GRAD_VIEWS", False)). A name dgrr.torch itself does not hold is
# looked up in the module that defines it, the first of _MODULES to hold it
# (a module holds only names of those before it besides its own), and an
# assignment to dgrr.torch.<name> rebinds it there, where the code that
# reads it looks, so that the module's state stays single.
_MODULES = (_support, _controls, _mirrored, _encoded, _generators, _state, _randomness, _data,
            _recorder, _parallel, _audit)


def _home(name):
    """The module that defines `name`, or None."""
    if name.startswith("__"):
        return None
    for module in _MODULES:
        if name in vars(module):
            return module
    return None


def __getattr__(name):
    home = _home(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(home, name)


def __dir__():
    return sorted(set(globals()) | {n for m in _MODULES for n in vars(m) if not n.startswith("__")})


class _Package(_types.ModuleType):
    """dgrr.torch's module type: assignments and deletions reach the module
    that defines the name (see _MODULES)."""

    def __setattr__(self, name, value):
        home = _home(name)
        if home is not None:
            setattr(home, name, value)
        if home is None or name in vars(self):
            super().__setattr__(name, value)

    def __delattr__(self, name):
        home = _home(name)
        if home is not None:
            delattr(home, name)
        if home is None or name in vars(self):
            super().__delattr__(name)


# The classes keep the name they had in the one module, dgrr.torch.<name>
# (reprs, and pickles: torch.save of a whole model holds a dgrr Dropout, or an
# instrumented model's mark, by it; unpickling finds them through __getattr__).
for _module in _MODULES:
    for _obj in list(vars(_module).values()):
        if isinstance(_obj, type) and _obj.__module__ == _module.__name__:
            _obj.__module__ = __name__
del _module, _obj

_sys.modules[__name__].__class__ = _Package
