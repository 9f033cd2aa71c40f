#!/usr/bin/env python3
"""dgrr full against torch's DebugMode with tensor hashing (issue 30, item 3).

    PYTHONPATH=BUILD/python python bench/python/debugmode_compare.py --cli BUILD/cli/dgrr
        [--steps N] [--plant-step K]

On nanogpt_overhead.py's script (small size, dgrr Dropout in every run so
the op sequences match): the step time plain, under
torch.utils._debug_mode.DebugMode with DebugMode.log_tensor_hashes(), and
recorded by dgrr in mode full; then, for three planted divergences from
step K (a bit flipped in one weight; one Linear run in bfloat16; the
micro-batch order reversed), a reference run and a planted run with each
tool, and what each names as the first divergence and how long finding it
takes: `dgrr compare A B` against DebugMode.check_hash_mismatches on the
runs' logs, one DebugMode per step (logs compared step by step, as its
docstring shows for one run), stopping at the first step that differs.
"""

import argparse
import contextlib
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import dgrr
import dgrr.torch
from torch.utils._debug_mode import DebugMode

HERE = pathlib.Path(__file__).resolve().parent
src = (HERE / "nanogpt_overhead.py").read_text()
child = src.split('CHILD = r"""', 1)[1].split('"""', 1)[0]
defs = child.split("torch.manual_seed(7)\nmodel = Gpt()", 1)[0]
ns = {}
_argv = sys.argv
sys.argv = ["x", "full", "1", "small"]
exec(compile(defs, "nanogpt_overhead.py", "exec"), ns)
sys.argv = _argv
WIDTH, BATCH, MICRO, CTX, VOCAB = ns["WIDTH"], ns["BATCH"], ns["MICRO"], ns["CTX"], ns["VOCAB"]
MB = BATCH // MICRO


def plant(model, kind, s, k_step, order):
    if s != k_step:
        return order
    if kind == "bitflip":
        w = model.blocks[0].mlp.fc.weight
        with torch.no_grad():
            w.view(-1).view(torch.int32)[5] ^= 1 << 12
    elif kind == "bf16":
        lin = model.blocks[1].mlp.fc
        lin.forward = lambda x: F.linear(x.bfloat16(), lin.weight.bfloat16(), lin.bias.bfloat16()).float()
    elif kind == "order":
        order = list(reversed(order))
    return order


def train(tool, steps, kind=None, k_step=-1, run_dir=None):
    """Returns (median step ms, per-step DebugMode logs or None)."""
    torch.manual_seed(7)
    model = ns["Gpt"]()
    dgrr.torch.replace_dropout(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(11)
    data = torch.randint(0, VOCAB, (steps, BATCH, CTX + 1), generator=g)
    order = list(range(MICRO))
    times, logs = [], []
    stack = contextlib.ExitStack()
    inst = session = None
    if tool == "dgrr":
        session = stack.enter_context(dgrr.open(run_dir=run_dir, seed=7, threads=1, mode="full",
                                                checkpoint_every=0, total_steps=steps))
        dgrr.torch.register_torch_state(session, model, opt)
        inst = dgrr.torch.instrument(session, model, opt)
        session.resume()
    with stack:
        for s in range(steps):
            order = plant(model, kind, s, k_step, order)
            t0 = time.perf_counter()
            with contextlib.ExitStack() as step_ctx:
                if tool == "debugmode":
                    dm = step_ctx.enter_context(DebugMode())
                    step_ctx.enter_context(DebugMode.log_tensor_hashes(hash_fn="hash_tensor"))
                if inst:
                    inst.begin_step(s, (s * BATCH, BATCH))
                opt.zero_grad(set_to_none=True)
                for k in order:
                    xb, yb = data[s, k * MB:(k + 1) * MB, :-1], data[s, k * MB:(k + 1) * MB, 1:]
                    if inst:
                        mctx = inst.micro_batch(s * BATCH + k * MB, MB)
                    else:
                        dgrr.torch.random_context.set(seed=7, step=s, examples=(s * BATCH + k * MB, MB))
                        mctx = contextlib.nullcontext()
                    with mctx:
                        loss = F.cross_entropy(model(xb).flatten(0, 1), yb.flatten()) / MICRO
                        if inst:
                            inst.record_loss(loss)
                        loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if session:
                    session.end_step(s, loss.item())
                else:
                    loss.item()
            times.append(time.perf_counter() - t0)
            if tool == "debugmode":
                logs.append(dm.logs)
    return statistics.median(times[2:]) * 1e3, logs


def debugmode_first(logs_a, logs_b):
    t0 = time.perf_counter()
    for s, (a, b) in enumerate(zip(logs_a, logs_b)):
        try:
            mism = DebugMode.check_hash_mismatches(a, b)
        except ValueError as e:
            return f"step {s}: logs differ in structure: {str(e).splitlines()[0][:160]}", time.perf_counter() - t0
        if mism:
            m = mism[0]
            idx = next((i for i, c in enumerate(a) if str(getattr(c, 'op', '')) == str(m.get('call'))), None)
            return (f"step {s}: {len(mism)} mismatching ops, first {m['call']} path {m.get('pytree_path')} "
                    f"rel_diff {m.get('rel_diff')}", time.perf_counter() - t0)
    return "no mismatch", time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--plant-step", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dgrr.torch.determinism(threads=1, warn=False)
    with tempfile.TemporaryDirectory() as d:
        plain, _ = train("plain", args.steps + 2)
        dm, _ = train("debugmode", args.steps + 2)
        full, _ = train("dgrr", args.steps + 2, run_dir=d + "/ovh")
        print(f"step ms: plain {plain:.2f}  debugmode+hash {dm:.2f} ({dm / plain:.2f}x)  "
              f"dgrr full {full:.2f} ({full / plain:.2f}x)")
        _, ref_logs = train("debugmode", args.steps)
        train("dgrr", args.steps, run_dir=d + "/ref")
        for kind in ("bitflip", "bf16", "order"):
            _, logs = train("debugmode", args.steps, kind, args.plant_step)
            found, secs = debugmode_first(ref_logs, logs)
            print(f"[{kind} at step {args.plant_step}] DebugMode ({secs * 1e3:.0f} ms): {found}")
            train("dgrr", args.steps, kind, args.plant_step, run_dir=d + "/" + kind)
            t0 = time.perf_counter()
            r = subprocess.run([args.cli, "compare", d + "/ref", d + "/" + kind],
                               capture_output=True, text=True)
            secs = time.perf_counter() - t0
            line = (r.stdout + r.stderr).strip().splitlines()
            print(f"[{kind} at step {args.plant_step}] dgrr compare (exit {r.returncode}, {secs * 1e3:.0f} ms): "
                  f"{' | '.join(l.strip() for l in line if 'diverg' in l.lower() or 'first' in l.lower())[:400]}")


if __name__ == "__main__":
    main()
