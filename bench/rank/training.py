"""The one training step and the one parameter checksum that every task training a model shares (train, converge,
fault): the same micro-batching, loss scaling and optimizer call, and the same sums to compare replicas by. Loaded
only inside a run's processes (it imports torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def optimizer_step(model, optimizer, loss_fn, next_batch, passes: int = 1, mark=None):
    """One optimizer step of `passes` micro-batches from next_batch(), each loss scaled by 1/passes so that the
    gradients match one batch of passes x the size; returns the last micro-batch's loss. mark(phase), where given
    (a warm-up step's bench.rank.profile.StepProfiler), is told when the step starts and when each of its parts
    (the first micro-batch's forward and backward, the optimizer) ends."""
    if mark:
        mark("start")
    optimizer.zero_grad()  # set_to_none=True, torch's default; Horovod's wrapper takes no argument
    scale = 1.0 / passes
    for _ in range(passes):
        x, y = next_batch()
        loss = loss_fn(model(x), y)
        if mark:
            mark("forward")
        (loss * scale if passes > 1 else loss).backward()
        if mark:
            mark("backward")
    optimizer.step()
    if mark:
        mark("optimizer")
    return loss


@dataclass(frozen=True)
class ParamSums:
    """What a model's parameters sum to, in double precision: replicas that hold the same parameters agree."""
    count: int  # elements
    total: float  # the sum of every element
    absolute: float  # the sum of their absolute values (a total of zero is not a model of zeros)


def param_sums(model) -> ParamSums:
    """The parameter sums of `model` (without its data-parallel wrapper, if it has one)."""
    plain = getattr(model, "module", model)
    with torch.no_grad():
        params = [p.detach().double() for p in plain.parameters()]
        return ParamSums(count=sum(p.numel() for p in params), total=float(sum(p.sum() for p in params)),
                         absolute=float(sum(p.abs().sum() for p in params)))


def first_non_finite(checks: list[tuple[int, str, float]], checksum: float, last_step: int) -> dict | None:
    """Where this process first saw a number that is not finite, for its result file (the parent decides the run's
    status from it), or None. `checks` are (step, what, value) in step order, such as a loss the loop already
    brought to the host; the parameters' `checksum` is checked last, at `last_step`. Returns {"what", "step": the
    step whose check saw it (it became non-finite there or earlier), "finite_at": the step of the check before, which
    found it finite (None: there was none; the parameters are checked once), "value"}."""
    finite_at = None
    for step, what, value in checks:
        if not math.isfinite(value):
            return {"what": what, "step": step, "finite_at": finite_at, "value": repr(value)}
        finite_at = step
    if not math.isfinite(checksum):
        return {"what": "parameters", "step": last_step, "finite_at": None, "value": repr(checksum)}
    return None
