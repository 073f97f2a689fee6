"""A fault run's spec: the scenarios, their defaults, and the spec built and checked from the user's values before
any process starts."""

from __future__ import annotations

import dataclasses
import signal

from bench.cluster.netcut import check
from bench.core.dryrun import planning
from bench.core.errors import UsageError
from bench.core.hostlist import Host, placement
from bench.core.registry import elastic_backends, get_backend
from bench.core.spec import check_timeout, cuda_device_count
from bench.harness.workload_check import workload_of
from bench.tasks.fault.settings import FaultSettings
from bench.tasks.train import build_spec as build_training_spec

SCENARIOS = ("kill", "join", "kill-host", "partition-host", "drop-host")


# across hosts: a node lost, cut off the network, or dropped by the cluster (out of the launcher's host discovery, its
# processes ended)
HOST_SCENARIOS = ("kill-host", "partition-host", "drop-host")
CUT_SCENARIOS = ("kill-host", "partition-host")  # those that cut the host off first (bench.cluster.netcut: nft)
HOST_FLAGS = {"kill-host": "--kill-host", "partition-host": "--partition-host", "drop-host": "--drop-host"}


SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}


# The faults by name, as a sweep injects them (bench.workflows.plan) and its results key them: a crashed
# worker, a hung one (stopped: alive, holding its sockets, answering nothing), one more worker joining
# (FaultSettings.kind).
FAULT_KINDS = {
    "kill": {"scenario": "kill", "signal": "KILL"},
    "hang": {"scenario": "kill", "signal": "STOP"},
    "join": {"scenario": "join", "signal": None},
}


# `bench fault`'s defaults; --at-step and --checkpoint-every default to multiples of the workload's window
FAULT_DEFAULTS = dict(kill_rank=1, signal="KILL", max_restarts=3, comm_timeout=10.0, recovery_timeout=90.0)


AT_STEP_WINDOWS = 4.5  # the fault comes between two checkpoints


CHECKPOINT_WINDOWS = 2


def build_spec(
    *,
    backend: str,
    workload: str,
    world_size: int,
    scenario: str,
    rank: int,
    at_step: int | None,
    signal_name: str,
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
    """A RunSpec of task "fault", or a one-line error for what cannot run. Across hosts (`cluster`, as
    bench.cli.common.cluster_of gives it) the scenarios are HOST_SCENARIOS, on `host`. On `device` "cuda" one worker
    per GPU, over NCCL (docs/method.md, "Faults on GPUs"); `gpus_here`, this machine's GPU count (asked when None),
    bounds a join, whose new worker takes a GPU of its own."""
    plugin = get_backend(backend)
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
    if signal_name not in SIGNALS:
        raise UsageError(
            f"signal {signal_name!r}: choose one of {', '.join(SIGNALS)} (bench fault --fault kill, term, hang)"
        )
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
    if (
        scenario in CUT_SCENARIOS and not planning()
    ):  # whether the host can be cut is the hosts' to say: a plan asks none
        import sys

        placed = [h.name for h, _ in placement([Host(**h) for h in cluster["hosts"]], world_size)]
        problem = check(placed, host, sys.executable)
        if problem:
            raise UsageError(f"{HOST_FLAGS[scenario]} {host}: {problem}")
    # the elastic mode answers for CPU processes; on GPUs the backend must have them too (Horovod: NCCL or MPI), as
    # the hosts say where a plan is made (problem_here)
    problem = (plugin.problem_here(device) if device != "cpu" else None) or plugin.elastic.problem(
        scenario, world_size, options.get("backend_options") or {}, cluster["hosts"] if cluster else None
    )
    if problem:
        raise UsageError(problem)
    if device == "cuda" and scenario == "join" and cluster is None and not planning():  # a plan's GPUs are as given
        gpus = cuda_device_count() if gpus_here is None else gpus_here
        if world_size + 1 > gpus:
            raise UsageError(
                f"--fault join on --gpus {world_size}: the joining worker needs a GPU of its own and this machine "
                f"has {gpus}; give --gpus {gpus - 1} or fewer"
                if gpus > 1
                else f"--fault join needs 2 GPUs (one joins) and this machine has {gpus}; use --nproc for CPU workers"
            )
    if scenario == "kill" and not 0 <= rank < world_size:
        raise UsageError(f"--kill-rank {rank}: the run has ranks 0..{world_size - 1}")
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
    fault = FaultSettings(
        scenario=scenario,
        rank=rank if scenario == "kill" else 0,
        host=host,
        at_step=at_step,
        signal=signal_name if scenario == "kill" else None,
        max_restarts=max_restarts,
        checkpoint_every=checkpoint_every,
        total_steps=total,
        comm_timeout=comm_timeout,
        recovery_timeout=recovery_timeout,
    )
    return dataclasses.replace(spec, task="fault", fault=fault, warmup_steps=0, windows=0)


def check_scenario_of(backend: str, scenario: str) -> None:
    """The backend's elastic mode makes this scenario (from the names alone: the CLI asks before any host)."""
    elastic = get_backend(backend).elastic
    if elastic is not None and scenario not in elastic.scenarios:
        makers = [name for name in elastic_backends() if scenario in get_backend(name).elastic.scenarios]
        flag = f" ({HOST_FLAGS[scenario]})" if scenario in HOST_FLAGS else ""
        raise UsageError(
            f"backend {backend} supports the scenarios {', '.join(elastic.scenarios)}, not {scenario}{flag}; "
            f"give --backend {' or '.join(makers)}"
        )


def check_scenario_hosts(scenario: str, hosts: list[dict] | None, host: str | None, world_size: int) -> None:
    """Across hosts the faults are HOST_SCENARIOS, and only there; the host to lose, cut off or drop is one of the
    run's hosts with processes on it, not the first (it holds the run's rendezvous: torchrun's c10d store, horovodrun
    itself). From the names alone, before any host is asked (bench.cluster.netcut.check asks them)."""
    if (scenario in HOST_SCENARIOS) != (hosts is not None):
        raise UsageError(
            "--kill-host, --partition-host and --drop-host need --hosts or --hostfile: they lose, cut off or drop "
            "one of the run's hosts"
            if hosts is None
            else "across hosts, the faults are --kill-host HOST (a node loss), --partition-host HOST "
            "(its link cut) and --drop-host HOST (the cluster drops it); --kill-rank and --fault join run on this "
            "machine"
        )
    if hosts is None:
        return
    flag = HOST_FLAGS[scenario]
    placed = [h.name for h, _ in placement([Host(**h) for h in hosts], world_size)]
    if len(placed) < 2:
        raise UsageError(
            f"{flag} needs processes on 2 hosts or more (the survivors go on without one); give more "
            "hosts or a larger --nproc"
        )
    if host not in placed:
        raise UsageError(f"{flag} {host}: the run's processes are on {', '.join(placed)}; name one of them")
    if host == placed[0]:
        raise UsageError(
            f"{flag} {host}: the first host holds the run's rendezvous (torchrun's c10d store, "
            f"horovodrun itself), without which no survivor can go on; choose another host"
        )
