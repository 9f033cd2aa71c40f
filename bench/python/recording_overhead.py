#!/usr/bin/env python3
"""Recording overhead of dgrr.torch on the example GPT (examples/pytorch).

    /usr/bin/python3 bench/python/recording_overhead.py BUILD_DIR [--steps N] [--rounds R] [--threads T]

Trains the example model without dgrr (the baseline: the same loop, the same
dgrr Dropout keyed by hand) and with a session in each recording mode, in
separate processes, interleaved round by round (the order rotates each round
so that no variant always runs first after a cold start). Each process reports
the wall time of its training loop alone (no interpreter start-up, no torch
import, no checkpoints: --ckpt-every 0). Prints the median per variant and its
ratio to the baseline measured in the same run (bench/README.md).
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pytorch" / "gpt_train.py"
VARIANTS = ["none", "off", "sdc", "trusted", "full"]


def run_once(build, variant, args, scratch):
    run_dir = pathlib.Path(tempfile.mkdtemp(dir=scratch))
    cmd = [sys.executable, str(EXAMPLE), str(run_dir / "run"), "--steps", str(args.steps),
           "--threads", str(args.threads), "--ckpt-every", "0"]
    cmd += ["--no-dgrr"] if variant == "none" else ["--mode", variant]
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(build).resolve() / "python"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"recording_overhead: {variant} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    m = re.search(r"loop seconds ([0-9.]+)", r.stdout)
    if not m:
        sys.exit(f"recording_overhead: {variant} printed no loop time:\n{r.stdout}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    times = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="dgrr-torch-overhead-") as scratch:
        for rnd in range(args.rounds):
            order = VARIANTS[rnd % len(VARIANTS):] + VARIANTS[:rnd % len(VARIANTS)]
            for v in order:
                times[v].append(run_once(args.build, v, args, scratch))
    base = statistics.median(times["none"])
    print(f"example GPT, {args.steps} steps, {args.threads} thread(s), {args.rounds} rounds; "
          f"median loop seconds and ratio to no dgrr")
    for v in VARIANTS:
        med = statistics.median(times[v])
        print(f"  {v:8s} {med:8.3f} s  {med / base:6.3f}x   (min {min(times[v]):.3f}, max {max(times[v]):.3f})")


if __name__ == "__main__":
    main()
