"""The neighbour audit across torch.distributed ranks (docs/python.md, "The
neighbour audit"): every `every` steps each rank recomputes its neighbour's
share of the step, rank (r + 1) % world, from the parameters as they are
before the optimizer step, and compares the fingerprints of every forward
and backward record with those the neighbour recorded for real. A rank whose
arithmetic is silently wrong is named by the rank that audits it, even when
the all-reduce has already spread its wrong gradient to every rank (so the
per-step parameter check sees all ranks agree). `dgrr train --audit-every`
does the same for the reference model (docs/model.md, "The audit").

It works when a rank's share is a function of the parameters, its inputs
and dgrr's randomness alone (dgrr Dropout is keyed by example, not by rank;
torch's own Dropout is not, and is reported as a difference). What is
compared is what the session's mode records of the forward and backward
passes (full: every module output, input gradient and the loss; trusted:
fewer outputs), so the audit needs one of those modes.

This module only arms the session's tap, runs the program's recomputation
and compares: what a rank's share is, the program says (recompute)."""

import torch as _torch

from .. import DivergenceError, FailedPreconditionError, InvalidArgumentError


class NeighbourAudit:
    """Audits the neighbour's share every `every` steps (step % every == 0).

        audit = dgrr.torch.NeighbourAudit(inst, every=10)
        for step in range(session.resume(), steps):
            inst.begin_step(step, (step * B + lo, hi - lo))   # or a reducer's begin_step
            audit.begin_step(step)                          # before the forward
            loss = loss_fn(ddp(x[lo:hi]), y[lo:hi]); inst.record_loss(loss)
            loss.backward()
            audit.check(step, recompute)                    # before optimizer.step()
            optimizer.step()

    `recompute(rank)` runs rank `rank`'s share of the step on this process,
    as that rank ran it, on the model itself rather than its DDP wrapper (so
    that no collective runs): its inputs, its example ranges
    (`with inst.micro_batch(first, count):`), its forward, `record_loss` and
    backward. The audit keeps and restores around it everything the
    recomputation would change of this rank's own step: each parameter's
    gradient, torch's CPU generator and the instrumentation's example range;
    nothing it computes is recorded. The ranks exchange their tables through
    torch.distributed (`group`, default the world) and then each one's
    finding, so every rank raises the same DivergenceError, at the same
    step, naming the audited rank, its examples and the first differing
    boundary; an EVENT `sdc_mismatch` records it in every rank's trace."""

    def __init__(self, inst, every, group=None):
        import torch.distributed as dist
        every = int(every)
        if every < 1:
            raise InvalidArgumentError(f"dgrr.torch.NeighbourAudit: every={every}: audit every 1 or more steps")
        if not (dist.is_available() and dist.is_initialized()):
            raise FailedPreconditionError(
                "dgrr.torch.NeighbourAudit: torch.distributed is not initialised "
                "(dgrr.distributed.init_process_group first)")
        session = inst.session
        if not (session.records("forward", "other") or session.records("backward", "other")):
            raise InvalidArgumentError(
                "dgrr.torch.NeighbourAudit: the session's mode records no forward or backward boundary "
                "to compare; audit in mode full or trusted")
        self.inst = inst
        self.every = every
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self._armed = None   # the step whose records the tap keeps

    def due(self, step):
        """Whether `step` is audited (at world size 1 nothing is)."""
        return self.world > 1 and int(step) % self.every == 0

    def begin_step(self, step):
        """At an audited step, keeps this rank's forward and backward records
        of the step (their fingerprints) as they are made."""
        session = self.inst.session
        session._audit_take()                  # nothing of an earlier step
        if self.due(step):
            session._audit_tap("keep")
            self._armed = int(step)
        else:
            session._audit_tap("off")
            self._armed = None

    def check(self, step, recompute):
        """At an audited step (after the backward, before the optimizer
        step): recompute the neighbour's share and compare. True when the
        step was audited and every rank's share matched; False when the
        step is not audited; DivergenceError naming every rank found."""
        import torch.distributed as dist
        step = int(step)
        session = self.inst.session
        if self._armed != step:
            if self.due(step):
                raise FailedPreconditionError(
                    f"dgrr.torch.NeighbourAudit: step {step} is audited but begin_step({step}) was not "
                    "called before its forward")
            return False
        self._armed = None
        session._audit_tap("off")
        mine = session._audit_take()
        neighbour = (self.rank + 1) % self.world
        expected = self._recompute(recompute, neighbour)
        tables = [None] * self.world
        dist.all_gather_object(tables, mine, group=self.group)
        finding = _first_difference(tables[neighbour], expected)
        findings = [None] * self.world
        dist.all_gather_object(findings, finding, group=self.group)
        messages = []
        for auditor, f in enumerate(findings):
            if f is None:
                continue
            audited = (auditor + 1) % self.world
            # An EVENT holds 100 bytes: who, which examples, where; the
            # fingerprints are in the error.
            session.record_event("sdc_mismatch", f"audit rank={audited} by={auditor} example={f['first']} "
                                                 f"at={f['name']}"[:100])
            messages.append(
                f"rank {audited} computed examples [{f['first']}, {f['first'] + f['count']}) differently "
                f"from rank {auditor}'s recomputation, first at {f['name']} ({f['why']})")
        if messages:
            raise DivergenceError(f"silent data corruption found by the audit at step {step}: "
                                  + "; ".join(messages))
        return True

    def _recompute(self, recompute, rank):
        inst = self.inst
        session = inst.session
        params = list(inst.model.parameters())
        grads = [p.grad for p in params]
        generator = _torch.get_rng_state()
        examples = inst.examples
        for p in params:
            p.grad = None
        session._audit_tap("divert")
        try:
            recompute(rank)
        finally:
            session._audit_tap("off")
            for p, g in zip(params, grads):
                p.grad = g
            _torch.set_rng_state(generator)
            inst._set_examples(examples)
        return session._audit_take()


def _first_difference(reported, expected):
    """The first record where the neighbour's own table and the
    recomputation differ, as a small dict; None when they agree."""
    for i in range(max(len(reported), len(expected))):
        if i >= len(reported) or i >= len(expected):
            longer = expected if i >= len(reported) else reported
            name, first, count, _, _ = longer[i]
            who = "the recomputation" if i >= len(reported) else "the rank"
            return {"name": name, "first": first, "count": count,
                    "why": f"{who} made {len(longer) - i} more record(s): "
                           f"{len(reported)} recorded, {len(expected)} recomputed"}
        r, e = reported[i], expected[i]
        if r[:3] != e[:3]:
            return {"name": r[0], "first": r[1], "count": r[2],
                    "why": f"record {i} is {r[0]} of examples [{r[1]}, {r[1] + r[2]}), the recomputation's "
                           f"{e[0]} of [{e[1]}, {e[1] + e[2]})"}
        if r[3:] != e[3:]:
            return {"name": r[0], "first": r[1], "count": r[2],
                    "why": f"xxh3 {r[4]:016x} vs {e[4]:016x}"}
    return None
