"""State whose shape changes as the program runs, encoded as JSON into one
registered byte buffer: _EncodedState and register_encoded_state()
(docs/python.md describes the layout)."""

import base64 as _base64
import json as _json

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError
from .mirrored import _is_ndarray, _state_accessors


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
