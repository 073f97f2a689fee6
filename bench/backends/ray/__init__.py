"""ray: Ray Train's TorchTrainer (its workers are Ray actors, its process group torch.distributed) + the
DistributedDataParallel wrapper of ray.train.torch.prepare_model.

The launcher starts a small driver (`python -m bench.backends.ray.driver RUN_DIR RUN_ID`) that starts a local Ray
runtime sized to the run, on ports Ray chooses and with its temporary files beside the run (or connects to
`--ray-address`), and runs a TorchTrainer of spec.world_size workers. Each Ray Train worker runs the suite's
per-rank code in its own process (bench.backends.ray.group.rank_main, the counterpart of bench.harness.guard +
bench.rank.entry): the process group
and the device are the ones Ray Train set up, and the rank writes the same files (log, start, joined, result,
error, exit) as every other backend's ranks, so the tasks conclude unchanged.

Every process of a local runtime (gcs_server, raylet, the workers Ray starts, its agents) inherits the run's
tag from the driver, so the supervisor's teardown ends them all; the driver also stops the runtime itself
(ray.shutdown) however the trainer ended.
"""

from __future__ import annotations

import importlib.util
import socket
from importlib.metadata import version

from bench.backends.base import Backend, BackendOption
from bench.backends.ray.launcher import SETUP_HINT, RayLauncher, RayTrainElastic
from bench.backends.shared.ddp import DDP_BUCKET, ddp_schedule, distributed_problem
from bench.core.spec import MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS

ADDRESS_CHECK_S = 3.0  # how long the parent waits for --ray-address to answer before refusing it


def ray_problem() -> str | None:
    """What is missing to run Ray Train here, if anything (without importing it: that takes seconds)."""
    if importlib.util.find_spec("ray") is None:
        return f"Ray is not installed; {SETUP_HINT}"
    if importlib.util.find_spec("ray.train") is None:
        return f"Ray is installed without Ray Train; {SETUP_HINT}"
    return None


def parse_address(text: str) -> tuple[str, int] | None:
    """(host, port) of a Ray cluster's address `HOST:PORT` (a `ray://` prefix refused: a Ray Client server is
    not a cluster the driver joins), or None when it is not of that form."""
    host, sep, port = (text or "").rpartition(":")
    if not sep or not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def address_problem(address: str) -> str | None:
    """None when a Ray cluster's GCS answers at `address` within ADDRESS_CHECK_S, else why not."""
    parsed = parse_address(address)
    if parsed is None:
        return f"--ray-address {address!r}: give the cluster's address as HOST:PORT (its GCS, e.g. 10.0.0.1:6379)"
    try:
        with socket.create_connection(parsed, timeout=ADDRESS_CHECK_S):
            return None
    except OSError as exc:
        return (
            f"--ray-address {address}: no Ray cluster answers there within {ADDRESS_CHECK_S:g} s "
            f"({exc.strerror or exc}); start one with `ray start --head` or drop --ray-address"
        )


class RayBackend(Backend):
    name = "ray"
    summary = "Ray Train TorchTrainer (Ray actors, torch process group) + prepare_model's DistributedDataParallel"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    options = (
        DDP_BUCKET,
        BackendOption(
            "ray_address",
            None,
            "an existing Ray cluster (its GCS, HOST:PORT) to run on",
            str,
            invalid=("nohost", "host:port", "h:0"),
            default_words="a local Ray runtime started for the run",
        ),
        BackendOption(
            "ray_resize_interval",
            60.0,
            "bench fault --fault join: how often Ray Train's elastic policy "
            "looks for room to grow the worker group, in seconds (ScalingConfig's "
            f"elastic_resize_monitor_interval_s; 60 is Ray's default; at most {MAX_TIMEOUT_WORDS})",
            float,
            invalid=("0", "-1", "nan", "inf", "x", "1e10"),
            fault_only=True,
        ),
    )
    launcher = RayLauncher()
    group = "bench.backends.ray.group"
    elastic = RayTrainElastic()

    def check_options(self, options, device):
        if options["ddp_bucket_mb"] <= 0:
            return "--ddp-bucket-mb must be positive"
        if not 0 < options["ray_resize_interval"] <= MAX_TIMEOUT_S:
            return f"--ray-resize-interval must be a positive number of seconds, at most {MAX_TIMEOUT_WORDS}"
        if options["ray_address"] is not None:
            return address_problem(options["ray_address"])
        return None

    def comm_schedule(self, options):
        return ddp_schedule(options)  # prepare_model's DistributedDataParallel

    def places_on_this_host(self, options):
        return options.get("ray_address") is None  # an existing cluster's nodes may share one machine's cores

    def unavailable_reason(self, device):
        return distributed_problem(device) or ray_problem()

    def doctor_lines(self):
        if ray_problem():
            return []
        return [f"ray {version('ray')}"]


BACKEND = RayBackend()
