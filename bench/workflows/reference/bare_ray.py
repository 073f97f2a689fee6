"""A bare Ray Train TorchTrainer loop, the yardstick `bench selfcheck` holds the ray backend against.

    python bench/reference/bare_ray.py --num-workers 2 --workload resnet18
    python bench/reference/bare_ray.py --num-workers 2 --allreduce 16777216 --iters 20

Started as Ray users start it: the script is the driver; it starts a local Ray runtime and runs a TorchTrainer
whose workers wrap the model with ray.train.torch.prepare_model. No harness: only the workload's model and
sizes are shared. The driver prints one JSON line, {"throughput": samples/s} or {"busbw_GBps": ...}
(nccl-tests: t the mean time per op, max over ranks), from the file rank 0 wrote it to.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
sys.path.insert(0, ROOT)  # run as a file: find `workloads`
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from workloads import WORKLOADS

p = argparse.ArgumentParser()
p.add_argument("--num-workers", type=int, default=2)
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


def train_loop_per_worker(config):
    sys.path.insert(0, ROOT)  # the Ray worker finds `workloads` too
    import ray.train.torch
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.cpu_bind == "cores":
        pin(ray.train.get_context().get_local_rank())
    device = ray.train.torch.get_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
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
        out = train(rank, world, device, sync)
    if rank == 0:  # the driver prints it
        Path(config["figure_file"]).write_text(json.dumps(out))


def train(rank, world, device, sync):
    import ray.train.torch
    import torch
    import torch.distributed as dist

    workload = WORKLOADS[a.workload]
    size = workload.size(a.device)
    batch, image = a.batch_size or size.batch, a.image_size or size.image
    classes, steps = a.classes or size.synthetic_classes, a.steps or 5 * size.window_steps
    torch.manual_seed(a.seed)
    model = ray.train.torch.prepare_model(workload.build(classes, image))
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
    return {"throughput": batch * world * steps / (time.perf_counter() - t0)}


# Ray's session files go in this launch's own folder (under $TMPDIR), removed at the end (left to Ray, every
# launch would leave a session under /tmp/ray); the path is short, as the unix sockets Ray makes there need.
figure_file = Path(tempfile.mkdtemp(prefix="bare-ray-")) / "figure.json"
ray.init(include_dashboard=False, _temp_dir=str(figure_file.parent / "ray"))
cuda = a.device == "cuda"
trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"figure_file": str(figure_file)},
                       scaling_config=ScalingConfig(num_workers=a.num_workers, use_gpu=cuda,
                                                    resources_per_worker={"CPU": a.threads}),
                       torch_config=TorchConfig(backend="nccl" if cuda else "gloo"),
                       run_config=RunConfig(storage_path=str(figure_file.parent)))
trainer.fit()
ray.shutdown()
print(figure_file.read_text(), flush=True)
shutil.rmtree(figure_file.parent, ignore_errors=True)
sys.stdout.flush()
os._exit(0)  # the figure is out; skip the interpreter's teardown
