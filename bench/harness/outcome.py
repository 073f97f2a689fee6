"""From a run directory and the launcher's outcome to one RunRecord: the status rules tasks share, the
events every run has, startup, and the one function that builds a record (build_record).

Status rules, the same for every backend (docs/method.md, "Status of a run"):
- interrupted / timeout: the user or the deadline ended the run (whatever the ranks did after);
- crashed: a rank exited non-zero or by a signal that did not come from the launcher or the harness;
  the earliest such exit is the root cause (its rank, exit code or signal and error tail are kept);
- failed: the launcher failed with no rank to blame, or a rank produced no result;
- ok: the launcher exited 0 and every rank wrote its result.
"""

from __future__ import annotations

import time

from bench.core.records import SCHEMA_VERSION, RankResult, RankRow, RunError, RunRecord, RunStatus, Startup
from bench.core.registry import get_backend
from bench.core.rundir import RunDir, tail


def _root_cause(exits: dict[int, dict], errors: dict[int, dict]) -> dict | None:
    """The rank whose failure caused the others, in this order of evidence:
    1. a rank killed by a signal that neither its launcher nor the harness sent (SIGKILL, an OOM kill,
       a segfault): its peers then fail with "connection closed", within microseconds, sometimes before
       its guard has even seen it die, so timestamps cannot order them; the death is the cause;
    2. else the rank that raised first (its error file is written when the exception is raised: a rank
       that fails because a peer died does so later, even when it happens to exit sooner);
    3. else the first rank to exit non-zero by itself.
    A rank its launcher terminated is a victim, unless it had already failed by itself."""
    failures = [e for e in exits.values()
                if e["returncode"] != 0 and (not e.get("terminated_by") or e["rank"] in errors)]
    if not failures:
        return None
    # a process that vanished with no exit status its launcher could read (a Ray worker) died as a killed one does
    killed = [e for e in failures
              if (e["signal"] or e.get("vanished")) and not e.get("terminated_by") and e["rank"] not in errors]
    raised = [e for e in failures if e["rank"] in errors]
    if killed:
        first = min(killed, key=lambda e: e["time"])
    elif raised:
        first = min(raised, key=lambda e: errors[e["rank"]]["time"])
    else:
        first = min(failures, key=lambda e: e["time"])
    err = errors.get(first["rank"]) or {}
    return {"rank": first["rank"], "attempt": first["attempt"], "exit_code": first["exit_code"],
            "signal": first["signal"], "vanished": bool(first.get("vanished")), "exception": err.get("type"),
            "exception_message": err.get("message"),
            "tail": first["tail"]}


def _process_name(spec, run_dir: RunDir, rank: int) -> str:
    """'rank R', with its role where a run has processes of several roles: 'rank 2 (server 0)' (from the
    file the process wrote when it joined; a process that never joined is its rank alone)."""
    row = run_dir.latest("joined").get(rank)
    if len(spec.roles) < 2 or not row:
        return f"rank {rank}"
    return f"rank {rank} ({row['role']} {row['role_rank']})"


def _rank_states(run_dir: RunDir, world_size: int) -> list[dict]:
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


def startup(results: list[RankResult], launched_at: float, run_dir: RunDir | None = None,
            spec=None) -> Startup:
    """Launch to the last process, the slowest rendezvous, launch to the last rank's first step; with the run
    directory and spec, the phases the backend's launcher reports of its own start-up (Launcher.startup_phases)."""
    times = [r.times for r in results]
    firsts = [t.first_step_end for t in times]
    phases = {}
    if run_dir is not None and spec is not None:
        phases = get_backend(spec.backend).launcher.startup_phases(run_dir)
    return Startup(launch_to_process_s=max(t.process_start for t in times) - launched_at,
                   rendezvous_s=max(t.init_end - t.init_start for t in times),
                   launch_to_first_step_s=max(firsts) - launched_at if all(f is not None for f in firsts) else None,
                   launcher_phases=phases)


def read_results(run_dir: RunDir) -> dict[int, RankResult]:
    """{rank: result} from each rank's last attempt."""
    return {rank: RankResult.from_dict(data) for rank, data in run_dir.latest("result").items()}


def workers_and_others(results: dict[int, RankResult]) -> tuple[dict[int, RankResult], dict[int, RankResult]]:
    """Results of the processes that train (role "worker") and of the others (parameter servers)."""
    workers = {r: res for r, res in results.items() if res.rank_info.role == "worker"}
    return workers, {r: res for r, res in results.items() if r not in workers}


def process_status(spec, run_dir: RunDir, outcome) -> tuple[RunStatus, RunError | None]:
    """The status of a run whose processes must all end cleanly (the module's rules)."""
    cause = _root_cause(run_dir.latest("exit"), run_dir.latest("error"))
    results = run_dir.latest("result")
    missing = [r for r in range(spec.processes) if r not in results]
    if outcome.ending in ("interrupted", "timeout"):
        what = outcome.interruption() if outcome.ending == "interrupted" else outcome.deadline(spec.timeout)
        return RunStatus(outcome.ending), RunError(message=what, ranks=_rank_states(run_dir, spec.processes),
                                        tail=tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown))
    if cause is not None:
        vanished = cause.pop("vanished")
        how = (f"signal {cause['signal']}" if cause["signal"] else
               "no exit status its launcher could read (its process vanished, as one killed by a signal does)"
               if vanished else f"exit code {cause['exit_code']}")
        if cause["exception"]:
            # it failed by itself first; how it then exited (a launcher may kill it while it shuts down)
            # is secondary
            message = (f"{_process_name(spec, run_dir, cause['rank'])} raised {cause['exception']}: "
                       f"{cause['exception_message']} (exited with {how})")
        else:
            message = f"{_process_name(spec, run_dir, cause['rank'])} ended with {how}"
        return RunStatus.CRASHED, RunError(message=message, **cause)
    if outcome.returncode != 0:
        said = tail(run_dir.launcher_log)
        last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "")
        return RunStatus.FAILED, RunError(message=f"launcher exited with {outcome.returncode} and no rank failed"
                                          + (f"; its last line: {last[:200]}" if last else ""), tail=said)
    if missing:
        return RunStatus.FAILED, RunError(message=f"rank(s) {missing} produced no result", tail=tail(run_dir.launcher_log))
    return RunStatus.OK, None


def joined_rank_map(run_dir: RunDir) -> list:
    """Who each process was, from the file it wrote when it joined (known even for ranks that later failed)."""
    return [RankRow.from_dict(row) for row in run_dir.latest("joined").values()]


def run_events(run_dir: RunDir, outcome) -> list[dict]:
    """The launch, every process's exit, how the launcher ended, and what teardown had to end."""
    events = [{"time": outcome.launched_at, "kind": "launch"}]
    for attempt_exit in sorted(run_dir.read_all("exit").values(), key=lambda e: e["time"]):
        events.append({"time": attempt_exit["time"], "kind": "rank_exit",
                       **{k: attempt_exit[k] for k in ("rank", "attempt", "returncode", "terminated_by")}})
    events.append({"time": outcome.ended_at, "kind": f"launcher_{outcome.ending}",
                   "returncode": outcome.returncode})
    if outcome.reaped:
        events.append({"time": outcome.ended_at, "kind": "reaped", "processes": outcome.reaped})
    if outcome.survivors:
        events.append({"time": time.time(), "kind": "survivors", "processes": outcome.survivors})
    return events


def build_record(run_id: str, spec, run_dir: RunDir, outcome, environment: dict, command: list[str],
                 conclusion, launch_info: dict, shared_with: list[dict] | None = None) -> RunRecord:
    """The one place a RunRecord is made: the run's facts, and what its task concluded; `shared_with`: the other
    bench runs that ran on its cores meanwhile (bench.harness.cores)."""
    events = run_events(run_dir, outcome) + list(conclusion.events)
    events.sort(key=lambda e: e["time"])
    return RunRecord(schema_version=SCHEMA_VERSION, run_id=run_id, created_at=outcome.launched_at,
                     duration_s=outcome.ended_at - outcome.launched_at, status=conclusion.status,
                     error=conclusion.error, spec=spec, command=list(command), rank_map=conclusion.rank_map,
                     metrics=conclusion.metrics, events=events, environment=environment,
                     run_dir=str(run_dir.path), launch=launch_info, shared_with=list(shared_with or []))
