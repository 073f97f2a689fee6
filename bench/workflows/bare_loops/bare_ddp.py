"""A bare DistributedDataParallel loop, the yardstick `bench selfcheck` holds the elastic backend against.

    torchrun --standalone --nproc-per-node 2 bench/workflows/bare_loops/bare_ddp.py --workload resnet18
    torchrun --standalone --nproc-per-node 2 bench/workflows/bare_loops/bare_ddp.py --allreduce 16777216 --iters 20

No harness: only the workload's model and sizes are shared, and the loops the bare loops share (bare_common.py,
beside it). Rank 0 prints one JSON line, {"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean
time per op, max over ranks).
"""

import os

import bare_common  # beside this file, which torchrun runs as a file
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

a = bare_common.parser().parse_args()
torch.set_num_threads(a.threads)
cuda = a.device == "cuda"
if cuda:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if cuda else "gloo")
if a.cpu_bind == "cores":
    bare_common.pin(int(os.environ["LOCAL_RANK"]), a.threads)
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")


def wrap(model):
    return DistributedDataParallel(model.to(device), device_ids=[device] if cuda else None)


if a.allreduce:
    out = bare_common.allreduce_figure(a, world, device, dist.all_reduce, dist.barrier)
else:
    out = bare_common.train_figure(a, rank, world, device, dist.barrier, wrap)
bare_common.print_figure_and_leave(out, rank, dist.destroy_process_group)
