"""A bare DistributedDataParallel loop, the yardstick `bench selfcheck` holds the elastic backend against.

    torchrun --standalone --nproc-per-node 2 bench/reference/bare_ddp.py --workload resnet18
    torchrun --standalone --nproc-per-node 2 bench/reference/bare_ddp.py --allreduce 16777216 --iters 20

No harness: only the workload's model and sizes are shared. Rank 0 prints one JSON line,
{"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean time per op, max over ranks).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: find `workloads`
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workloads import WORKLOADS

p = argparse.ArgumentParser()
p.add_argument("--workload", default="mnist_mlp", choices=list(WORKLOADS))
p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
p.add_argument("--batch-size", type=int)  # per worker; batch, image and classes default to the workload's
p.add_argument("--image-size", type=int)
p.add_argument("--classes", type=int)
p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
p.add_argument("--warmup-steps", type=int, default=5)
p.add_argument("--steps", type=int)  # timed steps; default 5 of the workload's windows
p.add_argument("--seed", type=int, default=0)
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--allreduce", type=int, metavar="BYTES", help="time a float32 allreduce instead of training")
p.add_argument("--warmup-iters", type=int, default=5)
p.add_argument("--iters", type=int, default=20)
p.add_argument("--cpu-bind", default="none", choices=("none", "cores"))  # cores: local rank r on cores [r*T, (r+1)*T)
a = p.parse_args()


def pin(local_rank):
    """--cpu-bind cores: every thread of this process on the local rank's own cores."""
    cores = sorted(os.sched_getaffinity(0))
    chosen = [cores[(local_rank * a.threads + i) % len(cores)] for i in range(a.threads)]
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), chosen)


torch.set_num_threads(a.threads)
cuda = a.device == "cuda"
if cuda:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if cuda else "gloo")
if a.cpu_bind == "cores":
    pin(int(os.environ["LOCAL_RANK"]))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
sync = torch.cuda.synchronize if cuda else (lambda: None)

if a.allreduce:
    buf = torch.zeros(a.allreduce // 4, dtype=torch.float32, device=device)
    for _ in range(a.warmup_iters):
        dist.all_reduce(buf)
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        dist.all_reduce(buf)
    sync()
    t = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time per op
    out = {"busbw_GBps": buf.numel() * 4 / t.item() / 1e9 * 2 * (world - 1) / world}
else:
    workload = WORKLOADS[a.workload]
    size = workload.size(a.device)
    batch, image = a.batch_size or size.batch, a.image_size or size.image
    classes, steps = a.classes or size.synthetic_classes, a.steps or 5 * size.window_steps
    torch.manual_seed(a.seed)
    model = DistributedDataParallel(workload.build(classes, image).to(device), device_ids=[device] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + rank)  # a few batches made once, cycled
    xs = torch.randn(8, batch, workload.channels, image, image, generator=gen).to(device)
    ys = torch.randint(0, classes, (8, batch), generator=gen).to(device)

    def step(i):
        optimizer.zero_grad()
        loss_fn(model(xs[i % 8]), ys[i % 8]).backward()
        optimizer.step()

    for i in range(a.warmup_steps):
        step(i)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.warmup_steps, a.warmup_steps + steps):
        step(i)
    sync()
    dist.barrier()
    out = {"throughput": batch * world * steps / (time.perf_counter() - t0)}

if rank == 0:
    print(json.dumps(out), flush=True)
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # the figure is out; skip the interpreter's teardown (seconds, once torch is loaded)
