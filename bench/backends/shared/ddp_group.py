"""DistributedDataParallel over torch.distributed's collectives: the process group of the backends whose data
parallelism is DDP (elastic's, over the group torchrun's processes join; Ray Train's, over the one it set up), less
how a process joins it (`init`, the backend's own). Worker side: torch imported at the top."""

from __future__ import annotations

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bench.backends.base import ProcessGroup


class DDPGroup(ProcessGroup):
    """The model wrapped in DistributedDataParallel (--ddp-bucket-mb), torch.distributed's barrier and collectives,
    and the group destroyed at the end. A subclass joins the group (init) and sets `device_ids`."""

    device_ids: list[int] | None = None  # the worker's GPU on CUDA (DistributedDataParallel's device_ids)

    def wrap(self, model, optimizer, spec):
        return DistributedDataParallel(
            model, device_ids=self.device_ids, bucket_cap_mb=spec.backend_options["ddp_bucket_mb"]
        ), optimizer

    def barrier(self):
        dist.barrier()

    def run_op(self, op, inp, out):
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
        if dist.is_initialized():
            dist.destroy_process_group()
