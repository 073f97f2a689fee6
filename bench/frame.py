"""Records as a pandas DataFrame, and the figures computed across runs (scaling efficiency)."""

from __future__ import annotations

FRAME_COLUMNS = ["run_id", "created_at", "status", "task", "backend", "workload", "world_size", "device",
                 "batch_size", "backward_passes", "global_batch", "threads", "data", "image_size", "sweep_id",
                 "throughput", "ci_low", "ci_high", "rel_stdev", "unstable", "step_time_s",
                 "startup_s", "rendezvous_s", "peak_rss_mb", "error", "record"]
# Runs are comparable only when these conditions are equal (DESIGN, "Fairness"); world size varies.
CONDITIONS = ["workload", "device", "batch_size", "backward_passes", "threads", "data", "image_size"]


def record_row(rec: dict) -> dict:
    spec, metrics = rec["spec"], rec.get("metrics") or {}
    thr = metrics.get("throughput") or {}
    startup = metrics.get("startup") or {}
    rss = metrics.get("peak_rss_bytes_max")
    return {
        "run_id": rec["run_id"], "created_at": rec["created_at"], "status": rec["status"],
        "task": spec.get("task", "train"),
        "backend": spec["backend"], "workload": spec["workload"], "world_size": spec["world_size"],
        "device": spec["device"], "batch_size": spec["batch_size"],
        "backward_passes": spec.get("backward_passes", 1),
        "global_batch": spec["batch_size"] * spec.get("backward_passes", 1) * spec["world_size"],
        "threads": spec["threads"],
        "data": spec["data"], "image_size": spec["image_size"], "sweep_id": spec.get("sweep_id"),
        "throughput": thr.get("mean"), "ci_low": thr.get("ci_low"), "ci_high": thr.get("ci_high"),
        "rel_stdev": thr.get("rel_stdev"), "unstable": thr.get("unstable"),
        "step_time_s": (metrics.get("step_time_s") or {}).get("mean"),
        "startup_s": startup.get("launch_to_first_step_s"), "rendezvous_s": startup.get("rendezvous_s"),
        "peak_rss_mb": rss / 2**20 if rss else None,
        "error": (rec.get("error") or {}).get("message"), "record": rec,
    }


def records_to_frame(records: list[dict]):
    import pandas as pd

    frame = pd.DataFrame([record_row(r) for r in records], columns=FRAME_COLUMNS)
    frame["created_at"] = pd.to_datetime(frame["created_at"], unit="s", utc=True)
    return frame


def with_efficiency(frame, baseline_backend: str | None = None):
    """Add weak-scaling efficiency columns to the ok runs.

    efficiency = thr(N) / (N x thr(1)), thr(1) the latest ok run of the same backend at world size 1
    under the same conditions; efficiency_vs_plain uses the plain single-process loop instead.
    """
    import pandas as pd

    from bench.backends import BASELINE

    baseline_backend = baseline_backend or BASELINE
    ok = frame[(frame["status"] == "ok") & (frame["task"] == "train")].copy()
    ok["efficiency"] = float("nan")
    ok["efficiency_vs_plain"] = float("nan")
    if ok.empty:
        return ok
    latest = ok.sort_values("created_at").groupby(["backend", *CONDITIONS, "world_size"]).tail(1)
    ones = latest[latest["world_size"] == 1].set_index(["backend", *CONDITIONS])["throughput"]
    plain = ones.xs(baseline_backend, level="backend") if baseline_backend in ones.index.get_level_values(0) \
        else pd.Series(dtype=float)
    for idx, row in ok.iterrows():
        key = tuple(row[c] for c in CONDITIONS)
        one = ones.get((row["backend"], *key))
        if one:
            ok.at[idx, "efficiency"] = row["throughput"] / (row["world_size"] * one)
        base = plain.get(key) if len(plain) else None
        if base:
            ok.at[idx, "efficiency_vs_plain"] = row["throughput"] / (row["world_size"] * base)
    return ok
