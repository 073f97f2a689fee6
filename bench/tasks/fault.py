"""fault: training through an injected fault (or a joining worker) under a backend's elastic mode."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.records import RankRow, Record
from bench.tasks.base import Task


@dataclass
class FaultMetrics(Record):
    """What a fault run measured (docs/method.md, "Fault recovery"). Times in seconds from the fault."""
    scenario: str  # "kill" or "join"
    signal: str | None
    at_step: int
    total_steps: int
    checkpoint_every: int
    max_restarts: int
    steps_completed: int
    timeline: dict  # samples/s over time: t0, bin_s, t, samples_per_s
    fault: dict | None  # what the parent did and when (None: never injected)
    agent_events: list[dict] = field(default_factory=list)  # the launcher's own events, if it reports any
    resume_checks: list[dict] = field(default_factory=list)
    commits: int = 0
    rendezvous: list[dict] = field(default_factory=list)
    world_before: int | None = None
    ended_after_fault_s: float | None = None
    rank_map_before: list[RankRow] | None = None
    step_at_fault: int | None = None
    detection_s: float | None = None
    detected_by: str | None = None
    resets: int | None = None
    restarts: int | None = None
    recovery_s: float | None = None
    resumed_from_step: int | None = None
    world_after: int | None = None
    rank_map_after: list[RankRow] | None = None
    steps_redone: int | None = None
    join_contributes_s: float | None = None
    hang_observed_s: float | None = None


class FaultTask(Task):
    name = "fault"
    label = "fault injection"
    metrics_type = FaultMetrics
    report_module = "bench.tasks.fault_report"
    columns = ("recovery_s", "detection_s")

    def case(self, spec) -> str:
        f = spec.fault
        what = (f"SIG{f['signal']} to 1 of {spec.world_size} workers" if f["scenario"] == "kill"
                else f"a worker joins {spec.world_size} running")
        return f"{spec.workload}: {what}, checkpoint/commit every {f['checkpoint_every']} steps"

    def frame_columns(self, record) -> dict:
        m = record.metrics
        return {} if m is None else {"recovery_s": m.recovery_s, "detection_s": m.detection_s}


TASK = FaultTask()
