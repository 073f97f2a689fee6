"""The pieces a task's rank program is built from: joining the group (GroupMember), pinning every thread of a
worker to its cores, the step loop the harness wraps around each optimizer step, the timed windows, the rank's
peak memory.

Method (docs/method.md, "Windows and throughput"): W warm-up steps, never timed (the first includes
lazy initialisation); then R windows of K steps. Before each window all ranks meet at a barrier and the
device is synchronised, so every rank times the same K steps; a window's time is taken per rank here
and the max over ranks is taken by the parent. Nothing but the step itself runs inside a window.
A rank measures and writes its own files; it never decides a run's status.
"""

from __future__ import annotations

import importlib
import os
import resource
import sys
import time

from bench.core.records import RankResult, Times
from bench.core.registry import get_backend
from bench.core.rundir import RunDir
from bench.core.spec import RunSpec
from bench.rank.inject import fire_injected
from bench.rank.numa import GpuPlacement, gpu_worker_cpus, torch_bus_id


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def bind_cpus(spec, local_rank: int, role: str = "worker", numa: GpuPlacement | None = None) -> list[int] | None:
    """--cpu-bind cores: the worker of local rank r takes cores [r*T, (r+1)*T) of those this process may use;
    --cpu-bind numa (GPU runs): `numa`'s cores, its share of its GPU's NUMA node (gpu_placement), of those it may use
    (where none is known, it is left unbound).
    Every thread of the process is pinned, not only the caller: by the time a rank has joined its group, the
    backend has started threads of its own (Horovod's background loop, gloo's I/O), which would otherwise run
    on any core. Processes that do not train (parameter servers) are left to the scheduler. Returns the
    process's cores."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if spec.cpu_bind not in ("cores", "numa") or role != "worker":
        return cores
    if spec.cpu_bind == "numa":
        allowed = [c for c in (numa.cpus if numa else None) or [] if c in cores]
        return pin_threads(allowed) if allowed else cores
    start = (local_rank * spec.threads) % len(cores)
    return pin_threads([cores[(start + i) % len(cores)] for i in range(spec.threads)])


def gpu_placement(local_rank: int, local_world_size: int | None) -> GpuPlacement:
    """--cpu-bind numa: this GPU worker's NUMA node and its share of the node's cores (bench.rank.numa), the GPUs of
    this host's workers read from torch; where the node is not known, the worker is left unbound and its log says
    why."""
    import torch  # only a GPU run binds by NUMA node, and its processes load torch anyway

    count = min(torch.cuda.device_count(), local_world_size or torch.cuda.device_count())
    bus_ids = [torch_bus_id(torch.cuda.get_device_properties(i)) for i in range(count)]
    placed = gpu_worker_cpus(bus_ids, local_rank)
    if placed.unbound:
        print(f"bench: --cpu-bind numa: {placed.unbound}", file=sys.stderr, flush=True)
    return placed


def pin_threads(chosen: list[int]) -> list[int]:
    """Every thread of this process pinned to `chosen`; returns them."""
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, chosen)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return chosen


def thread_ids() -> list[int]:
    """The ids of this process's threads (Linux; elsewhere the calling thread only)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def thread_affinities() -> dict[int, list[int]]:
    """Each thread's cores, as the kernel holds them (what --cpu-bind achieved, checked by the tests)."""
    out = {}
    for tid in thread_ids():
        try:
            out[tid] = sorted(os.sched_getaffinity(tid))
        except OSError:  # a thread that ended meanwhile
            pass
    return out


class StepLoop:
    """The harness's part of one optimizer step: a test-only injected failure or delay, and the step count.

    It runs inside every timed window, so it is kept to an integer comparison and an addition
    (tests/benchmarks measures it)."""

    def __init__(self, core, inject: dict | None = None, done: int = 0):
        self.core, self.done, self.delay_s = core, done, 0.0
        self.inject_step = inject["step"] if inject else -1
        self.inject_kind = inject["kind"] if inject else None

    def __call__(self):
        if self.done == self.inject_step:
            fire_injected(self.inject_kind, self.done)
        out = self.core()
        if self.delay_s:
            time.sleep(self.delay_s)
        self.done += 1
        return out


def timed_windows(step, windows: int, steps_per_window: int, barrier, sync, on_window) -> tuple[list, list]:
    """R windows of K steps: (each window's time on this rank, each window's last step output).

    All ranks meet at the barrier and the device is synchronised before a window starts, so every rank
    times the same K steps; nothing but the steps runs between the two clock readings."""
    window_times, last = [], []
    for window in range(windows):
        barrier()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps_per_window):
            out = step()
        sync()
        window_times.append(time.perf_counter() - t0)
        last.append(out)
        on_window(window + 1)
    return window_times, last


def step_delay_seconds(delay: dict, warmup_times: list[float], step, sync) -> float:
    """--inject-delay: a fixed duration, or a share of the warm-up's median step time."""
    if "seconds" in delay:
        return delay["seconds"]
    if not warmup_times:  # a one-step warm-up: time one more untimed step
        t0 = time.perf_counter()
        step()
        sync()
        warmup_times = [time.perf_counter() - t0]
    return delay["fraction"] * sorted(warmup_times)[len(warmup_times) // 2]


class GroupMember:
    """One process after its rendezvous: the backend's process group, who it is, and when it joined."""

    def __init__(self, spec: RunSpec, run_dir: RunDir, file_rank: int, attempt: int, t_process_start: float):
        self.spec, self.run_dir, self.file_rank, self.attempt = spec, run_dir, file_rank, attempt
        self.t_process_start = t_process_start
        self.first_step_end: float | None = None  # set by a task whose processes time a first step
        # the module Backend.group names holds the group's class as GROUP (it imports the backend's framework)
        self.group = importlib.import_module(get_backend(spec.backend).group).GROUP()
        self.group.set_threads(spec.threads)  # the framework's compute threads, before it starts any
        called = time.time()
        self.info = self.group.init(spec)  # rendezvous and process-group set-up
        self.t_init_end = time.time()
        self.t_init_start = self.group.rendezvous_began(called)
        self.info.pid, self.info.time = os.getpid(), self.t_init_end
        info = self.info
        numa = (
            gpu_placement(info.local_rank or 0, info.local_world_size)
            if spec.cpu_bind == "numa" and info.role == "worker"
            else None
        )
        self.affinity = bind_cpus(spec, info.local_rank, info.role, numa)  # after the backend's threads exist
        info.cpus, info.numa_node = self.affinity, numa.numa_node if numa else None
        run_dir.write(file_rank, attempt, "joined", self.info.to_dict())

    @property
    def device(self):
        import torch

        # the GPU the backend's group made this process's (ProcessGroup.init: torch.cuda.set_device), which is not
        # always the local rank: Ray gives a worker its own, and an elastic mode may start workers of one machine under
        # several agents or local "hosts"; the model, the batches and DDP's device_ids are then on one device
        return torch.device("cuda", torch.cuda.current_device()) if self.spec.device == "cuda" else torch.device("cpu")

    @property
    def sync(self):
        import torch

        return torch.cuda.synchronize if self.spec.device == "cuda" else (lambda: None)

    def result(self, output: dict) -> RankResult:
        """This process's result file contents; shuts the group down first."""
        end = time.time()
        self.group.shutdown()
        return RankResult(
            rank_info=self.info,
            pid=os.getpid(),
            peak_rss_bytes=peak_rss_bytes(),
            output=output,
            times=Times(
                process_start=self.t_process_start,
                init_start=self.t_init_start,
                init_end=self.t_init_end,
                first_step_end=self.first_step_end,
                end=end,
            ),
        )
