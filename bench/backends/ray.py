"""ray: Ray Train's TorchTrainer (its workers are Ray actors, its process group torch.distributed) + the
DistributedDataParallel wrapper of ray.train.torch.prepare_model.

The launcher starts a small driver (`python -m bench.backends.ray_driver RUN_DIR`) that starts a local Ray
runtime sized to the run, on ports Ray chooses and with its temporary files beside the run (or connects to
`--ray-address`), and runs a TorchTrainer of spec.world_size workers. Each Ray Train worker runs the suite's
per-rank code in its own process (rank_main, the counterpart of bench.harness.guard + bench.rank.entry): the process group
and the device are the ones Ray Train set up, and the rank writes the same files (log, start, joined, result,
error, exit) as every other backend's ranks, so the tasks conclude unchanged.

Every process of a local runtime (gcs_server, raylet, the workers Ray starts, its agents) inherits the run's
tag from the driver, so the supervisor's teardown ends them all; the driver also stops the runtime itself
(ray.shutdown) however the trainer ended.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import threading
import time

from bench.backends.base import Backend, BackendOption, CheckpointRestart, ElasticMode, Launcher, rank_row
from bench.backends.elastic import DDP_BUCKET, DDPGroup, ddp_schedule, distributed_problem
from bench.core.rundir import LOG_DRAIN_S, CappedLog, RunDir, copy_output, tail, write_json_atomic
from bench.core.spec import MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS
from bench.rank.entry import run_process

SETUP_HINT = "pip install -e '.[ray]'"
JOINER_OBJECT_STORE_BYTES = 100 * 1000 * 1000  # Ray's least; the node only hosts a worker
TIMES_FILE = "ray.json"  # in the run directory: what the driver and Ray Train's set-up timed
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


def ray_program() -> str | None:
    """The `ray` command of the environment bench runs in (the same Ray and Python as the run's runtime), or None
    when there is none."""
    import shutil
    from pathlib import Path

    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else shutil.which("ray")


def times_of(run_dir) -> dict:
    path = run_dir.path / TIMES_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_times(run_dir, **values) -> None:
    """Merge `values` into the run's timing file (the driver and Ray Train's set-up both write there)."""
    write_json_atomic(run_dir.path / TIMES_FILE, {**times_of(run_dir), **values})


class RayLauncher(Launcher):
    """The driver, started by the supervisor like any launcher; Ray starts the ranks."""

    def command(self, spec, rank_command, run_id):
        # rank_command is bench.harness.guard's (python -m bench.harness.guard RUN_DIR BACKEND): Ray starts the ranks itself and
        # runs the per-rank code in its workers, so the driver takes the run directory from it
        return [sys.executable, "-m", "bench.backends.ray_driver", rank_command[-2], run_id]

    def rank_identity(self, env):
        return int(env.get("BENCH_RANK", 0)), int(env.get("BENCH_ATTEMPT", 0))

    def startup_phases(self, run_dir):
        """Ray's own start-up: the driver's interpreter and `import ray`, starting the local runtime (or
        connecting to a cluster), making the TorchTrainer (importing Ray Train), placing the Train workers (fit()
        called to Ray Train starting the process group's set-up in them: its controller, the placement group, the
        worker actors), and that set-up."""
        t = times_of(run_dir)
        phases = {}
        for name, start, end in (("driver start", "launched_at", "ray_imported"),
                                 ("ray runtime start", "ray_init_start", "ray_init_end"),
                                 ("trainer set-up", "ray_init_end", "fit_start"),
                                 ("worker placement", "fit_start", "process_group_start"),
                                 ("process group set-up", "process_group_start", "process_group_end")):
            if t.get(start) is not None and t.get(end) is not None:
                phases[name] = max(0.0, t[end] - t[start])
        return phases


class RayTrainGroup(DDPGroup):
    """A Ray Train worker's side: the torch process group Ray Train initialised (gloo on CPU, NCCL on GPU), the
    rank map as Ray gave it, prepare_model's DistributedDataParallel, and the same collectives as elastic."""

    def init(self, spec):
        import ray.train
        import torch
        import torch.distributed as dist

        ctx = ray.train.get_context()
        if not dist.is_initialized():
            raise RuntimeError("Ray Train did not set up a torch process group in this worker")
        if spec.device == "cuda":
            import ray.train.torch

            device = ray.train.torch.get_device()
            torch.cuda.set_device(device)
            self.device_ids = [device.index]
        else:
            self.device_ids = None
        rank = ctx.get_world_rank()
        return rank_row(rank=rank, world_size=ctx.get_world_size(), local_rank=ctx.get_local_rank(),
                        local_world_size=ctx.get_local_world_size(), group_rank=ctx.get_node_rank(),
                        role_rank=rank, restart_count=int(os.environ.get("BENCH_ATTEMPT", 0)))  # worker groups before

    def rendezvous_began(self, init_called):
        began = times_of(_run_dir()).get("process_group_start")
        return min(began, init_called) if began else init_called

    def wrap(self, model, optimizer, spec):
        """ray.train.torch.prepare_model with elastic's DDP settings (bucket size; the model is already on its
        device). At one worker prepare_model wraps nothing, as Ray users get it."""
        import ray.train.torch

        return ray.train.torch.prepare_model(
            model, move_to_device=False,
            parallel_strategy_kwargs={"bucket_cap_mb": spec.backend_options["ddp_bucket_mb"]}), optimizer

    def shutdown(self):
        pass  # the process group is Ray Train's: it destroys it when the workers end


class RayTrainElastic(ElasticMode):
    """Ray Train's fault tolerance: FailureConfig(max_failures=--max-restarts). When a worker fails, Ray Train
    ends the worker group and starts a new one (new actors, a new process group) at the same size; the new
    workers resume from the latest checkpoint, which rank 0 writes every C steps.

    A join is Train V2's elastic worker count: the trainer runs with ScalingConfig(num_workers=(N, N + 1)) on a
    local runtime with the CPUs of N workers only, and the joining "worker" is a new Ray node with one worker's
    CPUs (`ray start --address` to the run's runtime). Ray Train's elastic policy sees the room, every
    --ray-resize-interval seconds, and restarts the worker group at N + 1, resuming from the checkpoint."""

    scenarios = ("kill", "join")

    def problem(self, scenario, world_size, options=None):
        if scenario == "join" and (options or {}).get("ray_address"):
            return ("a Ray join adds a node to the run's own runtime; with --ray-address the cluster is another's: "
                    "drop --ray-address (or add a node to your cluster yourself)")
        return None

    def launch(self, spec, rank_command, run_id, run_dir):
        # a local runtime turns token authentication on unless RAY_AUTH_MODE says otherwise, but `ray start
        # --address` turns it on only when told: the joining node is told what the runtime does
        extra = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")} if spec.fault["scenario"] == "join" else {}
        return RayLauncher().command(spec, rank_command, run_id), extra, {}

    def join(self, spec, rank_command, run_id, run_dir, info):
        address, ray = times_of(run_dir).get("gcs_address"), ray_program()
        if not address or not ray:
            raise RuntimeError("the run's Ray runtime has not said its address; nothing to join" if ray else
                               f"the `ray` command was not found; {SETUP_HINT}")
        return [ray, "start", f"--address={address}", f"--num-cpus={spec.threads}",
                f"--num-gpus={1 if spec.device == 'cuda' else 0}", "--block", "--disable-usage-stats",
                f"--object-store-memory={JOINER_OBJECT_STORE_BYTES}"]

    def worker_state(self, group, model, optimizer, run_dir, spec, on_reset):
        training_model, _ = group.wrap(model, optimizer, spec)
        return CheckpointRestart(model, optimizer, training_model, run_dir.checkpoint,
                                 lambda: (int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("BENCH_ATTEMPT", 0)),
                                          int(os.environ.get("NODE_RANK", 0))))


def _run_dir():
    return RunDir(os.environ["BENCH_RUN_DIR"])


def rank_main(config: dict) -> None:
    """Ray Train's train_loop_per_worker: one rank of the run, in the Ray worker's own process. What bench.harness.guard
    does for the other backends' ranks is done here: the rank's output goes to its log, capped as the guard caps it
    (through a pipe, copied by a thread of this process), and whatever the ending its exit file is written (a rank
    that raised exits with code 1, as a Python process would)."""
    import traceback

    import psutil
    import ray.train


    run_dir = RunDir(config["run_dir"])
    rank = ray.train.get_context().get_world_rank()
    attempt = run_dir.claim_attempt(rank, 0)
    os.environ.update(BENCH_RANK=str(rank), BENCH_ATTEMPT=str(attempt), BENCH_RUN_DIR=str(run_dir.path))
    log_path = run_dir.rank_file(rank, attempt, "log")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    read_end, write_end = os.pipe()
    pump = threading.Thread(target=copy_output, args=(read_end, CappedLog(log_path)), daemon=True)
    pump.start()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    returncode = 1
    try:
        run_process(run_dir, rank, attempt, psutil.Process().create_time())  # the Ray worker's process start
        returncode = 0
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        ended = time.time()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)  # the pipe's last write ends of this process: its copy ends once it has the rest
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        pump.join(LOG_DRAIN_S)
        run_dir.write(rank, attempt, "exit", {
            "rank": rank, "attempt": attempt, "pid": os.getpid(), "time": ended, "returncode": returncode,
            "exit_code": returncode, "signal": None, "terminated_by": None,
            "tail": tail(log_path) if returncode else ""})


def address_problem(address: str) -> str | None:
    """None when a Ray cluster's GCS answers at `address` within ADDRESS_CHECK_S, else why not."""
    parsed = parse_address(address)
    if parsed is None:
        return f"--ray-address {address!r}: give the cluster's address as HOST:PORT (its GCS, e.g. 10.0.0.1:6379)"
    try:
        with socket.create_connection(parsed, timeout=ADDRESS_CHECK_S):
            return None
    except OSError as exc:
        return (f"--ray-address {address}: no Ray cluster answers there within {ADDRESS_CHECK_S:g} s "
                f"({exc.strerror or exc}); start one with `ray start --head` or drop --ray-address")


class RayBackend(Backend):
    name = "ray"
    summary = "Ray Train TorchTrainer (Ray actors, torch process group) + prepare_model's DistributedDataParallel"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    options = (
        DDP_BUCKET,
        BackendOption("ray_address", None, "an existing Ray cluster (its GCS, HOST:PORT) to run on", str,
                      invalid=("nohost", "host:port", "h:0"), default_words="a local Ray runtime started for the run"),
        BackendOption("ray_resize_interval", 60.0, "bench fault --join: how often Ray Train's elastic policy looks "
                      "for room to grow the worker group, in seconds (ScalingConfig's "
                      f"elastic_resize_monitor_interval_s; 60 is Ray's default; at most {MAX_TIMEOUT_WORDS})", float,
                      invalid=("0", "-1", "nan", "inf", "x", "1e10"), fault_only=True),
    )
    launcher = RayLauncher()
    group_type = RayTrainGroup
    elastic = RayTrainElastic()
    counterpart = "elastic"  # the same DDP over the same gloo/NCCL: any difference is Ray's

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
        from importlib.metadata import version

        return [f"ray {version('ray')}"]


BACKEND = RayBackend()
