"""Resume, planted bugs and the determinism record of a torch run
(tests/python/mlp_train.py, 6 steps, checkpoints after steps 1, 3 and 5;
killed runs die right after step 4 and resume from step 3's checkpoint)."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

CLI = os.environ.get("DGRR_CLI", "dgrr")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp_train.py")
FULL = ["--dropout", "torch", "--global-rng", "--scheduler", "--sampler"]


def train(run_dir, *args, kill_after=None):
    env = dict(os.environ)
    if kill_after is not None:
        env["DGRR_TEST_KILL_AFTER_STEP"] = str(kill_after)
    r = subprocess.run([sys.executable, SCRIPT, str(run_dir), "--ckpt-every", "2", *args],
                       capture_output=True, text=True, env=env)
    expected = -signal.SIGKILL if kill_after is not None else 0
    assert r.returncode == expected, r.stdout + r.stderr
    return r


def killed_and_resumed(run_dir, *args):
    train(run_dir, *args, kill_after=4)
    r = train(run_dir, *args)
    assert "started at step 4, ended after step 5" in r.stdout, r.stdout
    return r


def compare(a, b):
    return subprocess.run([CLI, "compare", str(a), str(b)], capture_output=True, text=True)


def first_divergence(a, b):
    r = compare(a, b)
    assert r.returncode == 4, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("first divergence:")]
    assert len(lines) == 1, r.stdout
    return lines[0]


def assert_equal_runs(a, b):
    r = compare(a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout and "6 steps" in r.stdout, r.stdout


def load(path):
    with np.load(path) as f:
        return {k: f[k].tobytes() for k in f.files}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The uninterrupted run of the plain MLP."""
    run = tmp_path_factory.mktemp("plain") / "run"
    train(run)
    return run


def test_resume_is_bitwise_with_global_generators_scheduler_and_sampler(tmp_path):
    # torch's dropout and noise from torch's, Python's and NumPy's global
    # generators, a StepLR, and batches from a PermutationSampler whose
    # epochs end mid-run: all restored from the checkpoint of step 3.
    train(tmp_path / "ref", *FULL, "--params-out", str(tmp_path / "ref.npz"))
    killed_and_resumed(tmp_path / "k", *FULL, "--params-out", str(tmp_path / "k.npz"))
    assert load(tmp_path / "ref.npz") == load(tmp_path / "k.npz")
    assert_equal_runs(tmp_path / "ref", tmp_path / "k")
    # The checkpoint holds what was restored, named as in the state dicts,
    # readable with h5py in rank 0's shard (the step's .h5 is the manifest,
    # docs/checkpoint-format.md): after step 3, epoch 1 of the sampler (40
    # examples, batches of 16, the last 8 dropped) has handed out 32 indices.
    import h5py
    with h5py.File(tmp_path / "k" / "ckpt" / "step-00000003.h5", "r") as manifest:
        assert "shards/0" in manifest
    with h5py.File(tmp_path / "k" / "ckpt" / "step-00000003.rank-0.h5", "r") as f:
        rank0 = f["ranks/0"]
        assert list(rank0["sampler"][()]) == [1, 32]
        assert rank0["scheduler.last_epoch"][()][0] == 4
        assert rank0["optimizer.param_groups.0.lr"][()][0] == 1e-2 * 0.25
        assert rank0["rng.torch.cpu"].shape == (5056,)
        for name in ("rng.python.mt", "rng.numpy.keys", "model.fc1.weight",
                     "optimizer.fc1.weight.exp_avg"):
            assert name in rank0, sorted(rank0)


def test_a_sampler_read_ahead_by_loader_workers_resumes_bitwise(tmp_path):
    # Two workers with the default prefetch take indices from the sampler
    # up to four batches ahead of the step that uses them: the checkpoint
    # must hold what the steps consumed, not what the workers were handed.
    # 200 examples: 12 batches an epoch, so the checkpoint of step 3 falls
    # inside the first with the workers ahead of it.
    args = ["--sampler", "--workers", "2", "--examples", "200"]
    train(tmp_path / "ref", *args, "--params-out", str(tmp_path / "ref.npz"))
    killed_and_resumed(tmp_path / "k", *args, "--params-out", str(tmp_path / "k.npz"))
    assert load(tmp_path / "ref.npz") == load(tmp_path / "k.npz")
    assert_equal_runs(tmp_path / "ref", tmp_path / "k")
    import h5py
    with h5py.File(tmp_path / "k" / "ckpt" / "step-00000003.rank-0.h5", "r") as f:
        assert list(f["ranks/0/sampler"][()]) == [0, 64]


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "rmsprop", "adagrad", "nadam"])
def test_other_optimizers_resume_bitwise(tmp_path, optimizer):
    # SGD creates its momentum buffers in its first step (clones of the
    # gradient), RMSprop (centered, with momentum) its averages and an int
    # step, Adagrad its sums in its constructor, NAdam its moments and two
    # scalars (step, mu_product) in its first step: the checkpoint of step 3
    # holds them and the resumed run continues from them, ending with the
    # uninterrupted run's bits.
    args = ("--optimizer", optimizer)
    train(tmp_path / "ref", *args, "--params-out", str(tmp_path / "ref.npz"))
    killed_and_resumed(tmp_path / "k", *args, "--params-out", str(tmp_path / "k.npz"))
    assert load(tmp_path / "ref.npz") == load(tmp_path / "k.npz")
    assert_equal_runs(tmp_path / "ref", tmp_path / "k")


def test_the_determinism_controls_are_recorded_with_their_origins(plain):
    controls = json.loads((plain / "rank0.env.json").read_text())["program"]["torch.controls"]
    assert controls["torch.use_deterministic_algorithms"] == {"value": "true",
                                                              "origin": "dgrr default"}
    assert controls["torch.backends.cudnn.benchmark"] == {"value": "false", "origin": "dgrr default"}
    assert controls["torch.backends.cuda.matmul.allow_tf32"]["value"] == "false"
    assert controls["torch.intra_op_threads"] == {"value": "1", "origin": "session option"}
    assert controls["CUBLAS_WORKSPACE_CONFIG"]["value"] in (":4096:8", ":16:8")
    assert not any("warning" in c for c in controls.values()), controls


def test_torch_dropout_after_a_resume_without_its_generator_is_named(tmp_path):
    train(tmp_path / "ref", "--dropout", "torch")
    killed_and_resumed(tmp_path / "k", "--dropout", "torch", "--no-restore", "generators")
    line = first_divergence(tmp_path / "ref", tmp_path / "k")
    assert "step 4 rank 0 forward output drop.out f32[16,32]" in line, line


def test_dgrr_dropout_needs_no_generator_state_to_resume(tmp_path):
    # The same resume without generator state, with dgrr's counter-based
    # dropout: nothing to restore, and the run is bitwise the same.
    train(tmp_path / "ref", "--dropout", "dgrr")
    killed_and_resumed(tmp_path / "k", "--dropout", "dgrr", "--no-restore", "generators")
    assert_equal_runs(tmp_path / "ref", tmp_path / "k")


def test_a_skipped_optimizer_state_restore_is_named(plain, tmp_path):
    r = killed_and_resumed(tmp_path / "k", "--no-restore", "optimizer")
    # Warned of before it happens: the optimizer is instrumented, not registered.
    assert "the optimizer instrumented (Adam) is not registered as state" in r.stderr, r.stderr
    line = first_divergence(plain, tmp_path / "k")
    # Forward and backward of step 4 agree (parameters were restored); the
    # Adam update from zeroed moments is the first thing that differs.
    assert "step 4 rank 0 optimizer output fc1.weight f32[32,8]" in line, line


def test_a_changed_summation_order_is_named_at_its_layer(plain, tmp_path):
    train(tmp_path / "k", "--plant", "sum-order@fc2@3")
    line = first_divergence(plain, tmp_path / "k")
    assert "step 3 rank 0 forward output fc2.out f32[16,32]" in line, line


def test_an_in_place_op_on_a_saved_activation_is_named_in_the_backward(plain, tmp_path):
    # The forward values are untouched; tanh's backward reads its corrupted
    # saved output, so the gradient it passes back is the first difference.
    train(tmp_path / "k", "--plant", "inplace-saved@fc2@3")
    line = first_divergence(plain, tmp_path / "k")
    assert "step 3 rank 0 backward output act.grad_in.0 f32[16,32]" in line, line
