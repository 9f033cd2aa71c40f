"""Generators' state: a script's own NumPy and torch generators
(register_numpy_generator, register_torch_generator) and the global ones it
draws from behind dgrr's back (register_generators: torch's CPU and CUDA
generators, Python's `random`, NumPy's legacy RandomState), mirrored into
registered tensors."""

import random as _random

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError
from .mirrored import _MirroredState


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
