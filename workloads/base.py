"""What a workload is: a model, its input shape, its default batch, and a CPU size; optionally its own loss and
its own data sets (train and held-out), which `--data workload` reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Size:
    """The input and batch a workload uses on one kind of device."""

    batch: int  # per-worker batch
    image: int  # side of the square input image, in pixels
    synthetic_classes: int  # class count of the synthetic data set at this size
    # default steps per timed window: about a second of work on one core (launches, not windows, average out the noise)
    window_steps: int


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    channels: int
    gpu: Size
    cpu: Size  # the "CPU size": what runs when no GPU is in play
    fixed_image: bool  # True when the model only accepts its native image side
    build: Callable[[int, int], object]  # (num_classes, image side) -> torch.nn.Module
    # () -> a loss module called as loss(scores, class indices); None: torch.nn.CrossEntropyLoss()
    loss: Callable[[], object] | None = None
    # () -> (train, held_out): torch Datasets of (input of shape (channels, image, image), class index) pairs,
    # read through a DataLoader with a DistributedSampler under `--data workload`; None: it has none
    datasets: Callable[[], tuple] | None = None
    classes: int | None = None  # the class count of its own data sets (needed with `datasets`)
    # (num_classes, image side) -> the same model as a Keras model (tf_keras) taking channels-last inputs, for the
    # TensorFlow backends; None: the workload has none, and runs under the PyTorch backends only
    build_keras: Callable[[int, int], object] | None = None

    def make_loss(self):
        import torch.nn as nn

        return self.loss() if self.loss is not None else nn.CrossEntropyLoss()

    def size(self, device: str) -> Size:
        return self.gpu if device == "cuda" else self.cpu


@dataclass(frozen=True)
class WorkloadInfo:
    """What a run's parent knows of a workload, never its code: its declarations and, when the run reads them
    (`--data workload`), what its own data sets hold (`data`, as workloads.data.own.own_data_facts gives it, or
    {"error": why they cannot be used}). A user's workload is described in a process of its own
    (bench.harness.workload_check), so that the parent neither runs the user's code nor imports torch."""

    name: str
    summary: str
    channels: int
    gpu: Size
    cpu: Size
    fixed_image: bool
    classes: int | None = None
    data: dict | None = None

    def size(self, device: str) -> Size:
        return self.gpu if device == "cuda" else self.cpu

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadInfo:
        return cls(**{**d, "gpu": Size(**d["gpu"]), "cpu": Size(**d["cpu"])})
