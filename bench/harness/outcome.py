"""From a run directory and the launcher's outcome to one RunRecord: the status rules tasks share, the
events every run has, startup, and the one function that builds a record (build_record).

Status rules, the same for every backend (docs/method.md, "Status of a run"):
- interrupted / timeout: the user or the deadline ended the run (whatever the ranks did after);
- crashed: a rank exited non-zero or by a signal that did not come from the launcher or the harness (a SIGKILL of the
  kernel's OOM killer is named so where the rank's memory cgroup counted it), or exited
  by itself (any code) before the run's end with neither an error nor its result; the root cause is chosen by
  _root_cause (its rank, exit code or signal and error tail are kept);
- failed: the launcher failed with no rank to blame, or a rank produced no result (where the run directory's disk is
  full, the error says so: what a rank or its guard had to write may be what is missing);
- ok: the launcher exited 0 and every rank wrote its result. A rank whose exit file is missing (its guard could not
  write it: a full disk) still counts by its result, its guard having exited as the rank did; the record's events say
  which exit went unrecorded, and why where the disk says (`unrecorded_exits`).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from bench.core.records import SCHEMA_VERSION, RankResult, RankRow, RunError, RunRecord, RunStatus, Startup
from bench.core.registry import get_backend
from bench.core.rundir import RunDir, full_disk, tail
from bench.core.spec import RunSpec
from bench.harness.supervisor import Outcome

Row = dict[str, Any]  # a file a rank or its guard wrote (an exit, an error, a result), as read


class Conclusion(Protocol):
    """What a task concluded of a finished run (bench.tasks.base.Conclusion)."""

    status: RunStatus
    error: RunError | None
    metrics: Any  # the task's metrics dataclass, or None
    rank_map: list[RankRow]
    events: list[dict[str, Any]]


def _root_cause(exits: dict[int, Row], errors: dict[int, Row], results: dict[int, Row]) -> Row | None:
    """The rank whose failure caused the others, in this order of evidence:
    1. a rank that left without a word before the run's end: killed by a signal that neither its launcher nor the
       harness sent (SIGKILL, an OOM kill, a segfault), or exited by itself, whatever its code (os._exit(0) too),
       with neither an exception nor its result. Its peers then fail ("connection reset by peer", "Horovod has
       been shut down") within microseconds, sometimes before its guard has even seen it go, so their errors cannot
       order them: its leaving is the cause; the first to leave, by the exit times the guards write (where every
       rank exited 0 and none raised, nothing failed after it: its missing result makes the run `failed`);
    2. else the rank that raised first (its error file is written when the exception is raised: a rank that
       fails because a peer died does so later, even when it happens to exit sooner);
    3. else the first rank to exit non-zero by itself.
    A rank its launcher terminated is a victim, unless it had already failed by itself."""
    by_itself = [e for e in exits.values() if not e.get("terminated_by") or e["rank"] in errors]
    failures = [e for e in by_itself if e["returncode"] != 0]
    # a process that vanished with no exit status its launcher could read (a Ray worker) died as a killed one does
    left = [
        e
        for e in by_itself
        if not e.get("terminated_by")
        and e["rank"] not in errors
        and (e["signal"] or e.get("vanished") or e["rank"] not in results)
    ]
    if not errors and all(e["returncode"] == 0 for e in exits.values()):
        left = []  # ranks that left with code 0 and nothing failed after them: the run lacks their result (failed)
    raised = [e for e in failures if e["rank"] in errors]
    if left:
        first = min(left, key=lambda e: e["time"])
    elif raised:
        first = min(raised, key=lambda e: errors[e["rank"]]["time"])
    elif failures:
        first = min(failures, key=lambda e: e["time"])
    else:
        return None
    err = errors.get(first["rank"]) or {}
    return {
        "rank": first["rank"],
        "attempt": first["attempt"],
        "exit_code": first["exit_code"],
        "signal": first["signal"],
        "vanished": bool(first.get("vanished")),
        "oom_kill": first.get("oom_kill"),
        "exception": err.get("type"),
        "exception_message": err.get("message"),
        "tail": first["tail"],
    }


def _signal_words(ended: Row) -> str:
    """'signal SIGKILL', and who sent it where the guard knows: '(from the kernel's OOM killer: ...)'."""
    return f"signal {ended['signal']}" + (f" (from {ended['oom_kill']})" if ended.get("oom_kill") else "")


def _then(spec: RunSpec, run_dir: RunDir, cause: int, exits: dict[int, Row], errors: dict[int, Row]) -> str:
    """'; rank 0 then failed: RuntimeError: ...' for the first other rank that failed after the cause (by its
    exception's time, else its exit's), or nothing."""
    raised = sorted((e["time"], r) for r, e in errors.items() if r != cause)
    if raised:
        rank = raised[0][1]
        said = (errors[rank].get("message") or "").strip().splitlines()
        return f"; {_process_name(spec, run_dir, rank)} then failed: {errors[rank].get('type')}" + (
            f": {said[0][:200]}" if said else ""
        )
    failed = sorted(
        (e["time"], r) for r, e in exits.items() if r != cause and e["returncode"] != 0 and not e.get("terminated_by")
    )
    if failed:
        e = exits[failed[0][1]]
        how = _signal_words(e) if e["signal"] else f"exit code {e['exit_code']}"
        return f"; {_process_name(spec, run_dir, failed[0][1])} then ended with {how}"
    return ""


def _process_name(spec: RunSpec, run_dir: RunDir, rank: int) -> str:
    """'rank R', with its role where a run has processes of several roles: 'rank 2 (server 0)' (from the
    file the process wrote when it joined; a process that never joined is its rank alone)."""
    row = run_dir.latest("joined").get(rank)
    if len(spec.roles) < 2 or not row:
        return f"rank {rank}"
    return f"rank {rank} ({row['role']} {row['role_rank']})"


def _rank_states(run_dir: RunDir, world_size: int) -> list[Row]:
    """Where each rank was when the run was ended, from the files it had written."""
    progress, starts, joined = run_dir.latest("progress"), run_dir.latest("start"), run_dir.latest("joined")
    results = run_dir.latest("result")
    rows = []
    for rank in range(world_size):
        window = progress.get(rank, {}).get("window")
        if rank in results:
            state = "finished"
        elif window is not None:
            state = "warm-up done" if window == 0 else f"finished window {window}"
        elif rank in joined:
            state = "joined the group, in warm-up"
        elif rank in starts:
            state = "started, not yet joined the group"
        else:
            state = "not started"
        rows.append({"rank": rank, "state": state, "steps_reported": progress.get(rank, {}).get("steps")})
    return rows


def startup(
    results: list[RankResult], launched_at: float, run_dir: RunDir | None = None, spec: RunSpec | None = None
) -> Startup:
    """Launch to the last process, the slowest rendezvous, launch to the last rank's first step; with the run
    directory and spec, the phases the backend's launcher reports of its own start-up (Launcher.startup_phases)."""
    times = [r.times for r in results]
    firsts = [t.first_step_end for t in times]
    stepped = [f for f in firsts if f is not None]
    phases: dict[str, float] = {}
    if run_dir is not None and spec is not None:
        phases = get_backend(spec.backend).launcher.startup_phases(run_dir)
    return Startup(
        launch_to_process_s=max(t.process_start for t in times) - launched_at,
        rendezvous_s=max(t.init_end - t.init_start for t in times),
        launch_to_first_step_s=max(stepped) - launched_at if len(stepped) == len(firsts) else None,
        launcher_phases=phases,
    )


def read_results(run_dir: RunDir) -> dict[int, RankResult]:
    """{rank: result} from each rank's last attempt."""
    return {rank: RankResult.from_dict(data) for rank, data in run_dir.latest("result").items()}


def workers_and_others(results: dict[int, RankResult]) -> tuple[dict[int, RankResult], dict[int, RankResult]]:
    """Results of the processes that train (role "worker") and of the others (parameter servers)."""
    workers = {r: res for r, res in results.items() if res.rank_info.role == "worker"}
    return workers, {r: res for r, res in results.items() if r not in workers}


def process_status(spec: RunSpec, run_dir: RunDir, outcome: Outcome) -> tuple[RunStatus, RunError | None]:
    """The status of a run whose processes must all end cleanly (the module's rules)."""
    exits, errors, results = run_dir.latest("exit"), run_dir.latest("error"), run_dir.latest("result")
    cause = _root_cause(exits, errors, results)
    missing = [r for r in range(spec.processes) if r not in results]
    if outcome.ending in ("interrupted", "timeout"):
        what = outcome.interruption() if outcome.ending == "interrupted" else outcome.deadline(spec.timeout)
        return RunStatus(outcome.ending), RunError(
            message=what,
            ranks=_rank_states(run_dir, spec.processes),
            tail=tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown),
        )
    if cause is not None:
        vanished = cause.pop("vanished")
        name = _process_name(spec, run_dir, cause["rank"])
        how = (
            _signal_words(cause)
            if cause["signal"]
            else "no exit status its launcher could read (its process vanished, as one killed by a signal does)"
            if vanished
            else f"exit code {cause['exit_code']}"
        )
        if cause["exception"]:
            # it failed by itself first; how it then exited (a launcher may kill it while it shuts down)
            # is secondary
            message = f"{name} raised {cause['exception']}: {cause['exception_message']} (exited with {how})"
        elif cause["signal"] or vanished:
            message = f"{name} ended with {how}"
        else:  # it exited by itself, without an error or its result: the others' errors follow from it
            state = _rank_states(run_dir, spec.processes)[cause["rank"]] if cause["rank"] < spec.processes else {}
            last = state.get("state", "no report")
            if state.get("steps_reported") is not None:
                last += f", step {state['steps_reported']}"
            message = (
                f"{name} exited (code {cause['exit_code']}) before the run ended, without an error or its "
                f"result (its last report: {last})" + _then(spec, run_dir, cause["rank"], exits, errors)
            )
        cause.pop("oom_kill")  # (said in the message)
        return RunStatus.CRASHED, RunError(message=message, **cause)
    full = full_disk(run_dir.path)
    if outcome.returncode != 0:
        said = tail(run_dir.launcher_log)
        last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "")
        message = (
            f"launcher exited with {outcome.returncode}, no rank's failure is recorded, and {full}: what a "
            "rank or its guard had to write may be what is missing"
            if full
            else f"launcher exited with {outcome.returncode} and no rank failed"
        )
        return RunStatus.FAILED, RunError(
            message=message + (f"; its last line: {last[:200]}" if last else ""), tail=said
        )
    if missing:
        return RunStatus.FAILED, RunError(
            message=f"rank(s) {missing} produced no result"
            + (f" ({full}: a result that could not be written is missing)" if full else ""),
            tail=tail(run_dir.launcher_log),
        )
    return RunStatus.OK, None


def unrecorded_exits(run_dir: RunDir, outcome: Outcome) -> list[dict[str, Any]]:
    """An event for each process that wrote its result but has no exit file, in a run whose launcher exited 0: its
    guard could not write the exit file (a full disk), and exited as the rank did. Its result is the measurement;
    what is lost is its exit (the time, its pid). Why, where the run directory's disk says: it is full now."""
    if outcome.returncode != 0:
        return []
    exits = run_dir.read_all("exit")
    missing = sorted(key for key in run_dir.read_all("result") if key not in exits)
    if not missing:
        return []
    full = full_disk(run_dir.path)
    why = (
        f"its guard could not write it: {full}"
        if full
        else "its guard could not write it (a full disk that had room again by the end, or the file removed)"
    )
    return [
        {
            "time": outcome.ended_at,
            "kind": "rank_exit_unrecorded",
            "rank": rank,
            "attempt": attempt,
            "message": f"rank {rank} (attempt {attempt}) wrote its result, but its exit file is missing: {why}; its "
            "result is kept, its exit time is not among the events",
        }
        for rank, attempt in missing
    ]


def joined_rank_map(run_dir: RunDir) -> list[RankRow]:
    """Who each process was, from the file it wrote when it joined (known even for ranks that later failed)."""
    return [RankRow.from_dict(row) for row in run_dir.latest("joined").values()]


def run_events(run_dir: RunDir, outcome: Outcome) -> list[dict[str, Any]]:
    """The launch, every process's exit, how the launcher ended, and what teardown had to end."""
    events: list[dict[str, Any]] = [{"time": outcome.launched_at, "kind": "launch"}]
    for attempt_exit in sorted(run_dir.read_all("exit").values(), key=lambda e: e["time"]):
        events.append(
            {
                "time": attempt_exit["time"],
                "kind": "rank_exit",
                **{k: attempt_exit[k] for k in ("rank", "attempt", "returncode", "terminated_by")},
            }
        )
    events += unrecorded_exits(run_dir, outcome)
    events.append({"time": outcome.ended_at, "kind": f"launcher_{outcome.ending}", "returncode": outcome.returncode})
    if outcome.reaped:
        events.append({"time": outcome.ended_at, "kind": "reaped", "processes": outcome.reaped})
    if outcome.survivors:
        events.append({"time": time.time(), "kind": "survivors", "processes": outcome.survivors})
    return events


def build_record(
    run_id: str,
    spec: RunSpec,
    run_dir: RunDir,
    outcome: Outcome,
    environment: dict[str, Any],
    command: list[str],
    conclusion: Conclusion,
    launch_info: dict[str, Any],
    shared_with: list[dict[str, Any]] | None = None,
    gpu_usage: dict[str, Any] | None = None,
) -> RunRecord:
    """The one place a RunRecord is made: the run's facts, and what its task concluded; `shared_with`: the other
    bench runs that ran on its cores meanwhile (bench.harness.cores); `gpu_usage`: what the parent sampled of its
    GPUs (bench.harness.gpu_sampler; None: no bench process saw the run through to sample it)."""
    events = run_events(run_dir, outcome) + list(conclusion.events)
    events.sort(key=lambda e: e["time"])
    return RunRecord(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        created_at=outcome.launched_at,
        duration_s=outcome.ended_at - outcome.launched_at,
        status=conclusion.status,
        error=conclusion.error,
        spec=spec,
        command=list(command),
        rank_map=conclusion.rank_map,
        metrics=conclusion.metrics,
        events=events,
        environment=environment,
        gpu_usage=gpu_usage or {"sampled": False, "reason": "its bench process did not see the run through"},
        run_dir=str(run_dir.path),
        launch=launch_info,
        shared_with=list(shared_with or []),
    )
