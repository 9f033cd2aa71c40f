"""The tiny MLP of mlp_train.py trained data-parallel: one process, or one
process per rank under mpirun. The result is meant to be bitwise the same
for any number of processes (dgrr.torch.DataParallel: per-example gradients
summed in dgrr's canonical tree).

    python3 dp_train.py RUN_DIR [--steps N] [--ckpt-every K] [--micro-batch M]
                        [--flip-bit MODULE@STEP] [--fail-at STEP] [--flip-rank R]
                        [--params-out FILE]
    mpirun -np 2 python3 dp_train.py RUN_DIR ...

--flip-bit flips one bit of MODULE's output at STEP on rank R only (every
micro-batch of that rank): the planted bug `dgrr compare` must name with its
rank. --fail-at STEP raises on rank R before the all-reduce, --exit-at STEP
leaves by sys.exit(0) there: either way the job must end (dgrr aborts it)
rather than leave the other ranks waiting.
DGRR_TEST_KILL_AFTER_STEP=K (environment, so the command line stays the
recorded one) SIGKILLs rank R right after step K. --params-out: rank 0 writes the final parameters and Adam state.
"""

import argparse
import os
import signal
import sys

import numpy as np
import torch

import dgrr
import dgrr.torch
from mlp_train import BATCH, SEED, Mlp, batch, flip_bit_hook


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--flip-bit", default="", help="MODULE@STEP")
    ap.add_argument("--flip-rank", type=int, default=0)
    ap.add_argument("--fail-at", type=int, default=-1, help="raise on --flip-rank at this step")
    ap.add_argument("--exit-at", type=int, default=-1,
                    help="sys.exit(0) on --flip-rank at this step, before the all-reduce")
    ap.add_argument("--params-out", default="")
    args = ap.parse_args()

    comm = dgrr.communicator()
    info = dgrr.torch.determinism(threads=1)
    torch.manual_seed(SEED)            # the same initial parameters on every rank
    model = Mlp("dgrr")                # dgrr Dropout: keyed by example, not by rank
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    state = {"step": -1}
    if args.flip_bit and comm.rank == args.flip_rank:
        module, at = args.flip_bit.split("@")
        dict(model.named_modules())[module].register_forward_hook(flip_bit_hook(int(at), state))

    # No world size in the configuration: runs with any number of processes
    # are the same logical run.
    config = {"seed": SEED, "steps": args.steps, "lr": 1e-2, "batch": BATCH,
              "micro_batch": args.micro_batch, "data_parallel": True}
    kill_after = os.environ.get("DGRR_TEST_KILL_AFTER_STEP")
    with dgrr.open(run_dir=args.run_dir, seed=SEED, checkpoint_every=args.ckpt_every,
                   total_steps=args.steps, config=config, program_info=info,
                   communicator=comm) as session:
        dgrr.torch.register_torch_state(session, model, optimizer)
        inst = dgrr.torch.instrument(session, model, optimizer)
        dp = dgrr.torch.DataParallel(inst, comm, BATCH, micro_batch=args.micro_batch)
        loss_fn = torch.nn.MSELoss()
        start = session.resume()
        for step in range(start, args.steps):
            state["step"] = step
            inst.begin_step(step, (step * BATCH, BATCH))
            x, y = batch(step)         # every rank makes the whole batch, uses its part
            for lo, hi in dp.micro_batches():
                dp.backward(loss_fn(model(x[lo:hi]), y[lo:hi]))
            if step == args.fail_at and comm.rank == args.flip_rank:
                raise RuntimeError(f"planted failure at step {step}")
            if step == args.exit_at and comm.rank == args.flip_rank:
                sys.exit(0)
            loss = dp.all_reduce()
            optimizer.step()
            session.end_step(step, loss)
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if kill_after is not None and step == int(kill_after) and comm.rank == args.flip_rank:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if session.should_stop(step):
                break

    if args.params_out and comm.rank == 0:
        arrays = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
        for (pname, key, t) in dgrr.torch._optimizer_tensors(model, optimizer):
            arrays[f"opt.{pname}.{key}"] = t.detach().numpy().copy()
        np.savez(args.params_out, **arrays)
    print(f"rank {comm.rank} of {comm.size}: started at step {start}", flush=True)


if __name__ == "__main__":
    main()
