"""The scaling model against runs it has not seen: every stored training run across test hosts with a shaped link
(bench/testbed), predicted from the runs on one host and, where stored, each backend's allreduce across 2 hosts at
that link (bench.projection.fit.measured_link): no training run across hosts is read to fit it.

A point is a workload, a backend, a number of hosts (one worker each) and a link rate; its measured step time is the
mean over its launches (each launch's mean over its windows) with the t interval; the prediction is the model at
that point on the test hosts (bench.projection.clusters.shaped_test_hosts), with its interval. At each point where two
backends ran, the measured winner is the faster one when their difference is significant (Welch's t over launches,
Holm's correction over every such pair of the table); the prediction agrees when it names the same one."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

from bench.core.errors import UsageError
from bench.core.stats import Family, ratio_of_cases, summarize
from bench.projection.clusters import shaped_test_hosts
from bench.projection.fit import Case, fit, gives, measured_link
from bench.projection.model import Point, Value, project

GOAL_MEDIAN = 0.08  # the model's goal: median absolute error at most 8%
GOAL_WORST = 0.20  # and none worse than 20%
# The test hosts share one machine's cores, so a point is judged only where that cannot decide it: where the model
# puts most of the step outside compute (the link dominates; decided from the prediction, before any comparison),
# and where the measurement itself is resolved (its launches' 95% interval within +-25% of their mean: a point whose
# launches scatter more measures the machine's scheduling, not the link). Points left out are shown, with why.
LINK_DOMINATED = 0.5  # predicted compute share of the step at most this
RESOLVED = 0.25  # measured interval half-width / mean at most this


@dataclass(frozen=True)
class Row:
    workload: str
    backend: str
    hosts: int
    link: str
    measured: Value  # step time (s) over launches
    measured_low: float
    measured_high: float
    point: Point  # the prediction: with the link as the backend's allreduce measured it where stored, else nominal
    compute_share: float  # predicted compute (with the cores' sharing) over the predicted step
    runs: tuple[str, ...]
    nominal: Point  # the prediction with the nominal link (tc's rate, TCP's payload share)
    link_measured: bool  # whether `point` used a measured link
    link_runs: tuple[str, ...] = ()

    @property
    def error(self) -> float:
        return self.point.step / self.measured.mean - 1

    @property
    def left_out(self) -> str:
        """Why the point is not judged ("" when it is)."""
        if self.compute_share > LINK_DOMINATED:
            return f"compute {self.compute_share:.0%} of the predicted step: the shared cores decide it"
        spread = (self.measured_high - self.measured.mean) / self.measured.mean
        if not spread <= RESOLVED:
            return (
                f"launches scatter by ±{spread:.0%} (95%): the measurement does not resolve the step"
                if spread == spread
                else "fewer than 2 launches"
            )
        return ""

    @property
    def nominal_error(self) -> float:
        return self.nominal.step / self.measured.mean - 1


@dataclass(frozen=True)
class Winner:
    workload: str
    hosts: int
    link: str
    faster: str
    slower: str
    ratio: float  # slower's step / faster's, measured
    significant: bool
    predicted_faster: str
    judged: bool = True  # both points judged (Row.left_out)

    @property
    def agrees(self) -> bool:
        return self.faster == self.predicted_faster


@dataclass(frozen=True)
class Validation:
    rows: list[Row]
    winners: list[Winner]
    skipped: list[str]  # points the model could not be fitted for, and why

    @property
    def judged(self) -> list[Row]:
        return [r for r in self.rows if not r.left_out]

    @property
    def errors(self) -> list[float]:
        return [abs(r.error) for r in self.judged]

    @property
    def median_error(self) -> float:
        return statistics.median(self.errors) if self.errors else float("nan")

    @property
    def worst_error(self) -> float:
        return max(self.errors) if self.errors else float("nan")

    @property
    def significant_winners(self) -> list[Winner]:
        return [w for w in self.winners if w.significant and w.judged]

    def meets_goal(self) -> bool:
        return (
            bool(self.judged)
            and self.median_error <= GOAL_MEDIAN
            and self.worst_error <= GOAL_WORST
            and all(w.agrees for w in self.significant_winners)
        )

    @property
    def nominal_median_error(self) -> float:
        errors = [abs(r.nominal_error) for r in self.judged]
        return statistics.median(errors) if errors else float("nan")

    @property
    def all_median_error(self) -> float:
        return statistics.median(abs(r.error) for r in self.rows) if self.rows else float("nan")

    def summary(self) -> str:
        if not self.rows:
            if self.skipped:
                return (
                    f"none of the {len(self.skipped)} points across test hosts could be predicted (each is listed "
                    "as skipped, with what to run)"
                )
            return "no run across test hosts with a shaped link to check the model against"
        if not self.judged:
            return (
                f"{len(self.rows)} points, none judged (each is left out: the shared cores decide it or its "
                f"launches scatter); median absolute error over all {self.all_median_error:.1%}"
            )
        sig = self.significant_winners
        agree = sum(w.agrees for w in sig)
        measured = sum(r.link_measured for r in self.judged)
        return (
            f"{len(self.judged)} of {len(self.rows)} points judged ({measured} with the link as each backend's "
            f"allreduce measured it): median absolute error {self.median_error:.1%}, worst "
            f"{self.worst_error:.1%} (goal: at most {GOAL_MEDIAN:.0%} and {GOAL_WORST:.0%}); the predicted "
            f"winner is the measured one at {agree} of {len(sig)} significant differences; with the nominal link, "
            f"median {self.nominal_median_error:.1%}; over all {len(self.rows)} points, median "
            f"{self.all_median_error:.1%}"
        )


def held_out(records: list) -> list:
    """The ok training runs across hosts with a shaped link: what the model is checked against."""
    return [r for r in records if r.ok and gives(r, "step") and r.spec.hosts and r.spec.link and r.metrics is not None]


def validate(records: list) -> Validation:
    groups: dict[tuple, list] = {}
    for r in held_out(records):
        s = r.spec
        key = (
            s.workload,
            s.batch_size,
            s.threads,
            s.device,
            s.backend,
            s.world_size,
            s.link["rate"],
            s.link.get("delay"),
        )
        groups.setdefault(key, []).append(r)
    rows, skipped, fitted = [], [], {}
    for key, runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][6], kv[0][5], kv[0][4])):
        workload, batch, threads, device, backend, world, rate, delay = key
        case = Case(workload, batch, threads, device)
        if (backend, case) not in fitted:
            try:
                fitted[(backend, case)] = fit(records, backend, case)
            except UsageError as exc:
                fitted[(backend, case)] = str(exc)
        inputs = fitted[(backend, case)]
        if isinstance(inputs, str):
            skipped.append(f"{backend} {workload} at {world} hosts, {rate}: {inputs}")
            continue
        cores = runs[-1].environment.get("cpu_count") or 1
        link = measured_link(records, inputs, rate, delay)
        nominal = project(inputs, shaped_test_hosts(runs[-1].spec.link, world, cores), [world])[0]
        point = (
            nominal
            if link is None
            else project(inputs, shaped_test_hosts(runs[-1].spec.link, world, cores, link[0]), [world])[0]
        )
        values = [r.metrics.step_time_s.mean for r in runs]
        measured = Value.of(values, tuple(r.run_id for r in runs))
        interval = summarize(values)  # the mean over launches with its t interval (NaN bounds from one launch)
        share = point.parts.compute / point.step
        rows.append(
            Row(
                workload,
                backend,
                world,
                rate + (f":{delay}" if delay else ""),
                measured,
                interval["ci_low"],
                interval["ci_high"],
                point,
                share,
                measured.runs,
                nominal,
                link is not None,
                link[1] if link else (),
            )
        )
    return Validation(rows, winners(rows, groups), skipped)


def winners(rows: list[Row], groups: dict) -> list[Winner]:
    """Each pair of backends at each point: the measured faster one, significant after Holm over every pair."""
    by_point: dict[tuple, list[Row]] = {}
    for row in rows:
        by_point.setdefault((row.workload, row.hosts, row.link), []).append(row)
    values = {}
    for key, runs in groups.items():
        workload, _, _, _, backend, world, rate, delay = key
        values[(workload, world, rate + (f":{delay}" if delay else ""), backend)] = [
            r.metrics.step_time_s.mean for r in runs
        ]
    estimates, pairs = {}, []
    for point, point_rows in by_point.items():
        for a, b in itertools.combinations(sorted(point_rows, key=lambda r: r.backend), 2):
            est = ratio_of_cases([values[(*point, a.backend)]], [values[(*point, b.backend)]])
            key = f"{point}:{a.backend}/{b.backend}"
            estimates[key] = est
            pairs.append((key, point, a, b, est))
    family = Family(estimates)
    out = []
    for key, point, a, b, est in pairs:
        faster, slower = (a, b) if est.ratio < 1 else (b, a)
        predicted = a if a.point.step <= b.point.step else b
        ratio = est.ratio if est.ratio >= 1 else 1 / est.ratio
        out.append(
            Winner(
                point[0],
                point[1],
                point[2],
                faster.backend,
                slower.backend,
                float(ratio) if math.isfinite(ratio) else float("nan"),
                bool(family.judge(key).significant),
                predicted.backend,
                not a.left_out and not b.left_out,
            )
        )
    return out
