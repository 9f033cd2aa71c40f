#!/usr/bin/env python3
"""Recording overhead of dgrr.torch on a nanoGPT-style script (issue 30, item 1).

    PYTHONPATH=BUILD/python python bench/python/nanogpt_overhead.py [--steps N] [--rounds R]
        [--size small|large|xl] [--modes plain,controls,hooks,off,sdc,trusted,full]
        [--baseline DIR] [--paired plain,off,sdc,trusted,full,full-typesonly]

The script is what a user writes: 2 blocks, width 32, context 16, batch 8 in
4 micro-batches of gradient accumulation, its own LayerNorm class, dropout
(dgrr's Dropout where dgrr records, torch's otherwise), AdamW, gradient
clipping, one intra-op thread; one module (the last block's MLP) carries a
user's full backward hook (register_full_backward_hook), so its backward
goes through torch's full backward hook path. `--size large` widens it
(~57 ms steps on a 2-vCPU AMD EPYC with AVX2, ~38 ms on a 2-vCPU Intel Xeon
with AVX-512), `--size xl` more (width 128, 4 blocks: >= 50 ms on both).

Each mode runs in its own process, the modes interleaved over --rounds
rounds; each process reports the median wall and thread-CPU time of a step
(the first 5 steps not counted) and the CPU of the session's other threads
(the trace writer) per step. Reported: per mode the median and range over
rounds of the ratio to `plain` in the same round. The breakdown:
  controls  dgrr.torch.determinism() only (no session)
  hooks     controls + do-nothing forward / pre / tensor hooks where `full` puts dgrr's
  off       a session in mode off with instrument() (controls, session, hooks, bookkeeping)
  sdc / trusted / full  the recording modes (full - trusted ~ fingerprints of
            what trusted skips; writer = other threads' CPU)
With --baseline DIR (a directory holding another build's `dgrr` package, an
older recorder, say), each dgrr mode also runs as `MODE@base` with DIR first
on PYTHONPATH, interleaved in the same rounds: before and after side by side.
With --paired the variants share one process per round, one step of each in
turn (see PAIRED): the figures a loaded machine can resolve.
"""

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import math, statistics, sys, tempfile, time
import torch, torch.nn as nn, torch.nn.functional as F
mode, steps, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
uses_dgrr = mode != "plain"
if uses_dgrr:
    import dgrr, dgrr.torch
    dgrr.torch.determinism(threads=1, warn=False)

WIDTH, BLOCKS, CTX, BATCH, MICRO, VOCAB = {"small": (32, 2, 16, 8, 4, 64), "large": (96, 3, 32, 8, 4, 128),
                                           "xl": (128, 4, 32, 8, 4, 128)}[size]

class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n)); self.bias = nn.Parameter(torch.zeros(n))
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH); self.proj = nn.Linear(WIDTH, WIDTH)
        self.drop = nn.Dropout(0.1); self.heads = 4
    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))

class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, 4 * WIDTH); self.proj = nn.Linear(4 * WIDTH, WIDTH); self.drop = nn.Dropout(0.1)
    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x))))

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = LayerNorm(WIDTH), Attention(), LayerNorm(WIDTH), Mlp()
    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CTX, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln_f, self.head = LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)
    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))

torch.manual_seed(7)
model = Gpt()
grad_norms = []
model.blocks[-1].mlp.register_full_backward_hook(lambda m, gi, go: grad_norms.append(go[0].detach().norm()) and None)
if mode in ("off", "sdc", "trusted", "full"):
    dgrr.torch.replace_dropout(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
g = torch.Generator().manual_seed(11)
data = torch.randint(0, VOCAB, (steps, BATCH, CTX + 1), generator=g)
mb = BATCH // MICRO

def noop_hooks(model):
    def fwd(m, i, o): return None
    def gh(grad): return None
    def pre(m, inputs):
        x = inputs[0] if len(inputs) == 1 else None
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x = x.view_as(x); x.register_hook(gh); return (x,)
        return None
    for name, m in model.named_modules():
        if name and not any(True for _ in m.children()):
            m.register_forward_hook(fwd); m.register_forward_pre_hook(pre)

def loop(begin, micro, on_loss, end):
    walls, cpus = [], []
    for s in range(steps):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        begin(s)
        opt.zero_grad(set_to_none=True)
        for k in range(MICRO):
            xb, yb = data[s, k * mb:(k + 1) * mb, :-1], data[s, k * mb:(k + 1) * mb, 1:]
            with micro(s, k):
                loss = F.cross_entropy(model(xb).flatten(0, 1), yb.flatten()) / MICRO
                on_loss(loss)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        end(s, loss)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        if s >= 5:
            walls.append(w1 - w0); cpus.append(c1 - c0)
    return walls, cpus

import contextlib
nullctx = lambda s, k: contextlib.nullcontext()
others = 0
if mode in ("plain", "controls", "hooks"):
    if mode == "hooks":
        noop_hooks(model)
    walls, cpus = loop(lambda s: None, nullctx, lambda l: None, lambda s, l: l.item())
else:
    with tempfile.TemporaryDirectory() as d:
        with dgrr.open(run_dir=d + "/run", seed=7, threads=1, mode=mode, checkpoint_every=0,
                       total_steps=steps) as session:
            dgrr.torch.register_torch_state(session, model, opt)
            inst = dgrr.torch.instrument(session, model, opt)
            session.resume()
            p0, t0 = time.process_time_ns(), time.thread_time_ns()
            walls, cpus = loop(lambda s: inst.begin_step(s, (s * BATCH, BATCH)),
                               lambda s, k: inst.micro_batch(s * BATCH + k * mb, mb),
                               inst.record_loss, lambda s, l: session.end_step(s, l.item()))
            others = (time.process_time_ns() - p0) - (time.thread_time_ns() - t0)
print(statistics.median(walls) / 1e6, statistics.median(cpus) / 1e6, others / steps / 1e6)
"""


# --paired: the variants in one process, one step of each in turn (a new
# order each step), each its own model, optimizer and session, so the load
# of the machine falls on all alike; per variant the median thread-CPU of a
# step over the steps after the first 5, and the median of the per-step
# ratios to plain's step of the same turn. The determinism controls are on
# for all (their cost is `controls` in the process mode).
PAIRED = CHILD.split("torch.manual_seed(7)")[0].replace(
    "mode, steps, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]",
    "mode, steps, size = 'paired', int(sys.argv[2]), sys.argv[3]").replace(
    "uses_dgrr = mode != \"plain\"", "uses_dgrr = True") + r"""
import contextlib, random
variants = sys.argv[1].split(",")
data = torch.randint(0, VOCAB, (steps, BATCH, CTX + 1), generator=torch.Generator().manual_seed(11))
mb = BATCH // MICRO
stack = contextlib.ExitStack()
tmp = stack.enter_context(tempfile.TemporaryDirectory())

class Run:
    # Variants: plain (torch's Dropout, no dgrr), plain-<anything else> (a
    # second plain model: the harness's own resolution), plain-dgrrdropout (dgrr's
    # Dropout, its context set by hand, no session), off-noinst (that and a
    # session in mode off with the model's state registered, begin/end step,
    # no instrument()), MODE (the session in MODE with instrument()),
    # MODE-hooks (MODE through torch's hooks alone, no ModuleCall),
    # MODE-pure (the script's LayerNorm class declared pure= to instrument()),
    # full-typesonly (full's recorder as before issue 30).
    def __init__(self, variant):
        self.variant, mode = variant, variant.split("-")[0]
        torch.manual_seed(7)
        self.model = Gpt()
        self.model.blocks[-1].mlp.register_full_backward_hook(lambda m, gi, go: None)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01)
        self.session = self.inst = None
        self.dgrr_dropout = mode != "plain" or variant == "plain-dgrrdropout"
        if self.dgrr_dropout:
            dgrr.torch.replace_dropout(self.model)
        if mode != "plain":
            self.session = stack.enter_context(dgrr.open(
                run_dir=f"{tmp}/{variant}", seed=7, threads=1, mode=mode, checkpoint_every=0,
                total_steps=steps))
            dgrr.torch.register_torch_state(self.session, self.model, self.opt)
            if not variant.endswith("-noinst"):
                single = dgrr.torch._single_input
                calls = dgrr.torch._MODULE_CALLS
                if variant.endswith("-typesonly"):   # the recorder before issue 30's change
                    dgrr.torch._single_input = lambda m: isinstance(m, dgrr.torch._SINGLE_INPUT)
                if variant.endswith("-typesonly") or variant.endswith("-hooks"):
                    dgrr.torch._MODULE_CALLS = False   # torch's hooks, no ModuleCall
                pure = (LayerNorm,) if variant.endswith("-pure") else ()
                self.inst = dgrr.torch.instrument(self.session, self.model, self.opt, pure=pure)
                dgrr.torch._single_input, dgrr.torch._MODULE_CALLS = single, calls
            self.session.resume()
        self.cpu = []

    def micro(self, s, k):
        if self.inst:
            return self.inst.micro_batch(s * BATCH + k * mb, mb)
        if self.dgrr_dropout:
            dgrr.torch.random_context.set(seed=7, step=s, examples=(s * BATCH + k * mb, mb))
        return contextlib.nullcontext()

    def step(self, s):
        c0 = time.thread_time_ns()
        if self.inst:
            self.inst.begin_step(s, (s * BATCH, BATCH))
        elif self.session:
            self.session.begin_step(s)
        self.opt.zero_grad(set_to_none=True)
        for k in range(MICRO):
            xb, yb = data[s, k * mb:(k + 1) * mb, :-1], data[s, k * mb:(k + 1) * mb, 1:]
            with self.micro(s, k):
                loss = F.cross_entropy(self.model(xb).flatten(0, 1), yb.flatten()) / MICRO
                if self.inst:
                    self.inst.record_loss(loss)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if self.session:
            self.session.end_step(s, loss.item())
        else:
            loss.item()
        self.cpu.append(time.thread_time_ns() - c0)

runs = [Run(v) for v in variants]
order = random.Random(3)
for s in range(steps):
    turn = list(runs)
    order.shuffle(turn)
    for r in turn:
        r.step(s)
base = runs[0].cpu[5:]
for r in runs:
    ratios = [a / b for a, b in zip(r.cpu[5:], base)]
    print(r.variant, statistics.median(r.cpu[5:]) / 1e6, statistics.median(ratios))
stack.close()
"""


def paired(args, env):
    variants = args.paired.split(",")
    r = subprocess.run([sys.executable, "-c", PAIRED, ",".join(variants), str(args.steps), args.size],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"nanogpt_overhead: --paired failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return {line.split()[0]: (float(line.split()[1]), float(line.split()[2]))
            for line in r.stdout.splitlines()[-len(variants):]}


def run(mode, args, env):
    if mode.endswith("@base"):
        mode = mode[:-len("@base")]
        env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [args.baseline, env.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.steps), args.size],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"nanogpt_overhead: {mode} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return [float(v) for v in r.stdout.split()[-3:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", choices=["small", "large", "xl"], default="small")
    ap.add_argument("--modes", default="plain,controls,hooks,off,sdc,trusted,full")
    ap.add_argument("--baseline", help="a directory with another build's dgrr package: MODE@base")
    ap.add_argument("--paired", help="variants in one process, steps interleaved: plain first, "
                    "then any of plain-b (a second plain model: the null variant), "
                    "plain-dgrrdropout, off-noinst, off, sdc, trusted, full, "
                    "full-typesonly (full as before issue 30)")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if args.paired:
        rows = [paired(args, env) for _ in range(args.rounds)]
        print(f"size {args.size}, {args.steps} steps, {args.rounds} processes, variants paired step by step")
        print(f"{'variant':15} {'cpu ms':>8}  cpu ratio to plain's step of the same turn: median of processes (range)")
        for v in args.paired.split(","):
            med = [row[v][1] for row in rows]
            print(f"{v:15} {statistics.median(row[v][0] for row in rows):8.2f}  "
                  f"{statistics.median(med):.3f}x ({min(med):.3f}-{max(med):.3f})")
        return
    modes = args.modes.split(",")
    if args.baseline:
        modes = [v for m in modes for v in ([m, m + "@base"] if m in ("off", "sdc", "trusted", "full") else [m])]
    if "plain" not in modes:
        modes.insert(0, "plain")
    results = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in modes:
            results[m].append(run(m, args, env))
    print(f"size {args.size}, {args.steps} steps, {args.rounds} rounds (processes per mode)")
    print(f"{'mode':13} {'wall ms':>8} {'cpu ms':>8} {'writer ms':>9}  wall ratio (median, range)   cpu ratio (median, range)")
    for m in modes:
        rows = results[m]
        wr = [row[0] / p[0] for row, p in zip(rows, results["plain"])]
        cr = [(row[1] + row[2]) / p[1] for row, p in zip(rows, results["plain"])]
        med = lambda i: statistics.median(row[i] for row in rows)
        print(f"{m:13} {med(0):8.2f} {med(1):8.2f} {med(2):9.3f}  {statistics.median(wr):.3f}x "
              f"({min(wr):.3f}-{max(wr):.3f})      {statistics.median(cr):.3f}x ({min(cr):.3f}-{max(cr):.3f})")


if __name__ == "__main__":
    main()
