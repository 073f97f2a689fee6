"""What the fault task's stored runs say: per fault case (the fault, the workload, the world size, the hosts) and
backend, the runs that came through and their recovery times, and the comparisons of recovery time across runs
that the page and `bench agreement` make. A recovery is one event per run, so runs are the unit of replication.
Fault runs give the regression gate no figure (it has no gate_figures): one event a run is too noisy for it."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field

from bench.core import stats
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY, get_task
from bench.results.frame import records_to_frame
from bench.tasks.fault import FaultTask

# The scorecard's name of each kind of fault (the scenario, and a signal for `kill`).
MEASURES = {
    ("kill", "KILL"): "recovery from a killed worker",
    ("kill", "STOP"): "recovery from a hung worker",
    ("kill", "TERM"): "recovery from a terminated worker",
    ("kill-host", None): "recovery from a lost host",
    ("partition-host", None): "recovery from a cut-off host",
    ("drop-host", None): "recovery from a host the cluster dropped",
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


# a backend that failed to come through only once, where the other always did, is said but not weighed: one failure
# in a few runs is too few to tell a flaw from a bad moment of the machine
FAILURES_TO_DECIDE = 2
ONE_FAILURE = "one failure, too few to decide"  # undecided's reason that one more launch a side can settle


def undecided(first: tuple[int, int], second: tuple[int, int]) -> str | None:
    """Why the runs of one fault case cannot yet say whether one backend comes through where the other does not,
    or None where they can: (came through, runs) of each side. The page's answer and the sweep's follow-up fault
    launches read this one rule."""
    (k1, n1), (k2, n2) = first, second
    if min(n1, n2) < stats.MIN_LAUNCHES:
        return "one run a side, which does not decide"
    if k1 * n2 != k2 * n1:  # the shares of runs that came through differ
        failed = n2 - k2 if k1 * n2 > k2 * n1 else n1 - k1
        if failed < FAILURES_TO_DECIDE:
            return ONE_FAILURE
    return None


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


def follow_ups(records: list, planned: list) -> list:
    """For the fault runs among one sweep's `records`: one more launch a side (their specs) of each case that a single
    failure leaves undecided (undecided), the launch that can decide it, once: a case that already ran more launches a
    side than the sweep planned for every case (`planned`: its specs) gets none. So do cases decided, tied, or with
    one run a side (what was asked for)."""
    faults = [r for r in records if r.spec.task == FaultTask.name]
    cases = recovery_cases(records_to_frame(faults)) if faults else {}  # grouped as the page groups them
    per_side: dict[tuple, int] = {}
    for spec in planned:
        if spec.task == FaultTask.name:
            key = (get_task(spec.task).case(spec), spec.backend)
            per_side[key] = per_side.get(key, 0) + 1
    asked = min(per_side.values(), default=0)
    out = []
    for by_backend in cases.values():
        sides = [by_backend.get(b) for b in PRIMARY]
        if any(side is None or len(side.records) > asked for side in sides):
            continue
        if undecided(*((len(side.came_through), len(side.records)) for side in sides)) == ONE_FAILURE:
            out += [
                dataclasses.replace(side.records[-1].spec, repeat=side.records[-1].spec.repeat + 1) for side in sides
            ]
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
