"""The parts of a training step, timed during the untimed warm-up (bench/tasks/train/rank.py): forward, the
backward call, when each gradient became ready, and the optimizer step. These are the measured inputs of the
scaling model (bench.projection): its compute, and the order and times at which a backend may start moving
gradients. Loaded only inside a run's processes (it imports torch).

Why the warm-up: its steps train the same model through the same backend, but are never timed, so hooks that
read a clock (and, on a GPU, synchronise the device so that a gradient is ready when its kernels finished, not
when they were queued) cost nothing the windows measure; the hooks are removed before the first window, and no
extra step runs, so the parameters every backend ends with stay comparable."""

from __future__ import annotations

import statistics
import time

import torch  # noqa: F401  (a rank's module, never the parent's: tests/test_architecture.py counts it heavy)


class StepProfiler:
    """Hooks on every trained parameter of `model` (its data-parallel wrapper's module): mark(phase) is called by
    bench.rank.training.optimizer_step at "start", "forward", "backward" and "optimizer"."""

    def __init__(self, model, sync):
        plain = getattr(model, "module", model)
        self.params = [p for p in plain.parameters() if p.requires_grad]
        self.sync = sync
        self.steps: list[dict] = []
        self.current: dict | None = None
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _hook(self, index: int):
        def ready(_param):
            step = self.current
            if step is not None and index not in step["ready"]:  # the first micro-batch's gradient
                self.sync()
                step["ready"][index] = time.perf_counter()

        return ready

    def mark(self, phase: str) -> None:
        self.sync()
        now = time.perf_counter()
        if phase == "start":
            self.current = {"start": now, "ready": {}}
        elif self.current is not None and phase not in self.current:
            self.current[phase] = now
            if phase == "optimizer":
                self.steps.append(self.current)
                self.current = None

    def close(self) -> dict | None:
        """Remove the hooks; the profile for the run's record, or None when no step was profiled."""
        for handle in self.handles:
            handle.remove()
        return summarize_steps(self.steps, [p.numel() for p in self.params], [p.element_size() for p in self.params])


def summarize_steps(steps: list[dict], numel: list[int], element_size: list[int]) -> dict | None:
    """Medians over the profiled steps (seconds; ready times from the end of the forward pass, so from the start
    of the backward pass), with each gradient in the order it became ready in the last step:
    grads = [[parameter index, elements, bytes per element, ready_s], ...]."""
    complete = [s for s in steps if {"forward", "backward", "optimizer"} <= set(s) and len(s["ready"]) == len(numel)]
    if not complete:
        return None

    def median(values):
        return float(statistics.median(values))

    ready = {i: median([s["ready"][i] - s["forward"] for s in complete]) for i in range(len(numel))}
    order = sorted(ready, key=lambda i: (complete[-1]["ready"][i], i))
    return {
        "steps": len(complete),
        "step_s": median([s["optimizer"] - s["start"] for s in complete]),
        "forward_s": median([s["forward"] - s["start"] for s in complete]),
        "backward_s": median([s["backward"] - s["forward"] for s in complete]),  # the call: a backend may wait in it
        "gradients_s": median([max(s["ready"].values()) - s["forward"] for s in complete]),  # the last one ready
        "optimizer_s": median([s["optimizer"] - s["backward"] for s in complete]),
        "grads": [[i, numel[i], element_size[i], ready[i]] for i in order],
    }
