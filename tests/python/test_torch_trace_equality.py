"""The recorder's cheap paths change no recorded bit (issue 30).

Each script runs four times in this process with the same seeds: with
every module's input gradient recorded through torch's full backward hook
and every output through torch's forward hooks (the plain recorder,
dgrr.torch._INPUT_GRAD_VIEWS = False, _MODULE_CALLS = False), with the
views of the input-gradient pre-hook (_MODULE_CALLS = False: the recorder
of 2026-11-28), with the ModuleCall and those views (what a torch without
dgrr._torch_access gets), and as dgrr.torch records by default (a ModuleCall in place
of torch's hook dispatch, input gradients through dgrr's node put in after
the call, C++ hook sites, record plans). The traces must hold the same
boundary records in the same order with the same fingerprints and example
ranges (`dgrr inspect --json`, record for record), and `dgrr compare` must
exit 0. The scripts: a nanoGPT-style one with gradient accumulation (its
own LayerNorm class, dgrr Dropout, AdamW, clipping, a user's full backward
hook on a container), one whose leaf module takes a tensor by keyword, one
with a two-input leaf module (on the full backward hook path either way),
and one with the awkward cases (a module returning its input, modules of
the user's classes using it three times or returning a tuple, which get
views, one called twice, an input that is a leaf tensor, a LayerNorm and a
Linear over a 3-d input, a block under activation checkpointing, and a
ReLU working in place on its input).""" 

import json
import math
import os
import subprocess
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint

import dgrr
import dgrr.torch as dt

CLI = os.environ.get("DGRR_CLI", "dgrr")


class LayerNorm(nn.Module):
    """A user's own LayerNorm class (not nn.LayerNorm)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.qkv, self.proj, self.drop = nn.Linear(width, 3 * width), nn.Linear(width, width), nn.Dropout(0.1)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // 2)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), float("-inf"))
        return self.proj((self.drop(F.softmax(att, dim=-1)) @ v).transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc, self.proj, self.drop = nn.Linear(width, 4 * width), nn.Linear(4 * width, width), nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Gpt(nn.Module):
    def __init__(self, width=8, vocab=16, ctx=6):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(ctx, width)
        self.ln1, self.attn, self.ln2, self.mlp = LayerNorm(width), Attention(width), LayerNorm(width), Mlp(width)
        self.ln_f, self.head = LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


class Scale(nn.Module):
    """A leaf module given its second tensor by keyword."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x, scale=None):
        return x * self.weight * (scale if scale is not None else 1.0)


class WithKeywords(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.scale, self.out = nn.Linear(5, 6), nn.Linear(5, 6), Scale(6), nn.Linear(6, 1)

    def forward(self, x):
        return self.out(self.scale(self.a(x), scale=torch.sigmoid(self.b(x))))


class Mix(nn.Module):
    """A leaf module with two tensor inputs: the full backward hook's path."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.full((n,), 0.7))

    def forward(self, x, y):
        return x * self.weight + y.tanh()


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.norm, self.mix = nn.Linear(5, 6), nn.Linear(5, 6), LayerNorm(6), Mix(6)
        self.out = nn.Linear(6, 1)

    def forward(self, x):
        return self.out(self.mix(self.norm(self.a(x)), self.b(x)))


class Square(nn.Module):
    """Uses its input three times: three edges into it, one gradient."""

    def forward(self, x):
        return x * x + x


class Pair(nn.Module):
    """Returns a tuple."""

    def forward(self, x):
        return x.tanh(), x.sigmoid()


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.square = nn.Linear(6, 6), Square()

    def forward(self, x):
        return self.square(self.fc(x))


class Awkward(nn.Module):
    """The node path's awkward cases (see the module docstring)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.a, self.act, self.same = nn.Linear(5, 6), nn.ReLU(inplace=inplace), nn.Identity()
        self.square, self.pair, self.shared = Square(), Pair(), nn.Linear(6, 6)
        self.norm, self.wide = nn.LayerNorm(6), nn.Linear(6, 6)
        self.block, self.out = Checkpointed(), nn.Linear(6, 1)

    def forward(self, x):
        h = self.act(self.a(x))
        h = self.same(h) + self.square(h)
        p, q = self.pair(h)
        h = self.shared(p) + self.shared(q)
        # A LayerNorm (its node also feeds its parameters' accumulators, quiet
        # here: the post hook) and a Linear over a 3-d input (a reshape's node);
        # the 2-d Linears' addmm is not the call's lowest node: dgrr's node.
        h = h + self.wide(self.norm(h).view(2, 2, 6)).view(4, 6)
        h = h + checkpoint.checkpoint(self.block, h, use_reentrant=False)
        return self.out(h)


def train_gpt(run_dir, steps=3, micro=2, batch=4, pure=()):
    torch.manual_seed(3)
    model = Gpt()
    dt.replace_dropout(model)
    model.mlp.register_full_backward_hook(lambda m, gi, go: None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    data = torch.randint(0, 16, (steps, batch, 7), generator=torch.Generator().manual_seed(5))
    mb = batch // micro
    with dgrr.open(run_dir=run_dir, seed=7, mode="full", resume=False) as s:
        dt.register_torch_state(s, model, opt)
        inst = dt.instrument(s, model, opt, pure=pure)
        s.resume()
        for step in range(steps):
            inst.begin_step(step, (step * batch, batch))
            opt.zero_grad(set_to_none=True)
            for k in range(micro):
                x, y = data[step, k * mb:(k + 1) * mb, :-1], data[step, k * mb:(k + 1) * mb, 1:]
                with inst.micro_batch(step * batch + k * mb, mb):
                    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()) / micro
                    inst.record_loss(loss)
                    loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            s.end_step(step, loss.item())
    return model


def train_small(run_dir, make, steps=3, leaf_input=False):
    torch.manual_seed(4)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(6), requires_grad=leaf_input)
    with dgrr.open(run_dir=run_dir, seed=1, mode="full", resume=False) as s:
        dt.register_torch_state(s, model, opt)
        inst = dt.instrument(s, model, opt)
        s.resume()
        for step in range(steps):
            inst.begin_step(step, (0, 4))
            opt.zero_grad()
            loss = model(x).square().mean()
            inst.record_loss(loss)
            loss.backward()
            opt.step()
            s.end_step(step, loss.item())
    return model


def boundary_records(run_dir):
    out = subprocess.run([CLI, "inspect", str(run_dir), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # Everything but the wall-clock time of the record: name, step, seq,
    # dtype, shape, example range, fingerprints, offset in the trace.
    return [{k: v for k, v in r.items() if k != "host_time_ns"}
            for r in json.loads(out.stdout)["records"] if r["type"] == "boundary"]


# (name, views, module calls, input marks): "calls-views" is the default's
# ModuleCall with the views a torch without dgrr._torch_access gets.
RECORDERS = (("plain", False, False, True), ("views", True, False, True), ("calls-views", True, True, False),
             ("default", True, True, True))


def both(tmp_path, train, monkeypatch):
    """The models and traces of the plain recorder and of the default one
    (the other recorders' traces checked against the plain one on the way)."""
    warnings.simplefilter("ignore")   # the controls' and torch's hook warnings
    models, traces = {}, {}
    try:
        for name, views, calls, marks in RECORDERS:
            monkeypatch.setattr(dt, "_INPUT_GRAD_VIEWS", views)
            monkeypatch.setattr(dt, "_MODULE_CALLS", calls)
            dgrr._dgrr._input_marks(marks)
            models[name] = train(tmp_path / name)
            traces[name] = boundary_records(tmp_path / name)
    finally:
        dgrr._dgrr._input_marks(True)
    for name in ("views", "calls-views"):
        assert_same(tmp_path, traces["plain"], traces[name], name)
    return models["plain"], models["default"], traces["plain"], traces["default"]


def assert_same(tmp_path, plain, default, other="default"):
    assert len(plain) > 0 and len(plain) == len(default)
    for i, (a, b) in enumerate(zip(plain, default)):
        assert a == b, f"record {i} differs ({other}):\n{a}\n{b}"
    out = subprocess.run([CLI, "compare", str(tmp_path / "plain"), str(tmp_path / other), "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_gpt_with_gradient_accumulation(tmp_path, monkeypatch):
    plain_model, model, plain, default = both(tmp_path, train_gpt, monkeypatch)
    # The paths differ: the user's LayerNorm is on the full backward hook
    # path in the plain recorder and on the node path by default.
    assert len(plain_model.ln1._backward_hooks) == 1 and len(model.ln1._backward_hooks) == 0
    if dt._module_call_fits(LayerNorm(2)):
        assert "_compiled_call_impl" in vars(model.ln1) and not model.ln1._forward_hooks
    names = [r["name"] for r in default]
    assert "ln1.grad_in.0" in names and "attn.drop.grad_in.0" in names and "loss" in names
    assert_same(tmp_path, plain, default)


def test_a_class_declared_pure_takes_the_node_path_with_the_same_trace(tmp_path, monkeypatch):
    """instrument(pure=(LayerNorm,)): the user's LayerNorm class gets its
    input gradient without a view, as torch's own modules do."""
    _, _, plain, _ = both(tmp_path, train_gpt, monkeypatch)
    model = train_gpt(tmp_path / "pure", pure=LayerNorm)
    assert not model.ln1._backward_hooks
    assert_same(tmp_path, plain, boundary_records(tmp_path / "pure"), "pure")
    with dgrr.open(run_dir=tmp_path / "refused", seed=1) as s:
        for bad in (42, (LayerNorm, "ln")):
            try:
                dt.instrument(s, Gpt(), pure=bad)
            except dgrr.InvalidArgumentError as e:
                assert "pure" in str(e)
            else:
                raise AssertionError(f"pure={bad!r} was accepted")


class NormWithHookedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.norm, self.out = nn.Linear(5, 6), nn.LayerNorm(6), nn.Linear(6, 1)

    def forward(self, x):
        return self.out(self.norm(self.a(x)))


def test_a_hook_on_a_parameters_accumulator_keeps_its_place(tmp_path, monkeypatch):
    """A LayerNorm's backward node also feeds its parameters' accumulators,
    which the engine runs before the input gradient's record (the view's
    node, or dgrr's, is numbered below them). A hook there that records (as
    DDP's bucket hooks may) must keep its place: the post hook, which would
    record the input gradient first, is not used then."""
    warnings.simplefilter("ignore")

    def train(run_dir):
        torch.manual_seed(4)
        model = NormWithHookedWeight()
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(6))
        with dgrr.open(run_dir=run_dir, seed=1, mode="full", resume=False) as s:
            inst = dt.instrument(s, model)
            seen = s.declare_boundary("norm.weight.accumulated", "backward", "output", "other")
            model.norm.weight.register_post_accumulate_grad_hook(
                lambda p: s.record(seen, p.grad.detach().clone(), 0, 4))
            s.resume()
            for step in range(2):
                inst.begin_step(step, (0, 4))
                model.zero_grad()
                model(x).square().mean().backward()
                s.end_step(step, 0.0)
        return boundary_records(run_dir)

    monkeypatch.setattr(dt, "_MODULE_CALLS", False)
    views = train(tmp_path / "views")
    monkeypatch.setattr(dt, "_MODULE_CALLS", True)
    default = train(tmp_path / "default")
    names = [r["name"] for r in views]
    assert names.index("norm.weight.accumulated") < names.index("norm.grad_in.0")
    assert [r["name"] for r in default] == names
    for i, (a, b) in enumerate(zip(views, default)):
        assert a == b, f"record {i} differs:\n{a}\n{b}"


def test_keyword_inputs(tmp_path, monkeypatch):
    _, _, plain, default = both(tmp_path, lambda d: train_small(d, WithKeywords), monkeypatch)
    names = [r["name"] for r in default]
    assert "scale.grad_in.0" in names
    # torch 1.13 has no keyword forward pre-hooks: keyword inputs unrecorded there.
    assert ("scale.grad_in.scale" in names) == dt._KWARGS_HOOKS
    assert_same(tmp_path, plain, default)


def test_two_input_module(tmp_path, monkeypatch):
    plain_model, model, plain, default = both(tmp_path, lambda d: train_small(d, TwoInputs), monkeypatch)
    assert len(model.mix._backward_hooks) == 1 and len(model.norm._backward_hooks) == 0
    names = [r["name"] for r in default]
    assert "mix.grad_in.0" in names and "mix.grad_in.1" in names and "norm.grad_in.0" in names
    assert_same(tmp_path, plain, default)


def test_the_node_paths_awkward_cases(tmp_path, monkeypatch):
    _, _, plain, default = both(tmp_path, lambda d: train_small(d, Awkward, leaf_input=True), monkeypatch)
    names = [r["name"] for r in default]
    for name in ("a.grad_in.0", "same.grad_in.0", "square.grad_in.0", "pair.grad_in.0", "pair.out.1",
                 "block.square.grad_in.0", "act.grad_in.0", "norm.grad_in.0", "wide.grad_in.0"):
        assert name in names, name
    # shared is called twice a step; the checkpointed block runs its forward
    # again in the backward pass, and is recorded there again.
    assert names.count("shared.grad_in.0") == 2 * names.count("loss")
    assert names.count("block.fc.out") == 2 * names.count("loss")
    assert_same(tmp_path, plain, default)


def test_a_module_working_in_place_on_its_input(tmp_path, monkeypatch):
    """ReLU(inplace=True) rewrites its input: torch's full backward hook
    refuses that, and the gradient hook of a view of the input is lost when
    the view's history is rewritten (the views recorder records no
    `act.grad_in.0`). dgrr's node sits below the in-place operation: the
    trace is the one of the same model with ReLU(inplace=False)."""
    warnings.simplefilter("ignore")
    monkeypatch.setattr(dt, "_INPUT_GRAD_VIEWS", False)
    monkeypatch.setattr(dt, "_MODULE_CALLS", False)
    train_small(tmp_path / "plain", Awkward, leaf_input=True)
    monkeypatch.setattr(dt, "_INPUT_GRAD_VIEWS", True)
    monkeypatch.setattr(dt, "_MODULE_CALLS", True)
    model = train_small(tmp_path / "default", lambda: Awkward(inplace=True), leaf_input=True)
    if not dt._module_call_fits(model.act):
        return  # torch < 2.1: the views recorder, which loses it
    default = boundary_records(tmp_path / "default")
    assert "act.grad_in.0" in [r["name"] for r in default]
    assert_same(tmp_path, boundary_records(tmp_path / "plain"), default)


def test_decorated_or_variadic_forward_keeps_the_full_hook():
    class Variadic(nn.Module):
        def forward(self, *xs):
            return xs[0]

    class OneArgument(nn.Module):
        def forward(self, x):
            return x

    assert not dt._single_input(Variadic()) and dt._single_input(OneArgument())
    assert dt._single_input(nn.Linear(2, 2)) and not dt._single_input(Mix(2))
