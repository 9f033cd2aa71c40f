"""examples/pytorch/gpt_train.py: a few steps recorded with two micro-batches
of gradient accumulation and gradient clipping, then replayed by dgrr."""

import os
import subprocess
import sys

CLI = os.environ.get("DGRR_CLI", "dgrr")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch", "gpt_train.py")


def test_the_gpt_example_records_and_replays(tmp_path):
    run = tmp_path / "gpt"
    r = subprocess.run([sys.executable, EXAMPLE, str(run), "--steps", "6", "--ckpt-every", "3",
                        "--batch", "4", "--accum", "2", "--clip", "1.0", "--threads", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started at step 0, ended after step 5" in r.stdout
    assert (run / "ckpt" / "step-00000002.h5").exists()
    # Its dropouts are dgrr's, keyed by (step, example, layer, site).
    r = subprocess.run([CLI, "replay", str(run), "--from", "3", "--to", "5"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replayed steps 3..5" in r.stdout and "from the checkpoint of step 2" in r.stdout, r.stdout
