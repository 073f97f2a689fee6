"""The regression gate's figures, read from one sweep's records: each gated metric is a ratio of case means
(a backend's throughput over N x the plain loop's, ...), one value per run of each case.

A figure's value is bench.core.stats.ratio_of_cases, the function that gives the page its vs-plain-loop and
efficiency figures, so the gate and the page cannot disagree on a figure made of the same runs. Which runs make a
case, and what one run contributes, is each task's (`gate_figures` of bench/tasks/<task>/results.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from bench.core.registry import task_part
from bench.core.stats import Estimate, ratio_of_cases


@dataclass
class CaseValues:
    """What one case of a sweep contributes to a figure: one value per run (or, with a single run, its windows)."""

    values: list[float]
    per: str  # "run" or "window": what one value stands for
    run_ids: list[str]

    @property
    def positive(self) -> list[float]:
        """The values a ratio is taken of: a value of 0 or less has no log and is left out."""
        return [v for v in self.values if v > 0]

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.positive]

    @property
    def runs(self) -> int:
        """How many runs stand behind the values (a lone run's windows count as one)."""
        return len(self.values) if self.per == "run" else 1


@dataclass
class Figure:
    """One side of one gated metric: the ratio of the cases signed +1 over those signed -1, over `scale`."""

    key: str
    kind: str
    cases: list[CaseValues]
    signs: list[int]
    scale: float = 1.0

    @cached_property
    def estimate(self) -> Estimate:
        """The ratio of case means with its interval across runs (where a case has a single run, its windows
        stand in for runs, and the interval is optimistic). Computed once: a figure's cases do not change."""
        return ratio_of_cases(
            [c.positive for c, s in zip(self.cases, self.signs) if s > 0],
            [c.positive for c, s in zip(self.cases, self.signs) if s < 0],
            scale=self.scale,
        )

    @property
    def log_value(self) -> float:
        return self.estimate.log_ratio

    def value(self) -> float:
        return self.estimate.ratio

    @property
    def run_ids(self) -> list[str]:
        return [i for c in self.cases for i in c.run_ids]


def case_of(runs: list, value) -> CaseValues:
    """One value per run; a lone run's windows when there is only one (a run-to-run spread is unknown).
    `value(record, per_window)` gives a run's value, or its windows' values."""
    if len(runs) == 1:
        return CaseValues(value(runs[0], per_window=True), "window", [runs[0].run_id])
    return CaseValues([value(r, per_window=False) for r in runs], "run", [r.run_id for r in runs])


def group_runs(records: list, key) -> tuple[dict, dict]:
    """(all runs per case, comparable runs per case: ok and alone on their cores), oldest first; key(record) names
    a record's case."""
    runs: dict = {}
    for rec in sorted(records, key=lambda r: r.created_at):
        runs.setdefault(key(rec), []).append(rec)
    return runs, {k: [r for r in rs if r.comparable] for k, rs in runs.items()}


def not_ok_entry(runs: list) -> dict:
    """How a case none of whose runs can be compared ended (its last run): not ok, or ok but on cores another bench
    run shared."""
    last = runs[-1]
    status = f"{last.status}, but another bench run shared its cores" if last.ok and last.shared_with else last.status
    return {"status": status, "run_id": last.run_id}


def figures(records: list) -> tuple[dict[str, Figure], dict[str, dict]]:
    """The gated figures of one sweep's records, and the cases none of whose runs succeeded
    (key -> {"status", "run_id"}). Every ok run of a case counts (repeats, and confirmation runs).
    Each kind of run says what it contributes (`gate_figures` of its task's results)."""
    by_task: dict = {}
    for rec in records:
        by_task.setdefault(rec.spec.task, []).append(rec)
    out: dict[str, Figure] = {}
    not_ok: dict[str, dict] = {}
    for name, recs in by_task.items():
        part = task_part(name, "results")
        if part is None or not hasattr(part, "gate_figures"):
            continue
        figs, failed = part.gate_figures(recs, records)
        out.update(figs)
        not_ok.update(failed)
    return out, not_ok
