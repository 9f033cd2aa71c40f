"""Data parallelism: DataParallel, whose gradients, summed over the ranks of
an `mpirun` job in dgrr's canonical tree, are bitwise those of one process."""

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError
from .recorder import _warn_torch_dropout
from .state import _named_parameters


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
