#!/usr/bin/env python3
"""Recording overhead of dgrr.torch on the example GPT, paired step by step.

    /usr/bin/python3 bench/python/paired_overhead.py BUILD_DIR [--steps N] [--batch B]
                                                       [--modes full,trusted,sdc,off,hooks]

recording_overhead.py times whole processes, and on a machine shared with
other work their ratios spread by several percent. This one runs, for each
mode, one process holding two copies of the example GPT (examples/pytorch:
same weights, same batch, the dgrr Dropout), one instrumented in that mode
and one plain, and alternates their training steps, so both see the same
machine at nearly the same moment. It reports the median CPU time of the
training thread per step of each, split into forward (with the loss record),
backward, optimizer step (with its records) and end of step, and the ratio
of the medians; then the same with the CPU time of the session's other
threads (the trace writer) per step added (bench/README.md). The plain copy's step is the baseline:
the same loop as gpt_train.py --no-dgrr. The first 10 steps are not counted.
Mode `hooks` puts no session on the first copy but do-nothing hooks where
`full` puts dgrr's (a forward hook, and a pre-hook that hands the module a
view of its input with a tensor hook on it): what torch itself charges for
hooks, the floor under any recorder built on them.
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pytorch" / "gpt_train.py"

CHILD = r"""
import importlib.util, statistics, sys, tempfile, time
import torch, torch.nn.functional as F
import dgrr, dgrr.torch
spec = importlib.util.spec_from_file_location("gpt_train", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
mode, steps, batch = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dgrr.torch.determinism(threads=1, warn=False)

def make():
    torch.manual_seed(7)
    model = example.Gpt()
    dgrr.torch.replace_dropout(model)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

def timed_step(model, opt, begin, on_loss, end):
    # Thread CPU ns of (forward with the loss, backward, optimizer, end).
    t0 = clock()
    begin()
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    on_loss(loss)
    t1 = clock()
    opt.zero_grad()
    loss.backward()
    t2 = clock()
    opt.step()
    t3 = clock()
    end(loss)
    t4 = clock()
    return (t1 - t0, t2 - t1, t3 - t2, t4 - t3)

(ma, oa), (mb, ob) = make(), make()
x, y = torch.randint(0, 256, (batch, 32)), torch.randint(0, 256, (batch, 32))
clock = time.thread_time_ns
phases = {"dgrr": [], "plain": []}

def hook_floor(model):
    # What torch itself charges for the hooks `full` installs on each leaf
    # module (a forward hook; a pre-hook handing the module a view of its
    # input, with a tensor hook on the view), with hooks that do nothing.
    def forward_hook(module, inputs, output):
        return None
    def gradient_hook(grad):
        return None
    def pre_hook(module, inputs):
        x = inputs[0] if len(inputs) == 1 else None
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x = x.view_as(x)
            x.register_hook(gradient_hook)
            return (x,)
        return None
    for name, module in model.named_modules():
        if name and not any(True for _ in module.children()):
            module.register_forward_hook(forward_hook)
            module.register_forward_pre_hook(pre_hook)

def random_context(s):
    dgrr.torch.random_context.set(seed=7, step=s, examples=(s * batch, batch))

def alternate(begin, on_loss, end):
    # The same step for both copies; only what the first one adds differs.
    for s in range(steps):
        measured = timed_step(ma, oa, lambda: begin(s), on_loss, lambda loss: end(s, loss))
        plain = timed_step(mb, ob, lambda: random_context(s), lambda loss: None,
                           lambda loss: loss.item())
        if s >= 10:
            phases["dgrr"].append(measured)
            phases["plain"].append(plain)

if mode == "hooks":
    hook_floor(ma)
    alternate(random_context, lambda loss: None, lambda s, loss: loss.item())
    others = 0
else:
    with tempfile.TemporaryDirectory() as d:
        with dgrr.open(run_dir=d + "/run", seed=7, threads=1, mode=mode, checkpoint_every=0,
                       total_steps=steps) as session:
            dgrr.torch.register_torch_state(session, ma, oa)
            inst = dgrr.torch.instrument(session, ma, oa)
            session.resume()
            loop_process, loop_thread = time.process_time_ns(), clock()
            alternate(lambda s: inst.begin_step(s, (s * batch, batch)), inst.record_loss,
                      lambda s, loss: session.end_step(s, loss.item()))
            # What the session's other threads (the trace writer) cost: the
            # plain copy starts none (one intra-op thread).
            others = (time.process_time_ns() - loop_process) - (clock() - loop_thread)
print("others", others / steps / 1000)
for k, rows in phases.items():
    cols = [statistics.median(c) / 1000 for c in zip(*rows)]
    total = statistics.median(sum(r) for r in rows) / 1000
    print(k, total, *cols)
"""


def run_mode(mode, args, env):
    """One process of the pairing: (measured, plain, other threads) as the child prints them."""
    r = subprocess.run([sys.executable, "-c", CHILD, str(EXAMPLE), mode, str(args.steps),
                        str(args.batch)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"paired_overhead: {mode} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    rows = {}
    for line in r.stdout.splitlines():
        name, *values = line.split()
        rows[name] = [float(v) for v in values]
    return rows["dgrr"], rows["plain"], rows["others"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16, help="the example's default: 16")
    ap.add_argument("--runs", type=int, default=1,
                    help="processes per mode, the modes interleaved; with more than one, the "
                         "median and range of their ratios too (a process's plain step, and "
                         "with it the ratio, varies by more than a run's own noise)")
    ap.add_argument("--modes", default="full,trusted,sdc,off,hooks",
                    help="dgrr recording modes, and `hooks`: do-nothing hooks where `full` "
                         "puts dgrr's (what torch charges for hooks, dgrr's floor)")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(args.build).resolve() / "python"),
               OMP_NUM_THREADS="1")
    print(f"example GPT, batch {args.batch}, {args.steps} steps (10 not counted), 1 thread; "
          f"median CPU us of the training thread per step: total (forward, backward, "
          f"optimizer, end of step); the ratio with the trace writer thread's CPU added")
    modes = args.modes.split(",")
    ratios = {mode: [] for mode in modes}
    for run in range(args.runs):
        for mode in modes:
            d, p, others = run_mode(mode, args, env)
            ratios[mode].append((d[0] + others) / p[0])
            print(f"  {mode:8s} {d[0]:8.0f} vs {p[0]:8.0f}  {d[0] / p[0]:6.3f}x   "
                  f"(+{d[1] - p[1]:.0f}, +{d[2] - p[2]:.0f}, +{d[3] - p[3]:.0f}, "
                  f"+{d[4] - p[4]:.0f}); with other threads' {others:.0f} "
                  f"{ratios[mode][-1]:6.3f}x", flush=True)
    if args.runs > 1:
        print(f"over {args.runs} processes, with other threads: median (min..max)")
        for mode in modes:
            r = ratios[mode]
            print(f"  {mode:8s} {statistics.median(r):6.3f}x ({min(r):.3f}..{max(r):.3f})")


if __name__ == "__main__":
    main()
