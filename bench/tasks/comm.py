"""comm: a communication sweep in nccl-tests' conventions, through each backend's own collectives."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.records import Record, Startup
from bench.tasks.base import Task


@dataclass
class CommRow(Record):
    """One (op, message size) of a sweep, as nccl-tests prints it."""
    op: str
    size: int  # bytes of the whole buffer (see bench.comm)
    count: int
    type: str
    redop: str
    time_us: float  # mean per op, max over ranks
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    per_rank_time_us: list[float]
    window_time_us: list[float] | None = None  # per timed chunk, max over ranks
    busbw_fraction_of_limit: float | None = None


@dataclass
class CommMetrics(Record):
    avg_busbw_gbps: dict[str, float | None]
    wrong: int
    model: str  # the cost model fitted: "ring", "parameter server"
    fit: dict | None  # bench.comm.fit_alpha_beta
    rows: list[CommRow]
    startup: Startup
    peak_rss_bytes_max: int
    ceiling: dict | None = None  # bench.comm.measure_ceiling, measured just before the launch


class CommTask(Task):
    name = "comm"
    label = "communication sweep"
    metrics_type = CommMetrics
    report_module = "bench.tasks.comm_report"
    columns = ("rendezvous_s", "peak_rss_mb", "dtype")

    def frame_columns(self, record) -> dict:
        out = {"dtype": record.spec.comm["dtype"]}
        if record.metrics is not None:
            out.update(rendezvous_s=record.metrics.startup.rendezvous_s,
                       peak_rss_mb=record.metrics.peak_rss_bytes_max / 2**20)
        return out


TASK = CommTask()
