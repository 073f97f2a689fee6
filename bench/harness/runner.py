"""Run one RunSpec end to end: run directory, launch (the task's), supervision, record, store."""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.cluster import kubeflow_pod
from bench.cluster.hosts import SET_FROM_IFACE, check_interface_variables, gpu_nodes, shaped_links
from bench.cluster.slurm import signal_judged
from bench.core.codec import RecordError, dumps
from bench.core.console import format_duration, note
from bench.core.environment import PROJECT_ROOT, fingerprint
from bench.core.errors import Interrupted, RecordNotStored, UsageError
from bench.core.records import RankResult, RunRecord, RunStatus
from bench.core.registry import get_backend, get_task
from bench.core.rundir import RunDir, write_json_atomic
from bench.core.spec import RunSpec
from bench.core.store import Store
from bench.harness.cores import CoreClaim, run_resources
from bench.harness.gpu_sampler import GpuSampler, HostsSampling, sampling_problem, start_sampling
from bench.harness.gpu_sampler import usage as gpu_usage
from bench.harness.keep import keep_record
from bench.harness.lifeline import Lifeline, overdue_outcome, recover
from bench.harness.outcome import build_record, read_results
from bench.harness.supervisor import TAG_VARIABLE, Outcome, interruption, supervise


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def worker_environment(spec: RunSpec, tag: str) -> dict[str, str]:
    """The environment every rank starts with, whatever the launcher: the harness sets the threads."""
    env = dict(os.environ)
    env.update(
        {
            TAG_VARIABLE: tag,
            "OMP_NUM_THREADS": str(spec.threads),
            "MKL_NUM_THREADS": str(spec.threads),
            "PYTHONUNBUFFERED": "1",
            # the workers import exactly this checkout's harness, and a user's workload module from where it was found
            "PYTHONPATH": os.pathsep.join(
                p
                for p in (str(PROJECT_ROOT), (spec.workload_source or {}).get("import_path"), env.get("PYTHONPATH"))
                if p
            ),
        }
    )
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run never touches a GPU, on any machine
    if spec.iface:  # across hosts: every backend's transport on the same interface, but where the user chose one
        for variable in SET_FROM_IFACE:  # (kept, and checked on every host: bench.cluster.hosts.check_hosts)
            env[variable] = env.get(variable) or spec.iface
    return env


def rank_command_of(spec: RunSpec, run_dir: RunDir) -> list[str]:
    """What the launcher starts as each rank: the guard, which runs the rank's code (bench.harness.guard)."""
    return [sys.executable, "-m", "bench.harness.guard", str(run_dir.path), spec.backend]


def launch_environment(spec: RunSpec, run_id: str) -> dict[str, str]:
    """The launcher's environment: every rank's (worker_environment) and what the backend's launcher adds."""
    return {**worker_environment(spec, tag=run_id), **get_backend(spec.backend).launcher.env(spec)}


def execute(spec: RunSpec, store: Store, show_progress: bool = True) -> RunRecord:
    """Launch, supervise and record one run; the record is stored whatever the ending. The store is
    checked before anything starts; the record is also kept in the run directory (record.json), so a
    store that fails afterwards loses nothing (bench.harness.keep; RecordNotStored says where it is and how to add
    it later). Before anything of the run exists, it claims the machine's cores it will use (bench.harness.cores:
    it waits while another bench run holds them, or runs alongside, marked, as the process's sharing rule says).
    From the run directory's creation to the stored record, a lifeline (bench.harness.lifeline) ends and records
    the run if this process dies, and holds its deadline if this process is stopped; a Ctrl-C before the launch is
    recorded as an interrupted run like one after it."""
    store.check_writable()
    for run_id, status, own in recover(store):
        note(
            f"bench: stored run {run_id} ({status}) from the record it kept: it was not stored when it ended"
            if own
            else f"bench: recorded run {run_id} as {status}: its bench process died before recording it"
        )
    check_interface_variables(os.environ, spec.iface if spec.hosts else None)
    run_id = new_run_id()
    label = f"{spec.backend} {get_task(spec.task).case(spec)}, world {spec.world_size}"
    with CoreClaim(run_id, label, str(store.path), run_resources(spec)) as claim:
        with shaped_links(spec):  # before the run exists: a link that cannot be shaped is refused with nothing made
            return _execute(spec, store, show_progress, run_id, claim)


def _execute(spec: RunSpec, store: Store, show_progress: bool, run_id: str, claim: CoreClaim) -> RunRecord:
    run_dir = RunDir(store.run_dir(run_id)).create()
    run_dir.spec_file.write_text(dumps(spec.to_dict(), indent=1))  # never changed after this
    backend, task = get_backend(spec.backend), get_task(spec.task)
    rank_command = rank_command_of(spec, run_dir)
    env = launch_environment(spec, run_id)
    # the lifeline holds the claim too: if this process dies, the cores stay claimed until it has ended the run
    with Lifeline(run_id, run_dir, store.path, holds=(claim.claim_fd,)) as lifeline:
        claim.add_holder(lifeline.pid)
        command: list[str] = []
        info: dict[str, Any] = {}
        environment: dict[str, Any] = {}
        before = None
        sampler: GpuSampler | HostsSampling | None = None
        sampling: str | None = "the run did not start"
        try:
            environment = fingerprint(env)
            launch = task.launch(spec, backend, rank_command, run_id, run_dir, env, show_progress)
            env.update(launch.env)
            command, info = launch.command, launch.info
            # the hosts bench reaches over ssh: a Kubeflow job's pods have none, and each pod's processes end with its
            # agent, as its operator expects
            hosts = [] if kubeflow_pod.of_pods(spec.scheduler) else [h["name"] for h in spec.hosts or ()]
            environment = fingerprint(env, gpu_nodes(hosts, sys.executable, env) if hosts else None)
            sampling = sampling_problem(spec, environment["gpu_nodes"], hosts)
            before = task.before_launch(spec)
            write_json_atomic(
                run_dir.launch_file,
                {
                    "launched_at": time.time(),
                    "command": command,
                    "info": info,
                    "environment": environment,
                    "before": before,
                },
            )
        except (KeyboardInterrupt, Interrupted):
            now = time.time()
            ending, reason = interruption(before_launch=True)
            outcome = Outcome(ending=ending, returncode=None, launched_at=now, ended_at=now, reason=reason)
        else:
            lifeline.hold_deadline(spec.timeout)  # held there too, should this process be stopped
            # across hosts each host's GPUs, those of the hosts bench reaches over ssh by a sampler started there
            sampler = (
                start_sampling(spec, environment["gpu_nodes"], hosts, sys.executable, {TAG_VARIABLE: run_id})
                if sampling is None
                else None
            )
            try:
                outcome = supervise(
                    command,
                    env,
                    run_dir.launcher_log,
                    spec.timeout,
                    on_poll=launch.watcher,
                    poll_interval=launch.poll_interval,
                    hosts=hosts,
                    on_end=sampler.stop if sampler is not None else None,  # ended before the teardown's reaping
                )
            finally:
                if sampler is not None:
                    sampler.stop()  # (again, should supervise not have come to it)
            lifeline.launcher_ended()
            outcome = overdue_outcome(run_dir, outcome)  # the lifeline ended it at its deadline while this was stopped
        shared_with = claim.finish()  # its processes are gone: the cores are free for the next run
        if shared_with:
            note(
                f"bench: run {run_id} shared its cores with {', '.join(r['run_id'] for r in shared_with)}: its record "
                "is marked, and left out of verdicts and the gate"
            )
        record = build_record(
            run_id,
            spec,
            run_dir,
            outcome,
            environment,
            command,
            task.conclude(spec, run_dir, outcome, before),
            info,
            shared_with,
            gpu_usage(sampler, sampling, sampled_span_results(run_dir, sampler), socket.gethostname()),
        )
        for event in record.events:
            if event["kind"] == "rank_exit_unrecorded":  # (bench.harness.outcome.unrecorded_exits)
                note(f"bench: run {run_id}: {event['message']}")
        lifeline.hand_over(record)  # stored with its own status should this process die while it keeps it
        kept = keep_record(record, run_dir, store)
        if kept.stored or kept.file is None:  # else the next command on the store stores the file (recover)
            run_dir.owner_file.unlink(missing_ok=True)
    if not kept.stored:
        raise RecordNotStored(kept.not_stored(record, store.path))
    if kept.file_why is not None:
        note(
            f"bench: run {run_id}: its run directory could not take record.json ({kept.file_why}); the record is "
            f"stored in {store.path}"
        )
    return record


def sampled_span_results(run_dir: RunDir, sampler: GpuSampler | HostsSampling | None) -> list[RankResult]:
    """The ranks' results that bound a sampled run's measured span; none read where nothing was sampled, and none
    where a result cannot be read (the task's conclusion says what is wrong with it)."""
    if sampler is None:
        return []
    try:
        return list(read_results(run_dir).values())
    except (RecordError, OSError, ValueError):
        return []


def join_pods_run(spec: RunSpec, place: kubeflow_pod.PodPlace, store: Store) -> int:
    """In a pod of a Kubeflow job that does not lead: wait for the leading pod's hand-off (bench.cluster.kubeflow_pod)
    and become one agent of its run, its ranks started as the leading pod starts its own (the same guard command, the
    environment the harness gives every rank). The leading pod records the run; this pod exits as its agent does."""
    backend = get_backend(spec.backend)
    handoff = kubeflow_pod.wait_for_handoff(
        kubeflow_pod.handoff_file(store.run_dir("-").parent, place.job), spec.timeout
    )
    agent = backend.launcher.pod_agent(place, handoff["rank_command"])
    if agent is None:
        raise UsageError(f"backend {spec.backend} has no agent to run in a Kubeflow job's pods")
    # a tag of this pod's own: its processes end with the pod, not with the leading pod's reaping (test hosts, which
    # play the pods, share one process table)
    tag = f"{handoff['run_id']}-{socket.gethostname()}"
    env = {**worker_environment(spec, tag=tag), **backend.launcher.env(spec)}
    note(f"bench run: joining run {handoff['run_id']}, which the job's leading pod records")
    sys.stdout.flush()
    os.execvpe(agent[0], agent, env)
    return 0  # not reached


Kind = tuple[str, str, str, int]  # (task, backend, task case, world size)


def time_left(specs: list[RunSpec], durations: dict[Kind, list[float]]) -> float | None:
    """Seconds the runs of `specs` should take: each by the mean duration of the runs made so far of its
    case (task, backend, task case, world size), else of its task's (a fault run takes longer than a training
    run), else of all runs so far; None before the first run ends."""
    if not durations:
        return None
    by_task: dict[str, list[float]] = {}
    for (task, *_), ds in durations.items():
        by_task.setdefault(task, []).extend(ds)
    every = [d for ds in durations.values() for d in ds]
    total = 0.0
    for spec in specs:
        kind = _kind(spec)
        mine = durations.get(kind) or by_task.get(kind[0]) or every
        total += sum(mine) / len(mine)
    return total


def _kind(spec: RunSpec) -> Kind:
    return spec.task, spec.backend, get_task(spec.task).case(spec), spec.world_size


def run_specs(
    specs: list[RunSpec],
    store: Store,
    title: str,
    show_progress: bool = False,
    on_record: Callable[[RunRecord], object] | None = None,
) -> list[RunRecord]:
    """Run specs in order, storing every run: a progress line before and after each, with the time spent and
    an estimate of the time left (with show_progress, the run's description and its own progress lines
    too); on_record(record) after each. Stops after an interrupted run. Returns the RunRecords of the runs
    made."""
    n = len(specs)
    note(f"{title}: {n} run(s) -> {store.path}")
    records: list[RunRecord] = []
    durations: dict[Kind, list[float]] = {}
    started = time.monotonic()
    for i, spec in enumerate(specs, 1):
        task = get_task(spec.task)
        head = f"[{i}/{n}] {spec.backend} {task.case(spec)} world {spec.world_size}"
        note(f"{head} ...")
        if show_progress:
            note(f"  {task.describe(spec)}")
        began = time.monotonic()
        record = execute(spec, store, show_progress=show_progress)
        durations.setdefault(_kind(spec), []).append(time.monotonic() - began)
        records.append(record)
        left = time_left(specs[i:], durations)
        clock = f" [{format_duration(time.monotonic() - started)} so far" + (
            f", about {format_duration(left)} left]" if left is not None and i < n else "]"
        )
        note(f"{head}: {record.task.one_line(record)}{clock}")
        if on_record is not None:
            on_record(record)
        if record.status == RunStatus.INTERRUPTED or signal_judged():  # (a Slurm time limit stores `timeout`)
            note(f"{title}: interrupted; {n - i} run(s) not started")
            break
    failed = sum(r.status != RunStatus.OK for r in records)
    note(
        f"{title}: {len(records) - failed} ok, {failed} not ok in {format_duration(time.monotonic() - started)}; "
        f"`bench list --store {store.path}` shows them"
    )
    return records
