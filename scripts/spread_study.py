"""Where the launch-to-launch spread of training throughput comes from (docs/studies/spread.md), from the per-window
figures of stored training runs.

Usage:
    python scripts/spread_study.py STORE [STORE ...] [--json FILE]

For each condition (workload, world size, steps per window, pinning) it prints:

- the nested variance split of log throughput (method of moments, every backend's cases pooled): between sweeps of
  the same case, between launches of one sweep's case, and between windows of one launch; with the variance of one
  launch's mean, which is what a comparison across launches pays per launch;
- the windows' deviation from their launch's mean by window index (a short warm-up shows as a slow first window);
- a launch's deviation from its case's mean against its place in the sweep (fraction of the sweep's launches before
  it), its round (repeat) and the seconds since the previous launch ended;
- the correlation of the two primary backends' launches of the same round and condition, and what pairing them
  (bench.core.stats.ratio_of_pairs) does to each comparison's interval against ratio_of_cases.

Only runs that are ok, trained (task train), have two windows or more and shared the machine with no other bench run
count. Logs are natural logs: a standard deviation of 0.05 is about 5% of the mean."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import stats  # noqa: E402
from bench.core.registry import PRIMARY  # noqa: E402
from bench.core.store import Store  # noqa: E402


@dataclass
class Launch:
    store: str
    sweep: str
    backend: str
    condition: tuple  # (store, workload, world size, steps per window, cpu_bind): stores are never pooled
    repeat: int
    started: float
    ended: float
    logs: np.ndarray  # log throughput of each window
    duration_s: float  # the whole launch, start-up included
    window_s: float  # one timed window's mean length
    place: float = 0.0  # fraction of the sweep's launches (every task) that started before it
    gap_s: float = float("nan")  # seconds since the store's previous launch ended

    @property
    def mean(self) -> float:
        return float(self.logs.mean())

    @property
    def case(self) -> tuple:
        return (self.store, self.sweep, self.backend, self.condition)


def launches_of(path: str) -> list[Launch]:
    records = sorted(Store(path).records(), key=lambda r: r.created_at)
    out, by_sweep = [], defaultdict(list)
    previous_end = None
    for r in records:
        if r.spec.sweep_id:
            by_sweep[r.spec.sweep_id].append(r.created_at)
        gap = r.created_at - previous_end if previous_end is not None else float("nan")
        previous_end = r.created_at + (r.duration_s or 0.0)
        if r.spec.task != "train" or not r.ok or r.shared_with or r.metrics is None or r.spec.hosts or r.spec.link:
            continue  # across test hosts a sweep's link is its condition, not noise
        windows = r.metrics.throughput.per_window or []
        if len(windows) < 2 or min(windows) <= 0:
            continue
        s = r.spec
        out.append(
            Launch(
                Path(path).parent.name,
                s.sweep_id or r.run_id,
                s.backend,
                (Path(path).parent.name, s.workload, s.world_size, s.steps_per_window, s.cpu_bind),
                s.repeat or 0,
                r.created_at,
                previous_end,
                np.log(np.asarray(windows, dtype=float)),
                r.duration_s or math.nan,
                float(np.mean(r.metrics.window_times_s)) if r.metrics.window_times_s else math.nan,
                gap_s=gap,
            )
        )
    for launch in out:
        starts = by_sweep.get(launch.sweep, [launch.started])
        launch.place = sum(1 for t in starts if t < launch.started) / max(1, len(starts) - 1)
    return out


def variance_split(launches: list[Launch]) -> dict:
    """Method-of-moments components of a nested design (sweep > launch > window), each case's launches grouped by
    sweep; unequal counts handled by their means (the designs here are nearly balanced)."""
    ss_w = df_w = 0.0
    ss_l = df_l = 0.0
    windows = []
    by_case = defaultdict(list)
    for launch in launches:
        ss_w += float(((launch.logs - launch.mean) ** 2).sum())
        df_w += len(launch.logs) - 1
        windows.append(len(launch.logs))
        by_case[launch.case].append(launch)
    w = float(np.mean(windows))
    sweep_means = defaultdict(list)  # same condition and backend, one mean per sweep
    launches_per_case = []
    for case, members in by_case.items():
        means = np.array([m.mean for m in members])
        launches_per_case.append(len(members))
        if len(members) > 1:
            ss_l += float(((means - means.mean()) ** 2).sum()) * w
            df_l += len(members) - 1
        sweep_means[(case[2], case[3])].append(means.mean())  # (backend, condition): one mean per sweep
    var_w = ss_w / df_w if df_w else float("nan")
    ms_l = ss_l / df_l if df_l else float("nan")
    var_l = max(0.0, (ms_l - var_w) / w) if df_l else float("nan")
    per_case = float(np.mean(launches_per_case))
    across = [np.var(v, ddof=1) for v in sweep_means.values() if len(v) > 1]
    expected = (var_l + var_w / w) / per_case if math.isfinite(var_l) else float("nan")
    var_s = max(0.0, float(np.mean(across)) - expected) if across else float("nan")
    return {
        "launches": len(launches),
        "cases": len(by_case),
        "windows_per_launch": w,
        "sd_window": math.sqrt(var_w),
        "sd_launch": math.sqrt(var_l) if math.isfinite(var_l) else float("nan"),
        "sd_sweep": math.sqrt(var_s) if math.isfinite(var_s) else float("nan"),
        "sd_launch_mean": math.sqrt(var_l + var_w / w) if math.isfinite(var_l) else float("nan"),
        "window_share": (var_w / w) / (var_l + var_w / w) if math.isfinite(var_l) and var_l + var_w > 0 else 0.0,
    }


def design(launches: list[Launch], split: dict, windows: tuple[int, ...] = (3, 6, 12, 24)) -> list[dict]:
    """For each window count: a launch's cost (its overhead, the launch less its timed windows, plus the windows) and
    the variance of its mean (sd launch squared + sd window squared / windows); their product sets the interval a
    minute buys, so the 95% half-width of an unpaired comparison after `minutes` of both sides' launches is
    t x sqrt(2 x variance x 2 x cost / seconds) (t at 1.96, many launches)."""
    overhead = float(np.nanmean([x.duration_s - len(x.logs) * x.window_s for x in launches]))
    window_s = float(np.nanmean([x.window_s for x in launches]))
    rows = []
    for w in windows:
        cost = overhead + w * window_s
        var = split["sd_launch"] ** 2 + split["sd_window"] ** 2 / w
        rows.append(
            {
                "windows": w,
                "launch_s": cost,
                "sd_launch_mean": math.sqrt(var),
                "half_width_3min": math.expm1(1.96 * math.sqrt(2 * var * 2 * cost / 180)),
            }
        )
    return rows


def window_index(launches: list[Launch]) -> list[tuple[int, float, float, int]]:
    """(index, mean deviation of that window from its launch's mean, its 95% half-width, windows)."""
    rows = []
    for i in range(max(len(x.logs) for x in launches)):
        d = np.array([x.logs[i] - x.mean for x in launches if len(x.logs) > i])
        half = stats.t_quantile(0.95, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else math.nan
        rows.append((i + 1, float(d.mean()), half, len(d)))
    return rows


def residuals(launches: list[Launch]) -> dict:
    """Each launch's deviation from its case's mean (in the log), for the order and timing checks."""
    by_case = defaultdict(list)
    for launch in launches:
        by_case[launch.case].append(launch)
    return {id(x): x.mean - float(np.mean([m.mean for m in ms])) for ms in by_case.values() for x in ms if len(ms) > 1}


def slope(xs: list[float], ys: list[float]) -> tuple[float, float, float, int]:
    """Least-squares slope of ys on xs, its 95% half-width, the correlation, and the count."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = len(x)
    if n < 4 or x.std() == 0:
        return math.nan, math.nan, math.nan, n
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    se = math.sqrt(float((resid**2).sum()) / (n - 2) / float(((x - x.mean()) ** 2).sum()))
    return float(b), stats.t_quantile(0.95, n - 2) * se, float(np.corrcoef(x, y)[0, 1]), n


def pairing(launches: list[Launch]) -> dict:
    """Correlation of the primary pair's launch residuals of one round, and the pairs' interval against the cases'
    (each sweep's comparison on its own)."""
    res = residuals(launches)
    by_round = defaultdict(dict)
    for x in launches:
        if x.backend in PRIMARY and id(x) in res:
            by_round[(x.store, x.sweep, x.condition, x.repeat)][x.backend] = x
    a, b = [], []
    comparisons = defaultdict(lambda: ([], []))
    for key, sides in by_round.items():
        if len(sides) == len(PRIMARY):
            first, second = (sides[name] for name in PRIMARY)
            a.append(res[id(first)])
            b.append(res[id(second)])
            comparisons[key[:3]][0].append(math.exp(first.mean))
            comparisons[key[:3]][1].append(math.exp(second.mean))
    widths = []
    for first, second in comparisons.values():
        if len(first) >= 3:
            cases = stats.ratio_of_cases([first], [second])
            pairs = stats.ratio_of_pairs(first, second)
            widths.append(math.log1p(pairs.resolution) / math.log1p(cases.resolution))
    r = float(np.corrcoef(a, b)[0, 1]) if len(a) > 3 else math.nan
    z = math.atanh(r) if math.isfinite(r) and abs(r) < 1 else math.nan
    half = 1.96 / math.sqrt(len(a) - 3) if len(a) > 3 else math.nan
    return {
        "pairs": len(a),
        "correlation": r,
        "correlation_low": math.tanh(z - half) if math.isfinite(z) else math.nan,
        "correlation_high": math.tanh(z + half) if math.isfinite(z) else math.nan,
        "comparisons": len(widths),
        "paired_width_median": float(np.median(widths)) if widths else math.nan,
        "paired_narrower": sum(1 for w in widths if w < 1),
    }


def name(condition: tuple) -> str:
    store, workload, world, steps, bind = condition
    return f"{store}: {workload}, {world} workers, {steps} steps/window, {'pinned' if bind == 'cores' else 'unpinned'}"


def pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="+")
    parser.add_argument("--json", help="also write every figure as JSON to this file")
    args = parser.parse_args(argv)
    launches = [x for path in args.stores for x in launches_of(path)]
    by_condition = defaultdict(list)
    for x in launches:
        by_condition[x.condition].append(x)
    out: dict = {"stores": args.stores, "conditions": {}}
    print("## Variance split of log throughput (sd of each level; launch mean = one launch's figure)\n")
    print("| condition | launches | windows | sd window | sd launch | sd sweep | sd launch mean | windows' share |")
    print("|---|---|---|---|---|---|---|---|")
    for condition in sorted(by_condition, key=str):
        split = variance_split(by_condition[condition])
        out["conditions"][name(condition)] = {"split": split}
        print(
            f"| {name(condition)} | {split['launches']} | {split['windows_per_launch']:.0f} | "
            f"{pct(split['sd_window'])} | {pct(split['sd_launch'])} | {pct(split['sd_sweep'])} | "
            f"{pct(split['sd_launch_mean'])} | {pct(split['window_share'])} |"
        )
    print("\n## Design: a launch's length against what it buys (unpaired, 3 minutes of both sides' launches)\n")
    for condition in sorted(by_condition, key=str):
        split = out["conditions"][name(condition)]["split"]
        if not math.isfinite(split["sd_launch"]):
            continue
        rows = design(by_condition[condition], split)
        out["conditions"][name(condition)]["design"] = rows
        print(
            f"- {name(condition)}: "
            + "; ".join(
                f"{r['windows']} windows: {r['launch_s']:.1f} s, sd {pct(r['sd_launch_mean'])}, "
                f"±{pct(r['half_width_3min'])}"
                for r in rows
            )
        )
    print("\n## Window index: mean deviation from the launch's mean (95% half-width)\n")
    for condition in sorted(by_condition, key=str):
        rows = window_index(by_condition[condition])
        out["conditions"][name(condition)]["window_index"] = rows
        print(f"- {name(condition)}: " + ", ".join(f"{i}: {100 * d:+.1f}±{100 * h:.1f}%" for i, d, h, _ in rows))
    res = residuals(launches)
    print("\n## A launch's deviation from its case's mean against order and timing (slope, 95% half-width, r, n)\n")
    checks = {
        "place in the sweep (0 first, 1 last)": lambda x: x.place,
        "round (repeat index)": lambda x: float(x.repeat),
        "seconds since the previous launch ended": lambda x: x.gap_s,
    }
    for label, of in checks.items():
        xs = [of(x) for x in launches if id(x) in res]
        ys = [res[id(x)] for x in launches if id(x) in res]
        b, h, r, n = slope(xs, ys)
        out.setdefault("order", {})[label] = {"slope": b, "half": h, "r": r, "n": n}
        print(f"- {label}: slope {pct(b)} ± {pct(h)} per unit, r = {r:+.2f}, {n} launches")
    print("\n## The primary pair's launches of one round\n")
    for condition in sorted(by_condition, key=str):
        p = pairing(by_condition[condition])
        out["conditions"][name(condition)]["pairing"] = p
        if p["pairs"]:
            print(
                f"- {name(condition)}: r = {p['correlation']:+.2f} ({p['correlation_low']:+.2f} to "
                f"{p['correlation_high']:+.2f}, {p['pairs']} rounds); paired interval / unpaired, median "
                f"{p['paired_width_median']:.2f} over {p['comparisons']} comparisons, narrower in "
                f"{p['paired_narrower']}"
            )
    p = pairing(launches)
    out["pairing_all"] = p
    print(
        f"- all conditions: r = {p['correlation']:+.2f} ({p['correlation_low']:+.2f} to {p['correlation_high']:+.2f}, "
        f"{p['pairs']} rounds); paired / unpaired width median {p['paired_width_median']:.2f} over "
        f"{p['comparisons']} comparisons, narrower in {p['paired_narrower']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
