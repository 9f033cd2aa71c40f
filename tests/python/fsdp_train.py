"""A small MLP trained with FSDP2 (fully_shard, every Linear and the root)
under torchrun (gloo on 127.0.0.1), its gradients reduce-scattered by dgrr's
canonical reduce-scatter (dgrr.fsdp), clipped to a total gradient norm of 0.1
by dgrr.fsdp.clip_grad_norm_, its shards recorded and checkpointed.

    torchrun --nproc-per-node N fsdp_train.py RUN_DIR [--steps S] [--ckpt-every K]
             [--params-out FILE] [--rs-out FILE] [--flip-bit MODULE@STEP] [--flip-rank R]

The head has 5 outputs, so over 2 ranks its shards are uneven (3 rows and 2,
FSDP2 pads the second). --params-out: rank 0 writes the full parameters and
AdamW state (gathered with DTensor.full_tensor(), which only moves bytes).
--rs-out: rank 0 writes, for every reduce-scatter of the run, every rank's
input and output and what gloo's own reduce_scatter_tensor gives for the same
inputs and op, so the test can redo the sum. --flip-bit flips bit 13 of
MODULE's first output element on rank --flip-rank at STEP (forward only, as
ddp_train.py does). DGRR_TEST_KILL_AFTER_STEP=K SIGKILLs rank --flip-rank
after step K.
"""

import argparse
import os
import random
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import dgrr
import dgrr.distributed
import dgrr.fsdp
import dgrr.torch
from ddp_train import flip_bit_hook

SEED = 4321
BATCH, DIM_IN, HIDDEN, DIM_OUT = 16, 8, 24, 5
LR = 1e-2


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(DIM_IN, HIDDEN)
        self.act = torch.nn.Tanh()
        self.fc2 = torch.nn.Linear(HIDDEN, HIDDEN)
        self.act2 = torch.nn.ReLU()
        self.head = torch.nn.Linear(HIDDEN, DIM_OUT)

    def forward(self, x):
        return self.head(self.act2(self.fc2(self.act(self.fc1(x)))))


def batch(step):
    g = torch.Generator().manual_seed(SEED * 1_000_003 + step)
    return torch.randn(BATCH, DIM_IN, generator=g), torch.randn(BATCH, DIM_OUT, generator=g)


def spy_on_reduce_scatter(log):
    """Wraps CanonicalReduceScatter.__call__: each call's input and output on
    every rank, and gloo's reduce_scatter_tensor of the same input and op."""
    original = dgrr.fsdp.CanonicalReduceScatter.__call__

    def call(self, output_tensor, input_tensor, group, op, async_op=False):
        given = input_tensor.detach().clone()
        default = torch.empty_like(output_tensor)
        dist.reduce_scatter_tensor(default, given.clone(), op=op, group=group)
        result = original(self, output_tensor, input_tensor, group, op, async_op)
        world = dist.get_world_size(group)
        inputs = [torch.empty_like(given) for _ in range(world)]
        outputs = [torch.empty_like(output_tensor) for _ in range(world)]
        defaults = [torch.empty_like(default) for _ in range(world)]
        dist.all_gather(inputs, given, group=group)
        dist.all_gather(outputs, output_tensor.detach().clone(), group=group)
        dist.all_gather(defaults, default, group=group)
        log.append({"op": str(getattr(op, "op", op)).split(".")[-1],
                    "inputs": torch.stack(inputs).numpy().copy(),
                    "outputs": torch.stack(outputs).numpy().copy(),
                    "defaults": torch.stack(defaults).numpy().copy()})
        return result

    dgrr.fsdp.CanonicalReduceScatter.__call__ = call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--flip-bit", default="", help="MODULE@STEP")
    ap.add_argument("--flip-rank", type=int, default=1)
    ap.add_argument("--params-out", default="")
    ap.add_argument("--rs-out", default="")
    args = ap.parse_args()

    info = dgrr.torch.determinism(threads=1)
    rank, world = dgrr.distributed.init_process_group("gloo", timeout_s=120)
    torch.manual_seed(SEED)            # the same initial parameters on every rank
    random.seed(SEED)
    np.random.seed(SEED)
    model = Mlp()
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model.fc1, model.fc2, model.head):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    state = {"step": -1}
    if args.flip_bit and rank == args.flip_rank:
        module, at = args.flip_bit.split("@")
        dict(model.named_modules())[module].register_forward_hook(flip_bit_hook(int(at), state))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rs_log = []
    if args.rs_out:
        spy_on_reduce_scatter(rs_log)

    config = {"seed": SEED, "steps": args.steps, "lr": LR, "batch": BATCH}
    kill_after = os.environ.get("DGRR_TEST_KILL_AFTER_STEP")
    per = BATCH // world
    lo, hi = rank * per, (rank + 1) * per
    with dgrr.distributed.open(args.run_dir, SEED, checkpoint_every=args.ckpt_every,
                               total_steps=args.steps, config=config, program_info=info) as session:
        dgrr.torch.register_torch_state(session, model, optimizer)
        inst = dgrr.torch.instrument(session, model, optimizer)
        dgrr.fsdp.canonical_reduce_scatter(model)
        loss_fn = torch.nn.MSELoss()
        start = session.resume()
        for step in range(start, args.steps):
            x, y = batch(step)         # every rank makes the whole batch, uses its part
            state["step"] = step
            inst.begin_step(step, (step * BATCH + lo, per))
            optimizer.zero_grad()
            loss = loss_fn(model(x[lo:hi]), y[lo:hi])
            inst.record_loss(loss)
            loss.backward()
            # The total gradient norm summed by dgrr (gloo only moves the
            # ranks' partial sums), the gradients scaled before they are recorded.
            dgrr.fsdp.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            session.end_step(step, loss.item())
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if kill_after is not None and step == int(kill_after) and rank == args.flip_rank:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if session.should_stop(step):
                break

    arrays = {}
    if args.params_out:
        for name, p in model.named_parameters():
            arrays[name] = p.full_tensor().detach().numpy().copy()
        for (pname, key, t) in dgrr.torch._optimizer_tensors(model, optimizer):
            full = t.full_tensor() if type(t).__name__ == "DTensor" else t
            arrays[f"opt.{pname}.{key}"] = full.detach().numpy().copy()
    if rank == 0 and args.params_out:
        np.savez(args.params_out, **arrays)
    if rank == 0 and args.rs_out:
        np.savez(args.rs_out, ops=np.array([e["op"] for e in rs_log]),
                 **{f"{k}{i}": e[k] for i, e in enumerate(rs_log) for k in ("inputs", "outputs", "defaults")})
    print(f"rank {rank} of {world}: started at step {start}", flush=True)
    dgrr.distributed.shutdown()


if __name__ == "__main__":
    main()
