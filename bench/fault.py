"""Elasticity under fire: fault runs (`bench fault`), parent side and the worker's journal.

A fault run trains for a fixed number of steps under the backend's elastic mode (torchrun with
restarts and checkpoints; horovodrun --min-np/--max-np with hvd.elastic.run and a committed TorchState).
Each worker process appends one journal line per event (start, resumed, step, commit, detected,
reset) with its wall-clock time. The victim announces that it reached the fault step and waits; the
parent (FaultDriver, polled by the supervisor) then signals it from outside, or for a scale-up starts
the joining worker. Every figure is computed afterwards from the journals (DESIGN, "Fault recovery"):
- detection: signal -> the first sign that the system noticed (the elastic agent's failure metric;
  a survivor's collective failing under Horovod);
- recovery: signal -> the first training step completed after the run resumed;
- steps redone: the step the victim had reached - the step the run resumed from;
- world size before and after, restarts (torchrun) or resets (Horovod), rank map before and after.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from bench.errors import UsageError

SCENARIOS = ("kill", "join")
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}
REACHED = "fault-reached.json"  # written by the victim (or rank 0, for a join) at the fault step
FIRED = "fault-fired.json"  # written by the parent when the signal is sent or the joiner started
AGENT_EVENTS = "agent-events.jsonl"  # torchrun's events and metrics (bench.backends.torchrun_events)
VICTIM_WAIT_S = 30.0  # how long the victim waits for its signal before going on without it
HANG_CHECK_EVERY_S = 0.5
TIMELINE_BINS = 80
MIN_BIN_S = 0.05


def build_fault_spec(*, backend: str, workload: str, world_size: int, scenario: str, rank: int, at_step: int,
                     signal_name: str, max_restarts: int, checkpoint_every: int, total_steps: int | None,
                     comm_timeout: float, recovery_timeout: float, **options):
    """A RunSpec of task "fault", or a one-line error for what cannot run."""
    from bench.backends import get_backend
    from bench.spec import build_spec

    from workloads import WORKLOADS

    plugin = get_backend(backend)
    if workload in WORKLOADS:  # defaults in units of the workload's window (about a second of steps)
        window = WORKLOADS[workload].size("cpu").window_steps
        at_step = 4 * window + window // 2 if at_step is None else at_step  # between two checkpoints
        checkpoint_every = 2 * window if checkpoint_every is None else checkpoint_every
    if not plugin.elastic_modes:
        raise UsageError(f"backend {backend} has no elastic mode; bench fault takes "
                         f"{', '.join(fault_backends())}")
    if scenario not in plugin.elastic_modes:
        raise UsageError(f"backend {backend} supports the scenarios {', '.join(plugin.elastic_modes)}, not {scenario}")
    if signal_name not in SIGNALS:
        raise UsageError(f"--signal {signal_name!r}: choose one of {', '.join(SIGNALS)}")
    if at_step is None or checkpoint_every is None:
        raise UsageError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if at_step < 1:
        raise UsageError("--at-step must be 1 or more: the fault comes after a completed step")
    if checkpoint_every < 1:
        raise UsageError("--checkpoint-every must be 1 or more")
    if max_restarts < 0:
        raise UsageError("--max-restarts must be 0 or more")
    if comm_timeout <= 0 or recovery_timeout <= 0:
        raise UsageError("--comm-timeout and --recovery-timeout must be positive numbers of seconds")
    total = total_steps if total_steps is not None else at_step + 3 * checkpoint_every
    if total <= at_step:
        raise UsageError(f"--steps {total} must exceed --at-step {at_step}: the run must train after the fault")
    problem = plugin.fault_problem(scenario, world_size)
    if problem:
        raise UsageError(problem)
    if scenario == "kill" and not 0 <= rank < world_size:
        raise UsageError(f"--kill-rank {rank}: the run has ranks 0..{world_size - 1}")
    if options.get("data", "synthetic") != "synthetic":
        raise UsageError("bench fault trains on synthetic data (each step's batch is found again after a "
                         "restart); drop --data")
    spec = build_spec(backend=backend, workload=workload, world_size=world_size, device="cpu", **options)
    spec.task = "fault"
    spec.fault = {"scenario": scenario, "rank": rank if scenario == "kill" else 0, "at_step": at_step,
                  "signal": signal_name if scenario == "kill" else None, "max_restarts": max_restarts,
                  "checkpoint_every": checkpoint_every, "total_steps": total, "comm_timeout": comm_timeout,
                  "recovery_timeout": recovery_timeout}
    spec.warmup_steps = 0
    spec.windows = 0
    return spec


def fault_backends() -> list[str]:
    from bench.backends import BACKEND_MODULES, get_backend

    return [name for name in BACKEND_MODULES if get_backend(name).elastic_modes]


# ---------------------------------------------------------------- worker side
class Journal:
    """One worker process's event log: one JSON line per event, flushed as written (the parent reads it
    while the run goes on, and after any ending)."""

    def __init__(self, path: Path):
        self.fh = open(path, "a", buffering=1)

    def write(self, kind: str, **fields) -> None:
        self.fh.write(json.dumps({"kind": kind, "t": time.time(), **fields}) + "\n")


def wait_for_fault(run_dir: Path, journal: Journal, step: int, rank: int) -> None:
    """The victim at its fault step: say so, then wait for the parent's signal (it normally never returns
    from here: it is killed, terminated or stopped)."""
    from bench.rundir import write_json_atomic

    write_json_atomic(run_dir / REACHED, {"pid": os.getpid(), "step": step, "rank": rank, "time": time.time()})
    deadline = time.monotonic() + VICTIM_WAIT_S
    while time.monotonic() < deadline:
        if (run_dir / FIRED).exists():
            fired = json.loads((run_dir / FIRED).read_text())
            if fired.get("scenario") == "join":
                return
        time.sleep(0.002)
    journal.write("fault_not_delivered", step=step)


def fault_due(run_dir: Path, spec, rank_at_start: int, rank: int, step: int) -> bool:
    """Whether this process must stop at this step for the fault: the chosen rank (the rank it started
    with, and still has), once per run: a replacement that reaches the step again goes on."""
    f = spec.fault
    return (step == f["at_step"] and rank_at_start == f["rank"] == rank
            and not (run_dir / FIRED).exists() and not (run_dir / REACHED).exists())


# ---------------------------------------------------------------- parent side
class FaultDriver:
    """Polled by the supervisor: injects the fault when the victim is at its step, then watches for a hang."""

    def __init__(self, spec, run_dir, start_joiner):
        self.spec, self.run_dir = spec, run_dir
        self.start_joiner = start_joiner  # callable -> a description of what was started (join scenario)
        self.fired_at: float | None = None
        self.next_check = 0.0
        self.joiner = None
        self.recovered = False

    def __call__(self) -> str | None:
        base = self.run_dir.path
        if self.fired_at is None:
            if not (base / REACHED).exists():
                return None
            reached = json.loads((base / REACHED).read_text())
            f = self.spec.fault
            if f["scenario"] == "kill":
                self.fired_at = time.time()
                try:
                    os.kill(reached["pid"], SIGNALS[f["signal"]])
                    delivered = True
                except ProcessLookupError:
                    delivered = False
                fired = {"scenario": "kill", "time": self.fired_at, "signal": f["signal"], "pid": reached["pid"],
                         "rank": reached["rank"], "step": reached["step"], "delivered": delivered}
            else:
                self.fired_at = time.time()
                self.joiner = self.start_joiner()
                fired = {"scenario": "join", "time": self.fired_at, "step": reached["step"], **self.joiner}
            from bench.rundir import write_json_atomic

            write_json_atomic(base / FIRED, fired)
            return None
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + HANG_CHECK_EVERY_S
        if self.recovered or time.time() - self.fired_at <= self.spec.fault["recovery_timeout"]:
            return None
        self.recovered = recovered(self.run_dir.journal_lines(), self.fired_at) is not None
        return None if self.recovered else "hung"


def recovered(lines: list[dict], fired_at: float) -> dict | None:
    """The first step completed after the run resumed following the fault (None before it has)."""
    resumed = [e for e in lines if e["kind"] == "resumed" and e["t"] > fired_at]
    if not resumed:
        return None
    since = resumed[0]["t"]
    return next((e for e in lines if e["kind"] == "step" and e["t"] > since), None)


def read_agent_events(run_dir) -> list[dict]:
    path = run_dir.path / AGENT_EVENTS
    events = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def _processes(lines: list[dict]) -> dict[tuple, dict]:
    """Per worker process (file rank, attempt): pid, host, rank and size when it started training, and
    each later (rank, size) it took (Horovod reassigns ranks inside a process)."""
    procs: dict[tuple, dict] = {}
    for e in lines:
        key = (e["file_rank"], e["attempt"])
        if e["kind"] == "resumed":
            p = procs.setdefault(key, {"pid": e.get("pid"), "host": e.get("host"), "file_rank": key[0],
                                       "attempt": key[1], "first_t": e["t"], "ranks": []})
            p["ranks"].append({"t": e["t"], "rank": e["rank"], "size": e["size"], "local_rank": e.get("local_rank"),
                               "restart_count": e.get("restart_count")})
    return procs


def _rank_map(procs: dict, before: float | None, after: float | None) -> list[dict]:
    """The rank map at a moment: each process's latest (rank, size) taken at or before it."""
    rows = []
    for p in procs.values():
        taken = [r for r in p["ranks"] if (before is None or r["t"] <= before) and (after is None or r["t"] >= after)]
        if not taken:
            continue
        r = taken[-1] if before is not None else taken[0]
        rows.append({"rank": r["rank"], "size": r["size"], "pid": p["pid"], "host": p["host"],
                     "local_rank": r["local_rank"], "restart_count": r["restart_count"], "attempt": p["attempt"]})
    return sorted(rows, key=lambda r: r["rank"])


def timeline(lines: list[dict], batch: int) -> dict:
    """Samples per second over time, from the steps rank 0 (of the moment) completed, in TIMELINE_BINS
    equal bins (at least MIN_BIN_S wide) from its first step to its last."""
    steps = [e for e in lines if e["kind"] == "step" and e["rank"] == 0]
    if not steps:
        return {"t": [], "samples_per_s": [], "bin_s": None}
    t0 = steps[0]["t"]
    width = max(MIN_BIN_S, (steps[-1]["t"] - t0) / TIMELINE_BINS)
    bins: dict[int, float] = {}
    for e in steps:
        i = int((e["t"] - t0) / width)
        bins[i] = bins.get(i, 0.0) + batch * e["size"]
    last = max(bins)
    return {"t0": t0, "bin_s": width, "t": [i * width for i in range(last + 1)],
            "samples_per_s": [bins.get(i, 0.0) / width for i in range(last + 1)]}


def fault_metrics(spec, run_dir, outcome) -> dict:
    """Everything a fault run measured, from the journals, the parent's fault file and the agent's events."""
    lines = run_dir.journal_lines()
    fired = json.loads((run_dir.path / FIRED).read_text()) if (run_dir.path / FIRED).exists() else None
    f = spec.fault
    procs = _processes(lines)
    steps = [e for e in lines if e["kind"] == "step"]
    out = {"scenario": f["scenario"], "signal": f["signal"], "at_step": f["at_step"], "total_steps": f["total_steps"],
           "checkpoint_every": f["checkpoint_every"], "max_restarts": f["max_restarts"],
           "steps_completed": max((e["step"] for e in steps), default=0),
           "timeline": timeline(lines, spec.batch_size), "fault": fired, "agent_events": read_agent_events(run_dir)}
    commits = [e for e in lines if e["kind"] == "commit"]
    resumes = [e for e in lines if e["kind"] == "resumed" and e["step"] > 0]
    committed = {e["step"]: e["checksum"] for e in commits}
    out["resume_checks"] = [{"step": e["step"], "pid": e.get("pid"), "restored_checksum": e["checksum"],
                             "committed_checksum": committed.get(e["step"]),
                             "equal": committed.get(e["step"]) is not None
                             and abs(committed[e["step"]] - e["checksum"]) <= 1e-9 * max(1.0, abs(e["checksum"]))}
                            for e in resumes]
    out["commits"] = len(commits)
    out["rendezvous"] = [{"attempt": ev["metadata"].get("agent_restarts"), "state": ev["metadata"].get("state"),
                          "duration_ms": ev["metadata"].get("duration_ms"), "t": ev.get("t"),
                          "agent_pid": ev.get("agent_pid")}
                         for ev in out["agent_events"] if ev.get("kind") == "agent"
                         and (ev.get("metadata") or {}).get("state") in ("RENDEZVOUS", "ASSIGN_WORKER_RANKS")]
    if fired is None:
        out["world_before"] = max((e["size"] for e in steps), default=None)
        return out
    t = fired["time"]
    out["ended_after_fault_s"] = outcome.ended_at - t
    before_steps = [e for e in steps if e["t"] <= t]
    out["world_before"] = before_steps[-1]["size"] if before_steps else None
    out["rank_map_before"] = _rank_map(procs, before=t, after=None)
    out["step_at_fault"] = max((e["step"] for e in before_steps), default=0)
    detect = _detection(lines, out["agent_events"], t)
    out["detection_s"] = detect[0] - t if detect else None
    out["detected_by"] = detect[1] if detect else None
    first = recovered(lines, t)
    resumed_after = [e for e in lines if e["kind"] == "resumed" and e["t"] > t]
    resets_per_process: dict[tuple, int] = {}
    for e in lines:
        if e["kind"] == "reset" and e["t"] > t:
            key = (e["file_rank"], e["attempt"])
            resets_per_process[key] = resets_per_process.get(key, 0) + 1
    out["resets"] = max(resets_per_process.values(), default=0)  # every survivor sees each reset
    out["restarts"] = max((r["restart_count"] or 0 for p in procs.values() for r in p["ranks"]), default=0)
    if first is not None:
        out["recovery_s"] = first["t"] - t
        out["resumed_from_step"] = resumed_after[0]["step"]
        out["world_after"] = first["size"]
        out["rank_map_after"] = _rank_map(procs, before=None, after=resumed_after[0]["t"] - 1e-6)
        # work lost: the furthest step completed before the run resumed, minus the step it resumed from
        reached = max((e["step"] for e in steps if e["t"] < resumed_after[0]["t"]), default=0)
        out["steps_redone"] = reached - out["resumed_from_step"]
        if f["scenario"] == "join":  # until a process started after the join began completes a step
            new_keys = {(p["file_rank"], p["attempt"]) for p in procs.values() if p["first_t"] > t}
            first_new = next((e for e in steps if (e["file_rank"], e["attempt"]) in new_keys and e["t"] > t), None)
            out["join_contributes_s"] = first_new["t"] - t if first_new else None
    else:
        out["recovery_s"] = None
        out["world_after"] = None
        seen = [e["t"] for e in lines if e["kind"] == "detected" and e["t"] > t]
        out["hang_observed_s"] = (min(seen) - t) if seen else (outcome.ended_at - t)
    return out


def _detection(lines: list[dict], agent_events: list[dict], t: float) -> tuple[float, str] | None:
    """The first sign after the fault that the system noticed it."""
    candidates = []
    for ev in agent_events:
        if ev.get("kind") == "metric" and ev.get("name") == "workers.default.failed" and ev["t"] >= t:
            candidates.append((ev["t"], "elastic agent saw the worker group fail"))
        if ev.get("kind") == "log" and "new nodes" in ev.get("message", "") and ev["t"] >= t:
            candidates.append((ev["t"], "elastic agent saw a node waiting to join"))
    for e in lines:
        if e["kind"] == "detected" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: {e.get('what', 'collective failed')}"))
        if e["kind"] == "reset" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: reset"))
    return min(candidates) if candidates else None


def fault_status(spec, metrics: dict, outcome) -> tuple[str, str | None]:
    """ok: trained to the last step after the fault; failed: the launcher gave up (restarts exhausted, too
    few workers); timeout: the deadline, or no step within --recovery-timeout of the fault (a hang)."""
    f = spec.fault
    if outcome.ending == "interrupted":
        return "interrupted", "interrupted by the user"
    if outcome.ending == "hung":
        return "timeout", (f"hung: no training step within {f['recovery_timeout']:g} s of the fault"
                           + (f"; the fault was noticed after {metrics['detection_s']:.2f} s ({metrics['detected_by']})"
                              if metrics.get("detection_s") is not None else "; nothing noticed it"))
    if outcome.ending == "timeout":
        return "timeout", f"deadline of {spec.timeout:g} s passed"
    if metrics.get("fault") is None:
        return "failed", (f"the launcher exited {outcome.returncode} before the fault was injected "
                          f"(no rank reached step {f['at_step']})")
    if outcome.returncode != 0:
        return "failed", (f"the launcher exited {outcome.returncode} after the fault: it gave up "
                          f"(restarts or resets allowed: {f['max_restarts']}, used {metrics.get('restarts') or metrics.get('resets')})")
    if metrics.get("recovery_s") is None:
        return "failed", "no training step completed after the fault, yet the launcher exited 0"
    if f["scenario"] == "join" and not (metrics.get("world_after") or 0) > (metrics.get("world_before") or 0):
        return "failed", (f"the joining worker never trained with the others (world size stayed "
                          f"{metrics.get('world_before')} for {f['recovery_timeout']:g} s)")
    if metrics["steps_completed"] < f["total_steps"]:
        return "failed", f"the launcher exited 0 but training stopped at step {metrics['steps_completed']} of {f['total_steps']}"
    if any(not c["equal"] for c in metrics["resume_checks"]):
        return "failed", "a process resumed from parameters that differ from the committed ones"
    return "ok", None
