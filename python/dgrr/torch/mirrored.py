"""State that lives outside registered memory (a Python object's numbers,
tensors and NumPy arrays), mirrored into registered tensors of a fixed shape:
_MirroredState, and register_object_state() over it."""

import sys as _sys

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError


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
