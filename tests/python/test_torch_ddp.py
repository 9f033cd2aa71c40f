"""torch's DistributedDataParallel under torchrun (gloo on 127.0.0.1) with
dgrr's communication hook (dgrr.distributed, ddp_train.py: the tiny MLP, 4
steps of Adam, batch 16):

- mode leaf (LeafChunked, leaves of 4 examples): 1, 2, 3 and 4 processes end
  with the same parameters and Adam state, bit for bit, and `dgrr compare`
  certifies them as one logical run, every boundary compared;
- mode rank (plain, one leaf per rank): two runs at 2 processes end bitwise
  equal and compare equal; at 4 processes every step's reduced gradient is
  bitwise ((g0 + g1) + (g2 + g3)) / 4 of the ranks' own gradients (dgrr's
  canonical tree, whatever gloo does);
- a bit flipped in rank 1's parameters after step 1 is caught by the per-step
  check across ranks (run over torch.distributed) and ends the job naming
  rank 1; a rank that raises ends the job with dgrr's abort line; a job
  whose rank 1 is SIGKILLed after step 2, started again with the same
  command, resumes from step 1's checkpoint and ends bitwise as the
  uninterrupted run;
- the neighbour audit (dgrr.torch.NeighbourAudit, every step, 3 processes in
  mode leaf) changes no bit: the run equals the 1-process one; a bit flipped
  in rank 1's own forward at step 2 (its output, not its parameters: the
  reduced gradient then spreads it to every rank alike) is named by rank 0's
  audit on every rank, in mode rank and leaf, with an EVENT in each trace;
- in process: bad use raises one dgrr.Error naming it; the audit's
  comparison names the first differing record.

Every job runs under a timeout (JOB_TIMEOUT), so nothing hangs."""

import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import dgrr
import dgrr.distributed
import dgrr.torch
import torchrun_jobs
from torchrun_jobs import JOB_TIMEOUT

CLI = os.environ.get("DGRR_CLI", "dgrr")
PYTHON = os.environ.get("DGRR_PYTHON", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_train.py")


def torchrun(processes, run_dir, *args, env_extra=None):
    return torchrun_jobs.torchrun(SCRIPT, processes, run_dir, *args, env_extra=env_extra)


def torchrun_ok(processes, run_dir, *args, env_extra=None):
    return torchrun_jobs.torchrun_ok(SCRIPT, processes, run_dir, *args, env_extra=env_extra)


load = torchrun_jobs.load


def compare(a, b):
    return subprocess.run([CLI, "compare", str(a), str(b)], capture_output=True, text=True, timeout=120)


def differing(a, b):
    assert len(a) == 24 and a.keys() == b.keys()   # six parameters, Adam's step and moments of each
    return [k for k in a if a[k] != b[k]]


@pytest.fixture(scope="module")
def leaf_one(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaf1")
    torchrun_ok(1, root / "run", "--mode", "leaf", "--ckpt-every", "2", "--params-out", str(root / "final.npz"))
    return root


# 2 and 4: each rank's leaves are an aligned node of the tree (one all_gather
# per bucket); 3: they are not (leaves [0,1), [1,2), [2,4)), and the general
# CanonicalAllReduce runs through the torch.distributed communicator.
@pytest.mark.parametrize("processes", [2, 3, 4])
def test_leaf_mode_is_bitwise_the_same_for_1_2_3_and_4_processes(leaf_one, tmp_path, processes):
    # At 3 processes with the neighbour audit every step too: each rank
    # recomputes the next one's leaves (rank 2 rank 0's) through the
    # reducer's shard(rank), and no bit of the run changes.
    audit = ["--audit-every", "1"] if processes == 3 else []
    r = torchrun_ok(processes, tmp_path / "run", "--mode", "leaf", "--ckpt-every", "2",
                    "--params-out", str(tmp_path / "final.npz"), *audit)
    assert f"rank {processes - 1} of {processes}: started at step 0" in r.stdout, r.stdout
    if audit:
        for k in range(3):
            assert f"rank {k} of 3: audited 4 steps" in r.stdout, r.stdout
    assert differing(load(leaf_one / "final.npz"), load(tmp_path / "final.npz")) == []
    # One trace per rank in the one run directory, and each rank's checkpoint
    # shard; the model and optimizer, registered replicated, written once
    # (this small state whole in rank 0's shard: checkpoint-format.md §9).
    replicated = set()
    for k in range(processes):
        assert (tmp_path / "run" / f"rank{k}.trace").exists()
        with h5py.File(tmp_path / "run" / "ckpt" / f"step-00000003.rank-{k}.h5", "r") as f:
            held = set(f["replicated"].keys())
            own = set(f[f"ranks/{k}"].keys())
        replicated |= held
        assert len(held) == (24 if k == 0 else 0), (k, held)
        assert not own & replicated and any(n.startswith("optimizer.param_groups.") for n in own), (k, own)
    c = compare(leaf_one / "run", tmp_path / "run")
    assert c.returncode == 0, c.stdout + c.stderr
    assert "compared as logical runs" in c.stdout
    assert "coverage: every boundary compared" in c.stdout
    assert re.search(r"certified prefix: \d+ pairs, 4 steps", c.stdout), c.stdout


def test_leaf_mode_resumes_bitwise_after_a_rank_is_killed(leaf_one, tmp_path):
    args = ["--mode", "leaf", "--ckpt-every", "2", "--flip-rank", "1",
            "--params-out", str(tmp_path / "final.npz")]
    killed = torchrun(2, tmp_path / "run", *args, env_extra={"DGRR_TEST_KILL_AFTER_STEP": "2"})
    assert killed.returncode != 0
    assert not (tmp_path / "final.npz").exists()
    r = torchrun_ok(2, tmp_path / "run", *args)      # the same command again
    assert "rank 0 of 2: started at step 2" in r.stdout, r.stdout
    assert differing(load(leaf_one / "final.npz"), load(tmp_path / "final.npz")) == []


def test_rank_mode_repeats_bitwise_at_two_processes(tmp_path):
    torchrun_ok(2, tmp_path / "a", "--mode", "rank", "--params-out", str(tmp_path / "a.npz"),
                "--grads-out", str(tmp_path / "a_grads.npy"))
    torchrun_ok(2, tmp_path / "b", "--mode", "rank", "--params-out", str(tmp_path / "b.npz"))
    assert differing(load(tmp_path / "a.npz"), load(tmp_path / "b.npz")) == []
    c = compare(tmp_path / "a", tmp_path / "b")
    assert c.returncode == 0, c.stdout + c.stderr
    assert "coverage: every boundary compared" in c.stdout
    # Two leaves: the reduced gradient is (g0 + g1) / 2, bit for bit.
    g = np.load(tmp_path / "a_grads.npy")
    assert g.shape[:2] == (4, 3)
    for step in range(4):
        expected = (g[step, 0] + g[step, 1]) * np.float32(0.5)
        assert expected.tobytes() == g[step, 2].tobytes(), step


def test_rank_mode_sums_in_the_canonical_tree_at_four_processes(tmp_path):
    torchrun_ok(4, tmp_path / "run", "--mode", "rank", "--grads-out", str(tmp_path / "grads.npy"))
    g = np.load(tmp_path / "grads.npy")
    assert g.shape[:2] == (4, 5)
    for step in range(4):
        expected = ((g[step, 0] + g[step, 1]) + (g[step, 2] + g[step, 3])) * np.float32(0.25)
        assert expected.tobytes() == g[step, 4].tobytes(), step


def test_a_parameter_bit_flipped_on_rank_1_ends_the_job_naming_it(tmp_path):
    r = torchrun(2, tmp_path / "run", "--mode", "rank", "--corrupt-at", "1", "--flip-rank", "1")
    assert r.returncode != 0
    assert "silent data corruption suspected after step 1" in r.stderr, r.stderr
    assert "rank 1 holds" in r.stderr
    assert "aborts the torch.distributed job" in r.stderr


@pytest.mark.parametrize("mode, examples", [("rank", "[40, 48)"), ("leaf", "[40, 44)")])
def test_the_neighbour_audit_names_a_rank_that_computed_wrong(tmp_path, mode, examples):
    r = torchrun(2, tmp_path / "run", "--mode", mode, "--audit-every", "2", "--flip-bit", "head@2",
                 "--flip-rank", "1")
    assert r.returncode != 0
    said = (f"silent data corruption found by the audit at step 2: rank 1 computed examples {examples} "
            "differently from rank 0's recomputation, first at head.out (xxh3 ")
    for k in range(2):                                  # raised on both ranks, which end the job
        assert f"dgrr: rank {k} aborts the torch.distributed job: Divergence: rank {k}: uncaught " \
               f"DivergenceError: {said}" in r.stderr, r.stderr
    for k in range(2):
        out = subprocess.run([CLI, "inspect", str(tmp_path / "run" / f"rank{k}.trace")],
                             capture_output=True, text=True, timeout=60).stdout
        assert 'sdc_mismatch' in out and 'payload="audit rank=1 by=0 example=40 at=head.out"' in out, out


def test_a_rank_that_raises_ends_the_job(tmp_path):
    r = torchrun(2, tmp_path / "run", "--mode", "leaf", "--fail-at", "1", "--flip-rank", "1")
    assert r.returncode != 0
    assert "planted failure at step 1" in r.stderr
    assert "dgrr: rank 1 aborts the torch.distributed job" in r.stderr, r.stderr


# -- in process: a world of one over gloo ----------------------------------
@pytest.fixture(scope="module")
def world_of_one():
    import torch.distributed as dist
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        os.environ.pop(v, None)
    assert dgrr.distributed.init_process_group("gloo", timeout_s=60) == (0, 1)
    yield dgrr.distributed.communicator()
    dist.destroy_process_group()


def test_communicator_before_init_is_refused():
    import torch.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(dgrr.FailedPreconditionError, match="not initialised"):
        dgrr.distributed.communicator()


def test_world_of_one_collectives(world_of_one):
    comm = world_of_one
    assert (comm.rank, comm.size, comm.backend) == (0, 1, "torch.distributed:gloo")
    comm.barrier()
    leaves = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = torch.zeros(2)
    comm.canonical_all_reduce(leaves, 0, 3, out)
    assert out.tolist() == [9.0, 12.0]
    assert comm.gather_example_scalars([0.5, 0.25], 0, 2) == [0.5, 0.25]
    with pytest.raises(dgrr.InvalidArgumentError):
        comm.canonical_all_reduce(torch.zeros(2, 2), 0, 3, torch.zeros(2))   # shards do not tile


def test_bad_use_is_named(world_of_one, tmp_path):
    comm = world_of_one
    model = torch.nn.Linear(3, 2)
    with pytest.raises(dgrr.InvalidArgumentError, match="mode 'fast' is not one of"):
        dgrr.distributed.CanonicalReducer(comm, mode="fast")
    with pytest.raises(dgrr.InvalidArgumentError, match="needs chunked=LeafChunked"):
        dgrr.distributed.CanonicalReducer(comm, batch=8, mode="leaf")
    chunked = dgrr.distributed.LeafChunked(model, 4)
    with pytest.raises(dgrr.InvalidArgumentError, match="a batch of 6 does not split into leaves of 4"):
        dgrr.distributed.CanonicalReducer(comm, batch=6, mode="leaf", chunked=chunked)
    with pytest.raises(dgrr.InvalidArgumentError, match="does not split into leaves of 4"):
        chunked(torch.zeros(6, 3))
    with pytest.raises(dgrr.InvalidArgumentError, match="leaf_size 0"):
        dgrr.distributed.LeafChunked(model, 0)
    # A float64 model's buckets are refused by name, from inside backward.
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2).double())
    dgrr.distributed.CanonicalReducer(comm, batch=4).register(ddp)
    with pytest.raises(Exception, match="float32 CPU tensors"):
        ddp(torch.zeros(4, 3, dtype=torch.float64)).sum().backward()


def test_leaf_chunks_keep_each_chunk_gradient_apart(world_of_one):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    chunked = dgrr.distributed.LeafChunked(model, 2)
    x = torch.randn(6, 3)
    out = chunked(x)
    assert torch.equal(out, torch.cat([model(x[i:i + 2]) for i in range(0, 6, 2)]))
    out.sum().backward()
    w = model[0].weight
    for c in range(3):
        (expected,) = torch.autograd.grad(model(x[2 * c:2 * c + 2]).sum(), [w])
        assert torch.equal(chunked.leaf_grads[w][c], expected)


def test_the_neighbour_audit_is_refused_where_it_cannot_compare(world_of_one, tmp_path):
    model = torch.nn.Linear(3, 2)
    with dgrr.distributed.open(str(tmp_path / "sdc"), 1, mode="sdc") as session:
        inst = dgrr.torch.instrument(session, model)
        with pytest.raises(dgrr.InvalidArgumentError, match="records no forward or backward boundary"):
            dgrr.torch.NeighbourAudit(inst, 1)
        inst.remove()
    with dgrr.distributed.open(str(tmp_path / "full"), 1, mode="full") as session:
        inst = dgrr.torch.instrument(session, model)
        with pytest.raises(dgrr.InvalidArgumentError, match="every=0"):
            dgrr.torch.NeighbourAudit(inst, 0)
        audit = dgrr.torch.NeighbourAudit(inst, 1)
        # A world of one has no neighbour: nothing is due, nothing recomputed.
        assert session.resume() == 0
        inst.begin_step(0, (0, 4))
        audit.begin_step(0)
        model(torch.zeros(4, 3)).sum().backward()
        assert audit.check(0, lambda r: pytest.fail("recomputed at a world of one")) is False
        session.end_step(0, 0.0)


def test_the_audit_names_the_first_record_that_differs():
    from dgrr.torch.audit import _first_difference
    a = [("fc.out", 0, 4, 1, 2), ("fc.grad_in.0", 0, 4, 3, 4)]
    assert _first_difference(a, list(a)) is None
    f = _first_difference(a, [a[0], ("fc.grad_in.0", 0, 4, 3, 5)])
    assert (f["name"], f["first"], f["count"]) == ("fc.grad_in.0", 0, 4)
    assert f["why"] == "xxh3 0000000000000004 vs 0000000000000005"
    f = _first_difference(a, [("fc.out", 4, 4, 1, 2), a[1]])
    assert "record 0 is fc.out of examples [0, 4), the recomputation's fc.out of [4, 8)" in f["why"]
    f = _first_difference(a[:1], a)
    assert f["name"] == "fc.grad_in.0" and "the recomputation made 1 more record(s)" in f["why"]
