"""dgrr.fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) recorded, checkpointed
and resumed bitwise (docs/ddp.md, "FSDP2").

    model = Model()                                   # the same seed on every rank
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), ...)
    with dgrr.distributed.open(run_dir, seed, ...) as session:
        dgrr.torch.register_torch_state(session, model, optimizer)   # each rank's shards
        inst = dgrr.torch.instrument(session, model, optimizer)     # records the shards
        dgrr.fsdp.canonical_reduce_scatter(model)                    # dgrr adds, gloo moves
        for step in range(session.resume(), steps):
            inst.begin_step(step, (step * B + lo, hi - lo))         # this rank's examples
            ...

Three pieces:

* ``canonical_reduce_scatter(model)`` installs a ``CanonicalReduceScatter`` on
  every FSDP module (``FSDPModule.set_custom_reduce_scatter``): FSDP2's
  gradient reduce-scatter becomes one ``all_to_all_single`` (bytes only) and
  a sum of the ranks' chunks in dgrr's canonical tree over the ranks
  (runtime/tree_reduce.h, the tree of the DDP hook's mode rank), followed by
  the division FSDP2 asked for. The bits depend on the world size, never on
  the collective's algorithm.
* ``register_torch_state`` and ``instrument`` of dgrr.torch hand a model with
  DTensor parameters here: each rank's local shards (parameters and the
  optimizer's state) are registered as that rank's own state, outside the
  per-step cross-rank parameter check (the shards differ by design), and the
  records hold the shards (``<param>.grad`` after the reduce-scatter, phase
  collective; ``<param>`` and ``<param>.<key>`` after the optimizer step).
* What is refused, in one line: DTensors on a mesh of more than one
  dimension or with another placement than ``Shard`` (HSDP, tensor
  parallelism), an HSDP module handed to ``canonical_reduce_scatter``, and a
  reduction of anything but float32 CPU tensors.
"""

import warnings as _warnings
import weakref as _weakref

import torch as _torch
import torch.distributed as _dist

from . import _dgrr
from . import torch as _dt
from ._dgrr import FailedPreconditionError, InvalidArgumentError

try:  # torch 2.6+: FSDP2's pluggable collectives
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatter
except ImportError:  # pragma: no cover - older torch: canonical_reduce_scatter refuses
    _ReduceScatter = object

__all__ = ["CanonicalReduceScatter", "canonical_reduce_scatter", "clip_grad_norm_", "is_sharded", "local",
           "register_torch_state", "ShardedInstrumentation", "SHARD_ROLE"]

# The role of a parameter's local shard. Not "parameter": the session's
# per-step check all-gathers a fingerprint of the role-parameter entries and
# requires every rank's to be equal, which shards never are. A shard is still
# saved per rank and restored bitwise like any registered entry.
SHARD_ROLE = "other"


def _is_dtensor(t):
    return type(t).__name__ == "DTensor"


def local(t):
    """A DTensor's local shard (the tensor itself, not a copy: its memory is
    the DTensor's); any other tensor as it is."""
    if not _is_dtensor(t):
        return t
    with _torch.no_grad():
        return t.to_local()


def is_sharded(model, what=None):
    """Whether the model has DTensor parameters, after checking that each is
    an FSDP2 shard: a 1-D device mesh and a Shard placement. Anything else
    (HSDP's 2-D mesh, tensor parallelism's Replicate or Partial placements)
    is refused in one line naming the parameter. `what`: the dgrr.torch
    function asking, for the message."""
    caller = f"dgrr.torch.{what}" if what else "dgrr.fsdp.is_sharded"
    sharded = False
    for name, p in _dt._named_parameters(model):
        if not _is_dtensor(p):
            continue
        sharded = True
        mesh, placements = p.device_mesh, p.placements
        shard = len(placements) == 1 and type(placements[0]).__name__ in ("Shard", "_StridedShard")
        if mesh.ndim != 1 or not shard:
            raise InvalidArgumentError(
                f"{caller}: parameter '{name}' is a DTensor on a {mesh.ndim}-D device mesh "
                f"placed {tuple(str(q) for q in placements)}: dgrr supports FSDP2 (fully_shard) on a "
                "1-D mesh only, not HSDP or tensor parallelism (docs/ddp.md)")
    return sharded


# ---------------------------------------------------------------------------
# The reduce-scatter: gloo moves the chunks, dgrr adds them
# ---------------------------------------------------------------------------
def _op_name(kind):
    return str(kind).split(".")[-1].split(":")[0]


class CanonicalReduceScatter(_ReduceScatter):
    """FSDP2's reduce-scatter for one FSDP module, the sum in dgrr's canonical
    order. The input (every rank's) is world chunks of n values, chunk r for
    rank r; the output is this rank's n values. One all_to_all_single hands
    each rank the chunks meant for it, row q from rank q; the rows are summed
    in the canonical tree over the ranks (two ranks: c0 + c1; four: (c0 + c1)
    + (c2 + c3); the DDP hook's mode rank), and the op FSDP2 passes is
    honoured as its gloo default computes it:

      SUM          the sum;
      AVG          the sum divided by the world size (FSDP2's float32 default;
                   gloo divides the sum, as here);
      PREMUL_SUM   each row times 1/factor first (set_gradient_divide_factor
                   with a factor other than the world size; NCCL's premul,
                   which gloo lacks), then the sum.

    Other ops, and tensors other than float32 on the CPU, are refused by name
    (the exception surfaces from the backward). `calls` counts the
    reductions. The collective is synchronous, as FSDP2 calls it on the CPU."""

    def __init__(self, module=None, threads=1):
        if _ReduceScatter is object:
            raise FailedPreconditionError(
                f"dgrr.fsdp: torch {_torch.__version__} has no pluggable FSDP2 reduce-scatter "
                "(torch.distributed.fsdp._fully_shard._fsdp_api.ReduceScatter); use torch 2.11")
        self.module = module
        self.threads = max(1, int(threads))
        self.calls = 0

    def allocate(self, size, *, dtype, device):
        return _torch.empty(size, dtype=dtype, device=device)

    def _premul(self):
        group = None if self.module is None else self.module._get_fsdp_state()._fsdp_param_group
        factor = getattr(group, "gradient_divide_factor", None)
        if factor is None:
            raise FailedPreconditionError(
                "dgrr.fsdp: a PREMUL_SUM reduce-scatter, but the module has no gradient_divide_factor")
        return 1.0 / factor

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        R = _dist.ReduceOp.RedOpType
        kind = getattr(op, "op", op)      # PREMUL_SUM comes as a ReduceOp object
        for what, t in (("input", input_tensor), ("output", output_tensor)):
            if t.dtype != _torch.float32 or t.device.type != "cpu":
                raise InvalidArgumentError(
                    f"dgrr.fsdp: an FSDP2 reduce-scatter {what} is {t.dtype} on {t.device}; the "
                    "canonical reduce-scatter sums float32 CPU tensors (no reduce_dtype, no GPU yet)")
        if kind not in (R.SUM, R.AVG, R.PREMUL_SUM):
            raise InvalidArgumentError(
                f"dgrr.fsdp: an FSDP2 reduce-scatter with op {_op_name(kind)}; the canonical one "
                "does SUM, AVG and PREMUL_SUM")
        world = group.size() if group is not None else _dist.get_world_size()
        n = output_tensor.numel()
        if input_tensor.numel() != world * n:
            raise InvalidArgumentError(
                f"dgrr.fsdp: a reduce-scatter of {input_tensor.numel()} values into {n} over "
                f"{world} ranks")
        self.calls += 1
        if n == 0:
            return None
        if world == 1:
            rows = input_tensor.detach().reshape(1, n).clone()
        else:
            received = _torch.empty(world * n, dtype=_torch.float32)
            _dist.all_to_all_single(received, input_tensor.detach().contiguous(), group=group)
            rows = received.view(world, n)
        if kind == R.PREMUL_SUM:
            rows.mul_(self._premul())
        if world > 1:
            _dgrr.tree_reduce(rows.numpy(), self.threads)
        total = rows[0]
        if kind == R.AVG:
            total.div_(world)
        with _torch.no_grad():
            output_tensor.view(-1).copy_(total)
        return None


def _fsdp_groups(model):
    """(name, FSDP module, its parameter group) for each FSDP module of the
    model that holds parameters."""
    from torch.distributed.fsdp import FSDPModule
    out = []
    for name, module in model.named_modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                out.append((name, module, group))
    return out


def canonical_reduce_scatter(model, threads=1):
    """Installs a CanonicalReduceScatter on every FSDP module of the model
    (fully_shard'ed, with parameters) and returns them, in module order. An
    HSDP module (2-D mesh: a reduce-scatter then an all-reduce that gloo
    would sum) is refused by name; so is a model without FSDP modules."""
    if _ReduceScatter is object:
        CanonicalReduceScatter()      # raises, naming the torch version
    installed = []
    for name, module, group in _fsdp_groups(model):
        if group._is_hsdp:
            raise InvalidArgumentError(
                f"dgrr.fsdp.canonical_reduce_scatter: module '{name or '(root)'}' is sharded over a "
                "2-D mesh (HSDP): its all-reduce across replicas is not canonical; dgrr supports "
                "FSDP2 on a 1-D mesh only (docs/ddp.md)")
        comm = CanonicalReduceScatter(module, threads)
        module.set_custom_reduce_scatter(comm)
        installed.append(comm)
    if not installed:
        raise InvalidArgumentError(
            "dgrr.fsdp.canonical_reduce_scatter: no module of the model is fully_shard'ed with "
            "parameters")
    return installed


# ---------------------------------------------------------------------------
# Gradient clipping: the total norm summed by dgrr, not by the backend
# ---------------------------------------------------------------------------
def clip_grad_norm_(parameters, max_norm, group=None):
    """torch.nn.utils.clip_grad_norm_ (the 2-norm) for FSDP2's sharded
    gradients, with the total norm summed in dgrr's order: torch's version
    all-reduces the shards' partial norms through torch.distributed, whose
    addition is the backend's (gloo's ring, NCCL's tree). Here each rank sums
    the squares of its local shards' norms in parameter order, one
    all_gather hands every rank every rank's sum (bytes only), and every rank
    adds them in the canonical tree over the ranks (the reduce-scatter's
    tree). Then, as torch: coefficient max_norm / (norm + 1e-6), clamped at
    1, multiplied into each local gradient. Returns the total norm (a 0-d
    float32 tensor), the same on every rank. Its last bits may differ from
    torch's (which takes the norm of the stacked norms); it is a pure
    function of the shards and the world size. `group`: the shards' process
    group (default: the first DTensor parameter's mesh, else the default
    group). Float32 CPU gradients only, like the reduce-scatter."""
    if isinstance(parameters, _torch.Tensor):
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    grads = [local(p.grad) for p in params]
    for g in grads:
        if g.dtype != _torch.float32 or g.device.type != "cpu":
            raise InvalidArgumentError(
                f"dgrr.fsdp.clip_grad_norm_: a gradient is {g.dtype} on {g.device}; the canonical "
                "norm sums float32 CPU gradients (no GPU yet)")
    if group is None:
        sharded = next((p for p in params if _is_dtensor(p)), None)
        if sharded is not None:
            group = sharded.device_mesh.get_group()
    with _torch.no_grad():
        mine = _torch.zeros((), dtype=_torch.float32)
        for g in grads:
            n = _torch.linalg.vector_norm(g, 2.0)
            mine = mine + n * n
        world = 1
        if _dist.is_available() and _dist.is_initialized():
            world = _dist.get_world_size(group)
        if world > 1:
            parts = [_torch.empty((1,), dtype=_torch.float32) for _ in range(world)]
            _dist.all_gather(parts, mine.reshape(1), group=group)
            rows = _torch.stack(parts)               # (world, 1), rank order
            _dgrr.tree_reduce(rows.numpy(), 1)
            mine = rows[0, 0].clone()
        total = _torch.sqrt(mine)
        coef = _torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
    return total


def _uses_canonical_reduce_scatter(model):
    return all(isinstance(getattr(group, "_reduce_scatter_comm", None), CanonicalReduceScatter)
               for _, _, group in _fsdp_groups(model))


# ---------------------------------------------------------------------------
# State: each rank's shards, restored bitwise
# ---------------------------------------------------------------------------
class _ShardGuard:
    """Checks, before each checkpoint and after each resume, that every
    registered shard is still the memory of its DTensor: FSDP2 gives a
    parameter a new local tensor when it is replaced (load_state_dict,
    model.to_empty), and dgrr would then save and restore the old one."""

    def __init__(self, session):
        self.entries = []    # (name, get the DTensor now, the registered local tensor)
        session.add_state_hooks(self.check, self.check)

    def add(self, name, get, registered):
        self.entries.append((name, get, registered))

    def check(self):
        for name, get, registered in self.entries:
            now = get()
            if now is None or registered.numel() == 0:
                continue
            shard = local(now)
            if shard.data_ptr() != registered.data_ptr() or shard.numel() != registered.numel():
                raise FailedPreconditionError(
                    f"dgrr.fsdp: state '{name}' is no longer the local shard it was registered as: "
                    "FSDP2 gave the DTensor new memory (load_state_dict, to_empty, a new optimizer "
                    "state); register state after such changes")


class _ShardedMomentumBuffers(_dt._MomentumBuffers):
    """SGD's momentum buffers (dgrr.torch._MomentumBuffers) for DTensor
    parameters: each buffer a DTensor like its parameter, its local shard
    registered."""

    @staticmethod
    def _registered(buffer):
        return local(buffer)


def register_torch_state(session, model, optimizer=None, scheduler=None, sampler=None,
                         generators=True, prefix=""):
    """dgrr.torch.register_torch_state for a model with FSDP2 (DTensor)
    parameters, which that function hands here. The same names; each
    DTensor entry is registered as its local shard, a per-rank entry of the
    checkpoint (docs/checkpoint-format.md section 8), the parameters' with
    role SHARD_ROLE ("other") so that the per-step check across ranks
    leaves them out; parameters that are not DTensors keep role parameter
    (replicated, so the check compares them)."""
    guard = _ShardGuard(session)
    params = dict(_dt._named_parameters(model))
    for name, p in params.items():
        key = f"{prefix}model.{name}"
        if _is_dtensor(p):
            shard = local(p)
            session.register_state(key, shard, SHARD_ROLE)
            guard.add(key, lambda name=name: dict(_dt._named_parameters(model)).get(name), shard)
        else:
            session.register_state(key, p, "parameter")
    for name, b in model.named_buffers():
        if b is not None:
            session.register_state(f"{prefix}model.{_dt._plain_name(name)}", local(b), "other")
    if optimizer is not None:
        if _dt._sgd_with_momentum(optimizer):
            _ShardedMomentumBuffers(session, model, optimizer, prefix)
        else:
            _dt.materialize_optimizer_state(optimizer)
        for p, pname, key, tensor in _dt._optimizer_entries(model, optimizer):
            role = "counter" if key == "step" else "optimizer"
            entry = f"{prefix}optimizer.{pname}.{key}"
            shard = local(tensor)
            session.register_state(entry, shard, role)
            if _is_dtensor(tensor):
                guard.add(entry, lambda p=p, key=key: optimizer.state.get(p, {}).get(key), shard)
        _dt._MirroredState(session, f"{prefix}optimizer.param_groups", "counter",
                           lambda: [{k: v for k, v in g.items() if k != "params"}
                                    for g in optimizer.param_groups],
                           lambda groups: [g.update(s) for g, s in zip(optimizer.param_groups, groups)])
    _dt._registered_optimizers.setdefault(session, _weakref.WeakSet())
    if optimizer is not None:
        _dt._registered_optimizers[session].add(optimizer)
    if scheduler is not None:
        _dt._materialize_scheduler_state(scheduler)
        _dt.register_object_state(session, f"{prefix}scheduler", scheduler, role="counter")
    if sampler is not None:
        sampler.register(session, f"{prefix}sampler")
    if generators:
        _dt.register_generators(session, prefix=prefix,
                                which=_dt._GENERATORS if generators is True else generators)


# ---------------------------------------------------------------------------
# Recording: the shards
# ---------------------------------------------------------------------------
class ShardedInstrumentation(_dt.Instrumentation):
    """dgrr.torch's Instrumentation for a model with FSDP2 parameters
    (instrument() makes one): module outputs and input gradients as for any
    model; each rank's shard of every parameter's gradient, as FSDP2's
    reduce-scatter left it, as `<param>.grad` with phase collective (kind
    collective), at the optimizer's step; the optimizer's update of the
    local shards as `<param>` and `<param>.<key>`. The example range of
    these records is the rank's own (what begin_step declared), not the
    global batch's: a shard is per-rank data, and a comparison across world
    sizes must not take it for a replicated value."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._warned_reduce_scatter = False

    def record_gradients(self, phase="collective"):
        if not self._warned_reduce_scatter:
            self._warned_reduce_scatter = True
            if (_dist.is_initialized() and _dist.get_world_size() > 1
                    and not _uses_canonical_reduce_scatter(self.model)):
                _warnings.warn(
                    "dgrr.fsdp: the FSDP2 model reduces its gradients with torch.distributed's own "
                    "reduce-scatter, whose summation order is the backend's; call "
                    "dgrr.fsdp.canonical_reduce_scatter(model) for dgrr's canonical order",
                    _dt.NondeterminismWarning, stacklevel=2)
        if not self.session.in_step or not self.session.records("collective", "collective"):
            return
        entries = self._parameter_boundaries("collective", ".grad", "collective")
        records = []
        with _torch.no_grad():
            for b, p in entries:
                if p.grad is not None:
                    g = local(p.grad)
                    records.append((b, g if g.is_contiguous() else g.contiguous()))
        self._record_many(records)

    def _update_records(self, entries=None):
        return [(b, local(t)) for b, t in super()._update_records(entries)]
