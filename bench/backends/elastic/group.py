"""elastic's process group: a process torchrun started joins torch.distributed's group (gloo on the CPU, NCCL on a
GPU) and trains under DistributedDataParallel (bench.backends.shared.ddp_group); through faults it restarts from
a checkpoint. Imported by a run's processes only: torch at the top."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bench.backends.shared.checkpoint import CheckpointRestart
from bench.backends.shared.ddp_group import DDPGroup
from bench.backends.shared.torchrun import join_torchrun_group, torchrun_rank_row


class TorchrunDDPGroup(DDPGroup):
    """The group of the processes torchrun started, found through the variables it sets (LOCAL_RANK, ...)."""

    def init(self, spec):
        local_rank = int(os.environ["LOCAL_RANK"])
        kwargs = {}
        # On one machine the global rank picks the GPU: a joining worker's agent numbers its local ranks from 0
        # too (bench fault --fault join), and every rendezvous starts the workers afresh with ranks 0..N-1.
        gpu = local_rank if spec.hosts else int(os.environ["RANK"])
        if spec.device == "cuda":
            torch.cuda.set_device(gpu)
            kwargs["device_id"] = torch.device("cuda", gpu)
        join_torchrun_group("nccl" if spec.device == "cuda" else "gloo", spec, **kwargs)
        self.device_ids = [gpu] if spec.device == "cuda" else None
        return torchrun_rank_row(
            dist.get_rank(), dist.get_world_size(), local_rank=local_rank, role_rank=int(os.environ["ROLE_RANK"])
        )

    def elastic_state(self, model, optimizer, run_dir, spec, on_reset):
        def identity():  # (local rank, restart count, group rank), as torchrun set them for this process
            env = os.environ
            return (
                int(env["LOCAL_RANK"]),
                int(env.get("TORCHELASTIC_RESTART_COUNT", 0)),
                int(env.get("GROUP_RANK", 0)),
            )

        return CheckpointRestart(model, optimizer, DistributedDataParallel(model), run_dir.checkpoint, identity)


GROUP = TorchrunDDPGroup
