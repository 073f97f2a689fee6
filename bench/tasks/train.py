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


TASK = TrainTask()
