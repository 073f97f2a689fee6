"""DistributedDataParallel's parent side, shared by the backends whose data parallelism is DDP (elastic, ray): its
bucket option and the scaling model's rule for it; and whether this torch can run torch.distributed (theirs and
ps's). No framework imported at the top."""

from __future__ import annotations

import importlib.util

from bench.backends.base import BackendOption, CommSchedule
from bench.core.environment import torch_facts

# DDP's first bucket holds at most 1 MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES), so that the first
# allreduce starts early in the backward pass; the others hold up to --ddp-bucket-mb
DDP_FIRST_BUCKET_BYTES = 2**20

# DDP's bucket size, one option of every backend whose data parallelism is DDP (elastic, ray): one flag
DDP_BUCKET = BackendOption(
    "ddp_bucket_mb",
    25.0,
    "DDP gradient bucket size in MiB (the counterpart of Horovod's fusion threshold)",
    float,
    invalid=("0", "-1", "nan", "x"),
)


def ddp_schedule(options: dict) -> CommSchedule:
    """DDP's reducer: buckets in the order gradients become ready (it rebuilds them so after the first step), each
    allreduced once its last gradient is ready (the scaling model's rule, bench.backends.base.CommSchedule)."""
    return CommSchedule("buckets", cap_bytes=options["ddp_bucket_mb"] * 2**20, first_cap_bytes=DDP_FIRST_BUCKET_BYTES)


def distributed_problem(device: str) -> str | None:
    """What this torch build lacks to run torch.distributed on `device`, if anything: read from torch's facts
    (bench.core.environment.torch_facts), which a machine without a GPU driver keeps, so that the parent of a run
    does not import torch for it (about 3 s of CPU before every launch on a 2-core machine)."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e .)"
    facts = torch_facts()
    if not facts["distributed"]:
        return "this torch build has no torch.distributed"
    if device == "cpu" and not facts["gloo"]:
        return "this torch build has no gloo"
    if device == "cuda" and not facts["nccl"]:
        return "this torch build has no NCCL; install a CUDA build of torch"
    return None
