"""A sweep that adds launches until it is sure (`bench sweep --resolution PCT --resolution-timeout SECONDS`).

After its planned launches, the sweep looks at the comparisons it may add to (the primary pair's training throughput
at each world size above 1: bench.tasks.train.results.looked_comparisons), judged as the page judges them (the
store's frame, every comparison of the page one family). A comparison is settled when it is a difference or within
±PCT; while any is not, a round (one launch of each side, in a seeded order) goes to the widest unsettled one whose
round still fits the time left, and the sweep looks again. The design is group-sequential (bench.core.stats.Looks):
the number of looks is fixed at the first, from the time allowed and what a round of every comparison took, and each
look spends its share of the error rate, so that looking after every round calls no more ties differences than one
look would; the page states each comparison at the share of the look where the sweep left it, so the sweep's
stopping and the page say the same (docs/method.md, "Sequential sweeps").

The pure part (fix_looks, next_comparison, look_line) takes plain figures; `resolve` runs it against a store.
`simulated_sweeps` applies the same rule to thousands of simulated sweeps at once: what a design decides at a given
spread (its error rates in tests/test_sequential.py, the main job's reach in docs/studies/noise.md)."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass

from bench.core.console import format_duration, note
from bench.core.environment import git_state
from bench.core.registry import PRIMARY
from bench.core.stats import CONFIDENCE, Family, Judgement, Looks
from bench.results.agreement import frame_comparisons
from bench.results.frame import load_frame
from bench.results.sweeps import plan_text, ran
from bench.tasks.train.results import looked_comparisons


@dataclass(frozen=True)
class Standing:
    """One comparison at a look: its name in words, its judgement, the launches of each side in this sweep, and
    what a round of it takes (the mean length of its sides' launches, summed)."""

    key: str
    label: str  # "resnet18 2 workers"
    judgement: Judgement | None
    launches: int
    round_s: float
    sides: tuple = ()  # the spec of a launch of each side in this sweep, the round's launches made from them

    def settled(self, resolution: float) -> bool:
        return self.judgement is not None and self.judgement.settled(resolution)

    @property
    def width(self) -> float:
        """How far from settled: the equivalence margin (infinite where there is none yet)."""
        margin = self.judgement.margin if self.judgement is not None else math.nan
        return margin if math.isfinite(margin) else math.inf


def fix_looks(first: int, round_s: list[float], timeout_s: float) -> Looks:
    """The design, fixed before the first look: as many looks after the first as rounds of every comparison fit in
    `timeout_s`, from the time a round of each took in the planned launches, never from what they measured; one
    where a round of some comparison fits but not of all, none where no round fits (the planned launches are then
    the fixed design's). A comparison settled early leaves its rounds to the others, up to the design's last look."""
    every = sum(round_s)
    if every <= 0:
        return Looks(first, first + 1)
    added = int(timeout_s // every) or (1 if min(round_s) <= timeout_s else 0)
    return Looks(first, first + added)


def next_comparison(standings: list[Standing], resolution: float, looks: Looks, left_s: float) -> Standing | None:
    """The comparison the next round goes to: the widest that is not settled, has not reached the design's last
    look, and whose round fits in `left_s`; None when there is none."""
    open_ = [
        s
        for s in standings
        if not s.settled(resolution) and s.launches < looks.most and s.round_s <= left_s and s.round_s > 0
    ]
    return max(open_, key=lambda s: (s.width, s.label), default=None)


def state_words(standing: Standing, resolution: float) -> str:
    """A comparison's state in a few words: "elastic faster by 9%", "within ±7%", or the margin it has reached
    ("±14%, not yet within ±8%")."""
    j = standing.judgement
    if j is None or not j.replicated:
        return "not yet replicated"
    if j.significant:  # the ratio is the primary pair's first over its second (looked_comparisons)
        ratio, (first, second) = j.estimate.ratio, PRIMARY
        return f"{first} faster by {ratio - 1:.0%}" if ratio >= 1 else f"{second} faster by {1 / ratio - 1:.0%}"
    if j.margin <= resolution:
        return f"within ±{j.margin:.0%}"
    return f"±{j.margin:.0%}, not yet within ±{100 * resolution:g}%"


def look_line(standing: Standing, resolution: float, looks: Looks, left_s: float) -> str:
    """One look in one line: "resnet18 2 workers: within ±11%, 6 + 6, 2 min left (look 4 of 6)"."""
    return (
        f"{standing.label}: {state_words(standing, resolution)}, {standing.launches} + {standing.launches}, "
        f"{format_duration(max(0.0, left_s))} left (look {looks.look(standing.launches)} of {looks.count})"
    )


def standings(store, sweep_id: str) -> list[Standing]:
    """Every comparison the sweep may add to, judged on the store's frame as the page judges it."""
    frame = load_frame(store)
    family = Family(frame_comparisons(frame))
    out = []
    for key, (a, b) in sorted(looked_comparisons(frame).items()):
        mine = [[r for r in case.records if r.spec.sweep_id == sweep_id] for case in (a, b)]
        if not all(mine):
            continue  # a case this sweep did not launch: not its to add to
        round_s = sum(sum(r.duration_s or 0.0 for r in side) / len(side) for side in mine)
        judgement = family.judge(key) if key in family.estimates else None
        label = f"{a.cond['workload']} {a.world_size} workers"
        sides = tuple(max(side, key=lambda r: r.spec.repeat or 0).spec for side in mine)  # its latest round
        out.append(Standing(key, label, judgement, min(len(side) for side in mine), round_s, sides))
    return out


def round_specs(standing: Standing, sweep_id: str) -> list:
    """One more launch of each side of a comparison, as the sweep's next round of it (a repeat index past every
    launch of its sides), in an order seeded by the sweep and the round: no side always first."""
    repeat = max(spec.repeat or 0 for spec in standing.sides) + 1
    specs = [dataclasses.replace(spec, repeat=repeat) for spec in standing.sides]
    random.Random(f"{sweep_id}:{standing.key}:{repeat}").shuffle(specs)
    return specs


def resolve(store, sweep_id: str, plan: list, records: list, title: str, sequential: dict, run_marked) -> list:
    """Add rounds to the sweep's unsettled comparisons until each is settled or the time allowed is spent
    (`sequential`: resolution, timeout_s, spent_s, and first and most once fixed; stored with the plan after each
    change, so `--resume` goes on from where it stopped). `run_marked`: the sweep's runner of launches
    (bench.workflows.sweep.run_marked). Returns the records made."""
    made: list = []
    if len(ran(records)) < len(plan):
        return made  # an interrupted sweep looks only once its planned launches have run
    resolution, timeout_s = float(sequential["resolution"]), float(sequential["timeout_s"])
    sequential = dict(sequential)
    now = standings(store, sweep_id)
    if not now:
        note(f"{title}: no comparison of the primary pair above one worker to resolve")
        return made
    if sequential.get("most") is None:
        first = min(s.launches for s in now)
        looks = fix_looks(max(2, first), [s.round_s for s in now], timeout_s)
        sequential |= {"first": looks.first, "most": looks.most}
        store.update_sweep(sweep_id, plan=plan_text(plan, git_state(), sequential), updated_at=time.time())
        now = standings(store, sweep_id)  # judged at the first look's share now that the design is stored
    looks = Looks(int(sequential["first"]), int(sequential["most"]))
    note(
        f"{title}: looking after every round until each comparison is a difference or within ±{100 * resolution:g}%: "
        f"up to {looks.most} launches a side, {looks.count} look{'s' if looks.count > 1 else ''}, "
        f"{format_duration(timeout_s)} of added launches"
    )
    left = timeout_s - float(sequential.get("spent_s") or 0.0)
    for s in now:
        note(f"{title}: {look_line(s, resolution, looks, left)}")
    while True:
        pick = next_comparison(now, resolution, looks, left)
        if pick is None:
            note(f"{title}: {stop_reason(now, resolution, looks, left)}")
            return made
        began = time.monotonic()
        specs = round_specs(pick, sweep_id)
        plan = plan + specs
        store.update_sweep(
            sweep_id,
            state="running",
            planned=len(plan),
            plan=plan_text(plan, git_state(), sequential),
            updated_at=time.time(),
        )
        last = run_marked(store, sweep_id, specs, f"{title} (a round of {pick.label})", len(plan), len(plan) - 2)
        made += last
        if len(last) < len(specs) or not all(r.ok for r in last):
            note(f"{title}: a launch of {pick.label} was not ok or did not run: no more rounds")
            return made
        now = standings(store, sweep_id)
        left -= time.monotonic() - began  # the look's own time too: it grows with the store
        sequential["spent_s"] = timeout_s - left
        store.update_sweep(sweep_id, plan=plan_text(plan, git_state(), sequential), updated_at=time.time())
        note(f"{title}: {look_line(next(s for s in now if s.key == pick.key), resolution, looks, left)}")


def stop_reason(standings: list[Standing], resolution: float, looks: Looks, left_s: float) -> str:
    """Why the sweep adds no more rounds, in one line."""
    unsettled = [s for s in standings if not s.settled(resolution)]
    if not unsettled:
        return f"every comparison is a difference or within ±{100 * resolution:g}%"
    capped = [s.label for s in unsettled if s.launches >= looks.most]
    parts = [f"{', '.join(capped)} at the design's last look ({looks.most} launches a side)"] if capped else []
    short = [s for s in unsettled if s.launches < looks.most]
    if short:
        parts.append(
            f"{format_duration(max(0.0, left_s))} left, too little for a round of "
            + ", ".join(f"{s.label} (about {s.round_s:.0f} s)" for s in short)
        )
    return f"stopped, not resolved to ±{100 * resolution:g}%: {'; '.join(parts)}"


# ---------------------------------------------------------------- the rule, simulated
def simulated_launches(true_log_ratios, sd, sweeps: int, looks: Looks, seed: int):
    """Every launch a simulated sweep could make, as log figures [sweep, comparison, side, launch]: each normal around
    its case's with standard deviation `sd` (one for all, or one a comparison), the first side's case off by the
    comparison's true log ratio."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (sweeps, len(true_log_ratios), 2, looks.most)
    logs = (
        rng.normal(0.0, 1.0, shape)
        * np.broadcast_to(np.asarray(sd, dtype=float), (len(true_log_ratios),))[None, :, None, None]
    )
    logs[:, :, 0, :] += np.asarray(true_log_ratios)[None, :, None]
    return logs


def simulated_sweeps(logs, looks: Looks, resolution: float, shares: bool = True):
    """The sweep's rule for every simulated sweep of logs[sweep, comparison, side, launch] at once: Welch's t on the
    log ratio, p over the look's share (shares=False: every look at the fixed design's level), Holm over the family,
    the equivalence margin at the share, a round to the widest open comparison until each is settled or at the
    design's last look (no time limit). Returns (significant, margin), each [sweep, comparison]."""
    import numpy as np
    from scipy.special import stdtr, stdtrit

    alpha = 1 - CONFIDENCE
    sweeps, comparisons = logs.shape[:2]
    total = np.concatenate([np.zeros(logs.shape[:3] + (1,)), np.cumsum(logs, axis=3)], axis=3)
    squares = np.concatenate([np.zeros(logs.shape[:3] + (1,)), np.cumsum(logs**2, axis=3)], axis=3)
    n = np.full((sweeps, comparisons), looks.first)
    rows = np.arange(sweeps)[:, None]
    cols = np.arange(comparisons)[None, :]
    while True:
        sums = np.stack([total[rows, cols, side, n] for side in (0, 1)])
        sq = np.stack([squares[rows, cols, side, n] for side in (0, 1)])
        mean = sums / n
        var = (sq - n * mean**2) / (n - 1)
        terms = var / n
        se = np.sqrt(terms.sum(axis=0))
        dof = terms.sum(axis=0) ** 2 / (terms**2 / (n - 1)).sum(axis=0)
        d = mean[0] - mean[1]
        share = np.vectorize(looks.share)(n) if shares else np.ones_like(se)
        p = np.minimum(1.0, 2 * stdtr(dof, -np.abs(d) / se) / share)
        order = np.argsort(p, axis=1)
        ranked = np.take_along_axis(p, order, axis=1) * (comparisons - np.arange(comparisons))[None, :]
        adjusted = np.empty_like(p)
        np.put_along_axis(adjusted, order, np.minimum(1.0, np.maximum.accumulate(ranked, axis=1)), axis=1)
        significant = adjusted < alpha
        margin = np.expm1(np.abs(d) + stdtrit(dof, 1 - alpha * share) * se)
        open_ = ~(significant | (margin <= resolution)) & (n < looks.most)
        if not open_.any():
            return significant, margin
        pick = np.argmax(np.where(open_, margin, -np.inf), axis=1)
        n[np.arange(sweeps)[open_.any(axis=1)], pick[open_.any(axis=1)]] += 1
