"""A tiny torch MLP trained under dgrr: the program the Python tests run.

    python3 mlp_train.py RUN_DIR [--steps N] [--threads T] [--ckpt-every K]
                         [--flip-bit MODULE@STEP] [--params-out FILE]

Every number is a function of the seed and the step: the model's initial
weights come from torch.manual_seed, each step's batch from a generator
seeded by (seed, step), so a resumed run draws the same batches.

Test hooks (environment, so the command line stays the recorded one):
  DGRR_TEST_KILL_AFTER_STEP=K   SIGKILL this process right after step K
                                (after its checkpoint, if one is due)
"""

import argparse
import os
import signal
import sys

import numpy as np
import torch

import dgrr
import dgrr.torch

SEED = 1234
BATCH, DIM_IN, HIDDEN, DIM_OUT = 16, 8, 32, 4


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
    x = torch.randn(BATCH, DIM_IN, generator=g)
    y = torch.randn(BATCH, DIM_OUT, generator=g)
    return x, y


class _FlipLowestBit(torch.autograd.Function):
    """Identity for autograd, one flipped bit forward: the planted bug
    changes the forward value only, and the graph stays whole."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.view(-1).view(torch.int32)[0] ^= 1
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad


def flip_bit_hook(at_step, state):
    """A forward hook that flips the lowest mantissa bit of the module's
    first output element at one step: a planted, one-bit bug."""
    def hook(module, inputs, output):
        if state["step"] != at_step:
            return None
        return _FlipLowestBit.apply(output)
    return hook


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--flip-bit", default="", help="MODULE@STEP")
    ap.add_argument("--params-out", default="")
    args = ap.parse_args()

    info = dgrr.torch.deterministic(threads=args.threads)
    torch.manual_seed(SEED)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    state = {"step": -1}
    if args.flip_bit:
        module, at = args.flip_bit.split("@")
        # Registered before dgrr's hooks, so the recorded output is the
        # flipped one (hooks run in registration order).
        dict(model.named_modules())[module].register_forward_hook(flip_bit_hook(int(at), state))

    # The planted bug is left out of the configuration on purpose: a real
    # bug is not in the config either, and compare must find it in the trace.
    config = {"seed": SEED, "steps": args.steps, "lr": 1e-2, "batch": BATCH}
    kill_after = os.environ.get("DGRR_TEST_KILL_AFTER_STEP")
    with dgrr.open(run_dir=args.run_dir, seed=SEED, threads=args.threads,
                   checkpoint_every=args.ckpt_every, total_steps=args.steps,
                   config=config, program_info=info) as session:
        dgrr.torch.register_torch_state(session, model, optimizer)
        inst = dgrr.torch.instrument(session, model, optimizer)
        loss_fn = torch.nn.MSELoss()
        start = session.resume()
        for step in range(start, args.steps):
            state["step"] = step
            session.begin_step(step)
            x, y = batch(step)
            inst.examples = (step * BATCH, BATCH)
            loss = loss_fn(model(x), y)
            inst.record_loss(loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            session.end_step(step, loss.item())
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if kill_after is not None and step == int(kill_after):
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if session.should_stop(step):
                break
        print(f"started at step {start}, ended after step {step}", flush=True)

    if args.params_out:
        arrays = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
        for (pname, key, t) in dgrr.torch._optimizer_tensors(model, optimizer):
            arrays[f"opt.{pname}.{key}"] = t.detach().numpy().copy()
        np.savez(args.params_out, **arrays)


if __name__ == "__main__":
    main()
