"""The tiny MLP of mlp_train.py trained by torch's DistributedDataParallel
under torchrun (gloo on 127.0.0.1), its buckets reduced by dgrr's
communication hook (dgrr.distributed.CanonicalReducer).

    torchrun --nproc-per-node N ddp_train.py RUN_DIR [--mode rank|leaf|ddp]
             [--steps S] [--ckpt-every K] [--leaf L] [--params-out FILE]
             [--grads-out FILE] [--flip-bit MODULE@STEP] [--flip-rank R]
             [--fail-at STEP] [--corrupt-at STEP]

--mode rank: one leaf per rank (plain: bits fixed at a fixed world size);
leaf: the model wrapped in LeafChunked(model, L), leaves of L examples
(bits fixed across world sizes); ddp: DDP's own all-reduce (no hook, the
baseline; not recorded as a collective). --grads-out: rank 0 writes, every
step, the reduced gradients and every rank's local gradient (gathered with
torch.distributed, mode rank only), so the test can redo the sum itself.
--flip-bit flips bit 13 of MODULE's first output element on rank --flip-rank
at STEP (forward only); --fail-at raises on rank --flip-rank at STEP; --corrupt-at flips a bit of its
fc1.weight after STEP's update (the per-step check must name the rank).
DGRR_TEST_KILL_AFTER_STEP=K SIGKILLs rank --flip-rank after step K.
"""

import argparse
import os
import random
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist

import dgrr
import dgrr.distributed
import dgrr.torch
from mlp_train import BATCH, SEED, Mlp, batch


class _FlipMantissaBit(torch.autograd.Function):
    """Identity for autograd, bit 13 of the first element's mantissa flipped
    forward (a relative change of about 2**-10): large enough to reach the
    loss's gradient through this small MLP, where a flip of the lowest bit
    is rounded away by the next layer."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.view(-1).view(torch.int32)[0] ^= 1 << 13
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad


def flip_bit_hook(at_step, state):
    def hook(module, inputs, output):
        return _FlipMantissaBit.apply(output) if state["step"] == at_step else None
    return hook


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--mode", default="leaf", choices=["rank", "leaf", "ddp"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--leaf", type=int, default=4)
    ap.add_argument("--flip-bit", default="", help="MODULE@STEP")
    ap.add_argument("--flip-rank", type=int, default=0)
    ap.add_argument("--audit-every", type=int, default=0,
                    help="dgrr.torch.NeighbourAudit every K steps (--flip-bit then fires in the rank's own "
                         "step only, as a transient fault would)")
    ap.add_argument("--fail-at", type=int, default=-1)
    ap.add_argument("--corrupt-at", type=int, default=-1,
                    help="flip a bit of fc1.weight on --flip-rank after this step's update")
    ap.add_argument("--params-out", default="")
    ap.add_argument("--grads-out", default="")
    args = ap.parse_args()

    info = dgrr.torch.determinism(threads=1)
    rank, world = dgrr.distributed.init_process_group("gloo", timeout_s=120)
    torch.manual_seed(SEED)            # the same initial parameters on every rank
    # Python's and NumPy's global generators are checkpointed too: seeded, so
    # that two runs' checkpoints agree where their training does (dgrr bisect
    # compares checkpoint digests).
    random.seed(SEED)
    np.random.seed(SEED)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    state = {"step": -1}
    if args.flip_bit and rank == args.flip_rank:
        module, at = args.flip_bit.split("@")
        dict(model.named_modules())[module].register_forward_hook(flip_bit_hook(int(at), state))

    # No world size in the configuration: the runs of any number of
    # processes are one logical run (in mode leaf they have the same bits).
    config = {"seed": SEED, "steps": args.steps, "lr": 1e-2, "batch": BATCH, "mode": args.mode,
              "leaf": args.leaf if args.mode == "leaf" else 0}
    kill_after = os.environ.get("DGRR_TEST_KILL_AFTER_STEP")
    grads_log = []
    with dgrr.distributed.open(args.run_dir, SEED, checkpoint_every=args.ckpt_every,
                               total_steps=args.steps, config=config, program_info=info) as session:
        comm = dgrr.distributed.communicator()
        # Under the hook every rank holds the same model and optimizer state.
        dgrr.torch.register_torch_state(session, model, optimizer, replicated=args.mode != "ddp")
        inst = dgrr.torch.instrument(session, model, optimizer)
        wrapped = dgrr.distributed.LeafChunked(model, args.leaf) if args.mode == "leaf" else model
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped)
        reducer = None
        if args.mode != "ddp":
            reducer = dgrr.distributed.CanonicalReducer(
                comm, inst, batch=BATCH, mode=args.mode, mean=args.mode == "rank",
                chunked=wrapped if args.mode == "leaf" else None)
            reducer.register(ddp)
        loss_fn = torch.nn.MSELoss()
        sum_loss = torch.nn.MSELoss(reduction="sum")
        audit = dgrr.torch.NeighbourAudit(inst, args.audit_every) if args.audit_every else None
        audited = 0
        start = session.resume()
        per = BATCH // world

        def share(module, x, y, r):
            """Rank r's forward and loss of the step's batch (x, y)."""
            lo_r, hi_r = reducer.shard(r) if reducer is not None else (r * per, (r + 1) * per)
            if args.mode == "leaf":
                out = module(x[lo_r:hi_r])
                return sum_loss(out, y[lo_r:hi_r]) * (1.0 / (BATCH * out.shape[1]))
            return loss_fn(module(x[lo_r:hi_r]), y[lo_r:hi_r])

        def recompute(r, step, x, y):
            """Rank r's share, on this process, for the audit: on the model
            (its LeafChunked in mode leaf), not DDP, with r's examples."""
            lo_r, hi_r = reducer.shard(r) if reducer is not None else (r * per, (r + 1) * per)
            flip_at, state["step"] = state["step"], -1   # the planted fault is this rank's own step's
            try:
                with inst.micro_batch(step * BATCH + lo_r, hi_r - lo_r):
                    share(wrapped, x, y, r).backward()
            finally:
                state["step"] = flip_at

        for step in range(start, args.steps):
            state["step"] = step
            x, y = batch(step)         # every rank makes the whole batch, uses its part
            if args.grads_out:
                # This rank's own gradient, outside the step (not recorded).
                lo, hi = reducer.shard()
                local = torch.autograd.grad(loss_fn(model(x[lo:hi]), y[lo:hi]),
                                            list(model.parameters()))
            if reducer is not None:
                reducer.begin_step(step, (step * BATCH, BATCH))
                lo, hi = reducer.shard()
            else:
                lo, hi = rank * per, (rank + 1) * per
                inst.begin_step(step, (step * BATCH + lo, per))
            if step == args.fail_at and rank == args.flip_rank:
                raise RuntimeError(f"planted failure at step {step}")
            if audit is not None:
                audit.begin_step(step)
            optimizer.zero_grad()
            # Mode leaf scales by the global batch, not the local one: every
            # example's gradient, and so every backward record, is then the
            # same whatever the world size (the hook sums, mean=False).
            loss = share(ddp, x, y, rank)
            loss.backward()
            if audit is not None and audit.check(step, lambda r: recompute(r, step, x, y)):
                audited += 1
            if args.grads_out:
                flat = torch.cat([g.reshape(-1) for g in local])
                gathered = [torch.empty_like(flat) for _ in range(world)]
                dist.all_gather(gathered, flat)
                reduced = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
                grads_log.append(torch.stack(gathered + [reduced]).numpy().copy())
            optimizer.step()
            if step == args.corrupt_at and rank == args.flip_rank:
                with torch.no_grad():   # silent data corruption on one rank
                    model.fc1.weight.view(-1)[:1].view(torch.int32).bitwise_xor_(1 << 20)
            session.end_step(step, loss.item())
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if kill_after is not None and step == int(kill_after) and rank == args.flip_rank:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if session.should_stop(step):
                break

    if rank == 0 and args.params_out:
        arrays = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
        for (pname, key, t) in dgrr.torch._optimizer_tensors(model, optimizer):
            arrays[f"opt.{pname}.{key}"] = t.detach().numpy().copy()
        np.savez(args.params_out, **arrays)
    if rank == 0 and args.grads_out:
        np.save(args.grads_out, np.stack(grads_log))
    if args.audit_every:
        print(f"rank {rank} of {world}: audited {audited} steps", flush=True)
    print(f"rank {rank} of {world}: started at step {start}", flush=True)
    dgrr.distributed.shutdown()


if __name__ == "__main__":
    main()
