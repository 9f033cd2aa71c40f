"""dgrr.torch on a tiny MLP (tests/python/mlp_train.py, 6 steps of Adam,
checkpoints after steps 1, 3 and 5): identical runs, thread counts, a
planted one-bit bug, SIGKILL and resume, and bad use."""

import copy
import gc
import io
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import warnings
import weakref

import numpy as np
import pytest
import torch

import dgrr
import dgrr.torch

CLI = os.environ.get("DGRR_CLI", "dgrr")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp_train.py")


def train(run_dir, *args, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, SCRIPT, str(run_dir), "--ckpt-every", "2", *args],
                          capture_output=True, text=True, env=full_env)


def train_ok(run_dir, *args):
    r = train(run_dir, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def compare(a, b):
    return subprocess.run([CLI, "compare", str(a), str(b)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run with one intra-op thread, and its final state."""
    root = tmp_path_factory.mktemp("reference")
    train_ok(root / "run", "--threads", "1", "--params-out", str(root / "final.npz"))
    return root


def load(path):
    with np.load(path) as f:
        return {k: f[k].tobytes() for k in f.files}


def test_two_identical_runs_compare_equal(reference, tmp_path):
    train_ok(tmp_path / "b", "--threads", "1", "--params-out", str(tmp_path / "final.npz"))
    r = compare(reference / "run", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout
    # Every boundary of all six steps, both directions of the model.
    m = re.search(r"certified prefix: (\d+) pairs, 6 steps", r.stdout)
    assert m and int(m.group(1)) > 100, r.stdout
    assert load(reference / "final.npz") == load(tmp_path / "final.npz")


def test_one_and_two_intra_op_threads_compare_equal(reference, tmp_path):
    train_ok(tmp_path / "t2", "--threads", "2")
    env = json.loads((tmp_path / "t2" / "rank0.env.json").read_text())
    assert env["program"]["torch.controls"]["torch.intra_op_threads"]["value"] == "2"
    r = compare(reference / "run", tmp_path / "t2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout


def test_tensors_read_through_python_record_what_torchs_cpp_object_gives(reference, tmp_path):
    # A build with dgrr._torch_access (Debian's torch and libtorch-dev) reads
    # tensors from their C++ object; the Python path, which any other torch
    # takes, must record the same bits.
    if os.path.exists(os.path.join(os.path.dirname(dgrr.__file__), "_torch_build.py")):
        assert dgrr.torch.fast_tensor_access
    r = train(tmp_path / "py", "--threads", "1", "--params-out", str(tmp_path / "final.npz"),
              env={"DGRR_TORCH_ACCESS": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    env = json.loads((tmp_path / "py" / "rank0.env.json").read_text())
    assert env["program"]["dgrr.tensor_access"] == "python"
    reference_env = json.loads((reference / "run" / "rank0.env.json").read_text())
    assert reference_env["program"]["dgrr.tensor_access"] == (
        "c++" if dgrr.torch.fast_tensor_access else "python")
    r = compare(reference / "run", tmp_path / "py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"certified prefix: \d+ pairs, 6 steps", r.stdout), r.stdout
    assert load(reference / "final.npz") == load(tmp_path / "final.npz")


def test_a_flipped_bit_is_named_at_its_module_and_step(reference, tmp_path):
    train_ok(tmp_path / "flip", "--threads", "1", "--flip-bit", "fc2@3")
    r = compare(reference / "run", tmp_path / "flip")
    assert r.returncode == 4, r.stdout + r.stderr
    first = [l for l in r.stdout.splitlines() if l.startswith("first divergence:")]
    assert len(first) == 1, r.stdout
    assert "step 3 rank 0 forward output fc2.out f32[16,32]" in first[0]
    # Everything before it (steps 0-2 and step 3's fc1, act) was equal.
    assert re.search(r"certified prefix: \d+ pairs, 3 steps", r.stdout), r.stdout


def test_sigkill_then_the_same_command_resumes_bitwise(reference, tmp_path):
    run = tmp_path / "killed"
    final = str(tmp_path / "final.npz")
    # Killed by itself right after step 4: the newest checkpoint is step 3's.
    r = train(run, "--threads", "1", "--params-out", final,
              env={"DGRR_TEST_KILL_AFTER_STEP": "4"})
    assert r.returncode == -signal.SIGKILL, r.stdout + r.stderr
    assert not os.path.exists(final)
    r = train_ok(run, "--threads", "1", "--params-out", final)
    assert "started at step 4, ended after step 5" in r.stdout
    assert load(reference / "final.npz") == load(final)
    r = compare(reference / "run", run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout


def test_dgrr_replays_a_range_of_a_python_run(tmp_path):
    # The script is re-launched from launch.json under a control file:
    # restored from the checkpoint of step 1, every record verified through 4.
    train_ok(tmp_path / "run", "--threads", "1")
    r = subprocess.run([CLI, "replay", str(tmp_path / "run"), "--from", "2", "--to", "4"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replayed steps 2..4" in r.stdout and "from the checkpoint of step 1" in r.stdout, r.stdout
    assert re.search(r": \d+ boundaries and 3 step ends match the recorded traces", r.stdout), r.stdout


def test_dgrr_bisect_names_a_flipped_bit_in_a_python_run(tmp_path):
    train_ok(tmp_path / "good", "--threads", "1")
    train_ok(tmp_path / "bad", "--threads", "1", "--flip-bit", "fc2@3")
    r = subprocess.run([CLI, "bisect", "--good", str(tmp_path / "good"), "--bad", str(tmp_path / "bad"),
                        "--json", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 4, r.stdout + r.stderr
    first = json.loads(r.stdout)["divergence"]["b"]
    assert (first["step"], first["name"]) == (3, "fc2.out"), r.stdout


def test_the_launch_record_names_the_script(reference):
    launch = json.loads((reference / "run" / "launch.json").read_text())
    assert launch["argv"][:2] == [sys.executable, SCRIPT]
    assert launch["script"] == SCRIPT
    assert int(launch["script_xxh3"], 16) == dgrr.file_digest(SCRIPT)


# ---- bad use, in process ----------------------------------------------------
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


@pytest.fixture
def session(tmp_path):
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        yield s


def test_instrumenting_twice_is_refused(session):
    model = Tiny()
    inst = dgrr.torch.instrument(session, model)
    with pytest.raises(dgrr.FailedPreconditionError, match="already instrumented"):
        dgrr.torch.instrument(session, model)
    inst.remove()
    dgrr.torch.instrument(session, model).remove()


def train_steps(session, model, optimizer, x, steps, inst=None, after_checkpoint=None):
    """Steps of a loss that is the mean square of the model's output on x,
    checkpointed where the session says (then after_checkpoint(step))."""
    for step in steps:
        (inst or session).begin_step(step)
        loss = model(x).square().mean()
        if inst is not None:
            inst.record_loss(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        session.end_step(step, loss.item())
        if session.should_checkpoint(step):
            session.checkpoint(step)
            if after_checkpoint is not None:
                after_checkpoint(step)


class _CudaLookalike:
    """What the binding sees of a CUDA tensor, without a GPU: a torch-like
    object whose device is cuda:0 (its pointer is never read on the host)."""

    class device:  # noqa: N801 (mirrors torch.Tensor.device)
        type = "cuda"
        index = 0

    layout = "torch.strided"
    dtype = torch.float32
    shape = (4,)

    def data_ptr(self):
        return 0x1000

    def is_contiguous(self):
        return True

    def element_size(self):
        return 4


def test_cuda_tensors_are_registered_on_their_stream_and_never_read_on_the_host(
        session, monkeypatch):
    # dgrr.fingerprint reads the bytes on the host: a CUDA tensor is refused
    # by name there, and never dereferenced.
    with pytest.raises(dgrr.InvalidArgumentError, match="CUDA tensors can be recorded and registered"):
        dgrr.fingerprint(_CudaLookalike())
    if torch.cuda.is_available():
        pytest.skip("a real GPU: test_cuda_state_resumes_bitwise covers it (the lookalike's "
                    "pointer would be dereferenced on the device)")
    # Registered state is placed on torch's current stream of its device and
    # handed to the session, whose device work needs a GPU: without one the
    # first fingerprint of the parameters (end of step) says so.
    streams = []
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: streams.append(device) or type("S", (), {"cuda_stream": 0}))
    session.register_state("w", _CudaLookalike(), "parameter")
    assert len(streams) == 1
    session.resume()
    session.begin_step(0)
    with pytest.raises(dgrr.Error, match="CUDA"):
        session.end_step(0, 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs torch with CUDA and a GPU")
def test_cuda_state_resumes_bitwise(tmp_path):
    """A model on the GPU: its parameters and AdamW state are checkpointed from
    the device and a resume puts the same bits back there."""
    def run(steps):
        torch.manual_seed(3)
        model = Tiny().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(8, 3, device="cuda")
        with dgrr.open(run_dir=tmp_path / "gpu", seed=3, checkpoint_every=2,
                       total_steps=steps) as s:
            dgrr.torch.register_torch_state(s, model, opt, generators=("torch",))
            train_steps(s, model, opt, x, range(s.resume(), steps))
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, opt

    done, _ = run(4)                     # checkpoints after steps 1 and 3
    resumed, opt = run(4)                # resumes after step 3: restores, runs nothing
    for k in done:
        assert torch.equal(done[k], resumed[k]), k
    assert all(st["exp_avg"].is_cuda for st in opt.state.values())


def test_unsupported_tensors_are_refused(session):
    b = session.declare_boundary("x", "forward", "output", "other")
    session.resume()
    session.begin_step(0)
    with pytest.raises(dgrr.InvalidArgumentError, match="device 'meta'"):
        session.record(b, torch.empty(3, device="meta"))
    with pytest.raises(dgrr.InvalidArgumentError, match="non-contiguous"):
        session.record(b, torch.zeros(4, 4).t())
    with pytest.raises(dgrr.InvalidArgumentError, match="torch.complex64"):
        session.record(b, torch.zeros(4, dtype=torch.complex64))
    with pytest.raises(dgrr.InvalidArgumentError, match="torch.int16"):
        session.record(b, torch.zeros(4, dtype=torch.int16))
    # Supported without NumPy in between: bfloat16 and tensors that need grad.
    x = torch.ones(4, dtype=torch.bfloat16)
    assert session.record(b, x, fingerprint=True) == dgrr.fingerprint(x)
    w = torch.ones(2, 3, requires_grad=True)
    assert dgrr.fingerprint(w) == dgrr.fingerprint(np.ones((2, 3), np.float32))
    session.end_step(0, 0.0)


def test_the_fast_path_reads_what_the_general_one_reads(session):
    """record() reads CPU tensors through a fast path; dgrr.fingerprint()
    through the general one: the same bytes, dtypes, shapes and offsets."""
    b = session.declare_boundary("x", "forward", "output", "other")
    session.resume()
    session.begin_step(0)
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) - 7.5
    tensors = [base.to(d) for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                    torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool)]
    tensors += [torch.nn.Parameter(base.clone()), base[1], base.reshape(-1)[5:], base[0, 0, 0],
                torch.zeros(0, 3)]
    for t in tensors:
        for _ in range(2):   # the first of a dtype may take the general path
            assert session.record(b, t, fingerprint=True) == dgrr.fingerprint(t), t
    # A different tensor of the same shape differs: the fingerprint reads the data.
    assert session.record(b, base + 1, fingerprint=True) != dgrr.fingerprint(base)
    session.end_step(0, 0.0)


def recorded(run_dir):
    """(name, shape, (xor64, xxh3)) of each boundary record of rank 0, in order."""
    out = subprocess.run([CLI, "inspect", str(run_dir), "--type", "boundary"],
                         capture_output=True, text=True, check=True).stdout
    pattern = (r"boundary step=\d+ seq=\d+ \w+ \w+ (\S+) \w+\[([0-9,]*)\] .*?"
               r"xor64=(0x[0-9a-f]+) xxh3=(0x[0-9a-f]+)")
    return [(m[1], m[2], (int(m[3], 16), int(m[4], 16))) for m in re.finditer(pattern, out)]


def test_a_record_plan_can_be_the_first_thing_recorded(tmp_path):
    # In a fresh process no tensor has been through the binding's Python
    # path yet (a plan once read an unset attribute name there and crashed).
    code = textwrap.dedent(f"""
        import torch, dgrr, dgrr.torch
        with dgrr.open(run_dir={str(tmp_path / "r")!r}, seed=1) as s:
            b = s.declare_boundary("w", "optimizer", "output", "optimizer")
            s.resume()
            plan = s.record_plan([(b, torch.ones(3))])
            s.begin_step(0)
            plan.record(0, 1)
            s.end_step(0, 0.0)
        print("recorded")
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "recorded" in r.stdout, r.stdout + r.stderr


def test_a_record_plan_reads_its_tensors_again_each_time(tmp_path):
    """A RecordPlan keeps each tensor's view, so it must notice what can
    change under the same tensor object: values, a new storage and shape,
    an in-place transpose (recorded from a contiguous copy), a shrink, a
    dtype reinterpreted in place."""
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(4)
    expected = []
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        ba = s.declare_boundary("a", "optimizer", "output", "optimizer")
        bb = s.declare_boundary("b", "optimizer", "output", "optimizer")
        s.resume()
        plan = s.record_plan([(ba, a), (bb, b)])
        assert len(plan) == 2

        def step(i):
            s.begin_step(i)
            plan.record(i, 1)
            s.end_step(i, 0.0)
            for name, t in (("a", a), ("b", b)):
                shape = ",".join(str(d) for d in t.shape)
                expected.append((name, shape, dgrr.fingerprint(t.contiguous())))

        step(0)
        a.mul_(2)
        step(1)
        a.data = torch.full((3, 5), 0.5)
        step(2)
        a.t_()
        step(3)
        b.resize_(2)
        step(4)
        b.data = b.data.view(torch.int32)  # same pointer, shape and contiguity
        step(5)
        with pytest.raises(dgrr.InvalidArgumentError, match="each entry is a"):
            s.record_plan([(ba,)])
        with pytest.raises(dgrr.InvalidArgumentError, match="torch.complex64"):
            s.record_plan([(ba, torch.zeros(2, dtype=torch.complex64))])
    assert recorded(tmp_path / "r") == expected
    out = subprocess.run([CLI, "inspect", str(tmp_path / "r"), "--type", "boundary"],
                         capture_output=True, text=True, check=True).stdout
    dtypes_of_b = re.findall(r"boundary step=(\d+) seq=\d+ \w+ \w+ b (\w+)\[", out)
    assert dtypes_of_b[-2:] == [("4", "f32"), ("5", "i32")]


def test_input_gradients_are_the_same_however_their_hook_is_installed(tmp_path, monkeypatch):
    """A view's gradient hook is installed through torch's hook dict when a
    probe shows that works, else by register_hook: the same records."""
    runs = []
    for direct in (True, False):
        monkeypatch.setattr(dgrr.torch, "_direct_hooks_work", direct)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
        run = tmp_path / f"direct-{direct}"
        with dgrr.open(run_dir=run, seed=1) as s:
            inst = dgrr.torch.instrument(s, model)
            s.resume()
            for step in range(2):
                inst.begin_step(step, (step, 1))
                model(torch.full((1, 3), 0.25 + step)).square().sum().backward()
                s.end_step(step, 0.0)
        runs.append(recorded(run))
    assert runs[0] == runs[1]
    assert [name for name, _, _ in runs[0][:5]] == [
        "0.out", "1.out", "2.out", "2.grad_in.0", "1.grad_in.0"]


def test_the_package_answers_for_its_modules_as_the_one_module_did(monkeypatch):
    """dgrr.torch is a package of modules (python/dgrr/torch/); scripts and
    tests still reach the private names through it. An assignment through
    dgrr.torch rebinds the name in the module that defines and reads it, and
    classes keep the name they had, dgrr.torch.<name>, in pickles."""
    from dgrr.torch import recorder
    linear = torch.nn.Linear(2, 2)
    assert dgrr.torch._single_input(linear)
    monkeypatch.setattr(dgrr.torch, "_INPUT_GRAD_VIEWS", False)
    assert recorder._INPUT_GRAD_VIEWS is False and not dgrr.torch._single_input(linear)
    monkeypatch.setattr(dgrr.torch, "_single_input", lambda module: "replaced")
    assert recorder._single_input(linear) == "replaced"
    monkeypatch.undo()
    assert recorder._INPUT_GRAD_VIEWS is True and recorder._single_input(linear) is True
    assert dgrr.torch._optimizer_tensors is dgrr.torch.state._optimizer_tensors
    assert "_MirroredState" in dir(dgrr.torch)
    with pytest.raises(AttributeError):
        dgrr.torch.no_such_name
    assert all(hasattr(dgrr.torch, name) for name in dgrr.torch.__all__)
    for cls in (dgrr.torch.Dropout, dgrr.torch.Instrumentation, dgrr.torch._Mark):
        assert cls.__module__ == "dgrr.torch"
    data = pickle.dumps(dgrr.torch.Dropout(0.25, layer=2))
    assert b"dgrr.torch" in data and b"dgrr.torch.randomness" not in data
    assert pickle.loads(data).layer == 2


class LinearThenBilinear(torch.nn.Module):
    """A single-input module (its input gradient caught through a view) and
    a two-input one (through a full backward hook)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.pair = torch.nn.Bilinear(3, 3, 2)

    def forward(self, x):
        h = self.fc(x)
        return self.pair(h, x)


def one_recorded_step(run_dir, with_copies):
    """One recorded step of LinearThenBilinear; with_copies: a deepcopy and
    a torch.save/torch.load copy of the instrumented model run forward and
    backward inside the step too."""
    torch.manual_seed(3)
    model = LinearThenBilinear()
    x = torch.randn(4, 3, requires_grad=True)
    with dgrr.open(run_dir=run_dir, seed=1) as s:
        inst = dgrr.torch.instrument(s, model)
        s.resume()
        inst.begin_step(0, (0, 4))
        loss = model(x).square().mean()
        inst.record_loss(loss)
        loss.backward()
        if with_copies:
            saved = io.BytesIO()
            torch.save(model, saved)
            saved.seek(0)
            copies = [copy.deepcopy(model), torch.load(saved, weights_only=False)]  # a whole model (torch >= 2.6 loads weights only by default)
            for other in copies:
                other(x).square().mean().backward()
            # The copies are not instrumented: each may be, on its own.
            for other in copies:
                dgrr.torch.instrument(s, other, prefix="copy.").remove()
        s.end_step(0, loss.item())
        inst.remove()


def test_copies_of_an_instrumented_model_record_nothing(tmp_path):
    """An EMA model or a saved one carries the hooks of the model it was
    copied from: they must neither fail the copy (a hook that cannot be
    pickled or deep-copied) nor record the copy's tensors under the
    original's boundaries."""
    one_recorded_step(tmp_path / "a", with_copies=False)
    one_recorded_step(tmp_path / "b", with_copies=True)
    r = compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout


def steps_with_evaluations(run_dir, evaluate):
    """Three recorded steps of LinearThenBilinear; evaluate: forward passes
    between the steps (after end_step, before begin_step), with and without
    torch.no_grad, as a validation loop makes them."""
    torch.manual_seed(3)
    model = LinearThenBilinear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    with dgrr.open(run_dir=run_dir, seed=1) as s:
        inst = dgrr.torch.instrument(s, model, optimizer)
        s.resume()
        for step in range(3):
            if evaluate:
                model.eval()
                with torch.no_grad():
                    model(torch.ones(5, 3))
                model(torch.ones(2, 3, requires_grad=True)).sum().backward()
                model.train()
            inst.begin_step(step, (4 * step, 4))
            loss = model(x).square().mean()
            inst.record_loss(loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            s.end_step(step, loss.item())
        inst.remove()


def test_forward_passes_between_steps_are_not_recorded(tmp_path):
    """An evaluation between steps is not part of any step: before, its
    outputs were recorded into the step before it, under the training
    batch's examples, and compare could pair nothing past them."""
    steps_with_evaluations(tmp_path / "a", evaluate=False)
    steps_with_evaluations(tmp_path / "b", evaluate=True)
    r = compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no_counterpart" not in r.stdout, r.stdout
    assert re.search(r"certified prefix: \d+ pairs, 3 steps", r.stdout), r.stdout


def test_state_moved_after_registration_is_refused_by_name(tmp_path):
    """model.double() gives each Parameter new memory and frees the old,
    which the session would fingerprint, checkpoint and restore into: the
    next end_step (parameters), checkpoint or resume names the state."""
    model = Tiny()
    with dgrr.open(run_dir=tmp_path / "a", seed=1) as s:
        dgrr.torch.register_torch_state(s, model)
        model.double()
        with pytest.raises(dgrr.FailedPreconditionError,
                           match=r"resume: state 'model.fc.weight' is no longer in the memory"):
            s.resume()
    model = Tiny()
    with dgrr.open(run_dir=tmp_path / "b", seed=1) as s:
        dgrr.torch.register_torch_state(s, model)
        s.resume()
        s.begin_step(0)
        model.fc.weight.data = torch.zeros(2, 3)   # same dtype and size, other memory
        with pytest.raises(dgrr.FailedPreconditionError,
                           match=r"end_step: state 'model.fc.weight' is no longer in the memory"):
            s.end_step(0, 0.0)
        with pytest.raises(dgrr.FailedPreconditionError, match=r"checkpoint: state 'model.fc"):
            s.checkpoint(0)


def test_two_models_in_one_session_need_their_own_prefixes(tmp_path):
    """A GAN's generator and discriminator are both Tiny-shaped: without a
    prefix their boundaries ("fc.out", "loss"...) would share names."""
    generator, discriminator = Tiny(), Tiny()
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        g = dgrr.torch.instrument(s, generator, prefix="generator.")
        with pytest.raises(dgrr.InvalidArgumentError, match=r"another model is instrumented .* prefix 'generator.'"):
            dgrr.torch.instrument(s, discriminator, prefix="generator.")
        d = dgrr.torch.instrument(s, discriminator, prefix="discriminator.")
        s.resume()
        g.begin_step(0, (0, 1))
        loss = discriminator(generator(torch.ones(1, 3, requires_grad=True)).repeat(1, 2)[:, :3]).sum()
        d.record_loss(loss)
        loss.backward()
        s.end_step(0, 0.0)
        d.remove()
        # A removed Instrumentation frees its prefix.
        dgrr.torch.instrument(s, Tiny(), prefix="discriminator.").remove()
        g.remove()
    listing = subprocess.run([CLI, "inspect", str(tmp_path / "r" / "rank0.trace")],
                             capture_output=True, text=True).stdout
    names = set(re.findall(r'name +id=\d+ .*"(.*)"', listing))
    assert {"generator.fc.out", "generator.fc.grad_in.0", "discriminator.fc.out",
            "discriminator.fc.grad_in.0", "discriminator.loss"} <= names, listing


def test_an_optimizer_instrumented_but_not_registered_is_warned_of(tmp_path):
    model = Tiny()
    optimizer = torch.optim.Adam(model.parameters())
    with dgrr.open(run_dir=tmp_path / "a", seed=1) as s:
        dgrr.torch.register_torch_state(s, model, optimizer)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*not registered as state")
            dgrr.torch.instrument(s, model, optimizer).remove()
        other = torch.optim.Adam(model.parameters())   # made again after registering
        with pytest.warns(dgrr.torch.NondeterminismWarning,
                          match=r"the optimizer instrumented \(Adam\) is not registered as state"):
            dgrr.torch.instrument(s, model, other).remove()


@pytest.mark.parametrize("make", [
    lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0, factor=0.5),
    lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10),
    lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
        torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=2),
        torch.optim.lr_scheduler.CosineAnnealingLR(o, 8)], milestones=[2]),
], ids=["ReduceLROnPlateau", "OneCycleLR", "SequentialLR"])
def test_schedulers_are_checkpointed_and_resumed(tmp_path, make):
    """Two steps and a checkpoint, then a fresh model, optimizer and
    scheduler resumed from it: the scheduler's state_dict is the first's.
    (ReduceLROnPlateau makes part of its state in its first step.)"""
    def run(steps):
        torch.manual_seed(0)
        model = Tiny()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        scheduler = make(optimizer)
        with dgrr.open(run_dir=tmp_path / "r", seed=1, checkpoint_every=2, total_steps=4) as s:
            dgrr.torch.register_torch_state(s, model, optimizer, scheduler)
            start = s.resume()
            for step in range(start, steps):
                s.begin_step(step)
                loss = model(torch.ones(2, 3)).square().sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    scheduler.step(loss.item())
                else:
                    scheduler.step()
                s.end_step(step, loss.item())
                if s.should_checkpoint(step):
                    s.checkpoint(step)
        return scheduler.state_dict(), optimizer.param_groups[0]["lr"]

    saved, lr = run(2)
    resumed, resumed_lr = run(2)   # resumes after step 1: no step left to run
    keep = lambda d: {k: v for k, v in d.items() if not callable(v) and k != "_schedulers"}
    assert keep(resumed) == keep(saved)
    assert resumed_lr == lr


class StructuredOutputs(torch.nn.Module):
    """An LSTM, whose output is (output, (h, c)), and a module returning a
    dict with a nested tuple, as Hugging Face models return ModelOutputs."""

    class Heads(torch.nn.Module):
        def forward(self, x):
            return {"logits": x * 2, "extra": (x + 1, None, x.sum())}

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(3, 4, batch_first=True)
        self.heads = StructuredOutputs.Heads()

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.heads(out)["logits"]


def test_nested_and_dict_outputs_are_recorded_by_path(tmp_path):
    model = StructuredOutputs()
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        inst = dgrr.torch.instrument(s, model)
        s.resume()
        inst.begin_step(0, (0, 2))
        model(torch.ones(2, 5, 3)).sum().backward()
        s.end_step(0, 0.0)
        inst.remove()
    listing = subprocess.run([CLI, "inspect", str(tmp_path / "r" / "rank0.trace")],
                             capture_output=True, text=True).stdout
    names = set(re.findall(r'name +id=\d+ .*"(.*)"', listing))
    # Before, h and c (nested) and every dict entry went unrecorded.
    assert {"lstm.out.0", "lstm.out.1.0", "lstm.out.1.1", "heads.out.logits",
            "heads.out.extra.0", "heads.out.extra.2"} <= names, sorted(names)


def test_a_model_used_after_its_session_closed_runs_unrecorded(tmp_path):
    """Evaluating or fine-tuning a model after the training's `with
    dgrr.open(...)` block raised "the dgrr session is closed" from its hooks."""
    model = LinearThenBilinear()
    optimizer = torch.optim.Adam(model.parameters())
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        inst = dgrr.torch.instrument(s, model, optimizer)
        s.resume()
        inst.begin_step(0, (0, 2))
        loss = model(torch.ones(2, 3)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        s.end_step(0, loss.item())
    assert not s.in_step
    with torch.no_grad():
        model(torch.ones(2, 3))
    loss = model(torch.ones(2, 3, requires_grad=True)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    inst.remove()


def test_hooks_do_not_keep_the_model_alive(session):
    model = Tiny()
    alive = weakref.ref(model)
    inst = dgrr.torch.instrument(session, model)
    session.resume()
    inst.begin_step(0, (0, 1))
    model(torch.ones(1, 3, requires_grad=True)).sum().backward()
    session.end_step(0, 0.0)
    del model, inst
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("mode, forward_hooked, backward_hooked", [
    ("full", True, True), ("trusted", False, True), ("sdc", False, False), ("off", False, False)])
def test_only_what_the_mode_records_is_hooked(tmp_path, mode, forward_hooked, backward_hooked):
    """Hooks cost time on every call: a Linear's output is not recorded in
    trusted mode, nothing forward or backward in sdc and off."""
    model = Tiny()
    with dgrr.open(run_dir=tmp_path / "r", seed=1, mode=mode) as s:
        inst = dgrr.torch.instrument(s, model)
        # On torch >= 2.1 a recorded module's call goes through dgrr's
        # ModuleCall (its _compiled_call_impl), torch's hooks before that.
        call = model.fc.__dict__.get("_compiled_call_impl")
        if dgrr.torch._module_call_fits(Tiny().fc):
            assert (call is not None) == (forward_hooked or backward_hooked)
            assert not model.fc._forward_hooks and not model.fc._forward_pre_hooks
        else:
            assert call is None
            assert bool(model.fc._forward_hooks) == forward_hooked
            # The input gradient: a pre-hook that wraps the input in a view.
            assert bool(model.fc._forward_pre_hooks) == backward_hooked
        assert not model.fc._backward_hooks
        inst.remove()
        assert not model.fc._forward_hooks and not model.fc._forward_pre_hooks
        assert "_compiled_call_impl" not in model.fc.__dict__


def _boundary_records(run_dir):
    out = subprocess.run([CLI, "inspect", str(run_dir), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [r for r in json.loads(out.stdout)["records"] if r["type"] == "boundary"]


def test_hooks_of_others_and_the_module_call(tmp_path):
    """A module with a forward hook or pre-hook placed before instrument()
    keeps torch's hooks (dgrr's run after them, as before); on one without,
    hooks placed later run inside dgrr's ModuleCall: a pre-hook after the
    input is marked (its gradient is the module's input gradient, through
    the hook), a forward hook before the output is recorded (the output
    recorded is the one the caller gets)."""
    early, late = Tiny(), Tiny()
    calls = []
    early.fc.register_forward_pre_hook(lambda m, args: calls.append("early pre"))
    with dgrr.open(run_dir=tmp_path / "r", seed=1, mode="full") as s:
        inst = dgrr.torch.instrument(s, early, prefix="early.")
        other = dgrr.torch.instrument(s, late, prefix="late.")
        assert "_compiled_call_impl" not in vars(early.fc) and early.fc._forward_hooks
        if not dgrr.torch._module_call_fits(Tiny().fc):
            return  # torch < 2.1: hooks everywhere
        assert "_compiled_call_impl" in vars(late.fc)
        late.fc.register_forward_pre_hook(lambda m, args: (calls.append("late pre"), (args[0] * 2,))[1])
        late.fc.register_forward_hook(lambda m, args, out: (calls.append("late post"), out + 1)[1])
        returned = s.declare_boundary("returned", "forward", "output", "other")
        s.resume()
        inst.begin_step(0, (0, 2))
        x = torch.ones(2, 3, requires_grad=True)
        early(x).sum().backward()
        out = late(x)
        s.record(returned, out.detach(), 0, 2)
        out.sum().backward()
        s.end_step(0, 0.0)
        inst.remove()
        other.remove()
    assert calls == ["early pre", "late pre", "late post"]
    with torch.no_grad():
        assert torch.equal(out, torch.nn.functional.linear(2 * torch.ones(2, 3), late.fc.weight, late.fc.bias) + 1)
    records = {r["name"]: r for r in _boundary_records(tmp_path / "r")}
    assert records["late.fc.out"]["xxh3"] == records["returned"]["xxh3"]
    assert {"early.fc.out", "early.fc.grad_in.0", "late.fc.grad_in.0"} <= set(records)


def test_a_data_parallel_replica_runs_its_own_parameters_unrecorded(session):
    """nn.DataParallel's replicas copy the module's __dict__; dgrr's
    ModuleCall (called without `self`) must not come with it, or a replica
    would run the original module on its inputs."""
    model = Tiny()
    inst = dgrr.torch.instrument(session, model)
    replica = model.fc._replicate_for_data_parallel()   # what replicate() does per device
    assert "_compiled_call_impl" not in vars(replica)
    replica._parameters = {"weight": torch.full((2, 3), 2.0), "bias": torch.zeros(2)}
    with torch.no_grad():
        assert torch.equal(replica(torch.ones(1, 3)), torch.full((1, 2), 6.0))
    if dgrr.torch._module_call_fits(Tiny().fc):
        assert "_compiled_call_impl" in vars(model.fc)
    inst.remove()


def test_examples_are_checked_when_set(session):
    inst = dgrr.torch.instrument(session, Tiny())
    inst.examples = (5, 3)
    assert inst.examples == (5, 3)
    for bad in ((-1, 2), (0, -1), (0, 2 ** 32)):
        with pytest.raises(dgrr.InvalidArgumentError, match="examples"):
            inst.examples = bad
    assert inst.examples == (5, 3)
    inst.remove()


def test_an_unsupported_module_name_or_optimizer_is_refused(session):
    model = Tiny()
    with pytest.raises(dgrr.InvalidArgumentError, match="no module named 'fc9'"):
        dgrr.torch.instrument(session, model, modules=["fc9"])
    asgd = torch.optim.ASGD(model.parameters(), lr=0.1)
    with pytest.raises(dgrr.InvalidArgumentError, match="ASGD is not supported"):
        dgrr.torch.register_torch_state(session, model, asgd)
    # torch 1.13's differentiable RMSprop insists on an int step.
    rmsprop = torch.optim.RMSprop(model.parameters(), lr=0.1, differentiable=True)
    with pytest.raises(dgrr.InvalidArgumentError, match="differentiable RMSprop"):
        dgrr.torch.materialize_optimizer_state(rmsprop)
    # SGD's momentum buffers are the clones its first step makes: they
    # cannot be made early, only registered (register_torch_state).
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(dgrr.InvalidArgumentError, match="SGD with momentum"):
        dgrr.torch.materialize_optimizer_state(sgd)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_updates_are_recorded_and_its_state_registered(tmp_path, momentum):
    """torch 1.13's SGD keeps momentum_buffer=None without momentum (no state,
    not an error); with momentum its buffers are checkpointed once made."""
    torch.manual_seed(0)
    model = Tiny()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    with dgrr.open(run_dir=tmp_path / "r", seed=1, checkpoint_every=2, total_steps=3) as s:
        dgrr.torch.register_torch_state(s, model, sgd, generators=False)
        inst = dgrr.torch.instrument(s, model, sgd)
        s.resume()
        saved = {}

        def keep_step_1_buffer(step):
            if momentum and step == 1:
                saved[1] = sgd.state[model.fc.weight]["momentum_buffer"].clone()

        train_steps(s, model, sgd, torch.ones(4, 3), range(3), inst, keep_step_1_buffer)
    import h5py
    with h5py.File(tmp_path / "r" / "ckpt" / "step-00000001.rank-0.h5", "r") as f:
        rank0 = f["ranks/0"]
        names = set(rank0)
        if momentum:
            assert list(rank0["optimizer.momentum_buffer_present"][()]) == [1, 1]
            assert rank0["optimizer.fc.weight.momentum_buffer"][()].tobytes() == saved[1].numpy().tobytes()
    if not momentum:
        assert not any("momentum_buffer" in n for n in names), sorted(names)


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.Adam(ps, lr=0.1),
    lambda ps: torch.optim.AdamW(ps, lr=0.1, amsgrad=True),
    lambda ps: torch.optim.Adamax(ps, lr=0.1),
    lambda ps: torch.optim.NAdam(ps, lr=0.1),
    lambda ps: torch.optim.RAdam(ps, lr=0.1),
    lambda ps: torch.optim.RMSprop(ps, lr=0.1, momentum=0.5, centered=True),
], ids=["Adam", "AdamW-amsgrad", "Adamax", "NAdam", "RAdam", "RMSprop"])
def test_optimizer_state_made_early_matches_the_lazy_one(make):
    """The eagerly created state gives the same numbers, bitwise, as the
    state torch makes inside its first step, and has its keys, shapes and
    dtypes (RMSprop's step aside: a tensor for torch 1.13's int)."""
    results, layouts = [], []
    for eager in (False, True):
        torch.manual_seed(3)
        model = Tiny()
        opt = make(model.parameters())
        if eager:
            dgrr.torch.materialize_optimizer_state(opt)
        for step in range(3):
            g = torch.Generator().manual_seed(step)
            loss = model(torch.randn(5, 3, generator=g)).square().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        results.append([p.detach().numpy().tobytes() for p in model.parameters()])
        layouts.append([(k, tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (k, "int")
                        for st in opt.state.values() for k, v in st.items()])
    assert results[0] == results[1]
    if not isinstance(opt, torch.optim.RMSprop) or torch.__version__ >= "2":
        assert layouts[0] == layouts[1]
