"""A time-to-accuracy run's own settings, as its spec holds them (RunSpec.converge): its plan of steps and
evaluations, and its learning-rate rule."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.spec import TaskSettings


@dataclass(frozen=True, kw_only=True)
class ConvergeSettings(TaskSettings):
    """Train `epochs` passes of steps_per_epoch steps (total_steps) over the training part of training_samples
    samples (`holdout` of the data set held out), evaluating every eval_every steps, until held-out accuracy
    `target`; --lr scaled by the world size under lr_scaling "linear", reached by a linear warm-up of warmup_steps
    steps (warmup_epochs epochs; docs/method.md, "Time to accuracy")."""

    target: float
    epochs: int
    lr_scaling: str  # bench.tasks.converge.LR_SCALINGS
    warmup_epochs: float
    holdout: float
    steps_per_epoch: int
    total_steps: int
    eval_every: int
    warmup_steps: int
    training_samples: int

    @property
    def planned_steps(self) -> int:
        return self.total_steps

    def lr_at(self, lr, world_size, step):
        peak = lr * (world_size if self.lr_scaling == "linear" else 1)
        ramp = self.warmup_steps
        return peak if step >= ramp else lr + (peak - lr) * step / ramp
