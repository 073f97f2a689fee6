"""What the training task's stored runs say: its cases (the ok launches of one backend, world size and conditions
in its latest sweep), the comparisons across launches the page and `bench agreement` make, and the figures the
regression gate compares (bench.results.gate).

Every comparison is a test across launches (docs/method.md, "Replication"): each launch contributes its mean over
windows; two cases are compared by the ratio of their geometric means with a Welch t interval on the log scale
(bench.core.stats.ratio_of_cases). Windows describe one launch and never decide a comparison. The gate's vs_plain
and efficiency figures are the same ratios of the same launch values (bench.results.figures.Figure.estimate), so
where the gate and the page take the same launches they state the same figure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.core import stats
from bench.core.registry import PLAIN_LOOP, PRIMARY, RIVAL, against_the_plain_loop
from bench.core.spec import numerics_note, pinned_words
from bench.results.figures import Figure, case_of, group_runs, not_ok_entry
from bench.results.frame import CONDITIONS, blank_single_machine, comparable_runs, pooled_launches, sweeps_in


def launch_throughput(rec) -> float:
    """What one launch contributes to a comparison across launches: its mean throughput over windows."""
    return rec.metrics.throughput.mean


def gate_figures(records: list, all_records: list) -> tuple[dict, dict]:
    """throughput, vs_plain (over N x the plain loop's) and efficiency (over N x its own at one
    worker) of each backend, workload and world size (docs/method.md, "Regression gate")."""

    def value(rec, per_window):
        return rec.metrics.throughput.per_window if per_window else launch_throughput(rec)

    runs, ok = group_runs(records, lambda r: (r.spec.backend, r.spec.workload, r.spec.world_size))
    out, not_ok = {}, {}
    for (backend, workload, n), rs in sorted(runs.items(), key=lambda kv: str(kv[0])):
        where = f"{backend} {workload} n={n}"
        good = ok[(backend, workload, n)]
        if not good:
            not_ok.update({f"{kind} {where}": not_ok_entry(rs) for kind in ("throughput", "vs_plain", "efficiency")})
            continue
        mine = case_of(good, value)
        out[f"throughput {where}"] = Figure(f"throughput {where}", "throughput", [mine], [1])
        plain = ok.get((PLAIN_LOOP, workload, 1))
        if backend != PLAIN_LOOP and plain and against_the_plain_loop(backend):
            out[f"vs_plain {where}"] = Figure(
                f"vs_plain {where}", "vs_plain", [mine, case_of(plain, value)], [1, -1], scale=n
            )
        one = ok.get((backend, workload, 1))
        if n > 1 and one:
            out[f"efficiency {where}"] = Figure(
                f"efficiency {where}", "efficiency", [mine, case_of(one, value)], [1, -1], scale=n
            )
    return out, not_ok


def mean_of(values) -> float:
    """The mean of figures, infinite (not an error) past a float's range: a record's absurd figure is shown so."""
    values = list(values)
    try:
        return statistics.fmean(values)
    except OverflowError:
        return sum(values) / len(values)


@dataclass
class TrainingCase:
    """The ok launches of one backend and world size under one set of conditions, from its latest sweep
    (or, for runs made outside a sweep, its latest run)."""

    cond: dict
    backend: str
    world_size: int
    records: list  # oldest first
    vs_plain: stats.Estimate | None = None  # thr(N) / (N x the plain loop's), across launches
    efficiency: stats.Estimate | None = None  # thr(N) / (N x thr(1)) of the same backend
    notes: list[str] = field(default_factory=list)
    # the sweep that looked at this case after every round (`bench sweep --resolution`), its Looks and the case's
    # launches in it: a comparison of two such cases is stated at the share of its look (stats.sequential)
    looked: tuple[str, stats.Looks, int] | None = None

    def look_in(self, looks: dict) -> None:
        """Mark the case with the latest of its sweeps that has Looks (looks: sweep id -> Looks)."""
        sweeps = [r.spec.sweep_id for r in self.records if r.spec.sweep_id in looks]
        if sweeps:
            self.looked = (sweeps[-1], looks[sweeps[-1]], sweeps.count(sweeps[-1]))

    @property
    def values(self) -> list[float]:
        """One throughput per launch (launch_throughput)."""
        return [launch_throughput(r) for r in self.records]

    @property
    def launches(self) -> int:
        return len(self.records)

    @property
    def latest(self):
        return self.records[-1]

    @property
    def throughput(self) -> float:
        return mean_of(self.values)

    @property
    def interval(self) -> tuple[float, float]:
        """The t interval of the mean across launches; a single launch's interval over its windows."""
        if self.launches >= stats.MIN_LAUNCHES:
            s = stats.summarize(self.values)
            return s["ci_low"], s["ci_high"]
        t = self.latest.metrics.throughput
        return t.ci_low, t.ci_high

    @property
    def spread(self) -> float:
        """Launch-to-launch sd/mean; a single launch's window sd/mean."""
        if self.launches >= stats.MIN_LAUNCHES:
            return stats.summarize(self.values)["rel_stdev"]
        return self.latest.metrics.throughput.rel_stdev

    @property
    def unstable(self) -> bool:
        return self.spread > stats.UNSTABLE_REL_STDEV or any(r.metrics.throughput.unstable for r in self.records)

    @property
    def step_time_s(self) -> float:
        return mean_of(r.metrics.step_time_s.mean for r in self.records)

    @property
    def startup_s(self) -> float | None:
        times = [
            r.metrics.startup.launch_to_first_step_s
            for r in self.records
            if r.metrics.startup.launch_to_first_step_s is not None
        ]
        return statistics.median(times) if times else None

    @property
    def run_ids(self) -> str:
        return ", ".join(r.run_id for r in self.records)

    @property
    def sweeps(self) -> int:
        """How many sweeps (of the same code) its launches were pooled from."""
        return sweeps_in(self.records)

    @property
    def startup_values(self) -> list[float]:
        """Every launch's time from launch to the end of its first step (where it is one: above 0 s)."""
        times = [r.metrics.startup.launch_to_first_step_s for r in self.records]
        return [t for t in times if t is not None and t > 0]

    @property
    def place(self) -> str:
        """The case's conditions and world size in words: the key of its comparisons."""
        c, n = self.cond, self.world_size
        return (
            f"{c['workload']}, {n} worker{'s' if n != 1 else ''} of batch {c['batch_size']}, {c['device']}"
            f"{pinned_words(c.get('cpu_bind'), ', ')}{numerics_note(c.get('numerics'))}{network_words(c)}"
        )


def replicated_cases(ok) -> list[TrainingCase]:
    """Every (conditions, backend, world size) of the comparable runs (ok, alone on their cores) with a throughput:
    the launches of its latest sweep, with vs-plain and efficiency estimated across launches."""
    ok = comparable_runs(ok)
    ok = ok[ok["throughput"] > 0]  # (a throughput of none, or of no positive number, has no log to compare on)
    ok = blank_single_machine(ok)
    cases = {
        key: TrainingCase(dict(zip(CONDITIONS, key)), key[-2], int(key[-1]), records)
        for key, records in pooled_launches(ok, [*CONDITIONS, "backend", "world_size"]).items()
    }
    looks = ok.attrs.get("looks") or {}
    for key, case in cases.items():
        case.look_in(looks)
        cond_key = key[: len(CONDITIONS)]
        plain = cases.get((*cond_key, PLAIN_LOOP, 1))
        one = cases.get((*cond_key, case.backend, 1))
        if plain is not None and case.backend != PLAIN_LOOP and against_the_plain_loop(case.backend):
            case.vs_plain = stats.ratio_of_cases([case.values], [plain.values], scale=case.world_size)
        if one is not None and case.world_size > 1:
            case.efficiency = stats.ratio_of_cases([case.values], [one.values], scale=case.world_size)
    return list(cases.values())


def network_words(cond: dict) -> str:
    """', across 2 hosts, link 1gbit' for a run across hosts (nothing for one on one host), then the machine
    where the report holds runs of more than one."""
    where = "" if cond.get("network", "one host") == "one host" else f", across {cond['network']}"
    return where + (f", on {cond['hardware']}" if cond.get("hardware") else "")


def difference(a: TrainingCase, b: TrainingCase) -> dict:
    """a against b across launches: the faster one, by how much (and its interval, as faster/slower - 1),
    whether that is significant, and the smallest difference this comparison could have detected."""
    est = stats.ratio_of_cases([a.values], [b.values])
    if a.looked and b.looked and a.looked[0] == b.looked[0] and {a.backend, b.backend} == set(PRIMARY):
        # the sweep looked at this comparison after every round: it says what that look may say
        est = stats.sequential(est, a.looked[1], min(a.looked[2], b.looked[2]))
    flip = est.ratio < 1
    faster, slower = (b, a) if flip else (a, b)
    low, high = (1 / est.high, 1 / est.low) if flip else (est.low, est.high)
    return {
        "estimate": est,
        "faster": faster,
        "slower": slower,
        "gap": max(est.ratio, 1 / est.ratio) - 1,
        "low": low - 1,
        "high": high - 1,
        "significant": est.significant,
        "replicated": est.replicated,
        "resolution": est.resolution,
        "p": est.p,
    }


def pair_key(measure: str, a: str, b: str, place: str) -> str:
    """The name of a comparison of backend a against b: the page, its family and `bench agreement` share it."""
    return f"{measure}{a} / {b}, {place}"


def looked_comparisons(frame) -> dict[str, tuple[TrainingCase, TrainingCase]]:
    """The comparisons a sequential sweep adds launches to (`bench sweep --resolution`): the primary pair's
    throughput at each world size above 1 (one worker compares the wrappers, not distributed training), by the key
    of comparisons(); each with its two cases, the primary pair's first backend first."""
    ok = comparable_runs(frame)
    cases = replicated_cases(ok) if not ok.empty else []
    by_place: dict[str, dict[str, TrainingCase]] = {}
    for c in cases:
        if c.world_size > 1 and c.backend in PRIMARY:
            by_place.setdefault(c.place, {})[c.backend] = c
    first, second = PRIMARY
    return {
        pair_key("", first, second, place): (rows[first], rows[second])
        for place, rows in by_place.items()
        if first in rows and second in rows
    }


def efficiency_ratio(a: TrainingCase, a_one: TrainingCase, b: TrainingCase, b_one: TrainingCase) -> stats.Estimate:
    """a's scaling efficiency over b's at one world size: thr_a(N) thr_b(1) / (thr_b(N) thr_a(1)), across launches."""
    return stats.ratio_of_cases([a.values, b_one.values], [b.values, a_one.values])


def comparisons(frame) -> dict[str, stats.Estimate]:
    """Every comparison the training view makes (bench.tasks.base.Task.comparisons): each case against the
    plain loop, scaling efficiency, and for the primary pair (and each companion backend against each primary)
    throughput, scaling efficiency against each other and the time to the first step."""
    ok = comparable_runs(frame)
    cases = replicated_cases(ok) if not ok.empty else []
    out: dict[str, stats.Estimate] = {}
    by_place: dict[str, dict[str, TrainingCase]] = {}
    ones = {(tuple(c.cond.values()), c.backend): c for c in cases if c.world_size == 1}
    for c in cases:
        by_place.setdefault(c.place, {})[c.backend] = c
        if c.vs_plain is not None:
            out[f"{c.backend} / plain loop, {c.place}"] = c.vs_plain
        if c.efficiency is not None:
            out[f"{c.backend} efficiency, {c.place}"] = c.efficiency
    for place, rows in by_place.items():
        others = sorted(set(rows) - set(PRIMARY) - {PLAIN_LOOP})
        pairs = [PRIMARY] + [(other, primary) for other in others for primary in PRIMARY]
        # a backend of another framework against the one of its own it is weighed against (within TensorFlow)
        pairs += [(other, RIVAL[other]) for other in others if RIVAL.get(other) in rows]
        for a, b in pairs:
            if a not in rows or b not in rows:
                continue
            x, y = rows[a], rows[b]
            out[pair_key("", a, b, place)] = difference(x, y)["estimate"]
            if (a, b) != PRIMARY:
                continue
            x1, y1 = ones.get((tuple(x.cond.values()), a)), ones.get((tuple(y.cond.values()), b))
            if x.world_size > 1 and x1 is not None and y1 is not None:
                out[pair_key("efficiency ", a, b, place)] = efficiency_ratio(x, x1, y, y1)
            if x.startup_values and y.startup_values:
                out[pair_key("startup ", a, b, place)] = stats.ratio_of_cases([x.startup_values], [y.startup_values])
    return out
