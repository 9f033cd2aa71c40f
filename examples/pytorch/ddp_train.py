"""DistributedDataParallel recorded by dgrr, its gradients summed in dgrr's
canonical tree (docs/ddp.md).

    torchrun --nproc-per-node 2 examples/pytorch/ddp_train.py runs/ddp2
    torchrun --nproc-per-node 1 examples/pytorch/ddp_train.py runs/ddp1
    dgrr compare runs/ddp1 runs/ddp2      # mode leaf: "compared as logical runs", no divergence

A token-bag classifier (Embedding, LayerNorm, two Linear layers) on
synthetic sequences. The lines marked `# dgrr` are the whole change from a
plain DDP script. --mode leaf (the default) wraps the model in
LeafChunked so 1, 2 or 4 processes give the same bits; --mode rank is the
plain hook (one leaf per rank: the same bits at the same world size, at
plain DDP's cost). Killed and started again with the same command, a run
continues from its newest checkpoint.
"""

import argparse

import torch
import torch.nn.functional as F

import dgrr                      # dgrr
import dgrr.distributed          # dgrr
import dgrr.torch                # dgrr

VOCAB, SEQ, WIDTH, CLASSES = 64, 16, 32, 8


class BagClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.fc = torch.nn.Linear(WIDTH, WIDTH)
        self.act = torch.nn.GELU()
        self.head = torch.nn.Linear(WIDTH, CLASSES)

    def forward(self, tokens):
        h = self.norm(self.embed(tokens).mean(dim=1))
        return self.head(self.act(self.fc(h)))


def batch(seed, step, size):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    labels = tokens[:, :4].sum(dim=1) % CLASSES       # learnable from the tokens
    return tokens, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--leaf", type=int, default=8)
    ap.add_argument("--mode", choices=["leaf", "rank"], default="leaf")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    info = dgrr.torch.determinism(threads=1)                                     # dgrr
    rank, world = dgrr.distributed.init_process_group("gloo")                    # dgrr
    torch.manual_seed(args.seed)
    model = BagClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    config = {"steps": args.steps, "batch": args.batch, "leaf": args.leaf, "mode": args.mode,
              "seed": args.seed}
    with dgrr.distributed.open(args.run_dir, args.seed, checkpoint_every=20,     # dgrr
                               total_steps=args.steps, config=config, program_info=info) as session:
        dgrr.torch.register_torch_state(session, model, optimizer, replicated=True)  # dgrr
        inst = dgrr.torch.instrument(session, model, optimizer)                 # dgrr
        leaf = args.mode == "leaf"
        wrapped = dgrr.distributed.LeafChunked(model, args.leaf) if leaf else model   # dgrr
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped)
        reducer = dgrr.distributed.CanonicalReducer(                             # dgrr
            dgrr.distributed.communicator(), inst, batch=args.batch, mode=args.mode,
            chunked=wrapped if leaf else None, mean=not leaf)
        reducer.register(ddp)                                                    # dgrr
        for step in range(session.resume(), args.steps):                         # dgrr
            reducer.begin_step(step, (step * args.batch, args.batch))           # dgrr
            lo, hi = reducer.shard()                                             # dgrr
            tokens, labels = batch(args.seed, step, args.batch)
            logits = ddp(tokens[lo:hi])
            if leaf:
                # Scaled by the global batch: every example's gradient is
                # then the same whatever the number of processes.
                loss = F.cross_entropy(logits, labels[lo:hi], reduction="sum") * (1.0 / args.batch)
            else:
                loss = F.cross_entropy(logits, labels[lo:hi])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            session.end_step(step, loss.item())                                  # dgrr
            if session.should_checkpoint(step):                                  # dgrr
                session.checkpoint(step)                                         # dgrr
            if rank == 0 and step % 10 == 0:
                print(f"step {step}: loss {loss.item():.4f} (rank 0's share)", flush=True)
    dgrr.distributed.shutdown()                                              # dgrr


if __name__ == "__main__":
    main()
