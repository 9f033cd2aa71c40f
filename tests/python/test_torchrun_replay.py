"""dgrr replay, rollback and bisect of a torchrun job (docs/launch-record.md,
"torchrun"): the launch record names torchrun's job (2 processes on one
node), and the re-executor starts the whole job again under torchrun
(`python -m torch.distributed.run --standalone`) instead of one worker.

ddp_train.py (the tiny MLP, DDP with dgrr's hook in mode rank, 4 steps,
checkpoints after steps 1 and 3), every job 2 processes under a timeout:

- the launch record is dgrr.launch/2 with launcher torchrun, 2 per node, 1 node;
- `dgrr replay` of steps 2..3 restarts the job from step 1's checkpoint and
  certifies every record of both ranks;
- `dgrr rollback --step 2` re-executes step 2 from step 1's checkpoint under
  torchrun, and the same torchrun command then resumes at step 3 and ends
  bitwise as the uninterrupted run;
- `dgrr bisect` of a run whose rank 1 flipped a bit of its head's output at
  step 2 replays step 2 of both jobs from step 1's checkpoint and names step
  2, rank 1 and the head's output (compare puts every rank's forward and
  backward records of a step before any rank's reduced gradients, which
  hold rank 1's flipped contribution);
- the job started again with 1 process instead of 2 is refused, naming both
  world sizes, and changes nothing;
- a launch record whose torchrun job ran on 2 nodes, or whose worker command
  line is not torchrun's, is refused in one line.
"""

import json
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import torchrun_jobs

CLI = os.environ.get("DGRR_CLI", "dgrr")
PYTHON = os.environ.get("DGRR_PYTHON", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_train.py")
JOB_TIMEOUT = 240
ARGS = ["--mode", "rank", "--ckpt-every", "2"]


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in [e.get("PYTHONPATH", ""), HERE] if p)
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def torchrun(run_dir, *args, processes=2, ok=True):
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
           SCRIPT, str(run_dir), *ARGS, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=JOB_TIMEOUT, cwd=HERE)
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env(),
                          timeout=2 * JOB_TIMEOUT)


def load(path):
    with np.load(path) as f:
        return {k: f[k].tobytes() for k in f.files}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchrun")
    torchrun(root / "run", "--params-out", str(root / "final.npz"))
    # In memory: a re-execution runs the recorded command line, whose
    # --params-out names this file (rank 0 writes it when it stops).
    return types.SimpleNamespace(path=root, final=load(root / "final.npz"))


def test_the_launch_record_names_the_torchrun_job(recorded):
    launch = json.loads((recorded.path / "run" / "launch.json").read_text())
    assert launch["schema"] == "dgrr.launch/2"
    assert launch["launcher"] == {"name": "torchrun", "nproc_per_node": 2, "nnodes": 1}
    assert launch["argv"][1:3] == ["-u", SCRIPT]
    assert launch["script"] == SCRIPT


def test_replay_of_a_torchrun_job_certifies_both_ranks(recorded, tmp_path):
    r = cli("replay", recorded.path / "run", "--from", 2, "--to", 3)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2" in r.stderr, r.stderr
    assert "replayed steps 2..3" in r.stdout and "from the checkpoint of step 1" in r.stdout, r.stdout
    # Both ranks' step ends (2 steps each) verified.
    assert "4 step ends match the recorded traces" in r.stdout, r.stdout


def test_rollback_of_a_torchrun_job_then_the_same_command_resumes_bitwise(recorded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(recorded.path / "run", run)
    r = cli("rollback", run, "--step", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rolled back" in r.stdout and "re-executed steps 2..2 from the checkpoint of step 1" in r.stdout, r.stdout
    for k in range(2):
        assert (run / "ckpt" / f"step-00000002.rank-{k}.h5").exists()
        assert not (run / "ckpt" / f"step-00000003.rank-{k}.h5").exists()
    out = torchrun(run, "--params-out", str(tmp_path / "final.npz"))
    assert "rank 0 of 2: started at step 3" in out.stdout, out.stdout
    assert recorded.final == load(tmp_path / "final.npz")


def test_bisect_of_torchrun_jobs_names_the_flipped_step_and_rank(recorded, tmp_path):
    torchrun(tmp_path / "bad", "--flip-bit", "head@2", "--flip-rank", "1")
    r = cli("bisect", "--good", recorded.path / "run", "--bad", tmp_path / "bad", "--json", "--quiet")
    # The faulty rank's own record, not rank 0's reduced gradient (which
    # holds rank 1's flipped contribution and comes later in compare's order).
    torchrun_jobs.expect_bisect_names(r, step=2, rank=1, phase="forward", name="head.out", from_checkpoint=1)



def test_a_resume_at_another_world_size_is_refused_naming_both(recorded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(recorded.path / "run", run)
    r = torchrun(run, processes=1, ok=False)
    assert r.returncode != 0
    assert "step-00000003.h5: the run was recorded at world size 2, this resume has world size 1" in r.stderr, \
        r.stderr
    # Nothing of the run changed.
    for k in range(2):
        assert (run / f"rank{k}.trace").read_bytes() == (recorded.path / "run" / f"rank{k}.trace").read_bytes()


@pytest.mark.parametrize("edit, code, message", [
    (lambda l: l["launcher"].update(nnodes=2), 1, "torchrun job on 2 nodes"),
    (lambda l: l["argv"].pop(1), 1, "is not the `PYTHON -u SCRIPT ARGS` torchrun starts"),
    (lambda l: l["launcher"].update(nproc_per_node=4), 3, "nproc_per_node 4 differs from the traces' world size 2"),
    (lambda l: l.update(schema="dgrr.launch/1"), 3, "key 'launcher': is not part of dgrr.launch/1"),
])
def test_a_torchrun_record_dgrr_cannot_start_is_refused_in_one_line(recorded, tmp_path, edit, code, message):
    run = tmp_path / "run"
    shutil.copytree(recorded.path / "run", run)
    launch = json.loads((run / "launch.json").read_text())
    edit(launch)
    (run / "launch.json").write_text(json.dumps(launch))
    r = cli("replay", run)
    assert r.returncode == code, r.stdout + r.stderr
    assert message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
