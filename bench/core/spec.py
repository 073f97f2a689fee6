"""RunSpec: everything that defines a run, resolved and validated before any process starts.

The harness, not the launcher, fixes threads, seed, batch, data and device placement, and the
resolved values are recorded, so every backend runs under the same conditions.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from bench.core.codec import decode
from bench.core.errors import UsageError
from bench.core.hostlist import Host, placement

DEFAULTS = dict(warmup_steps=5, windows=5, seed=0, data="synthetic",
                lr=0.01, momentum=0.9, timeout=900.0, cpu_bind="auto")
CPU_BINDS = ("auto", "none", "cores")  # what a user asks for; a spec holds "none" or "cores" (resolve_cpu_bind)
# The longest timeout or wait any option takes (a run's deadline, a workload's check, a collective's timeout, a
# recovery, a wait for cores): 7 days. Past it a value is a slip of the unit, and far past it what holds it overflows
# (select(), with which the lifeline holds a run's deadline, takes some 292 years at most: 1e10 s does not fit).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_TIMEOUT_WORDS = f"{MAX_TIMEOUT_S:g} s, 7 days"
# --oversubscribe lets a run's worker threads outnumber the cores, to measure contention: up to this many a core.
# Past it a run measures the scheduler rather than a backend, and each worker is a process holding its own framework
# (some hundreds of MiB), so an unbounded --nproc would exhaust the machine's memory or processes first.
MAX_THREADS_PER_CORE = 8


@dataclass
class RunSpec:
    backend: str
    # The training fields (workload to windows) are None for a run that trains nothing (a communication sweep).
    workload: str | None
    world_size: int
    device: str  # "cpu" (gloo) or "cuda" (one process per GPU, NCCL)
    batch_size: int | None  # per worker (weak scaling)
    image_size: int | None
    num_classes: int | None
    threads: int  # intra-op threads per worker, also OMP_NUM_THREADS / MKL_NUM_THREADS
    steps_per_window: int | None
    warmup_steps: int | None = DEFAULTS["warmup_steps"]
    windows: int | None = DEFAULTS["windows"]
    seed: int = DEFAULTS["seed"]
    data: str = DEFAULTS["data"]
    data_dir: str | None = None
    loader_workers: int = 0  # DataLoader processes per worker (--loader dataloader, --data imagefolder)
    loader: str = "memory"  # in-memory sources: held on the device ("memory") or fed through a DataLoader
    lr: float = DEFAULTS["lr"]
    momentum: float = DEFAULTS["momentum"]
    cpu_bind: str = "none"  # "none" or "cores", as resolve_cpu_bind chose; records made before "auto" were unbound
    timeout: float = DEFAULTS["timeout"]
    backend_options: dict = field(default_factory=dict)
    backward_passes: int = 1  # micro-batches per optimizer step (gradient accumulation), from the backend
    roles: dict = field(default_factory=dict)  # processes per role, e.g. {"worker": 2, "server": 1}
    task: str = "train"  # the kind of run: a name in bench.tasks.TASK_MODULES
    comm: dict | None = None  # task "comm": ops, dtype, min_bytes, max_bytes, warmup_iters, iters
    inject: dict | None = None  # test-only injected failure of one rank (bench.rank.inject.parse_inject)
    step_delay: dict | None = None  # test-only slowdown of every timed step (bench.rank.inject.parse_step_delay)
    fault: dict | None = None  # task "fault": scenario, rank, at_step, signal, ... (bench.tasks.fault)
    converge: dict | None = None  # task "converge": target, epochs, eval_every, lr_scaling, ... (bench.tasks.converge)
    save_params: bool = False  # write each rank's final parameters into the run directory
    save_model: str | None = None  # the first worker writes the trained model's state_dict there (absolute path)
    hosts: list[dict] | None = None  # a run across hosts: [{"name", "slots"}] in order (bench.cluster.hosts)
    iface: str | None = None  # the network interface every backend uses across hosts
    # across hosts: how many machines they are on (hosts of one machine, such as test hosts, share its cores);
    # None on one host, and in records made before schema 8, which did not say
    machines: int | None = None
    link: dict | None = None  # every host's link shaped for the run: {"rate", "delay", "rate_bytes_per_s"}
    workload_source: dict | None = None  # a user's workload: reference, module, file, sha256 (workloads.external)
    scheduler: dict | None = None  # inside a Slurm allocation: {"name": "slurm", "job_id", "nodelist"} (bench.cluster.slurm)
    sweep_id: str | None = None
    repeat: int = 0  # which of a sweep's --repeats rounds this run belongs to

    @property
    def processes(self) -> int:
        """Every process the launcher starts: workers plus any other role."""
        return sum(self.roles.values()) if self.roles else self.world_size

    @property
    def trains(self) -> bool:
        """Whether the run trains a model (a communication sweep does not: its training fields are None)."""
        return self.workload is not None

    @property
    def total_steps(self) -> int | None:
        """Optimizer steps every worker takes (a parameter server serves as many); None when nothing trains."""
        if self.converge:
            return self.converge["total_steps"]
        if not self.trains:
            return None
        return self.warmup_steps + self.windows * self.steps_per_window

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based): --lr, scaled by the world size under
        --lr-scaling linear and reached by a linear warm-up (docs/method.md, "Time to accuracy")."""
        c = self.converge
        if not c:
            return self.lr
        peak = self.lr * (self.world_size if c["lr_scaling"] == "linear" else 1)
        ramp = c["warmup_steps"]
        return peak if step >= ramp else self.lr + (peak - self.lr) * step / ramp

    @property
    def samples_per_step(self) -> int | None:
        """Samples one worker consumes per optimizer step."""
        return None if self.batch_size is None else self.batch_size * self.backward_passes

    @property
    def global_batch(self) -> int | None:
        """Samples all workers consume per optimizer step."""
        return None if self.batch_size is None else self.samples_per_step * self.world_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        return decode(cls, data, "spec")


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(nproc: int | None, gpus: int | None) -> tuple[str, int]:
    """(device, world size) from --nproc / --gpus, or a one-line error."""
    if nproc is not None and gpus is not None:
        raise UsageError("give either --nproc (CPU processes) or --gpus (one process per GPU), not both")
    if gpus is not None:
        if gpus < 1:
            raise UsageError(f"--gpus {gpus}: the number of GPUs must be at least 1")
        available = cuda_device_count()
        if available == 0:
            raise UsageError(f"--gpus {gpus}: this machine has no CUDA device; "
                             f"use --nproc {gpus} to run {gpus} CPU processes over gloo")
        if gpus > available:
            raise UsageError(f"--gpus {gpus}: this machine has {available} CUDA device(s); "
                             f"use --gpus {available} or fewer")
        return "cuda", gpus
    if nproc is None:
        nproc = min(2, cpu_count())
    if nproc < 1:
        raise UsageError(f"--nproc {nproc}: the number of processes must be at least 1")
    return "cpu", nproc


def default_threads(device: str, max_world_size: int, cluster: dict | None = None) -> int:
    """Threads per worker so that the largest world size in play fits the cores without contention (on every
    machine of a run across hosts)."""
    if cluster is not None:
        return fitting_threads(machine_load(cluster, placement([Host(**h) for h in cluster["hosts"]], max_world_size)))
    return max(1, cpu_count() // max_world_size)


def check_timeout(timeout: float, flag: str = "--timeout") -> None:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"{flag} {timeout}: give a positive, finite number of seconds, at most "
                         f"{MAX_TIMEOUT_WORDS}")


def check_placement(plugin, world_size: int, device: str, threads: int | None, oversubscribe: bool,
                    backend_options: dict | None, timeout: float = DEFAULTS["timeout"],
                    cluster: dict | None = None) -> tuple[int, dict, dict]:
    """What every run of every task must pass: world size, availability, backend options, threads
    against cores (on each machine, for a run across the hosts of `cluster`: bench.cluster.hosts.check_hosts), a
    usable deadline. Returns (threads, resolved backend options, processes per role)."""
    name = plugin.name
    if plugin.max_world_size is not None and world_size > plugin.max_world_size:
        raise UsageError(f"backend {name} runs at most {plugin.max_world_size} worker(s); "
                         f"world size {world_size} is not allowed: lower --nproc or pick another backend")
    problem = plugin.unavailable_reason(device)
    if problem:
        raise UsageError(f"backend {name} cannot run here: {problem}")
    resolved = plugin.resolve_options(backend_options or {}, world_size, cluster["hosts"] if cluster else None)
    problem = plugin.check_options(resolved, device)
    if problem:
        raise UsageError(f"backend {name}: {problem}")
    check_timeout(timeout)
    roles = plugin.roles(resolved, world_size)
    if cluster is not None:
        return cluster_threads(plugin, cluster, world_size, resolved, threads, oversubscribe), resolved, roles
    cores = cpu_count()
    threads = default_threads(device, world_size) if threads is None else threads
    if threads < 1:
        raise UsageError(f"--threads {threads}: each worker needs at least 1 thread")
    if device == "cpu" and world_size * threads > cores and not oversubscribe:
        raise UsageError(f"world size {world_size} x {threads} thread(s) needs {world_size * threads} cores, "
                         f"this machine has {cores}; lower --nproc or --threads, or pass --oversubscribe "
                         "to measure contention on purpose")
    if device == "cpu" and world_size * threads > MAX_THREADS_PER_CORE * cores:
        raise UsageError(f"world size {world_size} x {threads} thread(s) is {world_size * threads} worker threads on "
                         f"this machine's {cores} cores; --oversubscribe allows at most {MAX_THREADS_PER_CORE} a core "
                         f"({MAX_THREADS_PER_CORE * cores} here): lower --nproc or --threads")
    return threads, resolved, roles


def resolve_cpu_bind(requested: str | None, device: str, oversubscribe: bool, cluster: dict | None,
                     on_this_host: bool = True) -> str:
    """What a run's workers do with CPU affinity. "auto" pins each worker to its own cores ("cores") where
    each can have them: CPU processes on one host that fit its cores. It leaves them to the scheduler
    ("none") on GPUs, when oversubscribed on purpose, and across hosts or on a cluster that places the workers
    itself (`on_this_host` False: Backend.places_on_this_host); test hosts share one machine's cores, where
    local ranks would collide: pass --cpu-bind cores on real machines. An unpinned rank's helper threads
    (Horovod's background loop, gloo's I/O) run on the other ranks' cores: docs/method.md, "Fairness"."""
    requested = DEFAULTS["cpu_bind"] if requested is None else requested
    if requested not in CPU_BINDS:
        raise UsageError(f"--cpu-bind {requested!r}: choose one of {', '.join(CPU_BINDS)}")
    if requested != "auto":
        return requested
    return "cores" if device == "cpu" and not oversubscribe and not cluster and on_this_host else "none"


def across_hosts(cluster: dict | None) -> dict:
    """The spec fields of a run across the hosts of `cluster` (none for a run on this machine)."""
    if not cluster:
        return {}
    scheduler = cluster.get("scheduler")
    machines = cluster.get("machines")
    return {"hosts": cluster["hosts"], "iface": cluster["iface"], "link": cluster.get("link"),
            "machines": len({m["id"] for m in machines.values()}) if machines else None,
            "scheduler": {k: scheduler[k] for k in ("name", "job_id", "nodelist")} if scheduler else None}


def cluster_threads(plugin, cluster: dict, world_size: int, options: dict, threads: int | None,
                    oversubscribe: bool) -> int:
    """Threads per process across hosts: by default the cores of each machine shared by the processes placed
    on it (the backend's host_plan; hosts that share one machine, such as test hosts, share its cores), checked
    on every machine."""
    per_host = [(host, n) for host, n, _ in plugin.host_plan([Host(**h) for h in cluster["hosts"]], world_size,
                                                             options)]
    if not plugin.launcher.spans_hosts and len(per_host) > 1:
        raise UsageError(f"backend {plugin.name} runs on one host only; give --nproc 1 or one host")
    load = machine_load(cluster, per_host)
    threads = fitting_threads(load) if threads is None else threads
    for cpus, n in load:
        if n * threads > cpus and not oversubscribe:
            raise UsageError(f"{n} process(es) x {threads} thread(s) on one machine of the hosts need "
                             f"{n * threads} cores, it has {cpus}; lower --nproc or --threads, or pass --oversubscribe")
    return threads


def fitting_threads(load: list[tuple[int, int]]) -> int:
    """The most threads per process that fit every machine's cores, from (cores, processes there)."""
    return max(1, min(cpus // n for cpus, n in load))


def machine_load(cluster: dict, per_host: list) -> list[tuple[int, int]]:
    """(cores, processes placed on it) for each machine the run's hosts are on, from (host, processes there)."""
    load: dict[str, list[int]] = {}
    for host, n in per_host:
        machine = cluster["machines"][host.name]
        load.setdefault(machine["id"], [machine["cpus"], 0])[1] += n
    return [(cpus, n) for cpus, n in load.values()]


def pinned_words(cpu_bind: str, lead: str = " ") -> str:
    """' pinned to its cores' for a pinned run's conditions (bench.core.spec.resolve_cpu_bind), nothing for an unpinned one."""
    return f"{lead}pinned to its cores" if cpu_bind == "cores" else ""


def placement_text(hardware: str, cpu_bind: str) -> str:
    """', pinned, on MACHINE' for a case's title: its workers' pinning and, where a page has two, its machine."""
    return (", pinned" if cpu_bind == "cores" else "") + (f", on {hardware}" if hardware else "")
