"""RunSpec: everything that defines a run, resolved and validated before any process starts.

The harness, not the launcher, fixes threads, seed, batch, data and device placement, and the
resolved values are recorded, so every backend runs under the same conditions.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields

from bench.errors import UsageError

DEFAULTS = dict(warmup_steps=5, windows=5, seed=0, data="synthetic",
                lr=0.01, momentum=0.9, timeout=900.0, cpu_bind="none")
CPU_BINDS = ("none", "cores")
INJECT_KINDS = ("hang", "crash", "kill")


@dataclass
class RunSpec:
    backend: str
    workload: str
    world_size: int
    device: str  # "cpu" (gloo) or "cuda" (one process per GPU, NCCL)
    batch_size: int  # per worker (weak scaling)
    image_size: int
    num_classes: int
    threads: int  # intra-op threads per worker, also OMP_NUM_THREADS / MKL_NUM_THREADS
    steps_per_window: int
    warmup_steps: int = DEFAULTS["warmup_steps"]
    windows: int = DEFAULTS["windows"]
    seed: int = DEFAULTS["seed"]
    data: str = DEFAULTS["data"]
    data_dir: str | None = None
    lr: float = DEFAULTS["lr"]
    momentum: float = DEFAULTS["momentum"]
    cpu_bind: str = DEFAULTS["cpu_bind"]
    timeout: float = DEFAULTS["timeout"]
    backend_options: dict = field(default_factory=dict)
    backward_passes: int = 1  # micro-batches per optimizer step (gradient accumulation), from the backend
    roles: dict = field(default_factory=dict)  # processes per role, e.g. {"worker": 2, "server": 1}
    task: str = "train"  # "train": the training loop; "comm": a communication sweep (bench.comm);
    # "fault": training through an injected fault under the backend's elastic mode (bench.fault)
    comm: dict | None = None  # for task "comm": ops, dtype, min_bytes, max_bytes, warmup_iters, iters
    inject: dict | None = None  # test-only fault injection, see parse_inject
    step_delay: dict | None = None  # test-only slowdown of every timed step, see parse_step_delay
    fault: dict | None = None  # for task "fault": scenario, rank, at_step, signal, ... (bench.fault)
    save_params: bool = False  # write each rank's final parameters into the run directory
    sweep_id: str | None = None
    repeat: int = 0  # which of a sweep's --repeats rounds this run belongs to

    @property
    def processes(self) -> int:
        """Every process the launcher starts: workers plus any other role."""
        return sum(self.roles.values()) if self.roles else self.world_size

    @property
    def samples_per_step(self) -> int:
        """Samples one worker consumes per optimizer step."""
        return self.batch_size * self.backward_passes

    @property
    def global_batch(self) -> int:
        """Samples all workers consume per optimizer step."""
        return self.samples_per_step * self.world_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_inject(text: str | None) -> dict | None:
    """'KIND:RANK:STEP' -> dict. Test-only: makes rank RANK hang, raise, or SIGKILL itself at STEP."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in INJECT_KINDS or not all(p.isdigit() for p in parts[1:]):
        raise UsageError(f"--inject {text!r}: expected KIND:RANK:STEP with KIND one of "
                         f"{', '.join(INJECT_KINDS)}, for example hang:1:3")
    return {"kind": parts[0], "rank": int(parts[1]), "step": int(parts[2])}


def parse_step_delay(text: str | None) -> dict | None:
    """'20%' -> a delay of 20% of the warm-up's median step time; '5ms' or '0.005s' -> a fixed delay.

    Test-only (--inject-delay): every rank sleeps that long in every timed step, so a run is slower by a
    known amount; the regression gate's tests use it to show a 20% slowdown is caught."""
    if not text:
        return None
    t = text.strip().lower()
    try:
        if t.endswith("%"):
            value = {"fraction": float(t[:-1]) / 100}
        elif t.endswith("ms"):
            value = {"seconds": float(t[:-2]) / 1000}
        elif t.endswith("s"):
            value = {"seconds": float(t[:-1])}
        else:
            raise ValueError
    except ValueError:
        raise UsageError(f"--inject-delay {text!r}: give a share of the step time (20%) or a duration "
                         "(5ms, 0.005s)") from None
    if not all(0 <= v < 100 for v in value.values()):
        raise UsageError(f"--inject-delay {text!r}: must be 0 or more (and under 100 s or 10000%)")
    return value


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


def default_threads(device: str, max_world_size: int) -> int:
    """Threads per worker so that the largest world size in play fits the cores without contention."""
    return max(1, cpu_count() // max_world_size)


def check_placement(plugin, world_size: int, device: str, threads: int | None, oversubscribe: bool,
                    backend_options: dict | None) -> tuple[int, dict, dict]:
    """What every run, training or communication, must pass: world size, availability, backend options,
    threads against cores. Returns (threads, resolved backend options, processes per role)."""
    name = plugin.name
    if plugin.max_world_size is not None and world_size > plugin.max_world_size:
        raise UsageError(f"backend {name} runs at most {plugin.max_world_size} worker(s); "
                         f"world size {world_size} is not allowed: lower --nproc or pick another backend")
    problem = plugin.unavailable_reason(device)
    if problem:
        raise UsageError(f"backend {name} cannot run here: {problem}")
    resolved = plugin.resolve_options(backend_options or {})
    problem = plugin.check_options(resolved, device)
    if problem:
        raise UsageError(f"backend {name}: {problem}")
    cores = cpu_count()
    threads = default_threads(device, world_size) if threads is None else threads
    if threads < 1:
        raise UsageError(f"--threads {threads}: each worker needs at least 1 thread")
    if device == "cpu" and world_size * threads > cores and not oversubscribe:
        raise UsageError(f"world size {world_size} x {threads} thread(s) needs {world_size * threads} cores, "
                         f"this machine has {cores}; lower --nproc or --threads, or pass --oversubscribe "
                         "to measure contention on purpose")
    return threads, resolved, plugin.roles(resolved, world_size)


def build_spec(*, backend: str, workload: str, world_size: int, device: str,
               batch_size: int | None = None, image_size: int | None = None,
               threads: int | None = None, oversubscribe: bool = False,
               inject: str | dict | None = None, step_delay: str | dict | None = None,
               backend_options: dict | None = None, **options) -> RunSpec:
    """Resolve defaults from the workload and the machine, and reject what cannot run."""
    from bench.backends import get_backend
    from workloads import WORKLOADS
    from workloads.data import DataError, check_source, real_classes

    plugin = get_backend(backend)
    if workload not in WORKLOADS:
        raise UsageError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    wl = WORKLOADS[workload]
    size = wl.size(device)
    threads, resolved_options, roles = check_placement(plugin, world_size, device, threads, oversubscribe,
                                                       backend_options)

    for name in ("warmup_steps", "steps_per_window", "windows", "timeout", "lr"):
        if name in options and options[name] is None:
            del options[name]
    spec_opts = {**DEFAULTS, "steps_per_window": size.window_steps, **options}
    batch_size = size.batch if batch_size is None else batch_size
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: the per-worker batch must be at least 1")
    if image_size is None:
        image_size = size.image
    elif wl.fixed_image and image_size != size.image:
        raise UsageError(f"workload {workload} takes {size.image}x{size.image} inputs only; drop --image-size")
    elif image_size < 16:
        raise UsageError(f"--image-size {image_size}: use 16 pixels or more")
    if spec_opts["warmup_steps"] < 1:
        raise UsageError("--warmup-steps must be at least 1: the first step (lazy initialisation) is never timed")
    if spec_opts["steps_per_window"] < 1:
        raise UsageError("--steps-per-window must be at least 1")
    if spec_opts["windows"] < 2:
        raise UsageError("--windows must be at least 2: a confidence interval needs two windows or more")
    if spec_opts["timeout"] <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if spec_opts["cpu_bind"] not in CPU_BINDS:
        raise UsageError(f"--cpu-bind {spec_opts['cpu_bind']!r}: choose one of {', '.join(CPU_BINDS)}")

    try:
        check_source(spec_opts["data"], spec_opts.get("data_dir"))
    except DataError as exc:
        raise UsageError(str(exc)) from None
    if spec_opts.get("data_dir"):
        spec_opts["data_dir"] = os.path.abspath(spec_opts["data_dir"])
    classes = size.synthetic_classes if spec_opts["data"] == "synthetic" else real_classes(spec_opts["data"])

    processes = sum(roles.values())

    if isinstance(inject, str) or inject is None:
        inject = parse_inject(inject)
    if inject and inject["rank"] >= processes:
        raise UsageError(f"--inject names rank {inject['rank']}, the run has ranks 0..{processes - 1}")

    if isinstance(step_delay, str) or step_delay is None:
        step_delay = parse_step_delay(step_delay)

    return RunSpec(backend=backend, workload=workload, world_size=world_size, device=device,
                   batch_size=batch_size, image_size=image_size, num_classes=classes,
                   threads=threads, inject=inject, step_delay=step_delay,
                   backend_options=resolved_options, roles=roles,
                   backward_passes=plugin.backward_passes(resolved_options), **spec_opts)


def build_comm_spec(*, backend: str, world_size: int, device: str, ops: list[str], dtype: str = "float32",
                    min_bytes: int = 4, max_bytes: int = 64 * 2**20, warmup_iters: int = 5, iters: int = 20,
                    threads: int | None = None, oversubscribe: bool = False, timeout: float | None = None,
                    backend_options: dict | None = None, sweep_id: str | None = None) -> RunSpec:
    """A communication sweep: no model, the same placement, threads and launchers as training runs."""
    from bench.backends import get_backend
    from bench.comm import DTYPES, OPS

    plugin = get_backend(backend)
    if not plugin.comm_ops:
        raise UsageError(f"backend {backend} has no collectives to time; choose one of the distributed backends")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise UsageError(f"unknown op {unknown[0]!r}; choose from {', '.join(OPS)}")
    missing = [op for op in ops if op not in plugin.comm_ops]
    if missing:
        raise UsageError(f"backend {backend} has no {missing[0]} (it offers {', '.join(plugin.comm_ops)}); "
                         "drop it from --ops")
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype not in plugin.comm_dtypes:
        raise UsageError(f"backend {backend} cannot reduce {dtype} here; use --dtype "
                         f"{' or '.join(plugin.comm_dtypes)}")
    if min_bytes < 1 or max_bytes < min_bytes:
        raise UsageError(f"--min-bytes {min_bytes} and --max-bytes {max_bytes}: need 1 <= min <= max")
    if warmup_iters < 0 or iters < 1:
        raise UsageError("--warmup-iters must be 0 or more and --iters at least 1")
    threads, resolved, roles = check_placement(plugin, world_size, device, threads, oversubscribe,
                                               backend_options)
    return RunSpec(backend=backend, workload="comm", world_size=world_size, device=device, batch_size=0,
                   image_size=0, num_classes=0, threads=threads, steps_per_window=0, warmup_steps=0,
                   windows=0, timeout=timeout or DEFAULTS["timeout"], backend_options=resolved,
                   roles=roles, task="comm", sweep_id=sweep_id,
                   comm={"ops": list(ops), "dtype": dtype, "min_bytes": min_bytes, "max_bytes": max_bytes,
                         "warmup_iters": warmup_iters, "iters": iters})
