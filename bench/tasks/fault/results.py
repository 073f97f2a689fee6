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
from bench.tasks.fault.scenarios import SCENARIOS, stored_as


def measure_of(spec) -> str:
    """The scorecard's name of a run's fault (its scenario's `measure`)."""
    f = spec.fault
    scenario = stored_as(f.scenario, f.signal)
    return f.scenario if scenario is None else scenario.measure


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
        joins = any(s.joins and s.measure == self.measure for s in SCENARIOS.values())
        return m.join_contributes_s if joins else m.recovery_s

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


# The runs a side at which a fault case's exact tests can call a gap seen in every run at 5% (2 / C(8, 4) = 2/70 at
# 4 a side; 3 a side gives at best 2/20): the sweep adds runs to an undecided case up to this many a side.
RUNS_TO_DECIDE = stats.runs_to_decide()
CAME_THROUGH, RECOVERY_TIME = "came through", "recovery time"  # what a case is decided on (Decision.basis)


@dataclass(frozen=True)
class Decision:
    """What the runs of one fault case decide (decide): the rule the page's row and answer and the sweep's added fault
    launches (follow_ups) all read."""

    standing: str  # "ahead", "within" (a tie), "unresolved" (not yet decided), "neither", "one launch", "no ratio"
    basis: str = ""  # CAME_THROUGH or RECOVERY_TIME: what was compared
    winner: str | None = None  # the side ahead, where decided
    leader: str | None = None  # the side ahead in every run (came through where the other never did, or recovered
    # sooner in every run than the other's fastest), decided or not
    p: float = float("nan")  # the exact test's two-sided p (Fisher's on the counts, a permutation test on the times)
    estimate: stats.Estimate | None = None  # the recovery times' ratio (stats.exact_ratio), where compared
    margin: float = float("nan")  # the times' equivalence margin: within ±margin at 95%

    @property
    def settled(self) -> bool:
        """Whether more runs are not needed: a side ahead, a tie, neither came through, or no ratio to take."""
        return self.standing in ("ahead", "within", "neither", "no ratio")


def decide(first: tuple[list[float], int], second: tuple[list[float], int], names=PRIMARY) -> Decision:
    """Decide one fault case from each side's (recovery times of the runs that came through, runs): first whether
    each came through, by Fisher's exact test on the counts where the shares differ; where they do not (and some came
    through), how soon, by the permutation test of the mean log recovery time (stats.exact_ratio), each at 5% on its
    own. A tie is the times shown within ±25% (stats.EQUIVALENCE_USEFUL) by the exact test's interval."""
    (t1, n1), (t2, n2) = first, second
    k1, k2 = len(t1), len(t2)
    if min(n1, n2) < stats.MIN_LAUNCHES:
        return Decision("one launch")
    if k1 * n2 != k2 * n1:  # the shares of runs that came through differ
        better, worse = (0, 1) if k1 * n2 > k2 * n1 else (1, 0)
        counts = ((k1, n1), (k2, n2))
        every = counts[better][0] == counts[better][1] and counts[worse][0] == 0
        p = stats.fisher_exact(k1, n1 - k1, k2, n2 - k2)
        standing = "ahead" if p < stats.ALPHA else "unresolved"
        winner = names[better] if standing == "ahead" else None
        return Decision(standing, CAME_THROUGH, winner, names[better] if every else None, p)
    if k1 == 0:
        return Decision("neither", CAME_THROUGH)
    if min(t1 + t2) <= 0:  # a time of 0 s or less (clocks apart) has no log to compare on
        return Decision("no ratio", RECOVERY_TIME)
    est = stats.exact_ratio(t1, t2)
    sooner = 0 if est.ratio < 1 else 1
    times = (t1, t2)
    every = max(times[sooner]) < min(times[1 - sooner])
    leader = names[sooner] if every else None
    if not est.replicated:  # one run a side came through
        return Decision("unresolved", RECOVERY_TIME, None, leader, estimate=est)
    margin = stats.equivalence_margin(est, stats.ALPHA)
    if est.p < stats.ALPHA:
        return Decision("ahead", RECOVERY_TIME, names[sooner], leader, est.p, est, margin)
    standing = "within" if margin <= stats.EQUIVALENCE_USEFUL else "unresolved"
    return Decision(standing, RECOVERY_TIME, None, leader, est.p, est, margin)


def case_decision(by_backend: dict) -> Decision | None:
    """decide() of one case's RecoveryCases (backend -> RecoveryCase), None unless both of the primary pair ran it."""
    sides = [by_backend.get(b) for b in PRIMARY]
    if any(side is None for side in sides):
        return None
    return decide(*((side.times, len(side.records)) for side in sides))


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
    """For the fault runs among one sweep's `records`: one more launch (its spec) of each side below the cap of each
    case its runs leave undecided (decide, the rule the page reads), the cap RUNS_TO_DECIDE runs a side (or what the
    sweep planned for every case, where that is more). None for a case decided, tied, or that neither came through,
    and none where the sweep asked for one run a side (`planned`: its specs). Called again after each added round,
    it adds runs until every case is decided or at the cap."""
    faults = [r for r in records if r.spec.task == FaultTask.name]
    cases = recovery_cases(records_to_frame(faults)) if faults else {}  # grouped as the page groups them
    per_side: dict[tuple, int] = {}
    for spec in planned:
        if spec.task == FaultTask.name:
            key = (get_task(spec.task).case(spec), spec.backend)
            per_side[key] = per_side.get(key, 0) + 1
    asked = min(per_side.values(), default=0)
    if asked < stats.MIN_LAUNCHES:
        return []
    cap = max(asked, RUNS_TO_DECIDE)
    out = []
    for by_backend in cases.values():
        found = case_decision(by_backend)
        if found is None or found.settled:
            continue
        sides = [by_backend[b] for b in PRIMARY]
        repeat = max(r.spec.repeat or 0 for side in sides for r in side.records) + 1
        out += [dataclasses.replace(side.records[-1].spec, repeat=repeat) for side in sides if len(side.records) < cap]
    return out


def recovery_key(case: str, a: str, b: str) -> str:
    return f"recovery {a} / {b}, {case}"


def comparisons(frame) -> dict[str, stats.Estimate]:
    """The primary pair's recovery time (the ratio of geometric means across the runs that came through, with its
    exact test: stats.exact_ratio), per case decided on the times (decide): both came through in the same share of
    their runs."""
    first, second = PRIMARY
    out = {}
    for case, by_backend in recovery_cases(frame).items():
        found = case_decision(by_backend)
        if found is not None and found.estimate is not None:
            out[recovery_key(case, first, second)] = found.estimate
    return out
