"""Workloads: one module each, registered by name."""

from workloads.base import Size, Workload
from workloads import mnist_mlp, resnet18

WORKLOADS: dict[str, Workload] = {w.name: w for w in (mnist_mlp.WORKLOAD, resnet18.WORKLOAD)}

__all__ = ["WORKLOADS", "Size", "Workload"]
