"""elastic: torchrun (the torch.distributed.elastic agent, c10d rendezvous) + DistributedDataParallel.

What the parent needs; its launcher is the shared torchrun one (bench.backends.shared.torchrun), its elastic mode's
launch side is `launcher`, and its processes' group is `group`."""

from __future__ import annotations

from bench.backends.base import Backend
from bench.backends.elastic.launcher import TorchrunElastic
from bench.backends.shared.ddp import DDP_BUCKET, ddp_schedule, distributed_problem
from bench.backends.shared.torchrun import TorchrunLauncher


class ElasticBackend(Backend):
    name = "elastic"
    summary = "torchrun (elastic agent, c10d rendezvous) + DistributedDataParallel"
    launcher = TorchrunLauncher()
    group = "bench.backends.elastic.group"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    options = (DDP_BUCKET,)
    elastic = TorchrunElastic()
    kubeflow_kinds = ("pytorchjob", "trainjob")  # torchrun in each pod, from the operator's PET_* variables

    def check_options(self, options, device):
        if options["ddp_bucket_mb"] <= 0:
            return "--ddp-bucket-mb must be positive"
        return None

    def unavailable_reason(self, device):
        return distributed_problem(device)

    def comm_schedule(self, options):
        return ddp_schedule(options)


BACKEND = ElasticBackend()
