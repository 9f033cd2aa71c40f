"""State a torch 2.x script keeps outside its model, checkpointed and resumed
exactly: NumPy Generators (128-bit states), torch.Generators, integers of
any size, a torchdata StatefulDataLoader (encoded state), and the micro-batch
example ranges of gradient accumulation."""

import json
import os
import random
import subprocess

import numpy as np
import pytest
import torch

import dgrr
import dgrr.torch as dt

CLI = os.environ.get("DGRR_CLI", "dgrr")


def run_steps(run_dir, register, draw, steps, stop_after=None):
    """Opens a session on run_dir, registers state, resumes, and for each step
    draws (draw() -> something comparable) and checkpoints after every step.
    Returns the draws of the steps it ran."""
    draws = []
    with dgrr.open(run_dir=run_dir, seed=3) as s:
        register(s)
        first = s.resume()
        for step in range(first, steps):
            s.begin_step(step)
            draws.append(draw())
            s.end_step(step, 0.0)
            s.checkpoint(step)
            if stop_after is not None and step == stop_after:
                break
    return draws


@pytest.mark.parametrize("bit_generator", ["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"])
def test_a_numpy_generator_resumes_where_it_was(tmp_path, bit_generator):
    def make():
        return np.random.Generator(getattr(np.random, bit_generator)(1234))

    gen = make()
    uninterrupted = [gen.random(3).tobytes() + gen.integers(0, 1 << 62, 2).tobytes()
                     for _ in range(5)]

    holder = {}

    def register(s):
        holder["g"] = make()
        dt.register_numpy_generator(s, "rng.aug", holder["g"])

    def draw():
        g = holder["g"]
        return g.random(3).tobytes() + g.integers(0, 1 << 62, 2).tobytes()

    first = run_steps(tmp_path / "r", register, draw, 5, stop_after=1)
    rest = run_steps(tmp_path / "r", register, draw, 5)
    assert first + rest == uninterrupted


def test_a_numpy_generator_of_another_kind_is_refused_on_resume(tmp_path):
    gen = {"g": np.random.default_rng(5)}

    def register(s):
        dt.register_numpy_generator(s, "rng.aug", gen["g"])

    run_steps(tmp_path / "r", register, lambda: gen["g"].random(), 2, stop_after=0)
    gen["g"] = np.random.Generator(np.random.MT19937(5))
    with pytest.raises(dgrr.Error):
        run_steps(tmp_path / "r", register, lambda: gen["g"].random(), 2)


def test_a_torch_generator_resumes_where_it_was(tmp_path):
    uninterrupted_gen = torch.Generator().manual_seed(77)
    uninterrupted = [torch.rand(4, generator=uninterrupted_gen).tolist() for _ in range(4)]
    holder = {}

    def register(s):
        holder["g"] = torch.Generator().manual_seed(77)
        dt.register_torch_generator(s, "rng.sampler", holder["g"])

    first = run_steps(tmp_path / "r", register,
                      lambda: torch.rand(4, generator=holder["g"]).tolist(), 4, stop_after=1)
    rest = run_steps(tmp_path / "r", register,
                     lambda: torch.rand(4, generator=holder["g"]).tolist(), 4)
    assert first + rest == uninterrupted
    with dgrr.open(run_dir=tmp_path / "x", seed=1) as s:
        with pytest.raises(dgrr.InvalidArgumentError, match="not a torch.Generator"):
            dt.register_torch_generator(s, "g", np.random.default_rng())


@pytest.mark.parametrize("value", [1 << 64, -(1 << 100) + 7, (1 << 127) + 12345, -1, 0,
                                   (1 << 63) - 1, -(1 << 63)])
def test_integers_of_any_size_come_back(tmp_path, value):
    box = {"n": value, "small": 3}
    put = []
    with dgrr.open(run_dir=tmp_path / "r", seed=1, resume=False) as s:
        dt.register_object_state(s, "user", get=lambda: box, put=put.append)
        s.resume()
        s.begin_step(0)
        s.end_step(0, 0.0)
        s.checkpoint(0)
    # The resumed process registers a value of the same width (an int that
    # fits int64, or one of as many 128-bit words: a fresh object of the same
    # kind), then gets the checkpointed one back.
    box.update(n=value - 1 if abs(value) >= 1 << 64 else 0, small=0)
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        dt.register_object_state(s, "user", get=lambda: box, put=put.append)
        assert s.resume() == 1
    assert put[-1] == {"n": value, "small": 3}
    assert type(put[-1]["n"]) is int


def test_an_integer_that_outgrows_its_registered_width_is_refused_by_name(tmp_path):
    box = {"counter": 5}
    with dgrr.open(run_dir=tmp_path / "r", seed=1, resume=False) as s:
        dt.register_object_state(s, "user", get=lambda: box, put=lambda _: None)
        s.resume()
        s.begin_step(0)
        s.end_step(0, 0.0)
        box["counter"] = 1 << 70          # registered as a 64-bit int
        with pytest.raises(dgrr.FailedPreconditionError, match=r"user.counter .*64-bit int"):
            s.checkpoint(0)


def test_encoded_state_round_trips_every_kind_of_data(tmp_path):
    state = {"epoch": 2, 7: "int key", "t": (1, 2.5, None, True), "nan": float("nan"),
             "inf": float("-inf"), "big": 1 << 90, "tensor": torch.arange(6, dtype=torch.int16).view(2, 3),
             "bools": torch.tensor([True, False]), "empty": torch.zeros(0),
             "array": np.arange(4, dtype=np.uint64) << np.uint64(60), "nested": [[{"x": 1}]]}
    put = []
    with dgrr.open(run_dir=tmp_path / "r", seed=1, resume=False) as s:
        dt.register_encoded_state(s, "thing", get=lambda: state, put=put.append, capacity=4096)
        s.resume()
        s.begin_step(0)
        s.end_step(0, 0.0)
        s.checkpoint(0)
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        dt.register_encoded_state(s, "thing", get=lambda: {}, put=put.append, capacity=4096)
        assert s.resume() == 1
    got = put[-1]
    assert list(got) == list(state)
    assert got[7] == "int key" and got["t"] == (1, 2.5, None, True) and got["big"] == 1 << 90
    assert got["nan"] != got["nan"] and got["inf"] == float("-inf")
    assert got["tensor"].dtype == torch.int16 and torch.equal(got["tensor"], state["tensor"])
    assert torch.equal(got["bools"], state["bools"]) and got["empty"].shape == (0,)
    assert got["array"].dtype == np.uint64 and (got["array"] == state["array"]).all()
    assert got["nested"] == [[{"x": 1}]]


def test_encoded_state_refuses_code_and_overflow_by_name(tmp_path):
    with dgrr.open(run_dir=tmp_path / "r", seed=1, resume=False) as s:
        with pytest.raises(dgrr.InvalidArgumentError, match=r"state a.fn is a builtin_function_or_method"):
            dt.register_encoded_state(s, "x", get=lambda: {"a": {"fn": print}}, put=print)
        box = {"items": []}
        dt.register_encoded_state(s, "grows", get=lambda: box, put=print, capacity=64)
        s.resume()
        s.begin_step(0)
        s.end_step(0, 0.0)
        box["items"] = list(range(100))
        with pytest.raises(dgrr.FailedPreconditionError, match=r"grows takes \d+ bytes .*capacity"):
            s.checkpoint(0)


def test_a_torch_data_loader_without_state_is_refused_with_what_to_use(tmp_path):
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        with pytest.raises(dgrr.InvalidArgumentError, match="StatefulDataLoader"):
            dt.register_data_loader(s, loader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stateful_data_loader_resumes_with_the_next_batch(tmp_path, num_workers):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make_loader():
        # shuffle=True: the loader's own sampler, whose generator its state keeps.
        return sdl.StatefulDataLoader(list(range(40)), batch_size=4, shuffle=True,
                                      generator=torch.Generator().manual_seed(9),
                                      num_workers=num_workers)

    def batches(loader, n):
        out, it = [], iter(loader)
        while len(out) < n:
            try:
                out.append(next(it).tolist())
            except StopIteration:
                it = iter(loader)
        return out

    uninterrupted = batches(make_loader(), 16)     # crosses an epoch (10 batches each)

    holder = {}

    def register(s):
        holder["loader"] = make_loader()
        holder["it"] = None
        dt.register_data_loader(s, holder["loader"])

    def draw():
        if holder["it"] is None:
            holder["it"] = iter(holder["loader"])
        try:
            return next(holder["it"]).tolist()
        except StopIteration:
            holder["it"] = iter(holder["loader"])
            return next(holder["it"]).tolist()

    first = run_steps(tmp_path / "r", register, draw, 16, stop_after=12)
    rest = run_steps(tmp_path / "r", register, draw, 16)
    assert first + rest == uninterrupted


def test_python_random_resumes_where_it_was(tmp_path):
    random.seed(4)
    uninterrupted = [random.random() for _ in range(5)]

    def register(s):
        dt.register_generators(s, which=("python",))

    random.seed(4)
    first = run_steps(tmp_path / "r", register, random.random, 5, stop_after=2)
    random.seed(999)                     # the resumed process starts elsewhere
    rest = run_steps(tmp_path / "r", register, random.random, 5)
    assert first + rest == uninterrupted


def test_micro_batches_give_their_records_their_own_examples(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), dt.Dropout(0.5), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 3)
    with dgrr.open(run_dir=tmp_path / "r", seed=2, mode="full", resume=False) as s:
        inst = dt.instrument(s, model, opt)
        s.resume()
        inst.begin_step(0, (100, 8))
        masks = []
        for k in range(2):
            with inst.micro_batch(100 + 4 * k, 4) as mb:
                assert inst.examples == (100 + 4 * k, 4)
                assert dt.random_context.examples == list(range(100 + 4 * k, 104 + 4 * k))
                loss = model(x[4 * k:4 * k + 4]).square().mean() / 2
                inst.record_loss(loss)
                loss.backward()
                masks.append(model[1].keep_mask((4, 4)))
            assert inst.examples == (100, 8)
        opt.step()
        s.end_step(0, 0.0)
        # Dropout rows depend on the example, not on the micro-batch split.
        inst._set_examples((100, 8))
        assert torch.equal(torch.cat(masks), model[1].keep_mask((8, 4)))
        with pytest.raises(dgrr.InvalidArgumentError, match="micro_batch"):
            inst.micro_batch(0, 0)
    out = subprocess.run([CLI, "inspect", str(tmp_path / "r"), "--name", "loss", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    losses = [(r["first_example"], r["example_count"]) for r in json.loads(out.stdout)["records"]
              if r["type"] == "boundary"]
    assert losses == [(100, 4), (104, 4)]
