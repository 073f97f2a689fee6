"""elastic: torchrun (the torch.distributed.elastic agent, c10d rendezvous) + DistributedDataParallel."""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta

from bench.backends.base import Backend, BackendOption, RankInfo, hostname


def torchrun_command(nproc: int, run_id: str, max_restarts: int, rank_command: list[str]) -> list[str]:
    """torchrun on this node with c10d rendezvous on a free port.

    `python -m torch.distributed.run` is torchrun's own entry point, run by this interpreter so the
    workers see the same environment. Port 0 lets the agent's c10d store pick a free port, which the
    workers then share (TORCHELASTIC_USE_AGENT_STORE): two runs at once never collide.
    """
    return [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", run_id,
            "--max-restarts", str(max_restarts), "--no-python", *rank_command]


class ElasticBackend(Backend):
    name = "elastic"
    summary = "torchrun (elastic agent, c10d rendezvous) + DistributedDataParallel"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    options = (
        BackendOption("ddp_bucket_mb", 25.0, "DDP gradient bucket size in MiB (the counterpart of "
                      "Horovod's fusion threshold)", float),
    )

    def check_options(self, options, device):
        if options["ddp_bucket_mb"] <= 0:
            return "--ddp-bucket-mb must be positive"
        return None

    def unavailable_reason(self, device):
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (pip install -e .)"
        import torch.distributed as dist

        if not dist.is_available():
            return "this torch build has no torch.distributed"
        if device == "cpu" and not dist.is_gloo_available():
            return "this torch build has no gloo"
        if device == "cuda" and not dist.is_nccl_available():
            return "this torch build has no NCCL; install a CUDA build of torch"
        return None

    def launch_command(self, spec, rank_command, run_id):
        return torchrun_command(spec.world_size, run_id, 0, rank_command)

    def rank_identity(self, env):
        return int(env.get("RANK", 0)), int(env.get("TORCHELASTIC_RESTART_COUNT", 0))

    def init(self, spec):
        import torch
        import torch.distributed as dist

        env = os.environ
        local_rank = int(env["LOCAL_RANK"])
        kwargs = {}
        if spec.device == "cuda":
            torch.cuda.set_device(local_rank)
            kwargs["device_id"] = torch.device("cuda", local_rank)
        dist.init_process_group("nccl" if spec.device == "cuda" else "gloo",
                                timeout=timedelta(seconds=max(60.0, spec.timeout)), **kwargs)
        self._device_ids = [local_rank] if spec.device == "cuda" else None
        return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                        local_world_size=int(env["LOCAL_WORLD_SIZE"]), group_rank=int(env["GROUP_RANK"]),
                        role_rank=int(env["ROLE_RANK"]),
                        restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", 0)), host=hostname())

    def wrap(self, model, optimizer, spec):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=self._device_ids,
                                       bucket_cap_mb=spec.backend_options["ddp_bucket_mb"]), optimizer

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def run_op(self, op, inp, out):
        import torch.distributed as dist

        if op == "allreduce":
            dist.all_reduce(inp)
            return inp
        if op == "broadcast":
            dist.broadcast(inp, 0)
            return inp
        if op == "allgather":  # the *_single names replace *_into_tensor / *_tensor in torch 2.14
            (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
            return out
        if op == "reduce_scatter":
            (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
            return out
        return super().run_op(op, inp, out)

    def shutdown(self):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


BACKEND = ElasticBackend()
