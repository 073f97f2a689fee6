"""Do sweeps of the same code on the same machine agree? Every comparison the report makes (the primary
pair, the companion backend against each of them, each case against the plain loop, scaling efficiency,
allreduce busbw at a matched size) is taken from each sweep on its own. Two sweeps disagree on a comparison when
one calls it significant in one direction and the other's estimate points the other way (a contradiction), or
when their two estimates differ by more than the 95% half-width of their difference, whatever either calls
significant (apart: beyond their resolution) (docs/method.md, "Replication"). A sweep's comparisons are judged as
one family, as a page's are (bench.core.stats.Family: Holm's correction), so "significant" means the same here as
on the page.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from bench.core.registry import all_tasks, task_part
from bench.core.stats import Estimate, Family
from bench.results.frame import hardware, of_task, records_to_frame


@dataclass(frozen=True)
class Claim:
    """One comparison in one sweep: its estimate, as a ratio (above 1: the first named side is ahead)."""

    key: str
    estimate: Estimate
    significant: bool  # after Holm's correction over the comparisons of its sweep

    @property
    def direction(self) -> int:
        """+1 or -1 where significant, else 0."""
        if not self.significant:
            return 0
        return 1 if self.estimate.ratio > 1 else -1

    @property
    def leaning(self) -> int:
        """The sign of the point estimate, significant or not."""
        return 1 if self.estimate.ratio > 1 else -1 if self.estimate.ratio < 1 else 0


def frame_comparisons(frame) -> dict[str, Estimate]:
    """Every comparison the views make of the runs of `frame`, by key (`comparisons` of
    bench/tasks/<task>/results.py): the family a page, or a sweep here, is judged as."""
    return {
        key: est
        for task in all_tasks()
        if (results := task_part(task.name, "results")) is not None and hasattr(results, "comparisons")
        for key, est in results.comparisons(of_task(frame, task.name)).items()
    }


def sweep_claims(records: list) -> dict[str, Claim]:
    """The comparisons of one sweep's records, by key, each judged within the sweep's family."""
    return claims_by_sweep({"": records})[""]


def claims_by_sweep(sweeps: dict[str, list], looks: dict | None = None) -> dict[str, dict[str, Claim]]:
    """sweep_claims of every sweep (sweep id -> records), from one frame of all their runs cut by sweep and task:
    a store of a thousand sweeps would otherwise build a thousand frames. Each sweep's comparisons are judged as
    one family (bench.core.stats.Family), as a page's are; a sequential sweep's (`looks`: sweep id -> its Looks,
    bench.results.sweeps.looks_of) at the look where it left them, as its page states them."""
    frame = records_to_frame([rec for recs in sweeps.values() for rec in recs])
    frame.attrs["looks"] = looks or {}
    labels = [sid for sid, recs in sweeps.items() for _ in recs]
    parts = dict(iter(frame.groupby([labels, frame["task"].tolist()], sort=False))) if labels else {}
    none = frame.iloc[0:0]
    views = [
        (task.name, results)
        for task in all_tasks()
        if (results := task_part(task.name, "results")) is not None and hasattr(results, "comparisons")
    ]
    out = {}
    for sid in sweeps:
        family = Family(
            {
                key: est
                for name, results in views
                for key, est in results.comparisons(parts.get((sid, name), none)).items()
            }
        )
        out[sid] = {key: Claim(key, est, family.judge(key).significant) for key, est in family.estimates.items()}
    return out


def contradictions(a: dict[str, Claim], b: dict[str, Claim]) -> list[str]:
    """The keys on which one sweep is significant in one direction and the other leans the other way."""
    out = []
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if (x.direction and y.leaning == -x.direction) or (y.direction and x.leaning == -y.direction):
            out.append(key)
    return out


def pair_apart(claims: dict[str, dict[str, Claim]], pairs: list[tuple[str, str]]) -> dict[tuple, list[str]]:
    """The keys on which each pair of sweeps' estimates, both across launches, differ by more than the 95% half-width
    of their difference: |log ratio a - log ratio b| above sqrt(h_a^2 + h_b^2), h each estimate's half-width on the
    log scale (log(1 + resolution)). Two sweeps of the same code differ by more only 1 time in 25 to 80 (3 to 10
    launches a side); a difference above either half-width alone would be called 1 time in 9 to 30. Key by key,
    over the sweeps sorted by their estimate, so only pairs at least one half-width apart are visited."""
    out: dict[tuple, list[str]] = {pair: [] for pair in pairs}
    by_key: dict[str, dict[str, Claim]] = {}
    for sid, made in claims.items():
        for key, claim in made.items():
            by_key.setdefault(key, {})[sid] = claim
    for key in sorted(by_key):  # each pair's keys in sorted order
        made = sorted(
            (c.estimate.log_ratio, math.log1p(c.estimate.resolution), sid)
            for sid, c in by_key[key].items()
            if c.estimate.replicated
        )
        logs = [m[0] for m in made]
        for i, (x, hx, a) in enumerate(made):
            for y, hy, b in made[bisect.bisect_right(logs, x + hx, i + 1) :]:  # hypot(hx, hy) >= hx
                pair = (a, b) if a < b else (b, a)
                if y - x > math.hypot(hx, hy) and pair in out:  # sweeps of one machine only
                    out[pair].append(key)
    return out


def apart(a: dict[str, Claim], b: dict[str, Claim]) -> list[str]:
    """pair_apart of two sweeps."""
    return pair_apart({"a": a, "b": b}, [("a", "b")])[("a", "b")]


def pair_contradictions(claims: dict[str, dict[str, Claim]], pairs: list[tuple[str, str]]) -> dict[tuple, list[str]]:
    """contradictions() of each pair of sweeps (a, b), a before b in sorted order, `claims` sweep id -> its claims.
    The same rule taken key by key, not pair by pair: on a key, the sweeps significant in one direction contradict
    those that lean the other way, and only those pairs are visited (a store of a thousand sweeps makes half a
    million pairs, nearly all of them without a contradiction)."""
    out: dict[tuple, list[str]] = {pair: [] for pair in pairs}
    by_key: dict[str, dict[str, Claim]] = {}
    for sid, made in claims.items():
        for key, claim in made.items():
            by_key.setdefault(key, {})[sid] = claim
    for key in sorted(by_key):  # each pair's keys in sorted order, as contradictions() lists them
        leaning: dict[int, list[str]] = {1: [], -1: [], 0: []}
        for sid, claim in by_key[key].items():
            leaning[claim.leaning].append(sid)
        found = set()
        for sid, claim in by_key[key].items():
            if claim.direction:
                found.update(tuple(sorted((sid, other))) for other in leaning[-claim.direction])
        for pair in found:
            if pair in out:  # sweeps of one machine only
                out[pair].append(key)
    return out


def machine_label(records: list) -> str:
    """The machine a sweep ran on (bench.results.frame.hardware); a sweep that somehow spans two names both."""
    return " + ".join(sorted({hardware(r) for r in records}))


def agreement(sweeps: dict[str, list], looks: dict | None = None) -> dict:
    """Claims of every sweep (sweep id -> records; `looks`: those of its sequential sweeps, as claims_by_sweep), and
    the contradictions of every pair of sweeps made on one machine. Sweeps of two machines are not reruns of each
    other: where the store holds more than one machine, each claim's key names its machine, so none is compared with
    another machine's."""
    machines = {sid: machine_label(recs) for sid, recs in sweeps.items()}
    several = len(set(machines.values())) > 1
    claims = {}
    for sid, made in claims_by_sweep(sweeps, looks).items():
        claims[sid] = {}
        for key, claim in made.items():
            key = f"{key}, on {machines[sid]}" if several else key
            claims[sid][key] = Claim(key, claim.estimate, claim.significant)
    ids = sorted(claims)
    same = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :] if machines[a] == machines[b]]
    pairs = pair_contradictions(claims, same)
    # beyond their resolution, and not already a contradiction
    far = {
        pair: [k for k in keys_apart if k not in pairs[pair]] for pair, keys_apart in pair_apart(claims, same).items()
    }
    keys = sorted({k for c in claims.values() for k in c})
    # significant, and in the same direction, in every sweep that made the comparison (two or more)
    resolved = []
    for k in keys:
        made = [claims[s][k] for s in ids if k in claims[s]]
        if len(made) >= 2 and all(c.direction for c in made) and len({c.direction for c in made}) == 1:
            resolved.append(k)
    return {
        "sweeps": ids,
        "claims": claims,
        "pairs": pairs,
        "apart": far,
        "keys": keys,
        "resolved_everywhere": resolved,
    }


def disagree(result: dict) -> bool:
    """Whether two sweeps contradict each other, or differ beyond their resolution, on any comparison."""
    return any(result["pairs"].values()) or any(result["apart"].values())
