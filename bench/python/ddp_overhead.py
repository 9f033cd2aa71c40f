#!/usr/bin/env python3
"""DDP with dgrr's communication hook vs DDP's own all-reduce, same script.

    python3 bench/python/ddp_overhead.py BUILD_DIR [--processes 2] [--batch 16]
                                          [--leaf 4] [--rounds 15] [--steps 8]

Starts one torchrun job (gloo on 127.0.0.1, --standalone) whose every process
holds three DistributedDataParallel copies of the example GPT
(examples/pytorch/gpt_train.py, dropout off, same initial weights, same
batches, one intra-op thread each):

  ddp   DDP's own all-reduce (gloo's ring sums; the baseline)
  rank  dgrr's hook, mode "rank" (one leaf per rank: plain DDP's compute)
  leaf  dgrr's hook, mode "leaf" (the model wrapped in LeafChunked with
        leaves of --leaf examples: world-size invariant)

and runs them in interleaved rounds (each round --steps training steps of
each copy, in an order rotated from round to round, a barrier between
blocks), so the three see the same machine at nearly the same moment. A
step is forward, backward (with the gradient reduction) and AdamW's update,
timed by wall clock on rank 0 (the collective waits are part of the cost).
The first round is not counted. Prints, per copy, the median step time and
its range over rounds, and each hook's ratio to ddp: the median of the
per-round ratios and their range. No session records here: this is the
hook's cost alone (recording costs are paired_overhead.py's).
"""

import argparse
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pytorch" / "gpt_train.py"


def child(args):
    import importlib.util
    import statistics
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import dgrr.distributed
    import dgrr.torch

    spec = importlib.util.spec_from_file_location("gpt_train", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    dgrr.torch.determinism(threads=1, warn=False)
    rank, world = dgrr.distributed.init_process_group("gloo")
    comm = dgrr.distributed.communicator()

    def make(mode):
        torch.manual_seed(7)
        model = example.Gpt(dropout=0.0)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        if mode == "ddp":
            return torch.nn.parallel.DistributedDataParallel(model), opt
        wrapped = dgrr.distributed.LeafChunked(model, args.leaf) if mode == "leaf" else model
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped)
        reducer = dgrr.distributed.CanonicalReducer(comm, batch=args.batch, mode=mode,
                                                    chunked=wrapped if mode == "leaf" else None)
        reducer.register(ddp)
        return ddp, opt

    copies = {m: make(m) for m in ("ddp", "rank", "leaf")}
    per = args.batch // world
    lo, hi = rank * per, (rank + 1) * per
    g = torch.Generator().manual_seed(11)
    data = [(torch.randint(0, 256, (args.batch, 32), generator=g),
             torch.randint(0, 256, (args.batch, 32), generator=g)) for _ in range(args.steps)]

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x[lo:hi]).flatten(0, 1), y[lo:hi].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    names = list(copies)
    times = {m: [] for m in names}
    for r in range(args.rounds + 1):
        order = names[r % len(names):] + names[:r % len(names)]
        for m in order:
            model, opt = copies[m]
            dist.barrier()
            t0 = time.perf_counter()
            for x, y in data:
                step(model, opt, x, y)
            dist.barrier()
            if r > 0:
                times[m].append((time.perf_counter() - t0) / args.steps * 1000)
    if rank == 0:
        for m in names:
            t = times[m]
            print(f"{m:5s} step {statistics.median(t):8.2f} ms  (range {min(t):.2f} .. {max(t):.2f})")
        for m in ("rank", "leaf"):
            ratios = [a / b for a, b in zip(times[m], times["ddp"])]
            print(f"{m:5s} / ddp  ratio median {statistics.median(ratios):.3f}  "
                  f"(range {min(ratios):.3f} .. {max(ratios):.3f}, {len(ratios)} rounds)")
    dgrr.distributed.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir", nargs="?", default="build")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--leaf", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(pathlib.Path(args.build_dir).resolve() / "python"), env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(args.processes), __file__, "--child",
           "--batch", str(args.batch), "--leaf", str(args.leaf), "--rounds", str(args.rounds),
           "--steps", str(args.steps)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"ddp_overhead: the torchrun job failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    print(f"{args.processes} processes, batch {args.batch} (local {args.batch // args.processes}), "
          f"leaf {args.leaf}, {args.rounds} rounds of {args.steps} steps each, gloo on 127.0.0.1")
    print(r.stdout, end="")


if __name__ == "__main__":
    main()
