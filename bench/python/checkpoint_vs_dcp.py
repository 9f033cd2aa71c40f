#!/usr/bin/env python3
"""Checkpoint write and restore of the same model+optimizer state: dgrr vs
torch.distributed.checkpoint (DCP) save/load.

    python3 bench/python/checkpoint_vs_dcp.py BUILD_DIR [--processes 2]
        [--width 1024] [--layers 4] [--rounds 7] [--dir DIR] [--per-rank]

Starts one torchrun job (gloo on 127.0.0.1, --standalone). Every process
holds the same model (an MLP of --layers Linear(width, width) layers with a
LayerNorm between, float32) and AdamW after one step (so the optimizer has
its step count and two moments per parameter), replicated as under DDP. Each
round, in an order alternating from round to round, a barrier between:

  dgrr  write: session.checkpoint(step) of a session opened over
        dgrr.distributed.communicator() with the model and optimizer
        registered (dgrr.torch.register_torch_state, replicated=True as a
        DDP script registers them, or not with --per-rank); the ranks
        compare the replicated tensors' fingerprints, each writes its shard
        (its share of the replicated tensors, checkpoint format v3; with
        --per-rank its whole state), fsync'd, and rank 0 the manifest.
        restore: a new session on the run directory (resume=True) with the
        state registered and session.resume(), which verifies the
        checkpoint's digests and copies it into the model and optimizer.
  dcp   write: torch.distributed.checkpoint.save({"model": model.state_dict(),
        "optim": optimizer.state_dict()}) with its FileSystemWriter (fsync'd;
        DCP de-duplicates replicated tensors, so each rank writes about
        1/world of them).
        restore: torch.distributed.checkpoint.load into the same state dicts,
        then optimizer.load_state_dict (the model's tensors are loaded in
        place).

Both restores are checked: the parameters and moments after a restore equal,
bit for bit, the state that was written (the state is perturbed before each
restore). Times are wall clock on rank 0 (the slowest rank decides: each
timed block ends with a barrier); the first round is not counted. Prints the
state size, each side's median write and restore time and range over rounds,
and the medians and ranges of the per-round ratios dgrr/dcp.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def child(args):
    import statistics
    import time

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import dgrr
    import dgrr.distributed
    import dgrr.torch

    dgrr.torch.determinism(threads=1, warn=False)
    rank, world = dgrr.distributed.init_process_group("gloo")
    comm = dgrr.distributed.communicator()
    torch.manual_seed(3)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.LayerNorm(args.width)]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, args.width)).square().mean().backward()
    opt.step()
    tensors = [p for p in model.parameters()] + [t for s in opt.state.values() for t in s.values()
                                                   if isinstance(t, torch.Tensor) and t.dim() > 0]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    reference = [t.detach().clone() for t in tensors]

    def perturb():
        with torch.no_grad():
            for t in tensors:
                t.add_(1.0)

    def check(what):
        for t, r in zip(tensors, reference):
            if not torch.equal(t, r):
                raise SystemExit(f"checkpoint_vs_dcp: {what} restored other bits")

    root = pathlib.Path(args.dir)

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dist.barrier()
        return time.perf_counter() - t0

    def dgrr_round(r):
        run = str(root / f"dgrr-{r}")
        with dgrr.distributed.open(run, 1, mode="off") as s:
            dgrr.torch.register_torch_state(s, model, opt, replicated=not args.per_rank)
            s.resume()
            s.begin_step(0)
            s.end_step(0, 0.0)
            w = timed(lambda: s.checkpoint(0))
        perturb()

        def restore():
            with dgrr.distributed.open(run, 1, mode="off") as s:
                dgrr.torch.register_torch_state(s, model, opt, replicated=not args.per_rank)
                if s.resume() != 1:
                    raise SystemExit("checkpoint_vs_dcp: dgrr did not resume after step 0")
        rd = timed(restore)
        check("dgrr")
        return w, rd

    def dcp_round(r):
        path = str(root / f"dcp-{r}")
        w = timed(lambda: dcp.save({"model": model.state_dict(), "optim": opt.state_dict()},
                                   checkpoint_id=path))
        perturb()

        def restore():
            state = {"model": model.state_dict(), "optim": opt.state_dict()}
            dcp.load(state, checkpoint_id=path)
            opt.load_state_dict(state["optim"])
        rd = timed(restore)
        check("dcp")
        return w, rd

    results = {"dgrr": [], "dcp": []}
    for r in range(args.rounds + 1):
        order = ["dgrr", "dcp"] if r % 2 == 0 else ["dcp", "dgrr"]
        for side in order:
            got = dgrr_round(r) if side == "dgrr" else dcp_round(r)
            if r > 0:
                results[side].append(got)
        if rank == 0:   # keep the disk use to one round's files
            for p in root.glob(f"*-{r}"):
                shutil.rmtree(p, ignore_errors=True)
        dist.barrier()

    if rank == 0:
        def ms(xs):
            return (f"{statistics.median(xs) * 1e3:7.1f} ms (range {min(xs) * 1e3:.1f}-"
                    f"{max(xs) * 1e3:.1f})")
        print(f"state: {nbytes / 2**20:.1f} MiB per rank ({len(tensors)} tensors: parameters and "
              f"AdamW moments), {world} processes, {args.rounds} rounds, dgrr's registered "
              f"{'per rank' if args.per_rank else 'replicated'}")
        for i, what in enumerate(("write", "restore")):
            for side in ("dgrr", "dcp"):
                print(f"  {what:7s} {side:4s} {ms([x[i] for x in results[side]])}")
            ratios = [a[i] / b[i] for a, b in zip(results["dgrr"], results["dcp"])]
            print(f"  {what:7s} dgrr/dcp: median {statistics.median(ratios):.2f}x "
                  f"(per-round range {min(ratios):.2f}-{max(ratios):.2f})")
    dgrr.distributed.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir", nargs="?", default="build")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default="")
    ap.add_argument("--per-rank", action="store_true",
                    help="register dgrr's state per rank (each shard holds its rank's whole state)")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    build = pathlib.Path(args.build_dir).resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(build / "python"), env.get("PYTHONPATH", "")] if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="dgrr-ckpt-bench-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(args.processes), os.path.abspath(__file__), "--child",
               "--width", str(args.width), "--layers", str(args.layers), "--rounds", str(args.rounds),
               "--dir", args.dir or tmp] + (["--per-rank"] if args.per_rank else [])
        sys.exit(subprocess.run(cmd, env=env).returncode)


if __name__ == "__main__":
    main()
