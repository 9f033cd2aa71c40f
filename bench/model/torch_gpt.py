#!/usr/bin/python3
"""PyTorch on CPU training the same GPT as dgrr's `small` preset: the yardstick
for the reference trainer's throughput (issue 14).

Shape and recipe from docs/model.md: byte vocabulary (256), seq_len 64, 4
layers, 128 channels, 4 heads, GELU (tanh), LayerNorm eps 1e-5, LM head tied
to the token embedding, attention and residual dropout 0.1, batch 16, AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.01 on matrices and embeddings only),
global-norm clipping at 1.0. 834,304 parameters, checked below.

Runs with Debian's python3-torch (1.13) under /usr/bin/python3. Debian's torch
links libblas.so.3, which is the slow reference BLAS unless OpenBLAS is
installed: `apt-get install libopenblas0-pthread` registers OpenBLAS in
update-alternatives with a higher priority, so torch picks it up with no
further step (`update-alternatives --display libblas.so.3-x86_64-linux-gnu`
shows the choice). The script reports which BLAS library the process loaded.

Prints one JSON line per measurement: threads, steps, tokens/s by wall time
and by process CPU time, and the BLAS in use.
"""
import argparse
import json
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-deterministic", action="store_true",
                   help="leave torch.use_deterministic_algorithms off")
    return p.parse_args()


args = parse_args()
# OpenBLAS's pthread build sizes its own pool from this, not from torch.
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
os.environ["OMP_NUM_THREADS"] = str(args.threads)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_gpt.py: needs Debian's python3-torch and libopenblas0-pthread "
             "(scripts/install-bench-deps.sh), run with /usr/bin/python3")

V, T, L, C, NH = 256, 64, 4, 128, 4
BATCH, DROPOUT = 16, 0.1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.attn_drop = nn.Dropout(DROPOUT)
        self.resid_drop = nn.Dropout(DROPOUT)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = att.masked_fill(~self.mask, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.resid_drop(self.proj(y))
        h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
        return x + self.resid_drop(self.mlp_proj(h))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # LM head tied to wte
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


def loaded_blas():
    # pip wheels (torch 2.x) carry MKL and oneDNN inside libtorch_cpu.
    if torch.backends.mkl.is_available():
        return "mkl (bundled)"
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line}
    if any("openblas" in lib for lib in libs):
        return "openblas"
    if libs:
        return "reference (" + ", ".join(sorted(os.path.basename(l) for l in libs)) + ")"
    return "none"


def main():
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(not args.no_deterministic)
    model = Gpt()
    params = sum(p.numel() for p in model.parameters())
    assert params == 834304, params
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    data = torch.randint(0, V, (BATCH * (args.warmup + args.steps), T + 1))

    def step(i):
        batch = data[i * BATCH:(i + 1) * BATCH]
        loss = model(batch[:, :T], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    model.train()
    for i in range(args.warmup):
        step(i)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    tokens = args.steps * BATCH * T
    print(json.dumps({
        "system": "torch", "torch": torch.__version__, "blas": loaded_blas(),
        "threads": args.threads, "deterministic": not args.no_deterministic,
        "steps": args.steps, "tokens_per_s_wall": round(tokens / wall),
        "cpu_s_per_step": round(cpu / args.steps, 5),
        "tokens_per_cpu_s": round(tokens / cpu),
    }))


main()
