"""What the fault task's stored runs say: its cases (the launches of one backend, fault kind and world size under
one set of conditions and fault settings, from its latest sweep), the recovery figures of each across launches,
and the comparisons of recovery time that `bench agreement` makes (docs/method.md, "Fault recovery").

A recovery is one event per launch: a case's figures are the spread of its launches (median, and the t interval
of the mean from two launches on); whether it recovered counts the launches that came through the fault among
those that measured it (Task.measured: the fault was delivered).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.core import stats
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY
from bench.core.spec import pinned_words
from bench.results.frame import CONDITIONS, blank_single_machine, latest_launches
from bench.tasks.fault.spec import fault_kind
from bench.tasks.train.results import network_words

# The fault's own settings: runs that differ in one are never one case (a shorter collective timeout is noticed
# sooner, a shorter recovery timeout calls a slow recovery a hang).
FAULT_SETTINGS = ("at_step", "checkpoint_every", "total_steps", "comm_timeout", "recovery_timeout", "max_restarts")


@dataclass
class RecoveryCase:
    """The launches of one backend, fault kind and world size (at the fault) under one set of conditions and fault
    settings (`cond`: CONDITIONS and FAULT_SETTINGS), from its latest sweep, oldest first."""
    cond: dict
    backend: str
    kind: str  # bench.tasks.fault.spec.fault_kind: kill, hang, join, ...
    world_size: int
    records: list

    @property
    def launches(self) -> int:
        return len(self.records)

    @property
    def measured(self) -> list:
        """The launches whose fault was delivered (whatever came of it)."""
        return [r for r in self.records if r.task.measured(r)]

    @property
    def came_through(self) -> int:
        """Launches that trained on to their last step after the fault."""
        return sum(r.status == RunStatus.OK for r in self.records)

    @property
    def recovered(self) -> bool:
        """Every launch that measured the fault came through it (and one did at least)."""
        return bool(self.measured) and self.came_through == len(self.measured)

    @property
    def recovery_values(self) -> list[float]:
        """Seconds from the fault to the first step after the resume, one per launch that came through."""
        return [r.metrics.recovery_s for r in self.records if r.ok and r.metrics.recovery_s is not None]

    @property
    def detection_values(self) -> list[float]:
        return [r.metrics.detection_s for r in self.measured if r.metrics.detection_s is not None]

    @property
    def recovery(self) -> dict | None:
        """The recovery time across the launches that came through: median, min, max, mean and the t interval of
        the mean (None with fewer than two launches); None when none came through."""
        return spread(self.recovery_values)

    @property
    def detection(self) -> dict | None:
        return spread(self.detection_values)

    @property
    def steps_redone(self) -> float | None:
        values = [r.metrics.steps_redone for r in self.records if r.ok and r.metrics.steps_redone is not None]
        return statistics.median(values) if values else None

    @property
    def world_after(self) -> list[int]:
        """The world sizes the launches that came through trained on at."""
        return sorted({r.metrics.world_after for r in self.records if r.ok and r.metrics.world_after is not None})

    @property
    def statuses(self) -> list[str]:
        return [str(r.status) for r in self.records]

    @property
    def run_ids(self) -> str:
        return ", ".join(r.run_id for r in self.records)


def spread(values: list[float]) -> dict | None:
    """A figure across launches: median, min, max, mean, and the t interval of the mean from two launches on."""
    if not values:
        return None
    out = {"launches": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
           "mean": statistics.fmean(values), "ci_low": None, "ci_high": None}
    if len(values) >= stats.MIN_LAUNCHES:
        s = stats.summarize(values)
        out.update(ci_low=s["ci_low"], ci_high=s["ci_high"])
    return out


def recovery_cases(frame) -> list[RecoveryCase]:
    """Every (conditions and fault settings, backend, fault kind, world size) of the fault runs in `frame` (this
    task's rows), with the launches of its latest sweep (or, outside a sweep, its latest run)."""
    if frame.empty:
        return []
    faults = [r.spec.fault for r in frame["record"]]
    keyed = blank_single_machine(frame).assign(fault_kind=[fault_kind(f) for f in faults],
                                               **{k: [f[k] for f in faults] for k in FAULT_SETTINGS})
    keys = [*CONDITIONS, *FAULT_SETTINGS, "backend", "fault_kind", "world_size"]
    # a column missing in every row (no loader on CPU) must not drop the rows from the groups
    keyed = keyed.assign(**{k: keyed[k].astype(object).where(keyed[k].notna(), "") for k in keys})
    return [RecoveryCase(dict(zip([*CONDITIONS, *FAULT_SETTINGS], key)), key[-3], key[-2], int(key[-1]), records)
            for key, records in latest_launches(keyed, keys).items()]


def case_words(case: RecoveryCase) -> str:
    """Where a case ran and under which fault settings, for a comparison's key."""
    c = case.cond
    return (f"{case.kind} {c['workload']} x{case.world_size}{pinned_words(c.get('cpu_bind'))}{network_words(c)} "
            f"(fault at step {c['at_step']} of {c['total_steps']}, checkpoint every {c['checkpoint_every']}, "
            f"timeouts {c['comm_timeout']:g}/{c['recovery_timeout']:g} s)")


def comparisons(frame) -> dict[str, stats.Estimate]:
    """The comparisons the fault view makes across launches: recovery time of the first primary backend over the
    second's (and of each other backend over each primary), per case where every launch of both sides that measured
    the fault came through it; a side that never recovers has no time to compare (recovery_cases says so)."""
    by_place: dict[str, dict[str, RecoveryCase]] = {}
    for case in recovery_cases(frame):
        by_place.setdefault(case_words(case), {})[case.backend] = case
    first, second = PRIMARY
    out = {}
    for where, rows in by_place.items():
        rows = {b: c for b, c in rows.items() if c.recovered and c.recovery_values}
        pairs = [(first, second)] if first in rows and second in rows else []
        pairs += [(other, p) for other in sorted(set(rows) - set(PRIMARY)) for p in PRIMARY if p in rows]
        for a, b in pairs:
            out[f"recovery {a} / {b}, {where}"] = stats.ratio_of_cases([rows[a].recovery_values],
                                                                       [rows[b].recovery_values])
    return out
