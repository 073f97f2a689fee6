"""Sweep planning on plain values: which runs a sweep makes, in which order.

A sweep is every backend x workload x world size (plus the plain single-process loop the others are
measured against), a communication sweep per backend and world size above 1, every case `repeats` times in
rounds, and a short elasticity comparison (each fault of SWEEP_FAULTS under every backend with an elastic mode),
every fault case `fault_repeats` times. Nothing here runs anything or reads command-line arguments.
"""

from __future__ import annotations

import dataclasses
import random

from bench.core.errors import UsageError
from bench.core.registry import COMPARED, PLAIN_LOOP, PRIMARY, against_the_plain_loop, get_backend
from bench.core.spec import default_threads
from bench.harness.workload_check import workload_of
from bench.rank.collectives import COMM_DEFAULTS, parse_bytes
from bench.tasks import comm as comm_task
from bench.tasks import train as train_task
from bench.tasks.fault import spec as fault_task
from bench.tasks.fault.scenarios import ACROSS_HOSTS, SCENARIOS, SWEPT, SWEPT_BY_DEFAULT

# A sweep compares cases, and launches are its replicates (docs/method.md, "Replication"): by default every
# case is launched REPEATS times in interleaved rounds, each launch short (its windows describe that launch
# only), and the communication part reaches the sizes where bandwidth, not latency, decides. These are the sweep's
# own settings, not one run's (bench.core.spec.DEFAULTS, bench.rank.collectives.COMM_DEFAULTS): `bench sweep
# --help` states each as the sweep's, beside the run's. The regression gate's matrix and its baselines use them.
SWEEP_DEFAULTS = dict(repeats=3, windows=3, warmup_steps=2, max_bytes="16M")
COMM_KEYS = ("ops", "dtype", "min_bytes", "max_bytes", "warmup_iters", "iters")
# The elasticity part (docs/method.md, "Fault recovery"): each fault (a scenario a sweep makes: SWEPT) under
# every backend of the sweep with an elastic mode, on its first workload at its smallest world size above 1 (a
# join: one less, joined by one), in short runs (in the workload's windows: a checkpoint or commit every window,
# the fault half a window after one, 3 windows in all). A stopped peer is noticed after comm_timeout; a run with no
# step within recovery_timeout of the fault is called hung, which a backend that never recovers from it costs in
# full, so it is short, yet long enough for torchrun's restart of the whole group on a busy 2-core machine. Two
# launches of each (repeats); a case they leave undecided gets one more a side at a time, up to the 4 a side at which
# its exact tests can call a gap seen in every run (bench.workflows.sweep.settle_faults), instead of every case paying
# for four.
SWEEP_FAULTS = dict(
    kinds=SWEPT_BY_DEFAULT,
    repeats=2,  # MIN_LAUNCHES a side: one run a side decides nothing (bench.tasks.fault.results.decide)
    checkpoint_windows=1,
    at_step_windows=1.5,
    steps_windows=3,
    comm_timeout=3.0,
    recovery_timeout=30.0,
)
# the spec options of the sweep that its fault runs take too (they train on synthetic data, never slowed, unpinned)
FAULT_SPEC_KEYS = (
    "batch_size",
    "image_size",
    "threads",
    "oversubscribe",
    "seed",
    "lr",
    "timeout",
    "check_timeout",
    "backend_options",
)


def sweep_world_sizes(limit: int) -> list[int]:
    """1, 2, 4 ... up to limit, and limit itself."""
    sizes, n = [], 1
    while n <= limit:
        sizes.append(n)
        n *= 2
    if sizes[-1] != limit:
        sizes.append(limit)
    return sizes


def backend_world_sizes(backend: str, world_sizes: list[int]) -> list[int]:
    """The world sizes a sweep trains `backend` at: all of them for the primary pair and for a backend of another
    framework than the plain loop's (its one-worker run is its yardstick: bench.core.registry.against_the_plain_loop),
    only the distributed ones for another companion backend (the parameter server answers "how far from a PS at N
    workers"; its one-worker case compares nothing), unless those are all there is."""
    if backend in PRIMARY or not against_the_plain_loop(backend):
        return list(world_sizes)
    return [n for n in world_sizes if n > 1] or list(world_sizes)


def available_backends(device: str, on_skip=None, names=None) -> list[str]:
    """Every compared backend (or each of `names`) that can run on `device` here; on_skip(name, why) for each
    that cannot."""
    backends = []
    for name in names or COMPARED:
        problem = get_backend(name).problem_here(device)
        if problem:
            if on_skip is not None:
                on_skip(name, problem)
        else:
            backends.append(name)
    return backends


def check_pair_can_run(device: str) -> None:
    """Refuse (UsageError) a sweep that asks for the question's pair (PRIMARY, by default or with `all`) when one
    of it cannot run on `device` here, saying how to set it up: one side measured alone answers nothing, and a note
    among a sweep's progress lines is easily missed."""
    for name in PRIMARY:
        problem = get_backend(name).problem_here(device)
        if problem:
            rest = ",".join(b for b in PRIMARY if b != name)
            raise UsageError(
                f"a sweep compares {' and '.join(PRIMARY)}, and {name} cannot run here: {problem}; "
                f"or give --backend {rest} to measure without it"
            )


def comm_options(values: dict) -> dict:
    """The keyword arguments of a communication spec (bench.tasks.comm.build_spec) from user values:
    sizes as bytes or text (4, 8K, 64M), ops as a list or comma-separated; a key missing or None takes
    bench.rank.collectives.COMM_DEFAULTS."""
    comm = {k: COMM_DEFAULTS[k] if values.get(k) is None else values[k] for k in COMM_KEYS}
    try:
        for key in ("min_bytes", "max_bytes"):
            if isinstance(comm[key], str):
                comm[key] = parse_bytes(comm[key])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if isinstance(comm["ops"], str):
        comm["ops"] = [op for op in comm["ops"].split(",") if op]
    return comm


def comm_specs(backends: list[str], device: str, world_sizes: list[int], *, comm: dict, options: dict) -> list:
    """A communication sweep per backend and world size; placement, timeout and backend options from
    `options` (the spec options of bench.tasks.train.build_spec)."""
    return [
        comm_task.build_spec(
            backend=b,
            world_size=n,
            device=device,
            **comm,
            threads=options.get("threads"),
            oversubscribe=options.get("oversubscribe", False),
            timeout=options.get("timeout"),
            backend_options=options.get("backend_options"),
            cluster=options.get("cluster"),
            cpu_bind=options.get("cpu_bind"),
        )
        for b in backends
        for n in world_sizes
    ]


def check_fault_kinds(kinds: list[str]) -> list[str]:
    """The faults named (--faults), each the word of a scenario a sweep makes (SWEPT), or a one-line error."""
    for kind in kinds:
        if kind not in SWEPT:
            raise UsageError(f"--faults: unknown fault {kind!r}; choose from {', '.join(SWEPT)}")
    if not kinds:
        raise UsageError(f"--faults names no fault; choose from {', '.join(SWEPT)}, or give --no-faults")
    return list(dict.fromkeys(kinds))


def fault_backends(backends: list[str]) -> list[str]:
    """The backends of a sweep that have an elastic mode (the ones its fault runs compare)."""
    return [b for b in backends if get_backend(b).elastic is not None]


def faults_missing(backends: list[str], world_sizes: list[int], cluster: dict | None) -> str | None:
    """Why a sweep of these backends and world sizes can make no fault run (None when it can)."""
    if cluster is not None:
        first, *others = (s.flag for s in ACROSS_HOSTS)
        return (
            f"across hosts the faults are a host lost, cut off or dropped: `bench fault {first}` ({', '.join(others)}) "
            "measures them"
        )
    if not fault_backends(backends):
        return f"none of {', '.join(backends)} has an elastic mode"
    if not any(n > 1 for n in world_sizes):
        return "a fault needs 2 workers or more: give a world size above 1"
    return None


FAULT_LIMITS = ("comm_timeout", "recovery_timeout")


def fault_limits(given: dict[str, float | None] | None = None) -> dict[str, float]:
    """The sweep's fault runs' time limits (FAULT_LIMITS): each one given (not None), else SWEEP_FAULTS'."""
    given = given or {}
    return {key: SWEEP_FAULTS[key] if given.get(key) is None else float(given[key]) for key in FAULT_LIMITS}


def fault_specs(
    backends: list[str],
    workload: str,
    world_size: int,
    *,
    kinds: list[str],
    options: dict,
    device: str = "cpu",
    timeouts: dict[str, float | None] | None = None,
) -> list:
    """The sweep's fault runs (SWEEP_FAULTS): each kind under each backend with an elastic mode, on the sweep's
    device (GPUs: one worker per GPU over NCCL, docs/method.md "Faults on GPUs"); spec options from `options`
    (FAULT_SPEC_KEYS only; threads, when not given, fitting world_size workers on this machine's cores); timeouts:
    the comm_timeout and recovery_timeout given for the sweep, in place of SWEEP_FAULTS'."""
    given = {
        "threads": default_threads(device, world_size),
        **{k: options[k] for k in FAULT_SPEC_KEYS if options.get(k) is not None},
    }
    _, info, _ = workload_of(workload, check_timeout=given.get("check_timeout"), timeout=given.get("timeout"))
    window = info.size(device).window_steps
    at_step = max(1, int(SWEEP_FAULTS["at_step_windows"] * window))
    total = max(at_step + 1, int(SWEEP_FAULTS["steps_windows"] * window))
    limits = fault_limits(timeouts)
    specs = []
    for backend in fault_backends(backends):
        for kind in kinds:
            specs.append(
                fault_task.build_spec(
                    backend=backend,
                    workload=workload,
                    world_size=world_size - 1 if SCENARIOS[kind].joins else world_size,
                    fault=kind,
                    rank=fault_task.FAULT_DEFAULTS["kill_rank"],
                    at_step=at_step,
                    max_restarts=fault_task.FAULT_DEFAULTS["max_restarts"],
                    checkpoint_every=max(1, SWEEP_FAULTS["checkpoint_windows"] * window),
                    total_steps=total,
                    **limits,
                    device=device,
                    # the sweep's GPUs were checked against this machine's; a join grows to world_size of them
                    gpus_here=world_size,
                    **given,
                )
            )
    return specs


def plan_sweep(
    backends: list[str],
    workloads: list[str],
    device: str,
    world_sizes: list[int],
    *,
    options: dict,
    comm: dict | None,
    sweep_id: str | None,
    with_plain_loop: bool = True,
    repeats: int = 1,
    workloads_of: dict[str, list[str]] | None = None,
    faults: list[str] | None = None,
    fault_repeats: int = SWEEP_FAULTS["repeats"],
    fault_timeouts: dict[str, float | None] | None = None,
) -> list:
    """The RunSpecs of a sweep, all tagged with sweep_id: training runs of every backend x workload x world
    size (backend_world_sizes; with_plain_loop: first the plain single-process loop of each workload, never
    slowed by a step delay), then, unless comm is None, a communication sweep (comm: the options of
    comm_options) for every primary backend that has collectives and every world size above 1 (a companion
    backend's only when it is the sweep's one backend; `bench allreduce --backend ps` measures it alone).
    workloads_of: backend -> the only workloads it trains (the regression matrix's extra gate cases).
    faults: the faults (words of SWEPT) of its elasticity part (fault_specs, where faults_missing finds nothing
    missing), each case in the first `fault_repeats` rounds (more rounds than `repeats` hold fault runs only), with
    fault_timeouts' comm_timeout and recovery_timeout where given.
    Repeated in rounds: every case once, then again, so a slow spell of the machine spreads over all cases
    instead of landing on the repeats of one; each round in an order shuffled with a seed taken from the
    sweep id and the round."""
    if repeats < 1 or fault_repeats < 1:
        raise UsageError(f"repeats {min(repeats, fault_repeats)}: run every case at least once")
    # One thread count for all training runs, so world sizes differ only in their number of workers.
    train = {
        "threads": default_threads(device, max(world_sizes), options.get("cluster")),
        **{k: v for k, v in options.items() if v is not None},
    }
    cluster = options.get("cluster")
    plan = []
    # across hosts, the whole matrix at every link asked for (links: the cluster's "links", None = unshaped)
    for link in (cluster.get("links") or [cluster.get("link")]) if cluster else [None]:
        at_link = {**train, "cluster": {**cluster, "link": link}} if cluster else train
        for workload in workloads:
            if with_plain_loop and PLAIN_LOOP not in backends:
                plan.append(
                    train_task.build_spec(
                        backend=PLAIN_LOOP,
                        workload=workload,
                        world_size=1,
                        device=device,
                        **{**at_link, "step_delay": None},
                    )
                )
            for backend in backends:
                if workloads_of and workload not in workloads_of.get(backend, [workload]):
                    continue
                for size in backend_world_sizes(backend, world_sizes):
                    plan.append(
                        train_task.build_spec(
                            backend=backend, workload=workload, world_size=size, device=device, **at_link
                        )
                    )
        if comm is not None:
            plan += comm_specs(
                [b for b in backends if get_backend(b).comm_ops and (b in PRIMARY or len(backends) == 1)],
                device,
                [n for n in world_sizes if n > 1],
                comm=comm,
                options={**options, "cluster": at_link.get("cluster")},
            )
    planned_faults = []
    if faults and faults_missing(backends, world_sizes, cluster) is None:
        # on the training runs' device and thread count
        planned_faults = fault_specs(
            backends,
            workloads[0],
            min(n for n in world_sizes if n > 1),
            kinds=check_fault_kinds(faults),
            options=train,
            device=device,
            timeouts=fault_timeouts,
        )
    # Each round in its own seeded order: a case that always ran first (or always after the same case)
    # would carry that position's bias in every launch, which interleaving alone does not remove.
    rounds = []
    for r in range(max(repeats, fault_repeats if planned_faults else 0)):
        order = (plan if r < repeats else []) + (planned_faults if r < fault_repeats else [])
        random.Random(f"{sweep_id}:{r}").shuffle(order)
        rounds += [dataclasses.replace(spec, sweep_id=sweep_id, repeat=r) for spec in order]
    return rounds
