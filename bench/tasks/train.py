"""train: the measured training loop (warm-up, then timed windows), under any backend."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.records import Record, Startup, Summary
from bench.tasks.base import Task


@dataclass
class RankFigures(Record):
    """One worker's own figures (stragglers show here)."""
    rank: int
    throughput: Summary
    step_time_mean_s: float
    peak_rss_bytes: int
    cuda_peak_bytes: int | None
    loss_first: float
    loss_last: float
    param_checksum: float
    threads: dict


@dataclass
class TrainMetrics(Record):
    throughput: Summary  # samples/s per window: global batch x K / the slowest rank's window time
    window_times_s: list[float]
    step_time_s: Summary
    per_rank: list[RankFigures]
    straggler_ratio: float | None  # slowest / fastest rank's mean step time
    startup: Startup
    peak_rss_bytes_max: int
    param_count: int
    loss_last: float
    other_roles: list[dict] = field(default_factory=list)  # processes that do not train (PS servers)


class TrainTask(Task):
    name = "train"
    label = "training"
    metrics_type = TrainMetrics
    report_module = "bench.tasks.train_report"
    columns = ("throughput", "ci_low", "ci_high", "rel_stdev", "unstable", "step_time_s", "startup_s",
               "rendezvous_s", "peak_rss_mb")

    def case(self, spec) -> str:
        return spec.workload

    def frame_columns(self, record) -> dict:
        m = record.metrics
        if m is None:
            return {}
        return {"throughput": m.throughput.mean, "ci_low": m.throughput.ci_low, "ci_high": m.throughput.ci_high,
                "rel_stdev": m.throughput.rel_stdev, "unstable": m.throughput.unstable,
                "step_time_s": m.step_time_s.mean, "startup_s": m.startup.launch_to_first_step_s,
                "rendezvous_s": m.startup.rendezvous_s, "peak_rss_mb": m.peak_rss_bytes_max / 2**20}


TASK = TrainTask()
