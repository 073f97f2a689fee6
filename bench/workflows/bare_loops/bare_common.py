"""What the bare loops (bare_ddp.py, bare_horovod.py, bare_ray.py) share, none of it about a backend: their options,
the workload's model and synthetic batches, and the timed loops, so that the three time the same work. Each loop
passes in its backend's own calls (its allreduce, its barrier, how it wraps the model and the optimizer).

Like the loops, it imports only the standard library, torch and the workloads. They run as files (under torchrun,
horovodrun, or python as a Ray driver), so their folder, and this module with it, is first on sys.path; Ray puts
the driver's folder on its workers' path too.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from the checkout: find `workloads` in it
import torch
import torch.distributed as dist
from bare_options import parser, pin  # noqa: F401  (the loops' options, beside this file)

from workloads import WORKLOADS

BATCHES = 8  # synthetic batches made once, cycled


def synchronizer(device: torch.device):
    """What waits for the device's queued work before a clock is read."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def slowest_rank(seconds: float, device: torch.device) -> float:
    """The largest of every rank's `seconds`, over torch.distributed's process group."""
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def allreduce_figure(args, world: int, device: torch.device, allreduce, barrier, slowest=None) -> dict:
    """Time allreduce(buffer) on args.allreduce bytes of float32: {"busbw_GBps": ...} (nccl-tests: t the mean time
    per op of the slowest rank, slowest(seconds) where torch.distributed does not carry it)."""
    sync = synchronizer(device)
    buf = torch.zeros(args.allreduce // 4, dtype=torch.float32, device=device)
    for _ in range(args.warmup_iters):
        allreduce(buf)
    barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        allreduce(buf)
    sync()
    seconds = (time.perf_counter() - t0) / args.iters
    t = slowest(seconds) if slowest else slowest_rank(seconds, device)
    return {"busbw_GBps": buf.numel() * 4 / t / 1e9 * 2 * (world - 1) / world}


def train_figure(
    args,
    rank: int,
    world: int,
    device: torch.device,
    barrier,
    prepare_model,
    prepare_optimizer=lambda optimizer, model: optimizer,
) -> dict:
    """Train the workload's model (prepare_model(model): the backend's wrapping, on the device) with SGD
    (prepare_optimizer(optimizer, model): the backend's) on synthetic batches: {"throughput": samples/s, all
    ranks together}."""
    workload = WORKLOADS[args.workload]
    size = workload.size(args.device)
    batch, image = args.batch_size or size.batch, args.image_size or size.image
    classes, steps = args.classes or size.synthetic_classes, args.steps or 5 * size.window_steps
    torch.manual_seed(args.seed)
    model = prepare_model(workload.build(classes, image))
    optimizer = prepare_optimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum), model)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + rank)
    xs = torch.randn(BATCHES, batch, workload.channels, image, image, generator=gen).to(device)
    ys = torch.randint(0, classes, (BATCHES, batch), generator=gen).to(device)
    sync = synchronizer(device)

    def step(i):
        optimizer.zero_grad()
        loss_fn(model(xs[i % BATCHES]), ys[i % BATCHES]).backward()
        optimizer.step()

    for i in range(args.warmup_steps):
        step(i)
    sync()
    barrier()
    t0 = time.perf_counter()
    for i in range(args.warmup_steps, args.warmup_steps + steps):
        step(i)
    sync()
    barrier()
    return {"throughput": batch * world * steps / (time.perf_counter() - t0)}


def print_figure_and_leave(figure: dict, rank: int, shutdown) -> None:
    """Rank 0 prints the figure, one JSON line (what bench selfcheck reads); then the backend shuts down and the
    process leaves."""
    if rank == 0:
        print(json.dumps(figure), flush=True)
    shutdown()
    leave()


def leave() -> None:
    """Leave at once, the figure out: the interpreter's teardown takes seconds once torch is loaded."""
    sys.stdout.flush()
    os._exit(0)
