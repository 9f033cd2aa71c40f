"""A tiny torch MLP trained under dgrr: the program the Python tests run.

    python3 mlp_train.py RUN_DIR [--steps N] [--threads T] [--ckpt-every K]
                         [--dropout none|torch|dgrr] [--global-rng] [--scheduler]
                         [--sampler] [--no-restore optimizer|generators]
                         [--optimizer adam|sgd-momentum|rmsprop|adagrad|nadam]
                         [--flip-bit MODULE@STEP] [--plant KIND@MODULE@STEP]
                         [--params-out FILE]

By default every number is a function of the seed and the step: the model's
initial weights come from torch.manual_seed, each step's batch from a
generator seeded by (seed, step), so a resumed run draws the same batches.
The options add what real scripts do: dropout (torch's, from the global
generator, or dgrr's counter-based one), noise from torch's, Python's and
NumPy's global generators, an LR scheduler, and batches from a DataLoader
over a PermutationSampler. --no-restore leaves a piece of state out of the
checkpoints and --plant plants a bug (sum-order: one layer's forward sums in
another order; inplace-saved: an in-place op on a saved activation), for the
tests that dgrr compare names them.

Test hooks (environment, so the command line stays the recorded one):
  DGRR_TEST_KILL_AFTER_STEP=K   SIGKILL this process right after step K
                                (after its checkpoint, if one is due)
"""

import argparse
import os
import random
import signal
import sys

import numpy as np
import torch

import dgrr
import dgrr.torch

SEED = 1234
BATCH, DIM_IN, HIDDEN, DIM_OUT = 16, 8, 32, 4


NUM_EXAMPLES = 40   # for --sampler: 2.5 batches an epoch, so epochs end mid-run


class Mlp(torch.nn.Module):
    def __init__(self, dropout="none"):
        super().__init__()
        self.fc1 = torch.nn.Linear(DIM_IN, HIDDEN)
        self.act = torch.nn.Tanh()
        if dropout == "torch":
            self.drop = torch.nn.Dropout(0.25)
        elif dropout == "dgrr":
            self.drop = dgrr.torch.Dropout(0.25, layer=0)
        else:
            self.drop = None
        self.fc2 = torch.nn.Linear(HIDDEN, HIDDEN)
        self.act2 = torch.nn.ReLU()
        self.head = torch.nn.Linear(HIDDEN, DIM_OUT)

    def forward(self, x):
        h = self.act(self.fc1(x))
        if self.drop is not None:
            h = self.drop(h)
        return self.head(self.act2(self.fc2(h)))


def batch(step):
    g = torch.Generator().manual_seed(SEED * 1_000_003 + step)
    x = torch.randn(BATCH, DIM_IN, generator=g)
    y = torch.randn(BATCH, DIM_OUT, generator=g)
    return x, y


def dataset(num_examples):
    g = torch.Generator().manual_seed(SEED + 17)
    xs = torch.randn(num_examples, DIM_IN, generator=g)
    ys = torch.randn(num_examples, DIM_OUT, generator=g)
    return torch.utils.data.TensorDataset(xs, ys)


def global_noise(x):
    """Noise from the three global generators a script typically uses."""
    import numpy
    scale = 1e-2 * (1.0 + random.random()) * (1.0 + float(numpy.random.rand()))
    return x + scale * torch.randn(x.shape)


def plant_hook(kind, at_step, state):
    """A forward hook on one Linear: the planted bug at one step."""
    def sum_order(module, inputs, output):
        if state["step"] != at_step:
            return None
        # The same products summed in the opposite order along the
        # reduction dimension: equal in exact arithmetic, not in float32.
        x = inputs[0]
        return torch.nn.functional.linear(x.flip(-1), module.weight.flip(-1), module.bias)

    def inplace_saved(module, inputs, output):
        if state["step"] != at_step:
            return None
        # Written through .data, so autograd's version check does not see
        # it: the forward result stands, the activation saved for the
        # backward (the previous layer's tanh output) is corrupted.
        inputs[0].data[0].mul_(0.5)
        return None
    return {"sum-order": sum_order, "inplace-saved": inplace_saved}[kind]


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
    ap.add_argument("--dropout", choices=["none", "torch", "dgrr"], default="none")
    ap.add_argument("--global-rng", action="store_true")
    ap.add_argument("--scheduler", action="store_true")
    ap.add_argument("--sampler", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="the DataLoader's num_workers (--sampler)")
    ap.add_argument("--examples", type=int, default=NUM_EXAMPLES, help="the dataset's size (--sampler)")
    ap.add_argument("--no-restore", choices=["optimizer", "generators"], default=None)
    ap.add_argument("--optimizer", choices=["adam", "sgd-momentum", "rmsprop", "adagrad", "nadam"],
                    default="adam")
    ap.add_argument("--plant", default="", help="KIND@MODULE@STEP")
    args = ap.parse_args()

    info = dgrr.torch.determinism(threads=args.threads)
    torch.manual_seed(SEED)
    # Every generator dgrr registers is seeded: Python's and NumPy's are
    # seeded from the OS otherwise, and two runs' checkpoints would differ.
    random.seed(SEED)
    np.random.seed(SEED)
    model = Mlp(args.dropout)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    elif args.optimizer == "rmsprop":
        optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.5, centered=True)
    elif args.optimizer == "adagrad":
        optimizer = torch.optim.Adagrad(model.parameters(), lr=1e-2)
    elif args.optimizer == "nadam":
        optimizer = torch.optim.NAdam(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.5) if args.scheduler else None
    sampler = dgrr.torch.PermutationSampler(args.examples, SEED) if args.sampler else None
    # The loader gets a generator of its own: each iter() of a DataLoader
    # draws its workers' base seed from its generator, torch's global one by
    # default, and a resumed run creates its iterator at another point.
    batches = (dgrr.torch.EndlessBatches(torch.utils.data.DataLoader(
        dataset(args.examples), batch_size=BATCH, sampler=sampler, drop_last=True, num_workers=args.workers,
        generator=torch.Generator().manual_seed(SEED))) if sampler else None)

    state = {"step": -1}
    if args.flip_bit:
        module, at = args.flip_bit.split("@")
        # Registered before dgrr's hooks, so the recorded output is the
        # flipped one (hooks run in registration order).
        dict(model.named_modules())[module].register_forward_hook(flip_bit_hook(int(at), state))
    if args.plant:
        kind, module, at = args.plant.split("@")
        dict(model.named_modules())[module].register_forward_hook(plant_hook(kind, int(at), state))

    # The planted bug is left out of the configuration on purpose: a real
    # bug is not in the config either, and compare must find it in the trace.
    config = {"seed": SEED, "steps": args.steps, "lr": 1e-2, "batch": BATCH,
              "dropout": args.dropout, "global_rng": args.global_rng,
              "scheduler": args.scheduler, "sampler": args.sampler, "optimizer": args.optimizer}
    kill_after = os.environ.get("DGRR_TEST_KILL_AFTER_STEP")
    with dgrr.open(run_dir=args.run_dir, seed=SEED, threads=args.threads,
                   checkpoint_every=args.ckpt_every, total_steps=args.steps,
                   config=config, program_info=info) as session:
        if args.no_restore == "optimizer":
            # The planted bug: the optimizer's state left out of checkpoints.
            dgrr.torch.register_torch_state(session, model, scheduler=scheduler, sampler=sampler)
            dgrr.torch.materialize_optimizer_state(optimizer)
        else:
            dgrr.torch.register_torch_state(session, model, optimizer, scheduler, sampler,
                                            generators=args.no_restore != "generators")
        inst = dgrr.torch.instrument(session, model, optimizer)
        loss_fn = torch.nn.MSELoss()
        start = session.resume()
        for step in range(start, args.steps):
            state["step"] = step
            inst.begin_step(step, (step * BATCH, BATCH))
            x, y = batches.next() if batches else batch(step)
            if args.global_rng:
                x = global_noise(x)
            loss = loss_fn(model(x), y)
            inst.record_loss(loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
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
