"""dgrr.torch data-parallel runs (dp_train.py: the tiny MLP, 4 steps of Adam,
per-example gradients summed in dgrr's canonical tree): one process and two
processes under mpirun end with the same bits and compare equal as logical
runs; a bit flipped on rank 1 is named with its rank; a job whose rank 1 is
killed after step 2 and started again ends as the one-process run; a rank
that fails ends the job instead of leaving the others waiting; bad use
raises one clear dgrr.Error. Registered when the binding is built with MPI
(DGRR_MPIRUN)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import dgrr
import dgrr.torch

CLI = os.environ.get("DGRR_CLI", "dgrr")
MPIRUN = os.environ.get("DGRR_MPIRUN", "mpirun")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dp_train.py")


def train(processes, run_dir, *args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    # CI runs as root; Open MPI refuses root unless told both of these.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [sys.executable, SCRIPT, str(run_dir), "--ckpt-every", "2", *args]
    if processes > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(processes)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)


def train_ok(processes, run_dir, *args):
    r = train(processes, run_dir, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def compare(a, b):
    return subprocess.run([CLI, "compare", str(a), str(b)], capture_output=True, text=True)


def load(path):
    with np.load(path) as f:
        return {k: f[k].tobytes() for k in f.files}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    root = tmp_path_factory.mktemp("one")
    train_ok(1, root / "run", "--params-out", str(root / "final.npz"))
    return root


def test_two_processes_end_bitwise_as_one(one_process, tmp_path):
    r = train_ok(2, tmp_path / "run", "--params-out", str(tmp_path / "final.npz"))
    assert "rank 1 of 2: started at step 0" in r.stdout, r.stdout
    one, two = load(one_process / "final.npz"), load(tmp_path / "final.npz")
    # Six parameters, and Adam's step count and moments of each: every bit.
    assert len(one) == 24 and one.keys() == two.keys()
    assert [k for k in one if one[k] != two[k]] == []
    # Each rank wrote its checkpoint shard (the session's group is the MPI one).
    assert (tmp_path / "run" / "ckpt" / "step-00000003.rank-1.h5").exists()
    c = compare(one_process / "run", tmp_path / "run")
    assert c.returncode == 0, c.stdout + c.stderr
    assert "compared as logical runs" in c.stdout
    assert "coverage: every boundary compared" in c.stdout
    assert re.search(r"certified prefix: \d+ pairs, 4 steps", c.stdout), c.stdout


def test_a_bit_flipped_on_rank_1_is_named(one_process, tmp_path):
    train_ok(2, tmp_path / "run", "--flip-bit", "fc2@2", "--flip-rank", "1")
    c = compare(one_process / "run", tmp_path / "run")
    assert c.returncode == 4, c.stdout + c.stderr
    first = [line for line in c.stdout.splitlines() if line.startswith("first divergence")]
    # Rank 1 holds examples 8..15 of every batch of 16: step 2's first is 40.
    assert len(first) == 1 and "step 2 forward output fc2.out" in first[0], c.stdout
    assert "examples 40+1" in first[0] and first[0].endswith("rank 0 of 1 vs rank 1 of 2"), first[0]


def test_a_killed_rank_and_the_same_command_again_end_as_one_process(one_process, tmp_path):
    args = (tmp_path / "run", "--params-out", str(tmp_path / "final.npz"), "--flip-rank", "1")
    killed = train(2, *args, env_extra={"DGRR_TEST_KILL_AFTER_STEP": "2"})
    assert killed.returncode != 0 and not (tmp_path / "final.npz").exists(), killed.stdout
    # Step 1's checkpoint is the newest both ranks committed: the rerun resumes there.
    again = train_ok(2, *args)
    assert "rank 1 of 2: started at step 2" in again.stdout, again.stdout
    assert load(one_process / "final.npz") == load(tmp_path / "final.npz")
    c = compare(one_process / "run", tmp_path / "run")
    assert c.returncode == 0 and "certified prefix" in c.stdout, c.stdout + c.stderr


def test_a_failing_rank_ends_the_job(tmp_path):
    r = train(2, tmp_path / "run", "--fail-at", "1", "--flip-rank", "1")
    # MPI_Abort with the exit code of an internal error: mpirun passes it on.
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dgrr: rank 1 aborts the MPI job" in r.stderr, r.stderr
    assert "planted failure at step 1" in r.stderr


def test_a_rank_that_exits_early_ends_the_job(tmp_path):
    # sys.exit(0) on rank 1 before the all-reduce: no exception to abort on,
    # and mpirun does not end a job for a rank that exits 0. Rank 0 must not
    # wait for it forever (the timeout in train() would fail the test): it is
    # told which rank left, and aborts.
    r = train(2, tmp_path / "run", "--exit-at", "1", "--flip-rank", "1")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "dgrr: rank 0 aborts the MPI job" in r.stderr, r.stderr
    assert "rank 1 left the job" in r.stderr, r.stderr


# --- in this process: a world of one, and what is refused -------------------

def test_mpi_without_a_launcher_is_refused():
    # Before communicator() below: a process has one communicator.
    with pytest.raises(dgrr.FailedPreconditionError, match="MPI launcher"):
        dgrr.communicator("mpi")


def test_a_world_of_one_without_mpirun(tmp_path):
    comm = dgrr.communicator()
    assert (comm.rank, comm.size, comm.backend) == (0, 1, "in-process")
    assert dgrr.communicator() is comm
    with pytest.raises(dgrr.InvalidArgumentError, match="communicator is rank 0 of 1"):
        dgrr.open(run_dir=tmp_path / "r", seed=1, world_size=2, communicator=comm)
    leaves = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = torch.zeros(2)
    comm.canonical_all_reduce(leaves, 0, 3, out)
    assert out.tolist() == [9.0, 12.0]
    with pytest.raises(dgrr.InvalidArgumentError, match="float32"):
        comm.canonical_all_reduce(leaves.double(), 0, 3, out)
    with pytest.raises(dgrr.InvalidArgumentError, match="cover 2 of the batch's 3"):
        comm.canonical_all_reduce(leaves[:2].clone(), 0, 3, out)


def test_data_parallel_refuses_bad_use(tmp_path):
    comm = dgrr.communicator()
    model = torch.nn.Linear(2, 2)
    with dgrr.open(run_dir=tmp_path / "r", seed=1, communicator=comm) as session:
        inst = dgrr.torch.instrument(session, model)
        with pytest.raises(dgrr.InvalidArgumentError, match="does not split"):
            dgrr.torch.DataParallel(inst, comm, batch=6, micro_batch=4)
        dp = dgrr.torch.DataParallel(inst, comm, batch=4, micro_batch=2)
        session.resume()
        inst.begin_step(0, (0, 4))
        with pytest.raises(dgrr.FailedPreconditionError, match="outside a micro-batch"):
            dp.backward(model(torch.ones(2, 2)).sum())
        batches = dp.micro_batches()
        next(batches)
        with pytest.raises(dgrr.FailedPreconditionError, match="0 of this rank's 2"):
            dp.all_reduce()
        inst.remove()
    with dgrr.open(run_dir=tmp_path / "d", seed=1, communicator=comm) as session:
        model = torch.nn.Linear(2, 2).double()
        with pytest.raises(dgrr.InvalidArgumentError, match="weight is torch.float64"):
            dgrr.torch.DataParallel(dgrr.torch.instrument(session, model), comm, batch=4)
