#!/usr/bin/env python3
"""Recording overhead of dgrr.torch on the example GPT (examples/pytorch).

    /usr/bin/python3 bench/python/recording_overhead.py BUILD_DIR [--steps N] [--rounds R] [--threads T]
                                                          [--batch B]

Trains the example model without dgrr (the baseline: the same loop, the same
dgrr Dropout keyed by hand) and with a session in each recording mode, in
separate processes, interleaved round by round (the order rotates each round
so that no variant always runs first after a cold start). Each process reports
the wall time and the CPU time of its training loop alone (no interpreter
start-up, no torch import, no checkpoints: --ckpt-every 0). Prints, for each
clock, the median per variant and its ratio to the baseline measured in the
same run, and the spread of the per-round ratios (each round's variant over
that round's baseline) (bench/README.md). On a machine shared with other work,
the CPU time (the process's own, all threads) is the steadier of the two.
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
           "--threads", str(args.threads), "--ckpt-every", "0", "--batch", str(args.batch)]
    cmd += ["--no-dgrr"] if variant == "none" else ["--mode", variant]
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(build).resolve() / "python"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"recording_overhead: {variant} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    wall = re.search(r"loop seconds ([0-9.]+)", r.stdout)
    cpu = re.search(r"loop cpu seconds ([0-9.]+)", r.stdout)
    if not wall or not cpu:
        sys.exit(f"recording_overhead: {variant} printed no loop time:\n{r.stdout}")
    return {"wall": float(wall.group(1)), "cpu": float(cpu.group(1))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    times = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="dgrr-torch-overhead-") as scratch:
        for rnd in range(args.rounds):
            order = VARIANTS[rnd % len(VARIANTS):] + VARIANTS[:rnd % len(VARIANTS)]
            for v in order:
                times[v].append(run_once(args.build, v, args, scratch))
    print(f"example GPT, batch {args.batch}, {args.steps} steps, {args.threads} thread(s), "
          f"{args.rounds} rounds; median loop seconds, ratio of medians to no dgrr, and the "
          f"min..max of the per-round ratios")
    for clock in ("wall", "cpu"):
        base = [t[clock] for t in times["none"]]
        print(f" {clock} time:")
        for v in VARIANTS:
            mine = [t[clock] for t in times[v]]
            ratios = [m / b for m, b in zip(mine, base)]
            print(f"  {v:8s} {statistics.median(mine):8.3f} s  {statistics.median(mine) / statistics.median(base):6.3f}x"
                  f"   (rounds {min(ratios):.3f}..{max(ratios):.3f})")


if __name__ == "__main__":
    main()
