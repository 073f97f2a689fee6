"""The regression gate: compare a current set of runs with a baseline, metric by metric (docs/method.md,
"Regression gate").

- The unit of replication is the launch: windows of one launch agree with each other far more closely than
  two launches of the same case do (docs/method.md, "Replication"), so a test on windows alone would call
  launch-to-launch drift a change. Each case is therefore run several times (`bench sweep --repeats R`,
  rounds interleaved); a run contributes one value (bench.results.figures). A case with a single run falls
  back to its windows as samples, and says so.
- Each gated figure is a ratio of case means on the log scale (bench.results.figures.Figure, whose value is
  bench.core.stats.ratio_of_cases, as the page's). The change current/baseline - 1 gets a t interval at
  CONFIDENCE: each case's run-to-run variance pooled over its baseline and current runs, the cases combined
  by Welch-Satterthwaite. A t interval rather than a rank test or a bootstrap: with 3 to 5 runs a side, a
  rank test cannot reach significance at all and a bootstrap understates the spread; and the figures are
  ratios of several cases, which a two-sample rank test cannot express.
- A change counts only when it is significant (the interval excludes 0) *and* at least the metric's
  minimum effect (RULES).
- Ratios taken within one sweep (scaling efficiency, throughput over the plain loop of the same sweep,
  busbw over the machine limit measured in the same run) cancel what the machine's state does to
  both sides alike; absolute throughput gets a wider threshold and is gated only when the baseline
  came from a machine of the same kind (bench.results.baselines.host_match), beyond the band the host's calibration
  speed explains (host_speed), as a ratio beyond its divisor's below.
- A ratio does not carry over whole to runs that compute at another speed, though: with the same communication and a
  faster step, communication takes a larger share of it (runs 30% faster at ResNet18 on one worker kept their
  2-worker throughput and lost a fifth of their efficiency). Where the cases a ratio divides by (the plain loop's,
  or one worker's) ran at s times the baseline's speed, the ratio can move by up to a factor s either way with no
  change to the code (the step's compute moved with them, its communication at most as far), so only the part of
  the change beyond that band is judged (explained_band, beyond_band), on any host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.core.stats import UNSTABLE_REL_STDEV, mean_log, t_quantile
from bench.results.figures import Figure, figures

CONFIDENCE = 0.995  # two-sided: a regression is called at 0.25% risk when nothing changed
WIDE = 3  # see change_verdict()
FAILING_VERDICTS = ("regressed", "failed")
# From how far off the baseline's speed the cases a ratio divides by ran the row says so (a smaller move is the
# machine's noise, which the interval already holds); the band itself is applied at any speed.
SPEED_NOTED = 0.01


@dataclass(frozen=True)
class Rule:
    min_effect: float  # smallest relative change (either way) that counts
    meaning: str
    same_machine_only: bool = False  # gated only when the current host matches the baseline's (host_match)


# The one place that says which metric is gated, and by how much.
RULES = {
    "vs_plain": Rule(0.12, "throughput / (N x the plain single-process loop's), same sweep"),
    "efficiency": Rule(0.12, "weak-scaling efficiency thr(N) / (N x thr(1)), same backend, same sweep"),
    "busbw_fraction": Rule(0.15, "allreduce busbw at the largest message / machine limit measured in the same run"),
    "throughput": Rule(0.25, "absolute samples/s", same_machine_only=True),
}


def change_interval(base: Figure, cur: Figure, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(change, low, high) of current/baseline - 1: a t interval on the log scale.

    Each case's run-to-run variance is pooled over its baseline and current runs (the same case on the
    same kind of machine: what an A/A comparison assumes), giving n_b + n_c - 2 degrees of freedom; the
    cases of a ratio are combined by Welch-Satterthwaite."""
    diff = cur.log_value - base.log_value
    terms = []  # (variance of this case's contribution to diff, its degrees of freedom)
    for b, c in zip(base.cases, cur.cases):
        lb, lc = b.logs, c.logs
        dof = len(lb) + len(lc) - 2
        if dof < 1:
            return math.exp(diff) - 1, -1.0, math.inf
        mb, mc = mean_log(b.positive), mean_log(c.positive)
        pooled = (sum((x - mb) ** 2 for x in lb) + sum((x - mc) ** 2 for x in lc)) / dof
        terms.append((pooled * (1 / len(lb) + 1 / len(lc)), dof))
    var = sum(v for v, _ in terms)
    if var == 0:
        return math.exp(diff) - 1, math.exp(diff) - 1, math.exp(diff) - 1
    dof = var**2 / sum(v**2 / d for v, d in terms if v > 0)  # Welch-Satterthwaite
    half = t_quantile(confidence, dof) * math.sqrt(var)
    return math.exp(diff) - 1, math.exp(diff - half) - 1, math.exp(diff + half) - 1


def change_verdict(change: float, low: float, high: float, min_effect: float, noisy: bool = False) -> str:
    """The verdict on one metric's change between baseline and current, from the change, its interval, and
    whether any of its cases varied from run to run by more than the suite calls stable
    (bench.core.stats.UNSTABLE_REL_STDEV). `unstable` also when the interval cannot rule out a change of
    WIDE x the minimum effect either way: such an `ok` would say nothing."""
    if change <= -min_effect and high < 0:
        return "regressed"
    if change >= min_effect and low > 0:
        return "improved"
    too_wide = low < (1 + min_effect) ** -WIDE - 1 or high > (1 + min_effect) ** WIDE - 1
    if noisy or too_wide or not (math.isfinite(low) and math.isfinite(high)):
        return "unstable"
    return "ok"


def noisy_cases(fig: Figure) -> list[str]:
    """Why a figure's cases are too noisy to trust, if they are: run-to-run spread above the limit."""
    notes = []
    for c in fig.cases:
        if c.per == "run" and len(c.values) >= 2:
            mean = sum(c.values) / len(c.values)
            sd = math.sqrt(sum((v - mean) ** 2 for v in c.values) / (len(c.values) - 1))
            if mean > 0 and sd / mean > UNSTABLE_REL_STDEV:
                notes.append(
                    f"{len(c.values)} runs of a case spread {sd / mean:.0%} (stable: up to {UNSTABLE_REL_STDEV:.0%})"
                )
    return notes


def divisor_speed(base: Figure, cur: Figure) -> float | None:
    """How fast the current runs made the cases a ratio divides by (the plain loop's, one worker's)
    against the baseline's: current over baseline geometric mean, the cases multiplied; None for a figure with no
    case it divides by (busbw over a limit measured in the same run)."""
    logs = [
        mean_log(c.positive) - mean_log(b.positive)
        for b, c, sign in zip(base.cases, cur.cases, cur.signs)
        if sign < 0 and b.positive and c.positive
    ]
    return math.exp(sum(logs)) if logs else None


def compare_figures(
    base: dict[str, Figure],
    cur: dict[str, Figure],
    cur_not_ok: dict[str, dict],
    same_machine: bool,
    host_differs: str = "the baseline came from another kind of machine",
    cannot_run: dict[str, str] | None = None,
    host_speed: float | None = None,
) -> list[dict]:
    """One row per gated figure. cannot_run: backend -> why it cannot run here; its baseline figures are skipped,
    not failed, when the current runs lack them (a gate without the optional Ray installed). host_speed: how fast this
    host ran the calibration work against the baseline's (bench.results.baselines.host_speed), the band an absolute
    figure may move with no change to the code on a host that matches."""
    rows = []
    for key in sorted(set(base) | set(cur) | set(cur_not_ok)):
        kind = key.split(" ", 1)[0]
        rule = RULES[kind]
        row = {
            "metric": key,
            "kind": kind,
            "min_effect": rule.min_effect,
            "baseline": None,
            "current": None,
            "change": None,
            "ci_low": None,
            "ci_high": None,
            "explained": None,  # the band a divisor's speed explains (explained_band), where the change was judged
        }
        b, c = base.get(key), cur.get(key)
        row["run_ids"] = c.run_ids if c is not None else [cur_not_ok[key]["run_id"]] if key in cur_not_ok else []
        if b is not None:
            row["baseline"] = b.value()
            row["baseline_runs"] = min(x.runs for x in b.cases)
        if c is not None:
            row["current"] = c.value()
            row["current_runs"] = min(x.runs for x in c.cases)
        if key in cur_not_ok and b is not None:
            row.update(verdict="failed", why=f"the current run ended {cur_not_ok[key]['status']}")
        elif key in cur_not_ok or b is None:
            row.update(
                verdict="new",
                why="not in the baseline"
                if key not in cur_not_ok
                else f"not in the baseline; the current run ended {cur_not_ok[key]['status']}",
            )
        elif c is None and key.split(" ")[1] in (cannot_run or {}):
            row.update(verdict="skipped", why=f"{key.split(' ')[1]} cannot run here: {cannot_run[key.split(' ')[1]]}")
        elif c is None:
            row.update(verdict="failed", why="in the baseline, missing from the current runs")
        elif rule.same_machine_only and not same_machine:
            row.update(verdict="skipped", why=f"absolute figure; host differs: {host_differs}")
        else:
            change, low, high = change_interval(b, c)
            noise = noisy_cases(b) + noisy_cases(c)
            absolute = rule.same_machine_only and host_speed is not None
            divided = host_speed if absolute else divisor_speed(b, c)
            band = explained_band(divided)
            row.update(
                change=change,
                ci_low=low,
                ci_high=high,
                explained=band,
                verdict=change_verdict(
                    *(beyond_band(x, band) for x in (change, low, high)), rule.min_effect, noisy=bool(noise)
                ),
            )
            lone = (
                " (a side has a single run: its windows stand in for runs, so the interval is optimistic)"
                if min(row["baseline_runs"], row["current_runs"]) < 2
                else ""
            )
            row["why"] = {
                "regressed": f"below by {-change:.1%}, at least {rule.min_effect:.0%} and significant",
                "improved": f"above by {change:.1%}, at least {rule.min_effect:.0%} and significant",
                "unstable": "; ".join(noise)
                or f"interval too wide to rule out a change of {(1 + rule.min_effect) ** WIDE - 1:.0%}",
                "ok": "",
            }[row["verdict"]] + (lone if row["verdict"] != "ok" else "")
            if band >= 1 + SPEED_NOTED:
                where = f"on this host (differs: {host_differs}) " if not same_machine else ""
                what = "this host ran the calibration work" if absolute else "the case it divides by ran"
                moved = (
                    f"{where}{what} at {divided:.0%} of the baseline's speed, which can move the "
                    f"{'figure' if absolute else 'ratio'} up to a factor {band:.2f} either way with no change to the "
                    "code: judged beyond that"
                )
                row["why"] = f"{row['why']}; {moved}" if row["why"] else moved
        rows.append(row)
    return rows


def explained_band(divided: float | None) -> float:
    """How far (a factor, >= 1) a ratio may move either way because the cases it divides by ran at `divided` times
    the baseline's speed (divisor_speed): that factor itself. A step's compute moves with its divisor's; its
    communication does not move, or moves with it, so the ratio moves between not at all and that factor. 1 for a
    figure with no case it divides by."""
    return 1.0 if divided is None else math.exp(abs(math.log(divided)))


def beyond_band(change: float, band: float) -> float:
    """The part of a relative change (current/baseline - 1) beyond a band of `band` either way, on the log scale:
    0 inside it."""
    if not math.isfinite(change) or change <= -1:
        return change
    log = math.log1p(change)
    return math.expm1(math.copysign(max(0.0, abs(log) - math.log(band)), log))


def format_comparison(rows: list[dict]) -> str:
    def num(v, kind):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:,.0f}" if kind == "throughput" else f"{v:.3f}"

    lines = [
        f"{'metric':<44} {'baseline':>10} {'current':>10} {'change':>8} "
        f"{'interval (' + format(CONFIDENCE, '.1%') + ')':>18} {'gate':>5}  verdict"
    ]

    def pct(v):
        return "<-99%" if v <= -0.99 else ">+999%" if v >= 9.99 else f"{v:+.1%}"

    for r in rows:
        change = "-" if r["change"] is None else f"{r['change']:+.1%}"
        ci = "-" if r["ci_low"] is None else f"{pct(r['ci_low'])}..{pct(r['ci_high'])}"
        verdict = r["verdict"] + (f" ({r['why']})" if r.get("why") else "")
        lines.append(
            f"{r['metric']:<44} {num(r['baseline'], r['kind']):>10} {num(r['current'], r['kind']):>10} "
            f"{change:>8} {ci:>18} {r['min_effect']:>5.0%}  {verdict}"
        )
    return "\n".join(lines)


def aa_rates(sweeps: dict[str, list[dict]]) -> tuple[list[dict], int]:
    """A/A calibration: every ordered pair of sweeps (same code, same machine) compared as baseline and
    current. Any `regressed` is a false alarm, any `improved` a false discovery. Rows per metric kind,
    and the number of pairs."""
    figs = {sid: figures(recs) for sid, recs in sweeps.items()}
    counts: dict[str, dict] = {}
    pairs = 0
    for a in figs:
        for b in figs:
            if a == b:
                continue
            pairs += 1
            for row in compare_figures(figs[a][0], figs[b][0], figs[b][1], same_machine=True):
                c = counts.setdefault(
                    row["kind"],
                    {
                        "kind": row["kind"],
                        "compared": 0,
                        "regressed": 0,
                        "improved": 0,
                        "unstable": 0,
                        "failed": 0,
                        "min_effect": RULES[row["kind"]].min_effect,
                    },
                )
                if row["verdict"] in ("ok", "regressed", "improved", "unstable", "failed"):
                    c["compared"] += 1
                    if row["verdict"] != "ok":
                        c[row["verdict"]] += 1
    rows = list(counts.values())
    for c in rows:
        c["false_alarm_rate"] = c["regressed"] / c["compared"] if c["compared"] else float("nan")
    return rows, pairs


def format_aa(rows: list[dict], pairs: int) -> str:
    lines = [
        f"A/A: {pairs} ordered pairs of sweeps, every metric compared",
        f"{'kind':<16} {'gate':>5} {'compared':>9} {'regressed':>10} {'improved':>9} {'unstable':>9} "
        f"{'failed':>7} {'false alarms':>13}",
    ]
    for c in rows:
        lines.append(
            f"{c['kind']:<16} {c['min_effect']:>5.0%} {c['compared']:>9} {c['regressed']:>10} "
            f"{c['improved']:>9} {c['unstable']:>9} {c['failed']:>7} {c['false_alarm_rate']:>13.2%}"
        )
    total = sum(c["compared"] for c in rows)
    alarms = sum(c["regressed"] for c in rows)
    lines.append(
        f"{'all':<16} {'':>5} {total:>9} {alarms:>10} {'':>9} {'':>9} {'':>7} "
        f"{(alarms / total if total else float('nan')):>13.2%}"
    )
    return "\n".join(lines)
