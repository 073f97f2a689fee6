"""What the fault task's stored runs say: per fault case (the fault, the workload, the world size, the hosts) and
backend, the runs that came through and their recovery times, and the comparisons of recovery time across runs
that the page and `bench agreement` make. A recovery is one event per run, so runs are the unit of replication.
Fault runs give the regression gate no figure (it has no gate_figures): one event a run is too noisy for it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.core import stats
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY

# The scorecard's name of each kind of fault (the scenario, and a signal for `kill`).
MEASURES = {
    ("kill", "KILL"): "recovery from a killed worker",
    ("kill", "STOP"): "recovery from a hung worker",
    ("kill", "TERM"): "recovery from a terminated worker",
    ("kill-host", None): "recovery from a lost host",
    ("partition-host", None): "recovery from a cut-off host",
    ("join", None): "a joining worker",
}


def measure_of(spec) -> str:
    f = spec.fault
    return MEASURES.get((f.scenario, f.signal if f.scenario == "kill" else None), f.scenario)


@dataclass
class RecoveryCase:
    """The fault runs of one backend in one case, oldest first."""

    case: str  # the task's case in words (bench.tasks.fault.FaultTask.case)
    measure: str
    backend: str
    records: list = field(default_factory=list)

    @property
    def came_through(self) -> list:
        return [
            r
            for r in self.records
            if r.status == RunStatus.OK and r.metrics is not None and self.time_of(r) is not None
        ]

    def time_of(self, rec) -> float | None:
        """What the case measures of one run: for a joining worker, from the join to its first step; otherwise
        from the fault to the first step after the run resumed."""
        m = rec.metrics
        return m.join_contributes_s if self.measure == MEASURES[("join", None)] else m.recovery_s

    @property
    def times(self) -> list[float]:
        return [self.time_of(r) for r in self.came_through]

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    def failures(self) -> str:
        """How the runs that did not come through ended, in words ("timeout in 1 run")."""
        bad = [r for r in self.records if r not in self.came_through]
        counts: dict[str, int] = {}
        for r in bad:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        return ", ".join(f"{status} in {n} run{'s' if n > 1 else ''}" for status, n in sorted(counts.items()))


def recovery_cases(frame) -> dict[str, dict[str, RecoveryCase]]:
    """case -> backend -> RecoveryCase, for every fault run of `frame` (this task's runs) that had its cores to
    itself (a run that shared them with another bench run measured that one too)."""
    out: dict[str, dict[str, RecoveryCase]] = {}
    for r in frame.sort_values("created_at").itertuples():
        rec = r.record
        if rec.shared_with:
            continue
        case = out.setdefault(r.case, {}).setdefault(r.backend, RecoveryCase(r.case, measure_of(rec.spec), r.backend))
        case.records.append(rec)
    return out


def recovery_key(case: str, a: str, b: str) -> str:
    return f"recovery {a} / {b}, {case}"


def comparisons(frame) -> dict[str, stats.Estimate]:
    """The primary pair's recovery time (ratio of geometric means across runs that came through), per case where
    both came through."""
    first, second = PRIMARY
    out = {}
    for case, by_backend in recovery_cases(frame).items():
        if first in by_backend and second in by_backend:
            a, b = by_backend[first].times, by_backend[second].times
            if a and b and min(a + b) > 0:
                out[recovery_key(case, first, second)] = stats.ratio_of_cases([a], [b])
    return out
