"""From a run directory and the launcher's outcome to one RunRecord: status, metrics, rank map.

Status rules, the same for every backend:
- interrupted / timeout: the user or the deadline ended the run (whatever the ranks did after);
- crashed: a rank exited non-zero or by a signal that did not come from the launcher or the harness;
  the earliest such exit is the root cause (its rank, exit code or signal and error tail are kept);
- failed: the launcher failed with no rank to blame, or a rank produced no result;
- ok: the launcher exited 0 and every rank wrote its result.
"""

from __future__ import annotations

import time

from bench import SCHEMA_VERSION
from bench.rundir import RunDir, tail
from bench.stats import summarize


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
    killed = [e for e in failures if e["signal"] and not e.get("terminated_by") and e["rank"] not in errors]
    raised = [e for e in failures if e["rank"] in errors]
    if killed:
        first = min(killed, key=lambda e: e["time"])
    elif raised:
        first = min(raised, key=lambda e: errors[e["rank"]]["time"])
    else:
        first = min(failures, key=lambda e: e["time"])
    err = errors.get(first["rank"]) or {}
    return {"rank": first["rank"], "attempt": first["attempt"], "exit_code": first["exit_code"],
            "signal": first["signal"], "exception": err.get("type"), "exception_message": err.get("message"),
            "tail": first["tail"]}


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


def _startup(times: list[dict], launched_at: float) -> dict:
    startup = {"launch_to_process_s": max(t["process_start"] for t in times) - launched_at,
               "rendezvous_s": max(t["init_end"] - t["init_start"] for t in times)}
    if all("first_step_end" in t for t in times):
        startup["launch_to_first_step_s"] = max(t["first_step_end"] for t in times) - launched_at
    return startup


def metrics_from_results(spec, all_results: dict[int, dict], launched_at: float) -> dict:
    """Throughput and timing metrics, as DESIGN's definitions state them. Only workers count; other
    roles (parameter servers) are reported beside them."""
    results = {r: res for r, res in all_results.items() if res["rank_info"]["role"] == "worker"}
    others = [{"rank": r, "role": res["rank_info"]["role"], "served": res["served"],
               "peak_rss_bytes": res["peak_rss_bytes"]}
              for r, res in sorted(all_results.items()) if r not in results]
    ranks = sorted(results)
    k = spec.steps_per_window
    per_rank_windows = [results[r]["window_times"] for r in ranks]
    window_times = [max(ws) for ws in zip(*per_rank_windows)]  # a window's time: the max over ranks
    throughput = [spec.global_batch * k / t for t in window_times]
    per_rank = []
    for r in ranks:
        res = results[r]
        rank_thr = [spec.samples_per_step * k / t for t in res["window_times"]]
        per_rank.append({
            "rank": r,
            "throughput": summarize(rank_thr),
            "step_time_mean_s": sum(res["window_times"]) / (len(res["window_times"]) * k),
            "peak_rss_bytes": res["peak_rss_bytes"],
            "cuda_peak_bytes": res["cuda_peak_bytes"],
            "loss_first": res["loss_first"], "loss_last": res["window_losses"][-1],
            "param_checksum": res["param_checksum"], "threads": res["threads"],
        })
    times = [results[r]["times"] for r in ranks]
    slowest = max(p["step_time_mean_s"] for p in per_rank)
    fastest = min(p["step_time_mean_s"] for p in per_rank)
    return {
        "throughput": {**summarize(throughput), "unit": "samples/s", "per_window": throughput},
        "window_times_s": window_times,
        "step_time_s": summarize([t / k for t in window_times]),
        "per_rank": per_rank,
        # spread of per-rank step time: a straggler shows as a ratio well above 1
        "straggler_ratio": slowest / fastest if fastest > 0 else None,
        "startup": _startup(times, launched_at),
        "peak_rss_bytes_max": max(p["peak_rss_bytes"] for p in per_rank),
        "param_count": results[ranks[0]]["param_count"],
        "loss_last": per_rank[0]["loss_last"],
        "other_roles": others,
    }


def comm_metrics(spec, all_results: dict[int, dict], launched_at: float) -> tuple[dict, list[dict]]:
    """A communication sweep's figures (bench.comm) and its table rows."""
    from bench.backends import get_backend
    from bench.comm import average_busbw, combine, fit_alpha_beta

    workers = {r: res for r, res in all_results.items() if res["rank_info"]["role"] == "worker"}
    rows = combine(spec, {r: res["comm_rows"] for r, res in workers.items()})
    model, alpha_coef, beta_coef = get_backend(spec.backend).cost_model(spec)
    fit = fit_alpha_beta([r for r in rows if r["op"] == "allreduce"], alpha_coef, beta_coef)
    times = [res["times"] for res in all_results.values()]
    return {
        "comm": {"avg_busbw_gbps": {op: average_busbw(rows, op) for op in spec.comm["ops"]},
                 "wrong": sum(r["wrong"] for r in rows), "model": model, "fit": fit},
        "startup": _startup(times, launched_at),
        "peak_rss_bytes_max": max(res["peak_rss_bytes"] for res in all_results.values()),
    }, rows


def build_record(run_id: str, spec, run_dir: RunDir, outcome, environment: dict) -> dict:
    exits = run_dir.latest("exit")
    results = run_dir.latest("result")
    error = None
    events = [{"time": outcome.launched_at, "kind": "launch"}]
    for attempt_exit in sorted(run_dir.read_all("exit").values(), key=lambda e: e["time"]):
        events.append({"time": attempt_exit["time"], "kind": "rank_exit",
                       **{k: attempt_exit[k] for k in ("rank", "attempt", "returncode", "terminated_by")}})
    events.append({"time": outcome.ended_at, "kind": f"launcher_{outcome.ending}",
                   "returncode": outcome.returncode})
    if outcome.reaped:
        events.append({"time": outcome.ended_at, "kind": "reaped", "processes": outcome.reaped})

    if spec.task == "fault":
        return _fault_record(run_id, spec, run_dir, outcome, environment, events)
    cause = _root_cause(exits, run_dir.latest("error"))
    missing = [r for r in range(spec.processes) if r not in results]
    if outcome.ending in ("interrupted", "timeout"):
        status = outcome.ending
        what = "interrupted by the user" if status == "interrupted" else f"deadline of {spec.timeout:g} s passed"
        error = {"message": what, "ranks": _rank_states(run_dir, spec.processes),
                 "tail": tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown)}
    elif cause is not None:
        status = "crashed"
        how = f"signal {cause['signal']}" if cause["signal"] else f"exit code {cause['exit_code']}"
        if cause["exception"]:
            # it failed by itself first; how it then exited (a launcher may kill it while it shuts down)
            # is secondary
            message = (f"rank {cause['rank']} raised {cause['exception']}: {cause['exception_message']} "
                       f"(exited with {how})")
        else:
            message = f"rank {cause['rank']} ended with {how}"
        error = {"message": message, **cause}
    elif outcome.returncode != 0:
        status = "failed"
        error = {"message": f"launcher exited with {outcome.returncode} and no rank failed",
                 "tail": tail(run_dir.launcher_log)}
    elif missing:
        status = "failed"
        error = {"message": f"rank(s) {missing} produced no result", "tail": tail(run_dir.launcher_log)}
    else:
        status = "ok"
    if outcome.survivors:
        events.append({"time": time.time(), "kind": "survivors", "processes": outcome.survivors})

    metrics, comm_rows = None, []
    if status == "ok" and spec.task == "comm":
        metrics, comm_rows = comm_metrics(spec, results, outcome.launched_at)
        if metrics["comm"]["wrong"]:
            status = "failed"
            error = {"message": f"{metrics['comm']['wrong']} wrong elements: a collective returned wrong "
                                "results", "tail": ""}
    elif status == "ok":
        metrics = metrics_from_results(spec, results, outcome.launched_at)
    rank_map = list(run_dir.latest("joined").values())  # known even for ranks that later failed
    return _record(run_id, spec, run_dir, outcome, environment, events, status, error, rank_map, metrics,
                   comm_rows)


def _fault_record(run_id, spec, run_dir, outcome, environment, events) -> dict:
    """A fault run: its status says whether training came through the fault (bench.fault), not whether
    every process exited cleanly (the victim never does)."""
    from bench.fault import fault_metrics, fault_status

    fault = fault_metrics(spec, run_dir, outcome)
    status, message = fault_status(spec, fault, outcome)
    error = None if status == "ok" else {
        "message": message, "tail": tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown)}
    rank_map = [{**r, "phase": phase} for phase in ("before", "after") for r in fault.get(f"rank_map_{phase}") or []]
    if fault.get("fault"):
        events.append({"time": fault["fault"]["time"], "kind": f"fault_{fault['scenario']}",
                       **{k: v for k, v in fault["fault"].items() if k != "time"}})
    return _record(run_id, spec, run_dir, outcome, environment, events, status, error, rank_map,
                   {"fault": fault}, [])


def _record(run_id, spec, run_dir, outcome, environment, events, status, error, rank_map, metrics,
            comm_rows) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": outcome.launched_at,
        "duration_s": outcome.ended_at - outcome.launched_at,
        "status": status,
        "error": error,
        "spec": spec.to_dict(),
        "command": None,
        "rank_map": rank_map,
        "metrics": metrics,
        "allreduce": comm_rows,
        "events": events,
        "environment": environment,
        "run_dir": str(run_dir.path),
    }
