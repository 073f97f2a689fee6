"""`bench agreement`'s table in the page's words: each comparison named by what it measures and its two sides, each
sweep's cell the side ahead and by how much ("elastic 22.3%", "horovod 14.9 times"), never a signed ratio that
reads one way for a speed and the other for a time (bench.report.sections, "One way to say a difference")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.core.stats import CONFIDENCE
from bench.report.sections import FASTER, RECOVERS_SOONER, SCALES_BETTER, STARTS_SOONER, Wording, ahead_of, factor_words


@dataclass(frozen=True)
class Reading:
    """How one kind of comparison reads: its measure, and whether a ratio above 1 puts its first side ahead."""

    pattern: re.Pattern
    measure: str
    higher_is_better: bool = True
    words: Wording = FASTER


# the keys the tasks' `comparisons` make (bench.tasks.*.results: pair_key, recovery_key, matched_key), most
# specific first; groups: first side, second side, the rest of the name
READINGS = (
    Reading(re.compile(r"startup (\S+) / (\S+), (.+)"), "startup to the first step", False, STARTS_SOONER),
    Reading(re.compile(r"recovery (\S+) / (\S+), (.+)"), "recovery time", False, RECOVERS_SOONER),
    Reading(re.compile(r"efficiency (\S+) / (\S+), (.+)"), "scaling efficiency", True, SCALES_BETTER),
    Reading(re.compile(r"allreduce busbw (\S+) / (\S+) (at .+)"), "allreduce bus bandwidth"),
    Reading(re.compile(r"(\S+) / (plain loop|\S+), (.+)"), "training throughput"),
)
# one backend's scaling efficiency: its throughput at N workers over N times its own at one
OWN_EFFICIENCY = re.compile(r"(\S+) efficiency, (.+)")


def comparison_words(key: str) -> tuple[str, Reading | None, tuple[str, ...]]:
    """A comparison's name in words, how its ratio reads (None for one backend's own efficiency), and its sides."""
    for reading in READINGS:
        if m := reading.pattern.fullmatch(key):
            a, b, rest = m.groups()
            return f"{reading.measure}, {a} or {b}: {rest}", reading, (a, b)
    if m := OWN_EFFICIENCY.fullmatch(key):
        return f"scaling efficiency of {m.group(1)}: {m.group(2)}", None, (m.group(1),)
    raise ValueError(f"a comparison bench agreement cannot read: {key!r}")


def resolution_words(resolution: float) -> str:
    """The smallest difference a sweep could have detected: "±29%", or "±4.2 times" from twice on; "no interval" where
    its runs allow none (an exact test of 2 or 3 runs a side: bench.core.stats.exact_ratio)."""
    if resolution == float("inf"):
        return "no interval"
    return f"±{factor_words(1 + resolution, 0)}" if resolution < 1 else f"±{1 + resolution:.1f} times"


def claim_cell(claim, reading: Reading | None, sides: tuple[str, ...]) -> str:
    """One sweep's cell: the side ahead and by how much (one backend's efficiency: its share of linear), then "*"
    where significant, else the sweep's resolution."""
    est = claim.estimate
    if reading is None:
        text = f"{est.ratio:.0%} of linear"
    else:
        side, factor = ahead_of(est.ratio, *sides, reading.higher_is_better)
        text = f"{side} {factor_words(factor)}" if factor > 1 else "equal"
    if not est.replicated:
        return text + " (1 launch)"
    return text + (" *" if claim.significant else f" ({resolution_words(est.resolution)})")


def format_agreement(result: dict) -> str:
    """The table of bench.results.agreement.agreement's result: a row per comparison, a column per sweep, whether
    they agree, and what the marks mean."""
    ids, claims = result["sweeps"], result["claims"]
    rows = []
    for key in result["keys"]:
        name, reading, sides = comparison_words(key)
        rows.append((key, name, [claim_cell(claims[s][key], reading, sides) if key in claims[s] else "-" for s in ids]))
    width = max([len(name) for _, name, _ in rows] + [10])
    cell = max([len(c) for _, _, cells in rows for c in cells] + [16])
    lines = [
        f"{'comparison (each sweep: the side ahead, by how much)':<{width}}  "
        + "  ".join(f"{s[-6:]:>{cell}}" for s in ids)
        + "  agree"
    ]
    bad = {k for keys in result["pairs"].values() for k in keys}
    far = {k for keys in result["apart"].values() for k in keys} - bad
    for key, name, cells in sorted(rows, key=lambda row: row[1]):
        said = "  NO" if key in bad else "  APART" if key in far else "  yes"
        lines.append(f"{name:<{width}}  " + "  ".join(f"{c:>{cell}}" for c in cells) + said)
    n_pairs = len(result["pairs"])
    n_bad = sum(len(v) for v in result["pairs"].values())
    n_far = sum(len(v) for v in result["apart"].values())
    lines.append(
        f"* significant at {1 - CONFIDENCE:.0%} after Holm's correction over the sweep's comparisons; otherwise (±R): "
        "the smallest difference that sweep could have detected. 'of linear': a backend's throughput at N workers "
        "over N times its own at one."
    )
    lines.append(
        "NO: one sweep significant one way, another's estimate the other way. APART: two sweeps' estimates "
        f"differ by more than the {CONFIDENCE:.0%} half-width of their difference (sqrt(R1² + R2²) on the "
        "log scale): they disagree beyond their resolution."
    )
    lines.append(
        f"{len(ids)} sweeps, {n_pairs} pairs, {len(result['keys'])} comparisons: {n_bad} contradiction(s), "
        f"{n_far} disagreement(s) beyond their resolution; "
        f"{len(result['resolved_everywhere'])} comparison(s) significant in the same direction in every sweep "
        "that made it."
    )
    return "\n".join(lines)
