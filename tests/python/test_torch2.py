"""dgrr.torch on torch 2.x: keyword inputs, torch.compile'd modules, LR
schedulers made after instrument(), torch's Dropout under data parallelism,
and the supported-version check."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import dgrr
import dgrr.torch as dt

CLI = os.environ.get("DGRR_CLI", "dgrr")
TORCH2 = dt._torch_version(torch.__version__) >= (2, 0)
needs_torch2 = pytest.mark.skipif(not TORCH2, reason="a torch 2.x feature (torch 1.13 here)")


def boundaries(run_dir, step=None):
    args = [CLI, "inspect", str(run_dir), "--json"] + (["--step", str(step)] if step is not None else [])
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [r for r in json.loads(out.stdout)["records"] if r["type"] == "boundary"]


class Gate(torch.nn.Module):
    """A module whose second tensor input is usually given by keyword."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, scale=None):
        y = self.fc(x)
        return y * scale if scale is not None else y


class WithGate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 4)
        self.scale = torch.nn.Linear(3, 4)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.proj(x), scale=torch.sigmoid(self.scale(x)))


def one_step(run_dir, model, x, compile_model=None, modules=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with dgrr.open(run_dir=run_dir, seed=1, mode="full", resume=False) as s:
        net = compile_model(model) if compile_model else model
        inst = dt.instrument(s, net, opt, modules=modules)
        s.resume()
        inst.begin_step(0, (0, x.shape[0]))
        loss = net(x).square().mean()
        inst.record_loss(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        s.end_step(0, loss.item())
    return boundaries(run_dir, 0)


@needs_torch2
def test_keyword_tensor_inputs_have_their_gradients_recorded(tmp_path):
    torch.manual_seed(0)
    model = WithGate()
    x = torch.randn(5, 3)
    recs = one_step(tmp_path / "r", model, x, modules=["gate"])
    names = [r["name"] for r in recs]
    assert "gate.out" in names and "gate.grad_in.0" in names
    assert "gate.grad_in.scale" in names, names
    # The recorded gradient is the one autograd gives the keyword input.
    scale = torch.sigmoid(model.scale(x)).detach().requires_grad_()
    h = model.proj(x).detach().requires_grad_()
    model.gate(h, scale=scale).square().mean().backward()
    rec = next(r for r in recs if r["name"] == "gate.grad_in.scale")
    assert rec["dims"] == [5, 4] and rec["dtype"] == "f32"


def compiled(model):
    return torch.compile(model, backend="eager")


@needs_torch2
def test_a_compiled_model_is_recorded_at_its_own_boundary_with_the_eager_names(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    x = torch.randn(6, 3)
    eager = {r["name"] for r in one_step(tmp_path / "eager", model, x)}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    names = [r["name"] for r in one_step(tmp_path / "compiled", model, x, compile_model=compiled)]
    # The compiled model is one leaf, `model`: its output, its input
    # gradient is not asked for (x needs none), the loss...
    assert "model.out" in names
    assert not any(n.startswith(("0.", "1.", "2.")) and n.endswith(".out") for n in names)
    # ...and its parameters, gradients and updates keep the eager names.
    params = {n for n in names if n.endswith((".weight", ".bias", ".weight.grad", ".bias.grad"))}
    assert params and params <= eager
    assert not any("_orig_mod" in n for n in names)


@needs_torch2
def test_a_module_inside_compiled_code_is_refused_by_name(tmp_path):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.compile(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()),
                                      backend="eager")
            self.head = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.head(self.body(x))

    net = Net()
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        with pytest.raises(dgrr.InvalidArgumentError,
                           match=r"module 'body.0' runs inside the torch.compile'd module 'body'"):
            dt.instrument(s, net, modules=["body.0"])
        inst = dt.instrument(s, net)
        hooked = {n for n, _ in dt._select_modules(net, None)}
        assert hooked == {"body", "head"}
        inst.remove()


def test_an_lr_scheduler_made_after_instrument_steps_and_is_counted(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    with dgrr.open(run_dir=tmp_path / "r", seed=1, mode="full", resume=False) as s:
        inst = dt.instrument(s, model, opt)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        s.resume()
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # no "step() was overridden" warning either
            for step in range(3):
                inst.begin_step(step, (step * 4, 4))
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                s.end_step(step, loss.item())
        assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 3)
    names = {r["name"] for r in boundaries(tmp_path / "r", 2)}
    assert {"weight", "weight.grad", "weight.exp_avg"} <= names


class TwoRanks:
    rank, size = 0, 2


def test_torch_dropout_under_data_parallelism_is_warned_of_with_the_fix(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1), torch.nn.Linear(3, 1))
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        inst = dt.instrument(s, model)
        with pytest.warns(dt.NondeterminismWarning, match=r"torch Dropout at 1 .*replace_dropout"):
            dt.DataParallel(inst, TwoRanks(), batch=4)
        inst.remove()
        dt.replace_dropout(model)
        inst = dt.instrument(s, model)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dt.DataParallel(inst, TwoRanks(), batch=4)


def test_an_unsupported_torch_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1.12.1'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", "import dgrr.torch"], capture_output=True, text=True, env=env)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: dgrr.torch: torch 1.12.1 is not supported; dgrr.torch needs torch "
                    + dt.SUPPORTED_TORCH)


OWN_FILES_SCRIPT = r'''
import os, sys
import numpy as np
import dgrr
run_dir, where = sys.argv[1], sys.argv[2]
w = np.ones(4, dtype=np.float32)
with dgrr.open(run_dir=run_dir, seed=5, checkpoint_every=1, total_steps=4) as s:
    s.register_state("w", w, "parameter")
    out = s.declare_boundary("w.next", "optimizer", "output", "optimizer")
    for step in range(s.resume(), 4):
        s.begin_step(step)
        w *= np.float32(0.5)
        w += np.float32(step)
        s.record(out, w, first_example=step, count=1)
        s.end_step(step, float(w[0]))
        # The script's own checkpoint file, as many scripts keep one.
        own = s.run_dir if where == "session" else run_dir
        with open(os.path.join(own, "own.ckpt"), "w") as f:
            f.write(f"step {step} w {w.tolist()}\n")
        if s.should_checkpoint(step):
            s.checkpoint(step)
        if s.should_stop(step):
            break
'''


def tree_bytes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


@pytest.mark.parametrize("where", ["session", "argv"])
def test_a_replay_leaves_the_original_run_as_it_was_or_names_what_changed(tmp_path, where):
    script = tmp_path / "own_files.py"
    script.write_text(OWN_FILES_SCRIPT)
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, str(script), str(run), where], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    before = tree_bytes(run)
    assert "own.ckpt" in before and before["own.ckpt"].startswith(b"step 3 ")
    r = subprocess.run([CLI, "replay", str(run), "--from", "1", "--to", "2", "-q"],
                       capture_output=True, text=True)
    if where == "session":
        # Written where the session says: the original run is byte for byte as it was.
        assert r.returncode == 0, r.stdout + r.stderr
        assert tree_bytes(run) == before
    else:
        # Written into the directory its command line names: the replay
        # overwrote the original's own file, and says so (exit 5, the file named).
        assert r.returncode == 5, r.stdout + r.stderr
        assert "own.ckpt (modified)" in r.stderr and "changed the run it replays" in r.stderr, r.stderr
