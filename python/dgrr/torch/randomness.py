"""Counter-based randomness: dgrr Dropout, whose masks come from dgrr's
Philox streams keyed by (seed, step, example, layer, site), the RandomContext
it reads them from (random_context, the default one, set by
Instrumentation.begin_step), and replace_dropout()."""

import torch as _torch

from .. import FailedPreconditionError, InvalidArgumentError, _dgrr


class RandomContext:
    """What a dgrr Dropout keys its masks by besides layer and site: the
    run's seed, the step, and the global index of each example in the batch
    (row i of the batch is example examples[i]). Instrumentation.begin_step
    sets the default context; set it yourself otherwise."""

    def __init__(self, seed=None, step=None, examples=None):
        self.seed, self.step, self.examples = seed, step, examples

    def set(self, seed=None, step=None, examples=None):
        if seed is not None:
            self.seed = int(seed)
        if step is not None:
            self.step = int(step)
        if examples is not None:
            if isinstance(examples, tuple) and len(examples) == 2:
                first, count = examples
                examples = range(int(first), int(first) + int(count))
            self.examples = [int(e) for e in examples]
        return self


random_context = RandomContext()   # the default one


class Dropout(_torch.nn.Module):
    """nn.Dropout with masks from dgrr's Philox streams keyed by
    (seed, step, example, layer, site): row i of the input is masked by
    example context.examples[i]'s stream alone, so a mask is the same
    whatever the batch it sits in, the thread count or the device, and a
    resumed run draws exactly what the uninterrupted one drew, with no
    generator state to save. The batch is dimension 0. Same scaling as
    nn.Dropout: kept elements are multiplied by 1/(1-p)."""

    def __init__(self, p=0.5, layer=0, site=0, context=None):
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise InvalidArgumentError(f"dgrr.torch.Dropout: p={p} is not in [0, 1]")
        self.p, self.layer, self.site = float(p), int(layer), int(site)
        self.context = context

    def extra_repr(self):
        return f"p={self.p}, layer={self.layer}, site={self.site}"

    def _context_for(self, shape):
        ctx = self.context or random_context
        if ctx.seed is None or ctx.step is None or ctx.examples is None:
            raise FailedPreconditionError(
                "dgrr.torch.Dropout: no seed, step or examples in its RandomContext; call "
                "Instrumentation.begin_step(step, (first, count)) or random_context.set(...)")
        if len(shape) == 0 or shape[0] != len(ctx.examples):
            raise InvalidArgumentError(
                f"dgrr.torch.Dropout (layer {self.layer}, site {self.site}): input of shape "
                f"{tuple(shape)} but {len(ctx.examples)} examples in the context; dimension 0 "
                "must be the batch")
        return ctx

    def keep_mask(self, shape):
        """The uint8 keep-mask for an input of `shape` under the context."""
        ctx = self._context_for(shape)
        mask = _torch.empty(tuple(shape), dtype=_torch.uint8)
        _dgrr.dropout_keep_mask(ctx.seed, ctx.step, ctx.examples, self.layer, self.site,
                                self.p, mask)
        return mask

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0
        if x.dtype in _SCALE_MASK_DTYPES and x.device.type == "cpu":
            # The scaled mask in one call: the same bits as the general path
            # below (keep.to(dtype) * scale, the scale rounded to the dtype
            # once), without its two intermediate tensors.
            ctx = self._context_for(x.shape)
            scaled = _torch.empty(tuple(x.shape), dtype=x.dtype)
            _dgrr.dropout_scale_mask(ctx.seed, ctx.step, ctx.examples, self.layer, self.site,
                                     self.p, scaled)
            return x * scaled
        keep = self.keep_mask(x.shape).to(device=x.device, dtype=x.dtype)
        return x * (keep * (1.0 / (1.0 - self.p)))


_SCALE_MASK_DTYPES = (_torch.float32, _torch.float64)


def replace_dropout(model, context=None):
    """Swaps every nn.Dropout in the model for a dgrr Dropout with the same
    p; layer is the module's index among the model's dropouts in
    named_modules() order (stable for a given architecture). Returns the
    names replaced."""
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is _torch.nn.Dropout:
                full = f"{name}.{child_name}" if name else child_name
                setattr(module, child_name, Dropout(child.p, len(replaced), 0, context))
                replaced.append(full)
    return replaced
