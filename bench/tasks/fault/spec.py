"""A fault run's spec: its defaults, and the spec built and checked from the user's values before any process starts
(each scenario's own checks are its entry's: bench.tasks.fault.scenarios)."""

from __future__ import annotations

import dataclasses

from bench.cluster.netcut import check
from bench.core.dryrun import planning
from bench.core.errors import UsageError
from bench.core.hostlist import Host, placement
from bench.core.registry import elastic_backends, get_backend
from bench.core.spec import check_timeout
from bench.harness.workload_check import workload_of
from bench.tasks.fault.scenarios import ACROSS_HOSTS, SCENARIOS, Scenario, listed, made_by
from bench.tasks.fault.settings import FaultSettings
from bench.tasks.train import build_spec as build_training_spec

# `bench fault`'s defaults (`fault`: a scenario's word); --at-step and --checkpoint-every default to multiples of the
# workload's window
FAULT_DEFAULTS = dict(kill_rank=1, fault="kill", max_restarts=3, comm_timeout=10.0, recovery_timeout=90.0)


AT_STEP_WINDOWS = 4.5  # the fault comes between two checkpoints


CHECKPOINT_WINDOWS = 2


def build_spec(
    *,
    backend: str,
    workload: str,
    world_size: int,
    fault: str,
    rank: int,
    at_step: int | None,
    max_restarts: int,
    checkpoint_every: int | None,
    total_steps: int | None,
    comm_timeout: float,
    recovery_timeout: float,
    host: str | None = None,
    cluster: dict | None = None,
    device: str = "cpu",
    gpus_here: int | None = None,
    **options,
):
    """A RunSpec of task "fault" making the scenario whose word is `fault` (bench.tasks.fault.scenarios.SCENARIOS),
    or a one-line error for what cannot run. Across hosts (`cluster`, as bench.cli.common.cluster_of gives it) the
    scenarios are those across hosts, on `host`. On `device` "cuda" one worker per GPU, over NCCL (docs/method.md,
    "Faults on GPUs"); `gpus_here`, this machine's GPU count (asked when None), bounds a join, whose new worker takes
    a GPU of its own."""
    plugin = get_backend(backend)
    scenario = SCENARIOS.get(fault)
    if scenario is None:
        raise UsageError(f"unknown fault {fault!r}: choose one of {', '.join(SCENARIOS)}")
    try:
        workload, wl, _ = workload_of(
            workload, check_timeout=options.get("check_timeout"), timeout=options.get("timeout")
        )
        unknown_workload = None
    except UsageError as exc:
        wl, unknown_workload = None, exc  # refused below, after what the fault itself gets wrong
    if wl is not None:  # defaults in units of the workload's window (about a second of steps)
        window = wl.size(device).window_steps
        at_step = int(AT_STEP_WINDOWS * window) if at_step is None else at_step
        checkpoint_every = CHECKPOINT_WINDOWS * window if checkpoint_every is None else checkpoint_every
    if plugin.elastic is None:
        raise UsageError(f"backend {backend} has no elastic mode; bench fault takes {', '.join(elastic_backends())}")
    check_scenario_of(backend, scenario)
    if unknown_workload is not None:
        raise unknown_workload
    if at_step < 1:
        raise UsageError("--at-step must be 1 or more: the fault comes after a completed step")
    if checkpoint_every < 1:
        raise UsageError("--checkpoint-every must be 1 or more")
    if max_restarts < 0:
        raise UsageError("--max-restarts must be 0 or more")
    for flag, seconds in (("--comm-timeout", comm_timeout), ("--recovery-timeout", recovery_timeout)):
        check_timeout(seconds, flag)
    total = total_steps if total_steps is not None else at_step + 3 * checkpoint_every
    if total <= at_step:
        raise UsageError(f"--steps {total} must exceed --at-step {at_step}: the run must train after the fault")
    check_scenario_hosts(scenario, cluster["hosts"] if cluster else None, host, world_size)
    if scenario.cuts_link and not planning():  # whether the host can be cut is the hosts' to say: a plan asks none
        import sys

        placed = [h.name for h, _ in placement([Host(**h) for h in cluster["hosts"]], world_size)]
        problem = check(placed, host, sys.executable)
        if problem:
            raise UsageError(f"{scenario.flag} {host}: {problem}")
    # the elastic mode answers for CPU processes; on GPUs the backend must have them too (Horovod: NCCL or MPI), as
    # the hosts say where a plan is made (problem_here)
    problem = (plugin.problem_here(device) if device != "cpu" else None) or plugin.elastic.problem(
        scenario, world_size, options.get("backend_options") or {}, cluster["hosts"] if cluster else None
    )
    if problem:
        raise UsageError(problem)
    scenario.check(world_size=world_size, rank=rank, device=device, cluster=cluster, gpus_here=gpus_here)
    if options.get("data", "synthetic") != "synthetic":
        raise UsageError(
            "bench fault trains on synthetic data (each step's batch is found again after a restart); drop --data"
        )
    if options.get("cpu_bind") in (None, "auto"):
        # Elastic launches put workers of one machine under several agents (a joiner's, Horovod's localhost and
        # 127.0.0.1), whose local ranks overlap: pinned by local rank, two workers would share a core.
        options["cpu_bind"] = "none"
    spec = build_training_spec(
        backend=backend, workload=workload, world_size=world_size, device=device, cluster=cluster, **options
    )
    settings = FaultSettings(
        scenario=scenario.scenario,
        rank=rank if scenario.signal else 0,  # the rank signalled
        host=host,
        at_step=at_step,
        signal=scenario.signal,
        max_restarts=max_restarts,
        checkpoint_every=checkpoint_every,
        total_steps=total,
        comm_timeout=comm_timeout,
        recovery_timeout=recovery_timeout,
    )
    return dataclasses.replace(spec, task="fault", fault=settings, warmup_steps=0, windows=0)


def check_scenario_of(backend: str, scenario: Scenario) -> None:
    """The backend's elastic mode makes this scenario (from the names alone: the CLI asks before any host)."""
    elastic = get_backend(backend).elastic
    if elastic is not None and not elastic.supports(scenario):
        makers = [name for name in elastic_backends() if get_backend(name).elastic.supports(scenario)]
        flag = f" ({scenario.flag})" if scenario.across_hosts else ""
        raise UsageError(
            f"backend {backend} supports the scenarios {', '.join(made_by(elastic))}, not {scenario.scenario}{flag}; "
            f"give --backend {' or '.join(makers)}"
        )


def check_scenario_hosts(scenario: Scenario, hosts: list[dict] | None, host: str | None, world_size: int) -> None:
    """Across hosts the faults are the scenarios across hosts, and only there; the host to lose, cut off or drop is
    one the scenario can act on (Scenario.check_hosts: one of the run's hosts with processes on it, not the first).
    From the names alone, before any host is asked (bench.cluster.netcut.check asks them)."""
    if scenario.across_hosts != (hosts is not None):
        raise UsageError(
            f"{listed(s.flag for s in ACROSS_HOSTS)} need --hosts or --hostfile: they lose, cut off or drop one of "
            "the run's hosts"
            if hosts is None
            else f"across hosts, the faults are {listed(f'{s.flag} HOST ({s.what})' for s in ACROSS_HOSTS)}; "
            "--kill-rank and --fault join run on this machine"
        )
    if hosts is not None:
        scenario.check_hosts([h.name for h, _ in placement([Host(**h) for h in hosts], world_size)], host)
