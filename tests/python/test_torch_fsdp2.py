"""FSDP2 (fully_shard) under torchrun (gloo on 127.0.0.1) with dgrr's canonical
reduce-scatter (dgrr.fsdp; fsdp_train.py: a small MLP, every Linear and the
root sharded, the head's 5 rows uneven over 2 ranks, 4 steps of AdamW):

- two 2-process runs end with bitwise equal parameters and AdamW state and
  `dgrr compare` finds no divergence, every boundary compared;
- every reduce-scatter of a run is bitwise (c0 + c1) / 2 of the two ranks'
  chunks, computed here, and equals gloo's own reduce_scatter_tensor of the
  same inputs (at two ranks the orders cannot differ);
- rank 1 SIGKILLed after step 2, the same command again: resumes at step 2
  from each rank's checkpoint shard and ends bitwise as the uninterrupted run;
- the same run directory resumed by one process: refused in one line naming
  both world sizes;
- `dgrr rollback --step 2` re-executes step 2 under torchrun from step 1's
  checkpoint shards, verified against both ranks' traces, and the same
  command then ends where the uninterrupted run ended (compare certifies all
  4 steps); `dgrr bisect` of a run whose rank 1
  flipped a bit of its head's output at step 2 names step 2, rank 1 and
  `head.out`;
- in process (a world of one over gloo): the canonical tree at 3 and 4 ranks
  and every op (all_to_all replaced by a stand-in that hands over chosen
  rows), the shards registered per rank outside the parameter check,
  resume bitwise for AdamW and SGD with momentum, HSDP refused in one line,
  a shard given new memory refused at the checkpoint.

Every job runs under a timeout (JOB_TIMEOUT), so nothing hangs."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import dgrr
import dgrr.distributed
import dgrr.fsdp
import dgrr.torch
import torchrun_jobs
from torchrun_jobs import JOB_TIMEOUT

CLI = os.environ.get("DGRR_CLI", "dgrr")
PYTHON = os.environ.get("DGRR_PYTHON", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "fsdp_train.py")


def torchrun(processes, run_dir, *args, env_extra=None):
    return torchrun_jobs.torchrun(SCRIPT, processes, run_dir, *args, env_extra=env_extra)


def torchrun_ok(processes, run_dir, *args, env_extra=None):
    return torchrun_jobs.torchrun_ok(SCRIPT, processes, run_dir, *args, env_extra=env_extra)


load = torchrun_jobs.load


def differing(a, b):
    assert len(a) == 24 and a.keys() == b.keys()   # six parameters, AdamW's step and moments of each
    return [k for k in a if a[k] != b[k]]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One 2-process run, checkpoints after steps 1 and 3, its reduce-scatters logged."""
    root = tmp_path_factory.mktemp("fsdp")
    r = torchrun_ok(2, root / "run", "--ckpt-every", "2", "--params-out", str(root / "final.npz"),
                    "--rs-out", str(root / "rs.npz"))
    assert "rank 1 of 2: started at step 0" in r.stdout, r.stdout
    return root


def test_two_runs_are_bitwise_equal(recorded, tmp_path):
    torchrun_ok(2, tmp_path / "run", "--ckpt-every", "2", "--params-out", str(tmp_path / "final.npz"))
    assert differing(load(recorded / "final.npz"), load(tmp_path / "final.npz")) == []
    for k in range(2):
        assert (tmp_path / "run" / f"rank{k}.trace").exists()
        assert (tmp_path / "run" / "ckpt" / f"step-00000003.rank-{k}.h5").exists()
    c = subprocess.run([CLI, "compare", str(recorded / "run"), str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "ranks: paired rank by rank" in c.stdout
    assert "coverage: every boundary compared" in c.stdout
    assert "certified prefix: 320 pairs, 4 steps" in c.stdout, c.stdout


def test_each_rank_records_its_shards(recorded):
    """rank 1 holds 2 of the head's 5 rows: its gradient and its update are
    recorded with that shape, the gradient with phase collective."""
    r = subprocess.run([CLI, "inspect", str(recorded / "run" / "rank1.trace")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "collective output head.weight.grad f32[2,24]" in r.stdout
    assert "optimizer output head.weight f32[2,24]" in r.stdout
    assert "optimizer output head.weight.exp_avg f32[2,24]" in r.stdout
    r0 = subprocess.run([CLI, "inspect", str(recorded / "run" / "rank0.trace")],
                        capture_output=True, text=True, timeout=60)
    assert "collective output head.weight.grad f32[3,24]" in r0.stdout


def test_the_reduce_scatter_is_the_rank_order_sum_halved(recorded):
    with np.load(recorded / "rs.npz") as f:
        ops = list(f["ops"])
        assert ops == ["AVG"] * 12, ops          # 3 sharded Linears, 4 steps; FSDP2's float32 op
        for i in range(len(ops)):
            inputs, outputs, defaults = f[f"inputs{i}"], f[f"outputs{i}"], f[f"defaults{i}"]
            world, n = outputs.shape
            assert world == 2 and inputs.shape == (2, 2 * n)
            for r in range(world):
                chunk = slice(r * n, (r + 1) * n)
                expected = (inputs[0, chunk] + inputs[1, chunk]) / np.float32(2)
                assert expected.tobytes() == outputs[r].tobytes(), (i, r)
                assert defaults[r].tobytes() == outputs[r].tobytes(), (i, r)


def test_a_killed_rank_resumes_bitwise(recorded, tmp_path):
    args = ["--ckpt-every", "2", "--params-out", str(tmp_path / "final.npz")]
    killed = torchrun(2, tmp_path / "run", *args, env_extra={"DGRR_TEST_KILL_AFTER_STEP": "2"})
    assert killed.returncode != 0
    assert not (tmp_path / "final.npz").exists()
    r = torchrun_ok(2, tmp_path / "run", *args)      # the same command again
    assert "rank 0 of 2: started at step 2" in r.stdout, r.stdout
    assert "rank 1 of 2: started at step 2" in r.stdout, r.stdout
    assert differing(load(recorded / "final.npz"), load(tmp_path / "final.npz")) == []
    c = subprocess.run([CLI, "compare", str(recorded / "run"), str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stdout + c.stderr


def test_a_resume_at_another_world_size_is_refused_naming_both(recorded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(recorded / "run", run)
    r = torchrun(1, run, "--ckpt-every", "2")
    assert r.returncode != 0
    assert ("step-00000003.h5: the run was recorded at world size 2, this resume has world size 1"
            in r.stderr), r.stderr
    for k in range(2):
        assert (run / f"rank{k}.trace").read_bytes() == (recorded / "run" / f"rank{k}.trace").read_bytes()


# -- in process: a world of one over gloo ----------------------------------
@pytest.fixture(scope="module")
def world_of_one():
    import torch.distributed as dist
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        os.environ.pop(v, None)
    assert dgrr.distributed.init_process_group("gloo", timeout_s=60) == (0, 1)
    dgrr.torch.determinism(threads=1)
    yield dgrr.distributed.communicator()
    dist.destroy_process_group()


def sharded_mlp(seed=0):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    mesh = init_device_mesh("cpu", (1,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


class _Group:
    """A stand-in process group of `size` ranks for CanonicalReduceScatter."""

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size


@pytest.mark.parametrize("world", [3, 4])
def test_the_canonical_tree_over_the_ranks(world_of_one, monkeypatch, world):
    """The rows the all_to_all hands over (chunk r of rank q, in rank order)
    are summed ((c0 + c1) + c2 at 3 ranks, (c0 + c1) + (c2 + c3) at 4), not
    in gloo's order (c3 + c2) + c1 ..."""
    n = 4096
    g = torch.Generator().manual_seed(world)
    rows = torch.randn(world, n, generator=g) * torch.logspace(-3, 3, n)

    def all_to_all(out, inp, group=None):
        assert group.size() == world and inp.numel() == world * n
        out.copy_(rows.reshape(-1))

    monkeypatch.setattr(dgrr.fsdp._dist, "all_to_all_single", all_to_all)
    comm = dgrr.fsdp.CanonicalReduceScatter()
    R = torch.distributed.ReduceOp.RedOpType
    out = torch.empty(n)
    comm(out, torch.zeros(world * n), _Group(world), R.SUM)
    c = list(rows)
    tree = (c[0] + c[1]) + c[2] if world == 3 else (c[0] + c[1]) + (c[2] + c[3])
    assert torch.equal(out, tree)
    reverse = c[-1]
    for x in reversed(c[:-1]):
        reverse = reverse + x
    assert not torch.equal(out, reverse)       # the order shows in the bits
    comm(out, torch.zeros(world * n), _Group(world), R.AVG)
    assert torch.equal(out, tree / world)
    assert comm.calls == 2


def test_ops_and_dtypes(world_of_one):
    import torch.distributed as dist
    model = sharded_mlp()
    comms = dgrr.fsdp.canonical_reduce_scatter(model)
    assert len(comms) == 2                 # the two Linears; the root holds no parameters
    assert dgrr.fsdp._uses_canonical_reduce_scatter(model)
    comm = comms[0]
    R = dist.ReduceOp.RedOpType
    x = torch.tensor([1.0, 2.0, 3.0])
    out = torch.empty(3)
    comm(out, x, dist.group.WORLD, R.SUM)
    assert torch.equal(out, x)
    # set_gradient_divide_factor(f) with f other than the world size: FSDP2
    # passes NCCL's PREMUL_SUM(1/f), which gloo lacks; each row is scaled first.
    model[0].set_gradient_divide_factor(4.0)
    comm(out, x, dist.group.WORLD, dist._make_nccl_premul_sum(1 / 4.0))
    assert torch.equal(out, x * 0.25)
    with pytest.raises(dgrr.InvalidArgumentError, match="op MAX"):
        comm(out, x, dist.group.WORLD, R.MAX)
    with pytest.raises(dgrr.InvalidArgumentError, match="torch.bfloat16 on cpu"):
        comm(out.bfloat16(), x.bfloat16(), dist.group.WORLD, R.SUM)
    with pytest.raises(dgrr.InvalidArgumentError, match="no module of the model is fully_shard"):
        dgrr.fsdp.canonical_reduce_scatter(torch.nn.Linear(2, 2))
    assert not dgrr.fsdp._uses_canonical_reduce_scatter(sharded_mlp())


def train(run_dir, optimizer_name, steps, stop_after=None):
    """In process: the sharded MLP for `steps` steps, checkpoints after steps
    1 and 3; stop_after ends the process's run early (a resume follows).
    Returns the parameters and optimizer state, full, as bytes."""
    model = sharded_mlp()
    if optimizer_name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with dgrr.distributed.open(str(run_dir), 7, checkpoint_every=2, total_steps=steps,
                               config={"opt": optimizer_name}) as session:
        dgrr.torch.register_torch_state(session, model, optimizer, generators=False)
        inst = dgrr.torch.instrument(session, model, optimizer)
        assert isinstance(inst, dgrr.fsdp.ShardedInstrumentation)
        dgrr.fsdp.canonical_reduce_scatter(model)
        start = session.resume()
        for step in range(start, steps):
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
            inst.begin_step(step, (8 * step, 8))
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            session.end_step(step, loss.item())
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if step == stop_after:
                break
    out = {n: p.full_tensor().detach().numpy().tobytes() for n, p in model.named_parameters()}
    for name, key, t in dgrr.torch._optimizer_tensors(model, optimizer):
        out[f"{name}.{key}"] = dgrr.fsdp.local(t).numpy().tobytes()
    return start, out


@pytest.mark.parametrize("optimizer_name", ["adamw", "sgd"])
def test_shards_resume_bitwise_in_process(world_of_one, tmp_path, optimizer_name):
    _, whole = train(tmp_path / "a", optimizer_name, 4)
    train(tmp_path / "b", optimizer_name, 4, stop_after=2)    # checkpoint after step 1 only
    start, resumed = train(tmp_path / "b", optimizer_name, 4)
    assert start == 2
    assert whole.keys() == resumed.keys() and len(whole) > 4
    assert [k for k in whole if whole[k] != resumed[k]] == []


def test_shards_are_per_rank_state_outside_the_parameter_check(world_of_one, tmp_path):
    model = sharded_mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    with dgrr.distributed.open(str(tmp_path / "run"), 1, checkpoint_every=1, total_steps=1) as session:
        dgrr.torch.register_torch_state(session, model, optimizer, generators=False)
        session.resume()
        session.begin_step(0)
        session.end_step(0, 0.0)
        session.checkpoint(0)
    r = subprocess.run([CLI, "plan", str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split()[0]: line.split() for line in r.stdout.splitlines()
             if line.startswith("  model.") or line.startswith("  optimizer.0.")}
    assert lines["model.0.weight"][1:4] == ["other", "f32", "[6,4]"], lines
    assert lines["model.0.weight"][-3:] == ["no", "(rank", "0)"], lines   # per rank, not replicated
    assert lines["optimizer.0.weight.exp_avg"][1:4] == ["optimizer", "f32", "[6,4]"], lines


def test_hsdp_and_a_moved_shard_are_refused_in_one_line(world_of_one, tmp_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    fully_shard(model, mesh=init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard")))   # HSDP
    optimizer = torch.optim.Adam(model.parameters())
    with dgrr.distributed.open(str(tmp_path / "hsdp"), 1) as session:
        with pytest.raises(dgrr.InvalidArgumentError,
                           match=r"register_torch_state: parameter '0.weight' is a DTensor on a 2-D "
                                 r"device mesh .* not HSDP or tensor parallelism"):
            dgrr.torch.register_torch_state(session, model, optimizer)
        with pytest.raises(dgrr.InvalidArgumentError, match=r"instrument: parameter '0.weight'"):
            dgrr.torch.instrument(session, model, optimizer)
    with pytest.raises(dgrr.InvalidArgumentError, match=r"module '\(root\)' is sharded over a 2-D mesh"):
        dgrr.fsdp.canonical_reduce_scatter(model)

    model = sharded_mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    with dgrr.distributed.open(str(tmp_path / "moved"), 1) as session:
        with pytest.raises(dgrr.InvalidArgumentError, match=r"replicated=True with FSDP2 \(fully_shard\) "
                                                            r"parameters: each rank holds its own shards"):
            dgrr.torch.register_torch_state(session, model, optimizer, replicated=True)
        with pytest.raises(dgrr.InvalidArgumentError, match=r"replicated must be True or False, not 'yes'"):
            dgrr.torch.register_torch_state(session, model, optimizer, replicated="yes")
        dgrr.torch.register_torch_state(session, model, optimizer, generators=False)
        session.resume()
        session.begin_step(0)
        session.end_step(0, 0.0)
        weight = model[2].weight
        weight._local_tensor = weight._local_tensor.clone()      # what load_state_dict may do
        with pytest.raises(dgrr.FailedPreconditionError,
                           match=r"state 'model.2.weight' is no longer the local shard"):
            session.checkpoint(0)


def test_clip_grad_norm_sums_the_ranks_in_the_canonical_tree(world_of_one, monkeypatch):
    """dgrr.fsdp.clip_grad_norm_: each rank's squared norm of its shards,
    all-gathered (never all-reduced), summed (s0 + s1) + s2 at 3 ranks on
    every rank; the gradients scaled as torch scales them."""
    model = sharded_mlp(3)
    model(torch.randn(5, 4)).square().sum().backward()
    grads = [dgrr.fsdp.local(p.grad).clone() for p in model.parameters()]
    mine = torch.zeros(())
    for g in grads:
        n = torch.linalg.vector_norm(g)
        mine = mine + n * n
    others = [torch.tensor([1e8]), torch.tensor([-1e8])]   # the order shows in the bits
    calls = []

    def all_gather(parts, tensor, group=None):
        calls.append(len(parts))
        parts[0].copy_(tensor)
        parts[1].copy_(others[0])
        parts[2].copy_(others[1])

    def all_reduce(*args, **kwargs):
        raise AssertionError("the backend must not add")

    monkeypatch.setattr(dgrr.fsdp._dist, "get_world_size", lambda group=None: 3)
    monkeypatch.setattr(dgrr.fsdp._dist, "all_gather", all_gather)
    monkeypatch.setattr(dgrr.fsdp._dist, "all_reduce", all_reduce)
    total = dgrr.fsdp.clip_grad_norm_(model.parameters(), 0.5)
    assert calls == [3]
    tree = (mine + others[0][0]) + others[1][0]
    assert not torch.equal(tree, (others[1][0] + others[0][0]) + mine)
    assert torch.equal(total, torch.sqrt(tree))
    coef = torch.clamp(0.5 / (torch.sqrt(tree) + 1e-6), max=1.0)
    for p, g in zip(model.parameters(), grads):
        assert torch.equal(dgrr.fsdp.local(p.grad), g * coef)


def test_clip_grad_norm_at_one_rank_is_torchs_up_to_rounding(world_of_one):
    a, b = sharded_mlp(4), sharded_mlp(4)
    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(1))
    for m in (a, b):
        m(x).square().sum().backward()
    ours = dgrr.fsdp.clip_grad_norm_(a.parameters(), 0.25)
    theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.25)
    theirs = theirs.full_tensor() if hasattr(theirs, "full_tensor") else theirs
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0)
    assert float(ours) > 0.25                     # it did clip
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(dgrr.fsdp.local(p.grad), dgrr.fsdp.local(q.grad), rtol=1e-5, atol=1e-8)
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    p.grad = torch.ones(2, dtype=torch.float64)
    with pytest.raises(dgrr.InvalidArgumentError, match="float32 CPU"):
        dgrr.fsdp.clip_grad_norm_([p], 1.0)


@pytest.fixture(scope="module")
def replayable(tmp_path_factory):
    """A 2-process run, checkpoints after steps 1 and 3, writing nothing
    outside its run directory (a re-execution runs its command line again)."""
    root = tmp_path_factory.mktemp("fsdp-replay")
    torchrun_ok(2, root / "run", "--ckpt-every", "2")
    return root / "run"


def cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=4 * JOB_TIMEOUT)


def test_rollback_of_an_fsdp2_job_then_the_same_command_ends_as_the_run(replayable, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(replayable, run)
    r = cli("rollback", run, "--step", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "re-executed steps 2..2 from the checkpoint of step 1" in r.stdout, r.stdout
    for k in range(2):
        assert (run / "ckpt" / f"step-00000002.rank-{k}.h5").exists()
        assert not (run / "ckpt" / f"step-00000003.rank-{k}.h5").exists()
    out = torchrun_ok(2, run, "--ckpt-every", "2")
    assert "rank 0 of 2: started at step 3" in out.stdout and "rank 1 of 2: started at step 3" in out.stdout, \
        out.stdout
    c = cli("compare", replayable, run)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "coverage: every boundary compared" in c.stdout
    assert "certified prefix: 320 pairs, 4 steps" in c.stdout, c.stdout


def test_bisect_of_fsdp2_jobs_names_the_flipped_step_and_rank(replayable, tmp_path):
    torchrun_ok(2, tmp_path / "bad", "--ckpt-every", "2", "--flip-bit", "head@2", "--flip-rank", "1")
    r = cli("bisect", "--good", replayable, "--bad", tmp_path / "bad", "--json", "--quiet")
    torchrun_jobs.expect_bisect_names(r, step=2, rank=1, phase="forward", name="head.out", from_checkpoint=1)
