"""The data order: PermutationSampler (dgrr's trainer's Philox permutation
per epoch, its position a registered cursor), EndlessBatches over it, and
register_data_loader() for a torchdata StatefulDataLoader."""

import torch as _torch

from .. import InvalidArgumentError, _dgrr
from .encoded import register_encoded_state


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
