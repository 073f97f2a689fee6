"""A bare Ray Train TorchTrainer loop, the yardstick `bench selfcheck` holds the ray backend against.

    python bench/workflows/bare_loops/bare_ray.py --num-workers 2 --workload resnet18
    python bench/workflows/bare_loops/bare_ray.py --num-workers 2 --allreduce 16777216 --iters 20

Started as Ray users start it: the script is the driver; it starts a local Ray runtime and runs a TorchTrainer
whose workers wrap the model with ray.train.torch.prepare_model. No harness: only the workload's model and
sizes are shared, and the loops the bare loops share (bare_common.py, beside it). The driver prints one JSON
line, {"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean time per op, max over ranks), from
the file rank 0 wrote it to.
"""

import json
import shutil
import tempfile
from pathlib import Path

import bare_common  # beside this file, which python runs as a file; Ray's workers get this folder on their path
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

p = bare_common.parser()
p.add_argument("--num-workers", type=int, default=2)
a = p.parse_args()


def train_loop_per_worker(config):
    import ray.train.torch
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.cpu_bind == "cores":
        bare_common.pin(ray.train.get_context().get_local_rank(), a.threads)
    device = ray.train.torch.get_device()
    if a.allreduce:
        out = bare_common.allreduce_figure(a, world, device, dist.all_reduce, dist.barrier)
    else:
        out = bare_common.train_figure(a, rank, world, device, dist.barrier, ray.train.torch.prepare_model)
    if rank == 0:  # the driver prints it
        Path(config["figure_file"]).write_text(json.dumps(out))


# Ray's session files go in this launch's own folder (under $TMPDIR), removed at the end (left to Ray, every
# launch would leave a session under /tmp/ray); the path is short, as the unix sockets Ray makes there need.
figure_file = Path(tempfile.mkdtemp(prefix="bare-ray-")) / "figure.json"
ray.init(include_dashboard=False, _temp_dir=str(figure_file.parent / "ray"))
cuda = a.device == "cuda"
trainer = TorchTrainer(
    train_loop_per_worker,
    train_loop_config={"figure_file": str(figure_file)},
    scaling_config=ScalingConfig(num_workers=a.num_workers, use_gpu=cuda, resources_per_worker={"CPU": a.threads}),
    torch_config=TorchConfig(backend="nccl" if cuda else "gloo"),
    run_config=RunConfig(storage_path=str(figure_file.parent)),
)
trainer.fit()
ray.shutdown()
print(figure_file.read_text(), flush=True)
shutil.rmtree(figure_file.parent, ignore_errors=True)
bare_common.leave()
