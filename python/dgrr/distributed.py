"""dgrr under torch.distributed: torchrun launches and DistributedDataParallel (docs/ddp.md).

Three pieces:

* ``communicator()``: a ``dgrr.Communicator`` whose byte collectives run on
  torch.distributed's process group (gloo on the CPU). A session opened over
  it (``dgrr.distributed.open``, or ``dgrr.open(communicator=...)``) takes its
  rank and world size from torch.distributed (RANK / WORLD_SIZE set by
  torchrun), writes one trace per rank into the one run directory, checks
  after every step that the ranks' parameters agree (the per-step SDC
  check) and writes sharded checkpoints, as under mpirun.

* ``CanonicalReducer``: a DDP communication hook
  (``ddp.register_comm_hook(reducer, dgrr.distributed.canonical_hook)``, or
  ``reducer.register(ddp)``) that sums DDP's gradient buckets in dgrr's
  canonical tree (runtime/canonical_reduce.h). torch.distributed only moves
  bytes (all_gather / all_to_all); every addition is dgrr's, in an order
  fixed by the leaves' global index, so the reduced gradient does not depend
  on the collective's algorithm or on where the processes run. It records the
  reduced gradients as ``<param>.grad`` with phase collective and the whole
  batch's examples.

* Two modes, named plainly:

  - ``"rank"`` (plain): one leaf per rank, each rank's gradient as DDP's
    backward left it. One forward and backward per rank, as plain DDP. The
    bits are independent of the collective algorithm and of process
    placement at a fixed world size, not across world sizes: a rank's
    gradient is already a sum over its examples inside torch's kernels, and
    that sum is blocked by its size.
  - ``"leaf"`` (world-size invariant): the model is wrapped in
    ``LeafChunked(model, leaf_size)``, which runs it on fixed-size chunks of
    ``leaf_size`` examples inside the one forward and keeps each chunk's
    parameter gradient apart (one backward per rank); the leaves are those
    chunks, numbered by their global position in the batch, so 1, 2 or 4
    processes sum the same leaves in the same tree: bitwise the same step.
"""

import datetime as _datetime
import os as _os
import sys as _sys

import torch as _torch
import torch.distributed as _dist

import dgrr as _dgrr_pkg
from . import _dgrr
from ._dgrr import FailedPreconditionError, InvalidArgumentError

__all__ = ["communicator", "open", "init_process_group", "shutdown", "CanonicalReducer",
           "canonical_hook", "LeafChunked", "MODES"]

MODES = ("rank", "leaf")


# ---------------------------------------------------------------------------
# Byte collectives on torch.distributed
# ---------------------------------------------------------------------------
def _tensor(buf):
    """A uint8 tensor over a memoryview from the C++ side (no copy)."""
    if len(buf) == 0:
        return _torch.empty(0, dtype=_torch.uint8)
    return _torch.frombuffer(buf, dtype=_torch.uint8)


class _TorchOps:
    """The byte collectives python/python_communicator.cc calls, on a
    torch.distributed process group. Nothing here adds: each call moves
    bytes (broadcast, all_gather, all_to_all). A group whose backend keeps
    tensors on a device (NCCL) gets its bytes staged through `device`."""

    def __init__(self, group, device):
        self.group = group
        self.device = device
        self.size = _dist.get_world_size(group)
        self.rank = _dist.get_rank(group)

    def _on_device(self, t):
        return t if self.device is None else t.to(self.device)

    def barrier(self):
        _dist.barrier(group=self.group)

    def broadcast(self, buf, root):
        t = _tensor(buf)
        d = self._on_device(t)
        _dist.broadcast(d, src=_dist.get_global_rank(self.group, root) if self.group else root,
                        group=self.group)
        if d is not t:
            t.copy_(d.cpu())

    def all_gather(self, mine, out):
        m, o = _tensor(mine), _tensor(out)
        count = m.numel()
        if count == 0:
            self.barrier()
            return
        dm = self._on_device(m)
        rows = [self._on_device(_torch.empty(count, dtype=_torch.uint8)) if self.device is not None
                else o[r * count:(r + 1) * count] for r in range(self.size)]
        _dist.all_gather(rows, dm, group=self.group)
        if self.device is not None:
            for r, row in enumerate(rows):
                o[r * count:(r + 1) * count].copy_(row.cpu())

    def all_gather_v(self, mine, counts, out):
        # gloo's all_gather wants equal sizes: pad to the largest count.
        m, o = _tensor(mine), _tensor(out)
        width = max(counts) if counts else 0
        if width == 0:
            self.barrier()
            return
        padded = _torch.zeros(width, dtype=_torch.uint8)
        padded[:m.numel()].copy_(m)
        rows = [self._on_device(_torch.empty(width, dtype=_torch.uint8)) for _ in range(self.size)]
        _dist.all_gather(rows, self._on_device(padded), group=self.group)
        offset = 0
        for r, c in enumerate(counts):
            o[offset:offset + c].copy_(rows[r][:c].cpu())
            offset += c

    def all_to_all_v(self, send, send_counts, send_offsets, recv, recv_counts, recv_offsets):
        s, r = _tensor(send), _tensor(recv)
        packed_send = _pack(s, send_counts, send_offsets)
        packed_recv = _torch.empty(sum(recv_counts), dtype=_torch.uint8)
        ds, dr = self._on_device(packed_send), self._on_device(packed_recv)
        _dist.all_to_all_single(dr, ds, output_split_sizes=list(recv_counts),
                                input_split_sizes=list(send_counts), group=self.group)
        if dr is not packed_recv:
            packed_recv.copy_(dr.cpu())
        offset = 0
        for c, o in zip(recv_counts, recv_offsets):
            if c:
                r[o:o + c].copy_(packed_recv[offset:offset + c])
            offset += c

    def abort(self, message, exit_code):
        # torchrun ends the other workers when one exits with an error.
        print(f"dgrr: rank {self.rank} aborts the torch.distributed job: {message}",
              file=_sys.stderr, flush=True)
        _sys.stdout.flush()
        _os._exit(int(exit_code) or 2)


def _pack(t, counts, offsets):
    """t's ranges [offsets[i], offsets[i] + counts[i]) concatenated in rank order."""
    expected = 0
    contiguous = True
    for c, o in zip(counts, offsets):
        if c and o != expected:
            contiguous = False
        expected += c
    if contiguous:
        return t[:expected] if expected else _torch.empty(0, dtype=_torch.uint8)
    parts = [t[o:o + c] for c, o in zip(counts, offsets) if c]
    return _torch.cat(parts) if parts else _torch.empty(0, dtype=_torch.uint8)


_communicators = {}


def init_process_group(backend="gloo", timeout_s=300):
    """torch.distributed.init_process_group from torchrun's environment
    (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), unless it is initialised
    already; a process torchrun did not start (no WORLD_SIZE) becomes a world
    of one on 127.0.0.1. Returns (rank, world_size)."""
    if not _dist.is_available():
        raise FailedPreconditionError("dgrr.distributed: this torch has no torch.distributed")
    if not _dist.is_initialized():
        if "WORLD_SIZE" not in _os.environ:
            _os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            _os.environ.setdefault("MASTER_PORT", str(_free_port()))
            _os.environ.setdefault("RANK", "0")
            _os.environ.setdefault("WORLD_SIZE", "1")
        missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in _os.environ]
        if missing:
            raise FailedPreconditionError(
                "dgrr.distributed: the environment lacks " + ", ".join(missing) +
                " (start the script with torchrun, which sets them)")
        _dist.init_process_group(backend=backend, timeout=_datetime.timedelta(seconds=timeout_s))
    return _dist.get_rank(), _dist.get_world_size()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def communicator(group=None):
    """This process's rank of torch.distributed's process group (the
    default group unless `group` is given) as a dgrr.Communicator, for
    dgrr.open(communicator=...) and CanonicalReducer. Its collectives move
    bytes through torch.distributed (broadcast, all_gather,
    all_to_all_single); dgrr adds. One per group: later calls return it. In a
    world of more than one, an uncaught exception on any rank ends that
    rank with the exit code of its dgrr.Error class (else 2) and one line
    `dgrr: rank R aborts the torch.distributed job: ...`; torchrun then ends
    the others, so none waits for it in a collective."""
    if not _dist.is_available() or not _dist.is_initialized():
        raise FailedPreconditionError(
            "dgrr.distributed.communicator: torch.distributed is not initialised; call "
            "dgrr.distributed.init_process_group() (or torch.distributed.init_process_group) first")
    key = id(group) if group is not None else None
    comm = _communicators.get(key)
    if comm is not None and not comm.closed:
        return comm
    backend = _dist.get_backend(group)
    device = None
    if backend == "nccl":
        device = _torch.device("cuda", _torch.cuda.current_device())
    ops = _TorchOps(group, device)
    comm = _dgrr._open_python_communicator(ops.rank, ops.size, f"torch.distributed:{backend}", ops)
    _communicators[key] = comm
    import atexit
    atexit.register(comm.close)
    if comm.size > 1:
        _dgrr_pkg._abort_job_on_uncaught_exception(comm)
    return comm


def shutdown():
    """Ends torch.distributed for this process: a barrier, a pause with the
    GIL released, then destroy_process_group(). Call it at the end of the
    script, after the session closed, instead of destroy_process_group().

    Why the pause: a gloo worker thread frees a finished collective's tensors
    after the collective has completed, and for tensors made in Python (every
    collective dgrr.distributed issues) that takes the GIL. If the program
    then drops the process group while holding the GIL (a DDP module's
    Reducer is freed at exit, and torch 2.11 joins gloo's threads from that
    deallocation without releasing the GIL), the two wait for each other
    forever; seen on a loaded machine about once in four 4-process jobs. The
    pause lets those threads finish first."""
    import time
    if _dist.is_available() and _dist.is_initialized():
        _dist.barrier()
        time.sleep(0.5)
        _dist.destroy_process_group()
        time.sleep(0.1)


def open(run_dir, seed, group=None, **kwargs):
    """dgrr.open over torch.distributed: rank and world size from the process
    group (torchrun's RANK and WORLD_SIZE), the per-step check that the
    ranks agree and sharded checkpoints through communicator(group).
    init_process_group() must have run. Other arguments as dgrr.open."""
    return _dgrr_pkg.open(run_dir, seed, communicator=communicator(group), **kwargs)


# ---------------------------------------------------------------------------
# Per-leaf gradients: fixed-size chunks of the batch inside one forward
# ---------------------------------------------------------------------------
class LeafChunked(_torch.nn.Module):
    """Runs `module` on chunks of `leaf_size` examples (dimension 0 of every
    tensor argument) and concatenates the outputs along dimension 0, so an
    example's outputs and its chunk's parameter gradient are computed by
    kernels of one shape whatever the world size (batch invariance below the
    collective). Each chunk sees the parameters through views of its own, and
    their gradient hooks keep each chunk's parameter gradient apart for
    CanonicalReducer's "leaf" mode. The backward is one call, as without it.
    A batch of exactly one leaf (leaf_size = the rank's local batch, the
    cheapest invariant choice) runs the module as it is: its parameter
    gradient is then the leaf's, and the reducer takes it from DDP's bucket.

    `module`'s outputs must be tensors (or tuples/lists of tensors) with the
    examples along dimension 0. Wrap the whole model (the loss may stay
    outside: its mean's gradient is a scale by 1/local batch, exact when the
    local batch is a power of two; a per-example loss inside the model has no
    such condition)."""

    def __init__(self, module, leaf_size):
        super().__init__()
        leaf_size = int(leaf_size)
        if leaf_size < 1:
            raise InvalidArgumentError(f"dgrr.distributed.LeafChunked: leaf_size {leaf_size} is not positive")
        self.module = module
        self.leaf_size = leaf_size
        self.leaf_grads = {}          # parameter -> (chunks, *shape) float32, this forward's
        self.chunks = 0               # this forward's leaves (one: run unchunked)
        self._inst = None             # an Instrumentation whose example ranges follow the chunks
        self._first_example = 0

    def follow(self, inst):
        """Sets inst.examples to each chunk's global examples while it runs
        (forward and backward records then carry the leaf's range, and
        dgrr compare pairs them across world sizes)."""
        self._inst = inst
        return self

    def forward(self, *args, **kwargs):
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, _torch.Tensor)]
        if not tensors:
            raise InvalidArgumentError("dgrr.distributed.LeafChunked: no tensor argument to chunk")
        rows = tensors[0].shape[0]
        if rows % self.leaf_size != 0 or any(t.shape[0] != rows for t in tensors):
            raise InvalidArgumentError(
                f"dgrr.distributed.LeafChunked: a batch of {rows} examples does not split into "
                f"leaves of {self.leaf_size} (every tensor argument needs the batch along dimension 0)")
        chunks = rows // self.leaf_size
        self.chunks = chunks
        if chunks == 1:
            # One leaf: the same kernels on the same rows as a chunk would
            # run (the tests compare this with chunked runs bit for bit).
            # The records' example range stays the batch's: the leaf's.
            self.leaf_grads = {}
            return self.module(*args, **kwargs)
        grad = _torch.is_grad_enabled()
        params = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        if grad:
            self.leaf_grads = {p: _torch.zeros((chunks,) + tuple(p.shape), dtype=p.dtype, device=p.device)
                               for _, p in params}
        inst = self._inst
        if inst is not None:
            self._first_example = inst.examples[0]

        def split(a):
            return a.split(self.leaf_size) if isinstance(a, _torch.Tensor) else [a] * chunks

        split_args = [split(a) for a in args]
        split_kwargs = {k: split(v) for k, v in kwargs.items()}
        outs = []
        for c in range(chunks):
            self._enter_chunk(c)
            views = {}
            if grad:
                for name, p in params:
                    v = p.view_as(p)
                    v.register_hook(self._capture(p, c))
                    views[name] = v
            out = _torch.func.functional_call(
                self.module, views, tuple(a[c] for a in split_args),
                {k: v[c] for k, v in split_kwargs.items()})
            if grad and inst is not None:
                first = _first_tensor(out)
                if first is not None and first.requires_grad:
                    first.register_hook(self._enter_chunk_hook(c))
            outs.append(out)
        if inst is not None:
            inst.examples = (self._first_example, rows)
        return _concat(outs)

    def _enter_chunk(self, c):
        if self._inst is not None:
            self._inst.examples = (self._first_example + c * self.leaf_size, self.leaf_size)

    def _enter_chunk_hook(self, c):
        def hook(g):
            self._enter_chunk(c)
        return hook

    def _capture(self, p, c):
        grads = self.leaf_grads

        def hook(g):
            grads[p][c].copy_(g)
        return hook


def _first_tensor(value):
    if isinstance(value, _torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value:
        return _first_tensor(value[0])
    return None


def _concat(outs):
    first = outs[0]
    if isinstance(first, _torch.Tensor):
        return outs[0] if len(outs) == 1 else _torch.cat(outs)
    if isinstance(first, (tuple, list)):
        return type(first)(_concat([o[i] for o in outs]) for i in range(len(first)))
    raise InvalidArgumentError(
        f"dgrr.distributed.LeafChunked: the module returned a {type(first).__name__}; "
        "it must return tensors (or tuples/lists of them) with the examples along dimension 0")


# ---------------------------------------------------------------------------
# The DDP communication hook
# ---------------------------------------------------------------------------
class CanonicalReducer:
    """The state of dgrr's DDP communication hook (see the module docstring).

        comm = dgrr.distributed.communicator()
        reducer = CanonicalReducer(comm, inst, batch=16)            # mode "rank"
        reducer.register(ddp)
        for step in ...:
            reducer.begin_step(step, (step * 16, 16))   # the global batch
            lo, hi = reducer.shard()                     # this rank's examples, offsets into it
            loss = loss_fn(ddp(x[lo:hi]), y[lo:hi]); loss.backward(); optimizer.step()

    mode "leaf": ddp wraps LeafChunked(model, leaf_size) and the leaves are
    its chunks; `batch` must split into leaves. mean: the reduced sum times
    1/world size (DDP's own convention: each rank's loss is a mean over its
    examples). threads: for the canonical tree's arithmetic.

    Each bucket's collective is started in bucket order (which DDP keeps
    alike on every rank) and runs while the backward goes on; the tree over
    the gathered node sums runs when it completes, and once DDP's backward
    is over the reduced gradients are recorded on the training thread.
    Buckets must be float32 CPU tensors."""

    def __init__(self, communicator, inst=None, batch=None, mode="rank", leaf_size=None,
                 chunked=None, mean=True, threads=1, group=None):
        if mode not in MODES:
            raise InvalidArgumentError(
                f"dgrr.distributed.CanonicalReducer: mode {mode!r} is not one of {MODES}")
        self.comm = communicator
        self.inst = inst
        self.mode = mode
        self.mean = bool(mean)
        self.threads = int(threads)
        self.rank, self.world = communicator.rank, communicator.size
        self.batch = None if batch is None else int(batch)
        self.chunked = chunked
        self.leaf_size = None
        if mode == "leaf":
            if chunked is None or not isinstance(chunked, LeafChunked):
                raise InvalidArgumentError(
                    "dgrr.distributed.CanonicalReducer: mode 'leaf' needs chunked=LeafChunked(model, "
                    "leaf_size), the module DDP wraps")
            self.leaf_size = chunked.leaf_size if leaf_size is None else int(leaf_size)
            if self.leaf_size != chunked.leaf_size:
                raise InvalidArgumentError(
                    f"dgrr.distributed.CanonicalReducer: leaf_size {self.leaf_size} differs from "
                    f"the LeafChunked module's {chunked.leaf_size}")
            if self.batch is None or self.batch % self.leaf_size != 0:
                raise InvalidArgumentError(
                    f"dgrr.distributed.CanonicalReducer: a batch of {self.batch} does not split into "
                    f"leaves of {self.leaf_size}")
            self.leaves_total = self.batch // self.leaf_size
            self.first_leaf = self.leaves_total * self.rank // self.world
            self.end_leaf = self.leaves_total * (self.rank + 1) // self.world
            if inst is not None:
                chunked.follow(inst)
        else:
            self.leaves_total, self.first_leaf, self.end_leaf = self.world, self.rank, self.rank + 1
        self.batch_examples = None    # (first, count) of the step's global batch
        self._reduced = {}            # parameter -> its reduced gradient (a view of a bucket result)
        self._futures = []            # this backward's bucket futures
        self.group = group            # the torch.distributed group `communicator` runs on
        self._names = None
        if inst is not None:
            # The reduced gradients are recorded here (phase collective); the
            # optimizer step then records none of its own.
            inst._gradients_recorded_by_all_reduce = True

    # -- the step's batch ----------------------------------------------------
    def shard(self, rank=None):
        """(lo, hi): this rank's examples (or rank `rank`'s: what the
        neighbour audit recomputes) as offsets into the step's batch. mode
        "leaf": its leaves' examples; mode "rank": an even split in rank
        order (the batch must divide by the world size)."""
        if self.batch is None:
            raise FailedPreconditionError("dgrr.distributed.CanonicalReducer: no batch= given")
        r = self.rank if rank is None else int(rank)
        if not 0 <= r < self.world:
            raise InvalidArgumentError(f"dgrr.distributed.CanonicalReducer: no rank {r} in a world of {self.world}")
        if self.mode == "leaf":
            first_leaf = self.leaves_total * r // self.world
            end_leaf = self.leaves_total * (r + 1) // self.world
            return first_leaf * self.leaf_size, end_leaf * self.leaf_size
        if self.batch % self.world != 0:
            raise InvalidArgumentError(
                f"dgrr.distributed.CanonicalReducer: a batch of {self.batch} does not split evenly "
                f"over {self.world} ranks")
        per = self.batch // self.world
        return r * per, (r + 1) * per

    def begin_step(self, step, examples):
        """Instrumentation.begin_step with this rank's examples (its shard of
        the global batch `examples` = (first, count)); the reduced gradients
        are recorded with the global batch's range."""
        first, count = int(examples[0]), int(examples[1])
        if self.batch is not None and count != self.batch:
            raise InvalidArgumentError(
                f"dgrr.distributed.CanonicalReducer: a step batch of {count} examples, not {self.batch}")
        self.batch_examples = (first, count)
        self._reduced = {}
        if self.inst is not None:
            lo, hi = self.shard() if self.batch is not None else (0, count)
            self.inst.begin_step(step, (first + lo, hi - lo))

    # -- DDP ------------------------------------------------------------------
    def register(self, ddp):
        """ddp.register_comm_hook(self, canonical_hook); returns ddp."""
        ddp.register_comm_hook(self, canonical_hook)
        return ddp

    def _aligned(self):
        """Whether every rank's leaves form a node of the canonical tree of
        the same size (an aligned block of a power of two leaves, as in mode
        rank, or mode leaf with leaves/world a power of two): then a rank
        pre-reduces its block, one all_gather hands every rank the blocks'
        sums, and the tree over those sums is the tree over all leaves
        (runtime/tree_reduce.h). Otherwise the general CanonicalAllReduce
        (an all_to_all and two all_gathers) runs."""
        local = self.end_leaf - self.first_leaf
        return self.leaves_total % self.world == 0 and local >= 1 and local & (local - 1) == 0

    def reduce(self, bucket):
        """A future of the bucket's reduced gradient (a new float32 tensor)."""
        buf = bucket.buffer()
        if buf.dtype != _torch.float32 or buf.device.type != "cpu":
            raise InvalidArgumentError(
                f"dgrr.distributed: a DDP gradient bucket is {buf.dtype} on {buf.device}; the "
                "canonical reduction sums float32 CPU tensors")
        params = list(bucket.parameters())
        n = buf.numel()
        offsets, offset = [], 0
        for p in params:
            offsets.append(offset)
            offset += p.numel()
        if offset != n:
            raise InvalidArgumentError(
                f"dgrr.distributed: a DDP bucket of {n} values holds parameters of {offset}")
        if self.mode == "rank" or (self.end_leaf - self.first_leaf == 1 and self.chunked.chunks == 1):
            # One leaf on this rank, run unchunked: its gradient is the bucket.
            leaves = buf.detach().reshape(1, n)
        else:
            local = self.end_leaf - self.first_leaf
            chunked = self.chunked
            if chunked.chunks != local:
                raise FailedPreconditionError(
                    f"dgrr.distributed: the LeafChunked forward ran {chunked.chunks} leaves, but rank "
                    f"{self.rank} holds {local} of the batch's {self.leaves_total} (feed it "
                    "reducer.shard()'s examples)")
            leaves = _torch.empty((local, n), dtype=_torch.float32)
            for p, o in zip(params, offsets):
                g = chunked.leaf_grads.get(p)
                if g is None:
                    leaves[:, o:o + p.numel()].zero_()
                else:
                    leaves[:, o:o + p.numel()].copy_(g.reshape(local, -1))
        if self._aligned():
            if leaves.shape[0] > 1:
                if leaves.data_ptr() == buf.data_ptr():
                    leaves = leaves.clone()
                _dgrr.tree_reduce(leaves.numpy(), self.threads)
            node = leaves[0]
            if self.world == 1:
                fut = _torch.futures.Future()
                fut.set_result(None)
                gathered = node.reshape(1, n).clone()
            else:
                gathered = _torch.empty((self.world, n), dtype=_torch.float32)
                fut = _dist.all_gather(list(gathered.unbind(0)), node, group=self.group,
                                       async_op=True).get_future()

            def finish(_, gathered=gathered):
                if gathered.shape[0] > 1:
                    _dgrr.tree_reduce(gathered.numpy(), self.threads)
                return self._finish(gathered[0], params, offsets)
            result = fut.then(finish)
        else:
            out = _torch.empty(n, dtype=_torch.float32)
            if leaves.data_ptr() == buf.data_ptr():
                leaves = leaves.clone()       # canonical_all_reduce clobbers its leaves
            self.comm.canonical_all_reduce(leaves, self.first_leaf, self.leaves_total, out, self.threads)
            result = _torch.futures.Future()
            result.set_result(self._finish(out, params, offsets))
        self._futures.append(result)
        if bucket.is_last():
            # Recorded once DDP's backward is over, on the training thread
            # (the futures' callbacks run on gloo's).
            _torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)
        return result

    def _finish(self, out, params, offsets):
        if self.mean and self.world > 1:
            out.mul_(1.0 / self.world)
        for p, o in zip(params, offsets):
            self._reduced[p] = out[o:o + p.numel()].view_as(p)
        return out

    def _after_backward(self):
        futures, self._futures = self._futures, []
        for f in futures:
            f.wait()
        if self.inst is not None and self.batch_examples is not None:
            # The update that follows is the whole batch's.
            self.inst.examples = self.batch_examples
        self._record()

    def _record(self):
        inst = self.inst
        if inst is None:
            return
        session = inst.session
        if not session.in_step or not session.records("collective", "collective"):
            return
        entries = inst._parameter_boundaries("collective", ".grad", "collective")
        records = [(b, self._reduced[p]) for b, p in entries if p in self._reduced]
        first, count = self.batch_examples if self.batch_examples is not None else inst.examples
        session.record_many(records, first, count)


def canonical_hook(state, bucket):
    """DDP communication hook: `state` is a CanonicalReducer. Returns a
    future of the bucket's reduced gradient."""
    try:
        return state.reduce(bucket)
    except Exception as e:  # noqa: BLE001  (handed to DDP, which raises it in backward)
        fut = _torch.futures.Future()
        fut.set_exception(e)
        return fut
