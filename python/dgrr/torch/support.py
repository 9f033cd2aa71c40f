"""Which torch dgrr.torch runs with: the versions it supports (importing
dgrr.torch under any other fails, naming them), and whether tensors are read
from their C++ object through dgrr._torch_access or through Python
(fast_tensor_access, decided once, when dgrr.torch is first imported)."""

import os

import torch as _torch

from .. import _dgrr


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
        from .. import _torch_build
    except ImportError:
        return False
    here = os.path.realpath(os.path.dirname(_torch.__file__))
    if _torch.__version__ != _torch_build.torch_version or here != _torch_build.torch_dir:
        return False
    from .. import _torch_access
    _dgrr._use_torch_access(_torch_access.access)
    return True


# Whether tensors are read from their C++ object (see _use_torch_access).
fast_tensor_access = _use_torch_access()
