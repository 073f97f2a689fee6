"""RunSpec: everything that defines a run, resolved and validated before any process starts.

The harness, not the launcher, fixes threads, seed, batch, data and device placement, and the
resolved values are recorded, so every backend runs under the same conditions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bench.core.cgroups import usable_cpus, usable_cpus_words
from bench.core.codec import JsonObject, OwnForm, RecordError, Where, decode, decode_fields, restore_floats, spell
from bench.core.dryrun import planning
from bench.core.errors import UsageError
from bench.core.gpu_node import unseen_gpus
from bench.core.hostlist import Host, placement
from bench.core.registry import get_task

DEFAULTS: dict[str, Any] = dict(
    warmup_steps=5, windows=5, seed=0, data="synthetic", lr=0.01, momentum=0.9, timeout=900.0, cpu_bind="auto"
)
# what a user asks for; a spec holds "none", "cores" or "numa" (a GPU worker on its GPU's NUMA node's cores), as
# resolve_cpu_bind chose
CPU_BINDS = ("auto", "none", "cores", "numa")
# The longest timeout or wait any option takes (a run's deadline, a workload's check, a collective's timeout, a
# recovery, a wait for cores): 7 days. Past it a value is a slip of the unit, and far past it what holds it overflows
# (select(), with which the lifeline holds a run's deadline, takes some 292 years at most: 1e10 s does not fit).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_TIMEOUT_WORDS = f"{MAX_TIMEOUT_S:g} s, 7 days"
# --oversubscribe lets a run's worker threads outnumber the cores, to measure contention: up to this many a core.
# Past it a run measures the scheduler rather than a backend, and each worker is a process holding its own framework
# (some hundreds of MiB), so an unbounded --nproc would exhaust the machine's memory or processes first.
MAX_THREADS_PER_CORE = 8
# The fields of a RunSpec that hold one task's own settings, each named after its task: the task's TaskSettings
# (Task.settings_type) in a run of that task, None in the others.
TASK_SETTINGS = ("comm", "fault", "converge")
# --precision: the arithmetic of the forward and backward passes (docs/method.md, "Numerics"). fp32 with TF32 off;
# tf32: fp32 tensors, TF32 tensor-core matmuls and convolutions; bf16 and fp16: autocast to that dtype, fp16 with a
# gradient scaler. tf32 and fp16 mean something only on a GPU (on a CPU, fp16 autocast is not what GPU users run).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
GPU_ONLY_PRECISIONS = ("tf32", "fp16")


@dataclass(frozen=True, kw_only=True)
class TaskSettings(OwnForm):
    """A task's own settings (bench/tasks/<task>/settings.py): a frozen dataclass that the spec holds in the field
    named after its task (TASK_SETTINGS) and stores as that field's JSON object, key for key. A value read from a
    record in another layout (a key it did not have yet, one since dropped) writes back as it was read. What the
    spec asks of a task's settings, the hooks below, has a default."""

    @property
    def collective_timeout(self) -> float | None:
        """Seconds a collective may wait for a peer, where the task sets them (None: RunSpec's default)."""
        return None

    @property
    def join_timeout(self) -> float | None:
        """Seconds the processes of a group may take to all reach it, where the task sets them (None: the collective
        timeout)."""
        return None

    @property
    def planned_steps(self) -> int | None:
        """Optimizer steps every worker takes, where the task plans them itself (None: warm-up plus windows)."""
        return None

    def lr_at(self, lr: float, world_size: int, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based) from the run's --lr: the task's schedule, if any."""
        return lr

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        stored = self.__dict__.get("_stored")
        if stored is None:
            return values
        keys, unknown = stored
        return {k: values[k] if k in values else unknown[k] for k in keys}

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> TaskSettings:
        where = where or cls.__name__
        if not isinstance(data, dict):  # (a where inside a record is spelled as the codec spells it)
            raise RecordError(f"{spell(where)}: expected an object, found {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        value: TaskSettings = decode_fields(cls, {k: v for k, v in data.items() if k in names}, where)
        if list(data) != names:  # another layout: kept, so that it is written back as it was read
            object.__setattr__(
                value, "_stored", (tuple(data), {k: restore_floats(v) for k, v in data.items() if k not in names})
            )
        return value

    @classmethod
    def from_json(cls, value: Any, where: Where) -> Any:
        if cls is TaskSettings:  # a spec's field: the JSON object, read as its task's type by RunSpec.__post_init__
            if not isinstance(value, dict):
                raise RecordError(f"{spell(where)}: expected an object, found {type(value).__name__}")
            return value
        return cls.from_dict(value, where)


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
    # "none", "cores" or "numa", as resolve_cpu_bind chose; records made before "auto" were unbound
    cpu_bind: str = "none"
    timeout: float = DEFAULTS["timeout"]
    backend_options: JsonObject = field(default_factory=dict)
    backward_passes: int = 1  # micro-batches per optimizer step (gradient accumulation), from the backend
    roles: JsonObject = field(default_factory=dict)  # processes per role, e.g. {"worker": 2, "server": 1}
    task: str = "train"  # the kind of run: a name in bench.tasks.TASK_MODULES
    comm: TaskSettings | None = None  # task "comm": ops, dtype, min_bytes, max_bytes, ... (bench.tasks.comm.settings)
    inject: JsonObject | None = None  # test-only injected failure of one rank (bench.rank.inject.parse_inject)
    step_delay: JsonObject | None = None  # test-only slowdown of every timed step (bench.rank.inject.parse_step_delay)
    fault: TaskSettings | None = None  # task "fault": scenario, rank, at_step, ... (bench.tasks.fault.settings)
    converge: TaskSettings | None = None  # task "converge": target, epochs, ... (bench.tasks.converge.settings)
    save_params: bool = False  # write each rank's final parameters into the run directory
    save_model: str | None = None  # the first worker writes the trained model's state_dict there (absolute path)
    hosts: list[JsonObject] | None = None  # a run across hosts: [{"name", "slots"}] in order (bench.cluster.hosts)
    iface: str | None = None  # the network interface every backend uses across hosts
    # across hosts: how many machines they are on (hosts of one machine, such as test hosts, share its cores);
    # None on one host, and in records made before schema 8, which did not say
    machines: int | None = None
    link: JsonObject | None = None  # every host's link shaped for the run: {"rate", "delay", "rate_bytes_per_s"}
    workload_source: JsonObject | None = None  # a user's workload: address, module, file, sha256 (workloads.external)
    # inside a Slurm allocation: {"name": "slurm", "job_id", "nodelist"} (bench.cluster.slurm); in a Kubeflow job's
    # pods: {"name": "kubeflow PyTorchJob" or "kubeflow TrainJob", "job_id": the job's name, "nodelist": its pods}
    scheduler: JsonObject | None = None
    sweep_id: str | None = None
    repeat: int = 0  # which of a sweep's --repeats rounds this run belongs to
    precision: str = "fp32"  # one of PRECISIONS (resolve_numerics); records before schema 10 ran fp32
    channels_last: bool = False  # model and 4-D inputs in channels_last memory format
    cudnn_benchmark: bool = False  # torch.backends.cudnn.benchmark: on for GPU runs unless --no-cudnn-benchmark

    def __post_init__(self) -> None:
        for name in TASK_SETTINGS:
            value = getattr(self, name)
            if isinstance(value, dict):  # as stored: read as its task's own type
                setattr(self, name, get_task(name).settings_type.from_dict(value, f"spec.{name}"))

    @property
    def settings(self) -> TaskSettings | None:
        """The run's task's own settings (None for a task that has none, such as training)."""
        return getattr(self, self.task) if self.task in TASK_SETTINGS else None

    @property
    def collective_timeout(self) -> float:
        """How long a collective waits for a stopped peer before it fails: the task's own (a fault run's
        --comm-timeout, so that the survivors notice soon), else the run's timeout and at least a minute."""
        own = self.settings.collective_timeout if self.settings else None
        return max(60.0, self.timeout) if own is None else own

    @property
    def join_timeout(self) -> float:
        """How long the first process of a group waits for the others to start and join it: the task's own (a fault
        run's recovery timeout, since a group formed again after the fault has until then), else the collective
        timeout. A short collective timeout must not bound a group's forming: a process started again on a busy or
        slow machine can take longer than that to import its framework, and the group would fail once more."""
        own = self.settings.join_timeout if self.settings else None
        return self.collective_timeout if own is None else max(own, self.collective_timeout)

    @property
    def processes(self) -> int:
        """Every process the launcher starts: workers plus any other role."""
        counts: dict[str, int] = self.roles
        return sum(counts.values()) if counts else self.world_size

    @property
    def trains(self) -> bool:
        """Whether the run trains a model (a communication sweep does not: its training fields are None)."""
        return self.workload is not None

    @property
    def total_steps(self) -> int | None:
        """Optimizer steps every worker takes (a parameter server serves as many); None when nothing trains."""
        planned = self.settings.planned_steps if self.settings else None
        if planned is not None:
            return planned
        if not self.trains or self.warmup_steps is None or self.windows is None or self.steps_per_window is None:
            return None  # (a run that trains has all three)
        return self.warmup_steps + self.windows * self.steps_per_window

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based): --lr, on the task's schedule if it has one (a
        converge run's: docs/method.md, "Time to accuracy")."""
        return self.settings.lr_at(self.lr, self.world_size, step) if self.settings else self.lr

    @property
    def samples_per_step(self) -> int | None:
        """Samples one worker consumes per optimizer step."""
        return None if self.batch_size is None else self.batch_size * self.backward_passes

    @property
    def global_batch(self) -> int | None:
        """Samples all workers consume per optimizer step."""
        per_worker = self.samples_per_step
        return None if per_worker is None else per_worker * self.world_size

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in TASK_SETTINGS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).to_dict()  # as stored (TaskSettings.to_dict)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> RunSpec:
        spec: RunSpec = decode(cls, data, "spec")
        return spec


def cpu_count() -> int:
    """The CPUs a run's threads can keep busy here: those this process may run on, fewer where its cgroup's CPU quota
    allows less time (a pod's limits.cpu on a larger node: bench.core.cgroups.usable_cpus)."""
    return usable_cpus()


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
            why = unseen_gpus()  # where nvidia-smi lists GPUs torch does not see: the versions that say why
            raise UsageError(
                f"--gpus {gpus}: this machine has no CUDA device torch can use"
                + (f" ({why})" if why else "")
                + f"; use --nproc {gpus} to run {gpus} CPU process{'es' if gpus > 1 else ''} over gloo"
            )
        if gpus > available:
            raise UsageError(
                f"--gpus {gpus}: this machine has {available} CUDA device(s); use --gpus {available} or fewer"
            )
        return "cuda", gpus
    if nproc is None:
        nproc = min(2, cpu_count())
    if nproc < 1:
        raise UsageError(f"--nproc {nproc}: the number of processes must be at least 1")
    return "cpu", nproc


def default_threads(device: str, max_world_size: int, cluster: dict[str, Any] | None = None) -> int:
    """Threads per worker so that the largest world size in play fits the cores without contention (on every
    machine of a run across hosts)."""
    if cluster is not None:
        return fitting_threads(machine_load(cluster, placement([Host(**h) for h in cluster["hosts"]], max_world_size)))
    return max(1, cpu_count() // max_world_size)


def check_timeout(timeout: float, flag: str = "--timeout") -> None:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"{flag} {timeout}: give a positive, finite number of seconds, at most {MAX_TIMEOUT_WORDS}")


def check_placement(
    plugin: Any,
    world_size: int,
    device: str,
    threads: int | None,
    oversubscribe: bool,
    backend_options: dict[str, Any] | None,
    timeout: float = DEFAULTS["timeout"],
    cluster: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any], dict[str, int]]:
    """What every run of every task must pass: world size, availability, backend options, threads
    against cores (on each machine, for a run across the hosts of `cluster`: bench.cluster.hosts.check_hosts), a
    usable deadline. Returns (threads, resolved backend options, processes per role)."""
    name = plugin.name
    if plugin.max_world_size is not None and world_size > plugin.max_world_size:
        raise UsageError(
            f"backend {name} runs at most {plugin.max_world_size} worker(s); "
            f"world size {world_size} is not allowed: lower --nproc or pick another backend"
        )
    problem = plugin.problem_here(device)
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
        raise UsageError(
            f"world size {world_size} x {threads} thread(s) needs {world_size * threads} cores, "
            f"this machine has {usable_cpus_words()}; lower --nproc or --threads, or pass --oversubscribe "
            "to measure contention on purpose"
        )
    if device == "cpu" and world_size * threads > MAX_THREADS_PER_CORE * cores:
        raise UsageError(
            f"world size {world_size} x {threads} thread(s) is {world_size * threads} worker threads on "
            f"this machine's {cores} cores; --oversubscribe allows at most {MAX_THREADS_PER_CORE} a core "
            f"({MAX_THREADS_PER_CORE * cores} here): lower --nproc or --threads"
        )
    return threads, resolved, roles


def resolve_cpu_bind(
    requested: str | None, device: str, oversubscribe: bool, cluster: dict[str, Any] | None, on_this_host: bool = True
) -> str:
    """What a run's workers do with CPU affinity. "auto" pins each worker to its own cores ("cores") where
    each can have them: CPU processes on one host that fit its cores. It leaves them to the scheduler
    ("none") on GPUs, when oversubscribed on purpose, and across hosts or on a cluster that places the workers
    itself (`on_this_host` False: Backend.places_on_this_host); GPU workers ("numa") each take a share of their
    GPU's NUMA node's cores, on each host (bench.rank.numa) unless the cluster places them; test hosts share one
    machine's cores, where
    local ranks would collide: pass --cpu-bind cores on real machines. An unpinned rank's helper threads
    (Horovod's background loop, gloo's I/O) run on the other ranks' cores: docs/method.md, "Fairness"."""
    requested = DEFAULTS["cpu_bind"] if requested is None else requested
    if requested not in CPU_BINDS:
        raise UsageError(f"--cpu-bind {requested!r}: choose one of {', '.join(CPU_BINDS)}")
    if requested == "numa" and device != "cuda":
        raise UsageError(
            "--cpu-bind numa binds GPU workers to their GPU's NUMA node: give --gpus N, or --cpu-bind cores"
        )
    if requested != "auto":
        return requested
    if device == "cuda":
        return "numa" if on_this_host else "none"
    return "cores" if not oversubscribe and not cluster and on_this_host else "none"


def across_hosts(cluster: dict[str, Any] | None) -> dict[str, Any]:
    """The spec fields of a run across the hosts of `cluster` (none for a run on this machine)."""
    if not cluster:
        return {}
    scheduler = cluster.get("scheduler")
    machines = cluster.get("machines")
    return {
        "hosts": cluster["hosts"],
        "iface": cluster["iface"],
        "link": cluster.get("link"),
        # pods of a Kubeflow job: their machines unknown (machines_known False), so not claimed separate
        "machines": len({m["id"] for m in machines.values()})
        if machines and cluster.get("machines_known", True)
        else None,
        "scheduler": {k: scheduler[k] for k in ("name", "job_id", "nodelist")} if scheduler else None,
    }


def cluster_threads(
    plugin: Any,
    cluster: dict[str, Any],
    world_size: int,
    options: dict[str, Any],
    threads: int | None,
    oversubscribe: bool,
) -> int:
    """Threads per process across hosts: by default the cores of each machine shared by the processes placed
    on it (the backend's host_plan; hosts that share one machine, such as test hosts, share its cores), checked
    on every machine."""
    per_host = [
        (host, n) for host, n, _ in plugin.host_plan([Host(**h) for h in cluster["hosts"]], world_size, options)
    ]
    if not plugin.launcher.spans_hosts and len(per_host) > 1:
        # a --gpus run's world is its GPUs on every host: only fewer hosts make it fit on one
        fewer = "" if cluster.get("gpus_per_host") else f"--nproc {per_host[0][1]} or fewer, or "
        cluster_of_its_own = any(o.name == "ray_address" for o in plugin.options)
        raise UsageError(
            f"backend {plugin.name} runs on one host only; give {fewer}one host"
            + (" (across nodes it runs on a Ray cluster: --ray-address HOST:PORT)" if cluster_of_its_own else "")
        )
    if planning():  # a dry run knows no host's cores (bench.cluster.hosts.planned_check): the threads as given
        return threads or 1
    load = machine_load(cluster, per_host)
    threads = fitting_threads(load) if threads is None else threads
    for cpus, n in load:
        if n * threads > cpus and not oversubscribe:
            raise UsageError(
                f"{n} process(es) x {threads} thread(s) on one machine of the hosts need "
                f"{n * threads} cores, it has {cpus}; lower --nproc or --threads, or pass --oversubscribe"
            )
    return threads


def fitting_threads(load: list[tuple[int, int]]) -> int:
    """The most threads per process that fit every machine's cores, from (cores, processes there)."""
    return max(1, min(cpus // n for cpus, n in load))


def machine_load(cluster: dict[str, Any], per_host: list[tuple[Host, int]]) -> list[tuple[int, int]]:
    """(cores, processes placed on it) for each machine the run's hosts are on, from (host, processes there)."""
    load: dict[str, list[int]] = {}
    for host, n in per_host:
        machine = cluster["machines"][host.name]
        load.setdefault(machine["id"], [machine["cpus"], 0])[1] += n
    return [(cpus, n) for cpus, n in load.values()]


def resolve_numerics(
    plugin: Any, device: str, precision: str | None, channels_last: bool | None, no_cudnn_benchmark: bool | None
) -> dict[str, Any]:
    """The spec fields of --precision, --channels-last and --no-cudnn-benchmark, or a one-line error. The TensorFlow
    backends run fp32 only: their Keras side has no mixed precision here, so anything else is refused rather than
    recorded and not done; a backend may refuse more (Backend.numerics_problem). cudnn.benchmark is on for a PyTorch
    GPU run unless refused; on a CPU it means nothing and is recorded off."""
    framework = plugin.framework
    precision = precision or "fp32"
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if framework != "torch" and (precision != "fp32" or channels_last):
        asked = f"--precision {precision}" if precision != "fp32" else "--channels-last"
        raise UsageError(
            f"{asked}: the {framework} backends run fp32 in their own memory format only; drop it or pick a PyTorch "
            "backend"
        )
    problem = plugin.numerics_problem(precision, bool(channels_last))
    if problem:
        raise UsageError(f"backend {plugin.name}: {problem}")
    if device == "cpu" and precision in GPU_ONLY_PRECISIONS:
        raise UsageError(
            f"--precision {precision} needs a GPU (give --gpus N); on CPU processes use --precision fp32 or bf16"
        )
    return {
        "precision": precision,
        "channels_last": bool(channels_last),
        "cudnn_benchmark": device == "cuda" and framework == "torch" and not no_cudnn_benchmark,
    }


def numerics_words(precision: str, channels_last: bool, cudnn_benchmark: bool) -> str:
    """A run's numerics as a condition: 'fp32', 'bf16 autocast, channels-last, cudnn.benchmark', ... Runs whose
    words differ are never compared as equals (bench.results.frame.CONDITIONS)."""
    words = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16 autocast", "fp16": "fp16 autocast + grad scaler"}[precision]
    return words + (", channels-last" if channels_last else "") + (", cudnn.benchmark" if cudnn_benchmark else "")


def numerics_note(words: str | None) -> str:
    """', bf16 autocast' for a condition title: a run's numerics where they are not plain fp32 (numerics_words)."""
    return f", {words}" if words and words != "fp32" else ""


def pinned_words(cpu_bind: str, lead: str = " ") -> str:
    """' pinned to its cores' for a pinned run's conditions (bench.core.spec.resolve_cpu_bind), nothing for an unpinned
    one."""
    if cpu_bind == "numa":
        return f"{lead}pinned to its GPU's NUMA node"
    return f"{lead}pinned to its cores" if cpu_bind == "cores" else ""


def placement_text(hardware: str, cpu_bind: str) -> str:
    """', pinned, on MACHINE' for a case's title: its workers' pinning and, where a page has two, its machine."""
    pinned = {"cores": ", pinned", "numa": ", pinned by NUMA node"}.get(cpu_bind, "")
    return pinned + (f", on {hardware}" if hardware else "")
