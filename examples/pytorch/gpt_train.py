"""A small GPT in plain PyTorch, trained on dgrr's embedded arithmetic
corpus and recorded by dgrr (examples/pytorch/README.md).

    PYTHONPATH=build/python python examples/pytorch/gpt_train.py runs/gpt [--steps N] [--accum K]

`--accum K` trains each step's batch as K micro-batches of gradient
accumulation (each recorded with its own examples, `inst.micro_batch`), and
`--clip` clips the gradient norm, as nanoGPT-style scripts do.

The model is ordinary PyTorch; the lines marked `# dgrr` are all the
instrumentation there is.
"""

import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import dgrr                 # dgrr
import dgrr.torch           # dgrr


class Block(nn.Module):
    def __init__(self, dim, heads, seq_len, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(4 * dim, dim)
        self.mlp_drop = nn.Dropout(dropout)
        self.register_buffer("causal", torch.tril(torch.ones(seq_len, seq_len)).bool(),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.causal[:t, :t], float("-inf")).softmax(dim=-1)
        y = (self.attn_drop(att) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp_drop(self.fc_out(self.act(self.fc(self.ln2(x)))))


class Gpt(nn.Module):
    def __init__(self, vocab=256, dim=64, heads=4, layers=2, seq_len=32, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, seq_len, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Windows(torch.utils.data.Dataset):
    """Example i: bytes [i*T, i*T + T + 1) of the corpus (input, target shifted by one)."""

    def __init__(self, text, seq_len):
        self.data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
        self.seq_len = seq_len

    def __len__(self):
        return (len(self.data) - 1) // self.seq_len

    def __getitem__(self, i):
        w = self.data[i * self.seq_len: i * self.seq_len + self.seq_len + 1]
        return w[:-1], w[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches of gradient accumulation per step (divides --batch)")
    ap.add_argument("--clip", type=float, default=0.0, help="clip the gradient norm to this (0: off)")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--mode", default="full", help="full, trusted, sdc or off")
    ap.add_argument("--no-dgrr", action="store_true", help="train without dgrr (for the benchmark)")
    args = ap.parse_args()
    if args.accum < 1 or args.batch % args.accum != 0:
        ap.error(f"--accum {args.accum} does not divide --batch {args.batch}")

    info = dgrr.torch.determinism(threads=args.threads)                        # dgrr
    # Every global generator is seeded (dgrr checkpoints them all; Python's
    # and NumPy's are seeded from the OS otherwise).
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    model = Gpt(seq_len=args.seq_len)
    dgrr.torch.replace_dropout(model)                                          # dgrr
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    data = Windows(dgrr._dgrr.arithmetic_corpus(args.seed, 1 << 16), args.seq_len)
    sampler = dgrr.torch.PermutationSampler(len(data), args.seed)             # dgrr
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, sampler=sampler,
                                         drop_last=True,
                                         generator=torch.Generator().manual_seed(args.seed))
    config = {k: v for k, v in vars(args).items() if k not in ("run_dir", "threads", "mode")}

    if args.no_dgrr:
        return train_plain(args, model, optimizer, scheduler, loader)
    with dgrr.open(run_dir=args.run_dir, seed=args.seed, threads=args.threads, mode=args.mode,  # dgrr
                   checkpoint_every=args.ckpt_every, total_steps=args.steps,
                   config=config, program_info=info) as session:
        dgrr.torch.register_torch_state(session, model, optimizer, scheduler, sampler)  # dgrr
        inst = dgrr.torch.instrument(session, model, optimizer)                        # dgrr
        batches = dgrr.torch.EndlessBatches(loader)
        step = start = session.resume()                                                # dgrr
        loop_start, loop_cpu = time.perf_counter(), time.process_time()
        for step in range(start, args.steps):
            inst.begin_step(step, (step * args.batch, args.batch))                      # dgrr
            x, y = batches.next()
            optimizer.zero_grad()
            loss = accumulate(args, model, x, y, step, inst)
            if args.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            scheduler.step()
            session.end_step(step, loss.item())                                        # dgrr
            if step % 20 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if session.should_checkpoint(step):                                        # dgrr
                session.checkpoint(step)                                               # dgrr
            if session.should_stop(step):                                              # dgrr
                break
        print(f"started at step {start}, ended after step {step}", flush=True)
        print_loop_time(loop_start, loop_cpu)


def accumulate(args, model, x, y, step, inst):
    """The step's forward and backward as `args.accum` micro-batches; returns
    the batch's mean loss. With a dgrr instrumentation, each micro-batch runs
    inside `inst.micro_batch(first, count)`: its records (and dgrr Dropout's
    masks) carry that micro-batch's global examples."""
    if args.accum == 1:  # the whole batch at once
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        if inst is not None:
            inst.record_loss(loss)                                                     # dgrr
        loss.backward()
        return loss
    micro = args.batch // args.accum
    total = 0.0
    for k in range(args.accum):
        first = step * args.batch + k * micro
        xs, ys = x[k * micro:(k + 1) * micro], y[k * micro:(k + 1) * micro]
        if inst is None:
            dgrr.torch.random_context.set(seed=args.seed, step=step, examples=(first, micro))
            loss = F.cross_entropy(model(xs).flatten(0, 1), ys.flatten()) / args.accum
            loss.backward()
        else:
            with inst.micro_batch(first, micro):                                      # dgrr
                loss = F.cross_entropy(model(xs).flatten(0, 1), ys.flatten()) / args.accum
                inst.record_loss(loss)                                                 # dgrr
                loss.backward()
        total = total + loss.detach()
    return total


def train_plain(args, model, optimizer, scheduler, loader):
    """The same loop with no dgrr session (dgrr Dropout keyed by hand)."""
    batches = dgrr.torch.EndlessBatches(loader)
    loop_start, loop_cpu = time.perf_counter(), time.process_time()
    for step in range(args.steps):
        dgrr.torch.random_context.set(seed=args.seed, step=step,
                                      examples=(step * args.batch, args.batch))
        x, y = batches.next()
        optimizer.zero_grad()
        loss = accumulate(args, model, x, y, step, None)
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        scheduler.step()
    print(f"trained {args.steps} steps without dgrr, loss {loss.item():.4f}", flush=True)
    print_loop_time(loop_start, loop_cpu)


def print_loop_time(wall_start, cpu_start):
    """For bench/python/recording_overhead.py: the loop's wall time, and its
    CPU time (all threads of the process), which a busy machine disturbs less."""
    print(f"loop seconds {time.perf_counter() - wall_start:.6f}", flush=True)
    print(f"loop cpu seconds {time.process_time() - cpu_start:.6f}", flush=True)


if __name__ == "__main__":
    main()
