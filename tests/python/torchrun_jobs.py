"""torchrun jobs of a test script, as the DDP and FSDP2 tests start them: a
`--standalone` rendezvous (a free local port, so jobs never share one), the
tests' folder on PYTHONPATH (the scripts import their neighbours), one
OpenMP thread unless the caller says otherwise, and a timeout, so nothing
hangs; and the tensors a script saved with np.savez, as bytes by name."""

import json
import os
import subprocess
import sys

import numpy as np

PYTHON = os.environ.get("DGRR_PYTHON", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
JOB_TIMEOUT = 240


def torchrun(script, processes, run_dir, *args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), HERE] if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
           script, str(run_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT, cwd=HERE)


def torchrun_ok(script, processes, run_dir, *args, env_extra=None):
    r = torchrun(script, processes, run_dir, *args, env_extra=env_extra)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def load(path):
    with np.load(path) as f:
        return {k: f[k].tobytes() for k in f.files}


def expect_bisect_names(r, step, rank, phase, name, from_checkpoint):
    """`dgrr bisect --json` of a good and a bad job (`r`, its completed
    process): divergence (exit 4) first seen at `step`, replayed from the
    checkpoint of `from_checkpoint`, and the bad run's first differing record
    is rank `rank`'s `phase` boundary `name` at that step."""
    assert r.returncode == 4, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["evidence"]["first_differing_step"] == step, r.stdout
    assert result["replay"]["first_step"] == step and result["replay"]["from_checkpoint"] == from_checkpoint, \
        r.stdout
    first = result["divergence"]["b"]
    assert (first["step"], first["rank"], first["phase"], first["name"]) == (step, rank, phase, name), r.stdout
