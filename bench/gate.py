"""The regression gate: compare a current set of runs with a baseline, metric by metric.

Method (README, "Regression gate"):
- Every gated figure is a function of per-window samples (training windows, or timed chunks of a
  communication sweep). For each side the figure's uncertainty comes from a bootstrap: every sample
  set is resampled with replacement, the figure recomputed; the change current/baseline - 1 gets a
  percentile interval at CONFIDENCE. A bootstrap, not a rank test, because the gated figures are
  ratios of means of several sample sets (a backend's windows over the plain loop's windows), which a
  rank test of one sample set against another cannot express.
- A change counts only when it is significant (the interval excludes 0) *and* at least the metric's
  minimum effect (RULES): windows of one run are closer to each other than two runs are, so the
  interval alone would flag run-to-run drift; the minimum effect is what a run-to-run A/A spread on a
  shared CPU machine does not reach (see README for the measured false-alarm rate).
- Ratios taken within one run (scaling efficiency, throughput over the plain loop of the same sweep,
  busbw over the machine limit measured in the same run) cancel what the machine's state does to
  both sides alike, so they carry the tight thresholds; absolute throughput gets a wider one and is
  gated only when the baseline came from a machine of the same kind.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import UsageError

BASELINE_FORMAT = "elastic-vs-horovod-bench baseline"
BASELINE_VERSION = 1
CONFIDENCE = 0.99
BOOTSTRAP_RESAMPLES = 4000
VERDICTS = ("ok", "regressed", "improved", "unstable", "failed", "new", "skipped")
FAILING_VERDICTS = ("regressed", "failed")


@dataclass(frozen=True)
class Rule:
    min_effect: float  # smallest relative change (either way) that counts
    meaning: str
    same_machine_only: bool = False  # gated only when the baseline's machine is of the same kind


# The one place that says which metric is gated, and by how much.
RULES = {
    "vs_plain": Rule(0.10, "throughput / (N x the plain single-process loop's), same sweep"),
    "efficiency": Rule(0.10, "weak-scaling efficiency thr(N) / (N x thr(1)), same backend, same sweep"),
    "busbw_fraction": Rule(0.15, "allreduce busbw at the largest message / machine limit measured in the same run"),
    "throughput": Rule(0.25, "absolute samples/s", same_machine_only=True),
}
# pytest-benchmark's --benchmark-compare-fail for the harness's own hot paths (tests/benchmarks): the
# fastest of many rounds (the one least disturbed by other work on a shared machine), and a wide margin:
# what it must catch is a hot path grown by a multiple (a file write per step), not a few percent.
HOT_PATH_FAIL = ("min:75%",)
# The fixed regression matrix, as `bench sweep` arguments: both workloads at their CPU size, world
# sizes 1 and 2, every compared backend that can run here, the plain loop, a short allreduce sweep.
REGRESS_SWEEP = ("--nproc", "2", "--world-sizes", "1,2", "--workload", "mnist_mlp,resnet18", "--windows", "8",
                 "--max-bytes", "1M")
HOT_PATH_TESTS = Path(__file__).resolve().parent.parent / "tests" / "benchmarks"
# Machine facts that must agree for absolute figures to travel.
MACHINE_KEYS = ("cpu_model", "cpu_count", "cuda_devices")


# ---------------------------------------------------------------- figures from records
@dataclass
class Figure:
    """One side of one gated metric: value = formula(mean of each sample set)."""
    key: str
    kind: str
    samples: list[list[float]]
    scale: float = 1.0  # constant divisor (N, or N x thr(1) when that is a sample set too)
    run_ids: list[str] = field(default_factory=list)

    def value(self, means: list[float] | None = None) -> float:
        m = means if means is not None else [sum(s) / len(s) for s in self.samples]
        return m[0] / (self.scale * (m[1] if len(m) > 1 else 1.0))


def _train_key(row) -> tuple:
    return (row["backend"], row["workload"], int(row["world_size"]))


def figures(records: list[dict]) -> tuple[dict[str, Figure], dict[str, str]]:
    """The gated figures of one sweep's records, and the cases whose run did not succeed
    (key -> {"status", "run_id"}).

    When several runs share a case the latest counts."""
    from bench.backends import BASELINE

    latest: dict[tuple, dict] = {}
    for rec in sorted(records, key=lambda r: r["created_at"]):
        spec = rec["spec"]
        if spec.get("task", "train") == "train":
            latest[("train", spec["backend"], spec["workload"], spec["world_size"])] = rec
        else:
            latest[("comm", spec["backend"], None, spec["world_size"])] = rec
    out: dict[str, Figure] = {}
    not_ok: dict[str, dict] = {}

    def windows(rec):
        return (rec.get("metrics") or {}).get("throughput", {}).get("per_window") or []

    for (task, backend, workload, n), rec in sorted(latest.items(), key=lambda kv: str(kv[0])):
        if task == "comm":
            key = f"busbw_fraction {backend} n={n}"
            if rec["status"] != "ok":
                not_ok[key] = {"status": rec["status"], "run_id": rec["run_id"]}
                continue
            fig = busbw_figure(rec, key)
            if fig:
                out[key] = fig
            continue
        where = f"{backend} {workload} n={n}"
        if rec["status"] != "ok":
            for kind in ("throughput", "vs_plain", "efficiency"):
                not_ok[f"{kind} {where}"] = {"status": rec["status"], "run_id": rec["run_id"]}
            continue
        mine = windows(rec)
        out[f"throughput {where}"] = Figure(f"throughput {where}", "throughput", [mine], run_ids=[rec["run_id"]])
        plain = latest.get(("train", BASELINE, workload, 1))
        if backend != BASELINE and plain is not None and plain["status"] == "ok":
            out[f"vs_plain {where}"] = Figure(f"vs_plain {where}", "vs_plain", [mine, windows(plain)],
                                              scale=n, run_ids=[rec["run_id"], plain["run_id"]])
        one = latest.get(("train", backend, workload, 1))
        if n > 1 and one is not None and one["status"] == "ok":
            out[f"efficiency {where}"] = Figure(f"efficiency {where}", "efficiency", [mine, windows(one)],
                                                scale=n, run_ids=[rec["run_id"], one["run_id"]])
    return out, not_ok


def busbw_figure(rec: dict, key: str) -> Figure | None:
    """Allreduce busbw of the largest message, per timed chunk, over the limit measured in that run."""
    rows = [r for r in rec.get("allreduce") or [] if r["op"] == "allreduce" and r.get("window_time_us")]
    ceiling = ((rec.get("metrics") or {}).get("comm") or {}).get("ceiling")
    if not rows or not ceiling:
        return None
    row = max(rows, key=lambda r: r["size"])
    busbw_per_chunk = [row["busbw_gbps"] * row["time_us"] / t for t in row["window_time_us"]]
    return Figure(key, "busbw_fraction", [busbw_per_chunk], scale=ceiling["limit_gbps"], run_ids=[rec["run_id"]])


# ---------------------------------------------------------------- comparison
def bootstrap_values(fig: Figure, rng, resamples: int):
    import numpy as np

    means = []
    for s in fig.samples:
        arr = np.asarray(s, dtype=float)
        idx = rng.integers(0, len(arr), size=(resamples, len(arr)))
        means.append(arr[idx].mean(axis=1))
    return means[0] / (fig.scale * (means[1] if len(means) > 1 else 1.0))


def judge(change: float, low: float, high: float, min_effect: float) -> str:
    """The verdict of one metric from its change and the interval of the change."""
    if change <= -min_effect and high < 0:
        return "regressed"
    if change >= min_effect and low > 0:
        return "improved"
    if (high - low) / 2 > min_effect:  # too noisy to tell a change of min_effect from none
        return "unstable"
    return "ok"


def compare_figures(base: dict[str, Figure], cur: dict[str, Figure], cur_not_ok: dict[str, dict],
                    same_machine: bool, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    alpha = (1 - CONFIDENCE) / 2
    rows = []
    for key in sorted(set(base) | set(cur) | set(cur_not_ok)):
        kind = key.split(" ", 1)[0]
        rule = RULES[kind]
        row = {"metric": key, "kind": kind, "min_effect": rule.min_effect, "baseline": None, "current": None,
               "change": None, "ci_low": None, "ci_high": None}
        b, c = base.get(key), cur.get(key)
        row["run_ids"] = c.run_ids if c is not None else [cur_not_ok[key]["run_id"]] if key in cur_not_ok else []
        if b is not None:
            row["baseline"] = b.value()
        if c is not None:
            row["current"] = c.value()
        if key in cur_not_ok and b is not None:
            row.update(verdict="failed", why=f"the current run ended {cur_not_ok[key]['status']}")
        elif key in cur_not_ok or b is None:
            row.update(verdict="new", why="not in the baseline" if key not in cur_not_ok
                       else f"not in the baseline; the current run ended {cur_not_ok[key]['status']}")
        elif c is None:
            row.update(verdict="failed", why="in the baseline, missing from the current runs")
        elif rule.same_machine_only and not same_machine:
            row.update(verdict="skipped", why="absolute figure; the baseline came from another kind of machine")
        else:
            changes = bootstrap_values(c, rng, resamples) / bootstrap_values(b, rng, resamples) - 1
            low, high = (float(v) for v in np.quantile(changes, [alpha, 1 - alpha]))
            change = row["current"] / row["baseline"] - 1
            row.update(change=change, ci_low=low, ci_high=high, verdict=judge(change, low, high, rule.min_effect))
            row["why"] = {"regressed": f"below by {-change:.1%}, at least {rule.min_effect:.0%} and significant",
                          "improved": f"above by {change:.1%}, at least {rule.min_effect:.0%} and significant",
                          "unstable": f"interval {low:+.1%}..{high:+.1%} too wide to tell "
                                      f"a {rule.min_effect:.0%} change",
                          "ok": ""}[row["verdict"]]
        rows.append(row)
    return rows


def format_comparison(rows: list[dict]) -> str:
    def num(v, kind):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:,.0f}" if kind == "throughput" else f"{v:.3f}"

    lines = [f"{'metric':<44} {'baseline':>10} {'current':>10} {'change':>8} "
             f"{'interval (' + format(CONFIDENCE, '.0%') + ')':>18} {'gate':>5}  verdict"]
    for r in rows:
        change = "-" if r["change"] is None else f"{r['change']:+.1%}"
        ci = "-" if r["ci_low"] is None else f"{r['ci_low']:+.1%}..{r['ci_high']:+.1%}"
        verdict = r["verdict"] + (f" ({r['why']})" if r.get("why") and r["verdict"] != "ok" else "")
        lines.append(f"{r['metric']:<44} {num(r['baseline'], r['kind']):>10} {num(r['current'], r['kind']):>10} "
                     f"{change:>8} {ci:>18} {r['min_effect']:>5.0%}  {verdict}")
    return "\n".join(lines)


def aa_rates(sweeps: dict[str, list[dict]], resamples: int = 1000) -> tuple[list[dict], int]:
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
            for row in compare_figures(figs[a][0], figs[b][0], figs[b][1], same_machine=True, seed=pairs,
                                       resamples=resamples):
                c = counts.setdefault(row["kind"], {"kind": row["kind"], "compared": 0, "regressed": 0,
                                                    "improved": 0, "unstable": 0, "failed": 0,
                                                    "min_effect": RULES[row["kind"]].min_effect})
                if row["verdict"] in ("ok", "regressed", "improved", "unstable", "failed"):
                    c["compared"] += 1
                    if row["verdict"] != "ok":
                        c[row["verdict"]] += 1
    rows = list(counts.values())
    for c in rows:
        c["false_alarm_rate"] = c["regressed"] / c["compared"] if c["compared"] else float("nan")
    return rows, pairs


def format_aa(rows: list[dict], pairs: int) -> str:
    lines = [f"A/A: {pairs} ordered pairs of sweeps, every metric compared",
             f"{'kind':<16} {'gate':>5} {'compared':>9} {'regressed':>10} {'improved':>9} {'unstable':>9} "
             f"{'failed':>7} {'false alarms':>13}"]
    for c in rows:
        lines.append(f"{c['kind']:<16} {c['min_effect']:>5.0%} {c['compared']:>9} {c['regressed']:>10} "
                     f"{c['improved']:>9} {c['unstable']:>9} {c['failed']:>7} {c['false_alarm_rate']:>13.2%}")
    total = sum(c["compared"] for c in rows)
    alarms = sum(c["regressed"] for c in rows)
    lines.append(f"{'all':<16} {'':>5} {total:>9} {alarms:>10} {'':>9} {'':>9} {'':>7} "
                 f"{(alarms / total if total else float('nan')):>13.2%}")
    return "\n".join(lines)


# ---------------------------------------------------------------- baseline files
def machine_of(records: list[dict]) -> dict:
    env = next((r.get("environment") for r in records if r.get("environment")), {}) or {}
    return {k: env.get(k) for k in ("hostname", "platform", "python", "cpu_model", "cpu_count", "memory_bytes",
                                    "torch", "cuda_devices")} | {"horovod": (env.get("packages") or {}).get("horovod"),
                                                                 "git": env.get("git")}


def same_kind(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS)


def latest_sweep(records: list[dict], sweep_id: str | None = None) -> tuple[str | None, list[dict]]:
    """The records of one sweep: the one named, else the most recent sweep."""
    swept = [r for r in records if r["spec"].get("sweep_id")]
    if sweep_id is None:
        if not swept:
            return None, []
        sweep_id = max(swept, key=lambda r: r["created_at"])["spec"]["sweep_id"]
    return sweep_id, [r for r in swept if r["spec"]["sweep_id"] == sweep_id]


def write_baseline(path: str | Path, records: list[dict], sweep_id: str | None, matrix: dict | None = None) -> Path:
    from bench.rundir import write_json_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "created_at": time.time(),
                             "sweep_id": sweep_id, "machine": machine_of(records), "matrix": matrix,
                             "records": records})
    return path


def read_runs_file(path: str | Path, what: str) -> dict:
    """A baseline (or current) file, or a one-line error that says what to do."""
    path = Path(path)
    hint = "make one with `bench baseline` (or `nox -s baseline`)"
    if not path.is_file():
        raise UsageError(f"{what} file {path} does not exist; {hint}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{what} file {path} is not readable JSON ({exc}); {hint}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("records"), list):
        raise UsageError(f"{what} file {path} is not a bench baseline file; {hint}")
    if data.get("version") != BASELINE_VERSION:
        raise UsageError(f"{what} file {path} has version {data.get('version')}, this bench reads "
                         f"{BASELINE_VERSION}; {hint}")
    for rec in data["records"]:
        if not isinstance(rec, dict) or not {"spec", "status", "created_at", "run_id"} <= set(rec):
            raise UsageError(f"{what} file {path} holds a malformed run record; {hint}")
    if not data["records"]:
        raise UsageError(f"{what} file {path} holds no runs; {hint}")
    return data


# ---------------------------------------------------------------- the harness's own hot paths
def run_hot_paths(compare_with: str | None = None, save_to: str | None = None) -> int:
    """pytest-benchmark over tests/benchmarks: save the figures, or fail past HOT_PATH_FAIL of a saved file."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("pytest_benchmark") is None:
        raise UsageError("the hot-path benchmarks need pytest-benchmark: pip install -e .[test]")
    if not HOT_PATH_TESTS.is_dir():
        raise UsageError(f"{HOT_PATH_TESTS} is missing; the hot-path benchmarks ship with a source checkout")
    command = [sys.executable, "-m", "pytest", str(HOT_PATH_TESTS), "-q", "-p", "no:cacheprovider",
               "--benchmark-only", "--benchmark-enable", "--benchmark-columns=min,median,mean,stddev,rounds"]
    if save_to:
        command.append(f"--benchmark-json={Path(save_to).resolve()}")
    if compare_with:
        command.append(f"--benchmark-compare={Path(compare_with).resolve()}")
        command += [f"--benchmark-compare-fail={expr}" for expr in HOT_PATH_FAIL]
    print("$ " + " ".join(command[2:]), file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=HOT_PATH_TESTS.parent.parent).returncode
