"""horovod's process group: horovod.torch's ranks, hvd.DistributedOptimizer, Horovod's collectives, and Horovod
elastic's state through faults (bench.backends.horovod.state). Imported by a run's processes only: Horovod's PyTorch
side and torch at the top."""

from __future__ import annotations

import horovod.torch as hvd
import torch

from bench.backends.base import ProcessGroup, rank_row
from bench.backends.horovod.state import HorovodElasticState


class HorovodGroup(ProcessGroup):
    def init(self, spec):
        hvd.init()
        if spec.device == "cuda":
            # On one machine the global rank picks the GPU: the elastic mode splits the workers between two local
            # "hosts" (localhost, 127.0.0.1) whose local ranks both start at 0.
            torch.cuda.set_device(hvd.local_rank() if spec.hosts else hvd.rank())
        self.hvd = hvd
        return rank_row(
            rank=hvd.rank(),
            world_size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_world_size=hvd.local_size(),
            group_rank=hvd.cross_rank(),
            role_rank=hvd.rank(),
            restart_count=0,
        )

    def wrap(self, model, optimizer, spec):
        hvd, opts = self.hvd, spec.backend_options
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if opts["hvd_compression"] == "fp16" else hvd.Compression.none,
            backward_passes_per_step=opts["hvd_backward_passes"],
            op=hvd.Adasum if opts["hvd_op"] == "adasum" else hvd.Average,
        )
        return model, optimizer

    def barrier(self):
        self.hvd.barrier()

    def run_op(self, op, inp, out):
        hvd = self.hvd  # hvd.allreduce and friends: fusion, the controller and its cycle are measured too
        if op == "allreduce":
            return hvd.allreduce_(inp, op=hvd.Sum)
        if op == "broadcast":
            return hvd.broadcast_(inp, root_rank=0)
        if op == "allgather":
            return hvd.allgather(inp)
        if op == "reduce_scatter":
            return hvd.reducescatter(inp, op=hvd.Sum)
        return super().run_op(op, inp, out)

    def shutdown(self):
        self.hvd.shutdown()

    def elastic_state(self, model, optimizer, run_dir, spec, on_reset):
        return HorovodElasticState(self.hvd, model, optimizer, on_reset)


GROUP = HorovodGroup
