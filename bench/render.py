"""Plain-text views of specs and records for the terminal."""

from __future__ import annotations


def fmt_throughput(thr: dict | None) -> str:
    if not thr or thr.get("mean") is None:
        return "-"
    mean, half = thr["mean"], thr.get("ci_half_width")
    pct = f" ± {100 * half / mean:.1f}%" if half == half and half is not None and mean else ""
    flag = " (unstable)" if thr.get("unstable") else ""
    return f"{mean:,.0f} samples/s{pct}{flag}"


def describe_spec(spec) -> str:
    placement = f"{spec.world_size} GPU(s), NCCL" if spec.device == "cuda" else \
        f"{spec.world_size} CPU process(es), gloo"
    return (f"{spec.backend} {spec.workload}, {placement}, batch {spec.batch_size}/worker, "
            f"{spec.threads} thread(s)/worker, {spec.data} data, {spec.image_size}px, "
            f"{spec.warmup_steps} warm-up + {spec.windows} x {spec.steps_per_window} timed steps")


def describe_comm(spec) -> str:
    c = spec.comm
    return (f"{spec.backend}, {spec.world_size} rank(s) ({spec.device}), {', '.join(c['ops'])}, {c['dtype']}, "
            f"{c['min_bytes']} to {c['max_bytes']} bytes, {c['warmup_iters']} warm-up + {c['iters']} timed ops")


def fmt_busbw(metrics: dict | None) -> str:
    if not metrics or "comm" not in metrics:
        return "-"
    return "avg busbw " + ", ".join(f"{op} {v:.3f} GB/s" for op, v in metrics["comm"]["avg_busbw_gbps"].items()
                                    if v is not None)


def one_line(record: dict) -> str:
    if record["status"] != "ok":
        message = (record.get("error") or {}).get("message", "")
        return f"{record['status']}: {message}"
    if record["spec"].get("task") == "comm":
        return f"ok {fmt_busbw(record['metrics'])}"
    if record["spec"].get("task") == "fault":
        f = record["metrics"]["fault"]
        return f"ok recovered in {_secs(f.get('recovery_s'))}, world {f.get('world_before')} -> {f.get('world_after')}"
    return f"ok {fmt_throughput(record['metrics']['throughput'])}"


def summary_lines(record: dict) -> list[str]:
    lines = [f"status: {record['status']}"]
    error = record.get("error")
    if error:
        lines.append(f"error: {error['message']}")
        for row in error.get("ranks") or []:
            lines.append(f"  rank {row['rank']}: {row['state']}")
        if error.get("tail"):
            lines.append("error output (tail):")
            lines += ["  " + line for line in error["tail"].splitlines()]
    m = record.get("metrics")
    if m:
        thr, step, start = m["throughput"], m["step_time_s"], m["startup"]
        lines.append(f"throughput: {fmt_throughput(thr)} (95% CI {thr['ci_low']:,.0f} to "
                     f"{thr['ci_high']:,.0f}, {thr['n']} windows)")
        lines.append(f"step time: {1000 * step['mean']:.2f} ms (max over ranks per window)")
        lines.append(f"startup: {start['launch_to_first_step_s']:.2f} s to first step, rendezvous "
                     f"{start['rendezvous_s']:.2f} s")
        lines.append(f"peak memory: {m['peak_rss_bytes_max'] / 2**20:,.0f} MiB RSS (largest rank); "
                     f"straggler ratio {m['straggler_ratio']:.3f}")
        for row in m["per_rank"]:
            lines.append(f"  rank {row['rank']}: {fmt_throughput(row['throughput'])}, "
                         f"{1000 * row['step_time_mean_s']:.2f} ms/step")
    return lines


def runs_table(frame) -> str:
    rows = [("run", "when (UTC)", "status", "backend", "workload", "world", "device", "batch",
             "threads", "result")]
    for _, r in frame.iterrows():
        metrics = r["record"].get("metrics")
        figure = fmt_busbw(metrics) if r["task"] == "comm" else fmt_throughput((metrics or {}).get("throughput"))
        status = r["status"] if r["status"] == "ok" else f"{r['status']}!"
        rows.append((r["run_id"], r["created_at"].strftime("%Y-%m-%d %H:%M:%S"), status, r["backend"],
                     r["workload"], str(r["world_size"]), r["device"], str(r["batch_size"]),
                     str(r["threads"]), figure))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _secs(value) -> str:
    return "-" if value is None else f"{value:.2f} s"


def fault_lines(record: dict) -> list[str]:
    """What a fault run measured, for the terminal."""
    lines = [f"status: {record['status']}"]
    error = record.get("error")
    if error:
        lines.append(f"error: {error['message']}")
    f = (record.get("metrics") or {}).get("fault") or {}
    fired = f.get("fault")
    if not fired:
        return lines
    if fired["scenario"] == "kill":
        lines.append(f"fault: SIG{fired['signal']} to rank {fired['rank']} (pid {fired['pid']}) at step {fired['step']}")
    else:
        lines.append(f"fault: a worker joins at step {fired['step']}")
    lines.append(f"detection: {_secs(f.get('detection_s'))}" + (f" ({f['detected_by']})" if f.get("detected_by") else ""))
    lines.append(f"recovery (signal to first step after it): {_secs(f.get('recovery_s'))}")
    if f.get("join_contributes_s") is not None:
        lines.append(f"new worker's first step: {_secs(f['join_contributes_s'])} after the join began")
    if f.get("hang_observed_s") is not None and f.get("recovery_s") is None:
        lines.append(f"hang observed {_secs(f['hang_observed_s'])} after the fault; no step since")
    lines.append(f"resumed from step {f.get('resumed_from_step', '-')}; steps redone {f.get('steps_redone', '-')}; "
                 f"trained {f.get('steps_completed')} of {f.get('total_steps')}")
    lines.append(f"world size {f.get('world_before')} -> {f.get('world_after')}; restarts {f.get('restarts', 0)}, "
                 f"resets {f.get('resets', 0)}; the run ended {_secs(f.get('ended_after_fault_s'))} after the fault")
    for r in f.get("rendezvous") or []:
        lines.append(f"  agent {r['agent_pid']} attempt {r['attempt']}: {r['state'].lower().replace('_', ' ')} "
                     f"{r['duration_ms']:.0f} ms")
    for phase in ("before", "after"):
        rows = f.get(f"rank_map_{phase}") or []
        if rows:
            lines.append(f"ranks {phase}: " + ", ".join(f"{r['rank']}=pid {r['pid']}@{r['host']}" for r in rows))
    checks = f.get("resume_checks") or []
    if checks:
        ok = all(c["equal"] for c in checks)
        lines.append(f"resumed state {'equals' if ok else 'DIFFERS FROM'} the committed one "
                     f"({len(checks)} process(es) checked)")
    return lines
