"""A bare Horovod loop, the yardstick `bench selfcheck` holds the horovod backend against.

    OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 python bench/workflows/bare_loops/bare_horovod.py
    OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 python bench/workflows/bare_loops/bare_horovod.py \
        --allreduce 16777216

horovodrun sets no thread count: give OMP_NUM_THREADS (or --threads), or the ranks oversubscribe the cores.
No harness: only the workload's model and sizes are shared, and the loops the bare loops share (bare_common.py,
beside it). Rank 0 prints one JSON line, {"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean
time per op, max over ranks).
"""

import bare_common  # beside this file, which python runs as a file
import horovod.torch as hvd
import torch

a = bare_common.parser().parse_args()
torch.set_num_threads(a.threads)
hvd.init()
if a.cpu_bind == "cores":
    bare_common.pin(hvd.local_rank(), a.threads)
cuda = a.device == "cuda"
if cuda:
    torch.cuda.set_device(hvd.local_rank())
rank, world = hvd.rank(), hvd.size()
device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")


def distributed_optimizer(optimizer, model):
    """Every rank starts from rank 0's parameters and optimizer state; the optimizer averages the gradients over
    the ranks."""
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    return hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def slowest_rank(seconds):
    """The largest of every rank's `seconds`."""
    return hvd.allgather(torch.tensor([seconds], dtype=torch.float64)).max().item()


if a.allreduce:
    out = bare_common.allreduce_figure(
        a, world, device, lambda buf: hvd.allreduce_(buf, op=hvd.Sum), hvd.barrier, slowest_rank
    )
else:
    out = bare_common.train_figure(
        a, rank, world, device, hvd.barrier, lambda model: model.to(device), distributed_optimizer
    )
bare_common.print_figure_and_leave(out, rank, hvd.shutdown)
