"""What a finished fault run measured, computed afterwards from the workers' journals and what the launcher itself
reported (docs/method.md, "Fault recovery"): the timeline, detection, recovery, steps redone, world size and rank
map before and after, and the run's status."""

from __future__ import annotations

import math

from bench.core.codec import float_of
from bench.core.records import RunStatus

TIMELINE_BINS = 80
MIN_BIN_S = 0.05


def recovered(lines: list[dict], fired_at: float) -> dict | None:
    """The first step completed after the run resumed following the fault (None before it has)."""
    resumed = [e for e in lines if e["kind"] == "resumed" and e["t"] > fired_at]
    if not resumed:
        return None
    since = resumed[0]["t"]
    return next((e for e in lines if e["kind"] == "step" and e["t"] > since), None)


def _processes(lines: list[dict]) -> dict[tuple, dict]:
    """Per worker process (file rank, attempt): pid, host, rank and size when it started training, and
    each later (rank, size) it took (Horovod reassigns ranks inside a process)."""
    procs: dict[tuple, dict] = {}
    for e in lines:
        key = (e["file_rank"], e["attempt"])
        if e["kind"] == "resumed":
            p = procs.setdefault(
                key,
                {
                    "pid": e.get("pid"),
                    "host": e.get("host"),
                    "file_rank": key[0],
                    "attempt": key[1],
                    "first_t": e["t"],
                    "ranks": [],
                },
            )
            p["ranks"].append(
                {
                    "t": e["t"],
                    "rank": e["rank"],
                    "size": e["size"],
                    "local_rank": e.get("local_rank"),
                    "group_rank": e.get("group_rank"),
                    "restart_count": e.get("restart_count"),
                }
            )
    return procs


def _rank_map(procs: dict, before: float | None, after: float | None) -> list[dict]:
    """The rank map at a moment: each process's latest (rank, size) taken at or before it."""
    rows = []
    for p in procs.values():
        taken = [r for r in p["ranks"] if (before is None or r["t"] <= before) and (after is None or r["t"] >= after)]
        if not taken:
            continue
        r = taken[-1] if before is not None else taken[0]
        rows.append(
            {
                "rank": r["rank"],
                "world_size": r["size"],
                "pid": p["pid"],
                "host": p["host"],
                "local_rank": r["local_rank"],
                "group_rank": r["group_rank"],
                "restart_count": r["restart_count"],
                "attempt": p["attempt"],
            }
        )
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
    return {
        "t0": t0,
        "bin_s": width,
        "t": [i * width for i in range(last + 1)],
        "samples_per_s": [bins.get(i, 0.0) / width for i in range(last + 1)],
    }


def fault_metrics(spec, run_dir, outcome, observed: dict) -> dict:
    """Everything a fault run measured, from the journals, the parent's fault file and what the launcher
    itself reported (ElasticMode.observations)."""
    lines = run_dir.journal_lines()
    fired = run_dir.read_json(run_dir.fault_fired)
    f = spec.fault
    procs = _processes(lines)
    steps = [e for e in lines if e["kind"] == "step"]
    out = {
        "scenario": f.scenario,
        "signal": f.signal,
        "at_step": f.at_step,
        "total_steps": f.total_steps,
        "checkpoint_every": f.checkpoint_every,
        "max_restarts": f.max_restarts,
        "steps_completed": max((e["step"] for e in steps), default=0),
        "timeline": timeline(lines, spec.batch_size),
        "fault": fired,
        "agent_events": observed["events"],
    }
    commits = [e for e in lines if e["kind"] == "commit"]
    resumes = [e for e in lines if e["kind"] == "resumed" and e["step"] > 0]
    committed = {e["step"]: float_of(e["checksum"]) for e in commits}
    out["resume_checks"] = [resume_check(e, committed.get(e["step"])) for e in resumes]
    out["commits"] = len(commits)
    out["diverged"] = diverged(lines)
    out["rendezvous"] = observed["rendezvous"]
    if fired is None:
        out["world_before"] = max((e["size"] for e in steps), default=None)
        return out
    t = fired["time"]
    out["ended_after_fault_s"] = outcome.ended_at - t
    before_steps = [e for e in steps if e["t"] <= t]
    out["world_before"] = before_steps[-1]["size"] if before_steps else None
    out["rank_map_before"] = _rank_map(procs, before=t, after=None)
    out["step_at_fault"] = max((e["step"] for e in before_steps), default=0)
    detect = _detection(lines, observed["detections"], t)
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
        if f.joining:  # until a process started after the join began completes a step
            new_keys = {(p["file_rank"], p["attempt"]) for p in procs.values() if p["first_t"] > t}
            first_new = next((e for e in steps if (e["file_rank"], e["attempt"]) in new_keys and e["t"] > t), None)
            out["join_contributes_s"] = first_new["t"] - t if first_new else None
    else:
        out["recovery_s"] = None
        out["world_after"] = None
        seen = [e["t"] for e in lines if e["kind"] == "detected" and e["t"] > t]
        out["hang_observed_s"] = (min(seen) - t) if seen else (outcome.ended_at - t)
    return out


def resume_check(resumed: dict, committed: float | None) -> dict:
    """Whether a process resumed from the parameters committed at its step (their checksums agree)."""
    restored = float_of(resumed["checksum"])
    return {
        "step": resumed["step"],
        "pid": resumed.get("pid"),
        "restored_checksum": restored,
        "committed_checksum": committed,
        "equal": committed is not None and abs(committed - restored) <= 1e-9 * max(1.0, abs(restored)),
    }


def diverged(lines: list[dict]) -> dict | None:
    """The first parameter checksum of the journals that is not a finite number, at a commit or at the end of a
    process's training (the checks the run makes anyway: a step's loss is never read): {"step", "rank", "value"},
    the step by which the parameters had become non-finite; None when none is."""
    seen = [
        e
        for e in lines
        if e["kind"] in ("commit", "finished")
        and e.get("checksum") is not None
        and not math.isfinite(float_of(e["checksum"]))
    ]
    if not seen:
        return None
    first = min(seen, key=lambda e: (e["step"], e["t"]))
    return {
        "step": first["step"],
        "rank": first.get("rank", first["file_rank"]),
        "value": repr(float_of(first["checksum"])),
    }


def _detection(lines: list[dict], launcher_saw: list[tuple[float, str]], t: float) -> tuple[float, str] | None:
    """The first sign after the fault that the system noticed it: the launcher's own report, a worker's
    failing collective, or a reset."""
    candidates = [(when, what) for when, what in launcher_saw if when >= t]
    for e in lines:
        if e["kind"] == "detected" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: {e.get('what', 'collective failed')}"))
        if e["kind"] == "reset" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: reset"))
    return min(candidates) if candidates else None


def fault_status(spec, metrics, outcome) -> tuple[RunStatus, str | None]:
    """ok: trained to the last step after the fault; failed: the launcher gave up (restarts exhausted, too
    few workers); timeout: the deadline, or no step within --recovery-timeout of the fault (a hang); diverged:
    trained through, but the parameters became non-finite."""
    f = spec.fault
    if outcome.ending == "interrupted":
        return RunStatus.INTERRUPTED, outcome.interruption()
    if outcome.ending == "hung":
        return RunStatus.TIMEOUT, (
            f"hung: no training step within {f.recovery_timeout:g} s of the fault"
            + (
                f"; the fault was noticed after {metrics.detection_s:.2f} s ({metrics.detected_by})"
                if metrics.detection_s is not None
                else "; nothing noticed it"
            )
        )
    if outcome.ending == "timeout":
        return RunStatus.TIMEOUT, outcome.deadline(spec.timeout)
    if metrics.fault is None:
        return RunStatus.FAILED, (
            f"the launcher exited {outcome.returncode} before the fault was injected (no rank reached step {f.at_step})"
        )
    if metrics.fault.get("delivered") is False:
        return RunStatus.FAILED, "the fault could not be delivered" + (
            f" ({metrics.fault['why_not']})" if metrics.fault.get("why_not") else ""
        )
    if outcome.returncode != 0:
        return RunStatus.FAILED, (
            f"the launcher exited {outcome.returncode} after the fault: it gave up "
            f"(restarts or resets allowed: {f.max_restarts}, used {metrics.restarts or metrics.resets})"
        )
    if metrics.recovery_s is None:
        return RunStatus.FAILED, "no training step completed after the fault, yet the launcher exited 0"
    if f.joining and not (metrics.world_after or 0) > (metrics.world_before or 0):
        return RunStatus.FAILED, (
            f"the joining worker never trained with the others (world size stayed "
            f"{metrics.world_before} for {f.recovery_timeout:g} s)"
        )
    if metrics.steps_completed < f.total_steps:
        return (
            RunStatus.FAILED,
            f"the launcher exited 0 but training stopped at step {metrics.steps_completed} of {f.total_steps}",
        )
    if metrics.diverged:  # before the resume checks: a non-finite checksum equals none, not even its own
        d = metrics.diverged
        return RunStatus.DIVERGED, (
            f"rank {d['rank']}: the parameters' checksum became {d['value']} by "
            f"step {d['step']} (checked at commits and at the end)"
        )
    if any(not c["equal"] for c in metrics.resume_checks):
        return RunStatus.FAILED, "a process resumed from parameters that differ from the committed ones"
    return RunStatus.OK, None
