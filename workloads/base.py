"""What a workload is: a model, its input shape, its default batch, and a CPU size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Size:
    """The input and batch a workload uses on one kind of device."""

    batch: int  # per-worker batch
    image: int  # side of the square input image, in pixels
    synthetic_classes: int  # class count of the synthetic data set at this size
    window_steps: int  # default steps per timed window: about a second of work on one core (launches, not windows, average out the noise)


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    channels: int
    gpu: Size
    cpu: Size  # the "CPU size": what runs when no GPU is in play
    fixed_image: bool  # True when the model only accepts its native image side
    build: Callable[[int, int], "object"]  # (num_classes, image side) -> torch.nn.Module

    def size(self, device: str) -> Size:
        return self.gpu if device == "cuda" else self.cpu
