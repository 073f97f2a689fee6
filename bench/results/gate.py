"""The regression gate: compare a current set of runs with a baseline, metric by metric.

Method (docs/method.md, "Regression gate"):
- The unit of replication is the launch. Windows of one launch agree with each other far more
  closely than two launches of the same case do (on the 2-core machine of the committed baseline: a
  median 2.7% standard deviation within a launch, 5.1% between launches), so a test on windows alone would call launch-to-launch drift a
  change. Each case is therefore run several times (`bench sweep --repeats R`, rounds interleaved);
  a run contributes one value, the mean of its windows (a communication run: the mean busbw of the
  timed chunks at its largest message over the limit measured in that run). A case with a single
  run falls back to its windows as samples, and says so.
- Each gated figure is a product of case means (a backend's throughput over the plain loop's, ...),
  taken on a log scale: log figure = sum of +-(mean log of a case's run values). The change
  current/baseline - 1 gets a t interval at CONFIDENCE: each case's run-to-run variance pooled over its
  baseline and current runs, the cases combined by Welch-Satterthwaite. A t interval rather than a rank
  test or a bootstrap: with 3 to 5 runs a side, a rank test cannot reach significance at all and a
  bootstrap understates the spread; and the figures are ratios of several cases, which a two-sample rank
  test cannot express.
- A change counts only when it is significant (the interval excludes 0) *and* at least the metric's
  minimum effect (RULES).
- Ratios taken within one sweep (scaling efficiency, throughput over the plain loop of the same sweep,
  busbw over the machine limit measured in the same run) cancel what the machine's state does to
  both sides alike; absolute throughput gets a wider threshold and is gated only when the baseline
  came from a machine of the same kind.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench.core.codec import RecordError
from bench.core.errors import UsageError
from bench.core.records import RunRecord
from bench.core.registry import task_part
from bench.core.rundir import write_json_atomic
from bench.core.stats import UNSTABLE_REL_STDEV

BASELINE_FORMAT = "elastic-vs-horovod-bench baseline"
BASELINE_VERSION = 1
BASELINE_DIR = os.path.join("results", "baselines")
BASELINE_FILE = "cpu-gloo.json"
HOT_PATHS_FILE = "hot-paths.json"
CONFIDENCE = 0.995  # two-sided: a regression is called at 0.25% risk when nothing changed
WIDE = 3  # see judge()
FAILING_VERDICTS = ("regressed", "failed")


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
# The harness's own hot paths (tests/benchmarks) are compared on the fastest of many rounds (the one
# least disturbed by other work on a shared machine), with a wide margin (HOT_PATH_LIMIT): what they must
# catch is a hot path grown by a multiple (a file write per step), not a few percent.
HOT_PATH_TESTS = Path(__file__).resolve().parent.parent / "tests" / "benchmarks"
# Absolute figures travel between hosts only when these facts agree and the hosts ran the same calibration
# work (bench.core.environment.calibrate) within CALIBRATION_TOLERANCE of each other: a label is not a speed.
MACHINE_KEYS = ("cpu_model", "cpu_count", "cuda_devices", "cpu_flags", "cpu_capability")
CALIBRATION_KEYS = ("gemm_gflops", "conv_step_ms")  # bench.core.environment.calibrate's figures, compared by host_match
CALIBRATION_TOLERANCE = 0.15
# The hot paths are compared only when the reference work timed in the same pytest run (REFERENCE_BENCHMARK)
# ran within HOT_PATH_HOST_TOLERANCE of its saved time; each figure is then divided by the reference's
# ratio, and one over HOT_PATH_LIMIT x its saved time fails.
REFERENCE_BENCHMARK = "test_reference_work"
HOT_PATH_HOST_TOLERANCE = 0.25
HOT_PATH_LIMIT = 2.5  # same code, same host, minutes apart: up to 1.84 x (a record write, fsync-bound)


# ---------------------------------------------------------------- figures from records
@dataclass
class Case:
    """The runs of one case of a sweep: one value per run (or, with a single run, its windows)."""
    values: list[float]
    per: str  # "run" or "window": what one value stands for
    run_ids: list[str]

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.values if v > 0]


@dataclass
class Figure:
    """One side of one gated metric: exp(sum of sign x mean log of each case) / scale."""
    key: str
    kind: str
    cases: list[Case]
    signs: list[int]
    scale: float = 1.0

    @property
    def log_value(self) -> float:
        return sum(sign * (sum(c.logs) / len(c.logs)) for sign, c in zip(self.signs, self.cases)) - math.log(self.scale)

    def value(self) -> float:
        return math.exp(self.log_value)

    @property
    def run_ids(self) -> list[str]:
        return [i for c in self.cases for i in c.run_ids]



def case_of(runs: list, value) -> Case:
    """One value per run; a lone run's windows when there is only one (a run-to-run spread is unknown).
    `value(record, per_window)` gives a run's value, or its windows' values."""
    if len(runs) == 1:
        return Case(value(runs[0], per_window=True), "window", [runs[0].run_id])
    return Case([value(r, per_window=False) for r in runs], "run", [r.run_id for r in runs])


def group_runs(records: list, key) -> tuple[dict, dict]:
    """(all runs per case, ok runs per case), oldest first; key(record) names a record's case."""
    runs: dict = {}
    for rec in sorted(records, key=lambda r: r.created_at):
        runs.setdefault(key(rec), []).append(rec)
    return runs, {k: [r for r in rs if r.status == "ok"] for k, rs in runs.items()}


def not_ok_entry(runs: list) -> dict:
    """How a case none of whose runs succeeded ended (its last run)."""
    return {"status": runs[-1].status, "run_id": runs[-1].run_id}


def figures(records: list) -> tuple[dict[str, Figure], dict[str, dict]]:
    """The gated figures of one sweep's records, and the cases none of whose runs succeeded
    (key -> {"status", "run_id"}). Every ok run of a case counts (repeats, and confirmation runs).
    Each kind of run says what it contributes (Task.gate_figures)."""
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


# ---------------------------------------------------------------- comparison
def change_interval(base: Figure, cur: Figure, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(change, low, high) of current/baseline - 1: a t interval on the log scale.

    Each case's run-to-run variance is pooled over its baseline and current runs (the same case on the
    same kind of machine: what an A/A comparison assumes), giving n_b + n_c - 2 degrees of freedom; the
    cases of a ratio are combined by Welch-Satterthwaite."""
    from scipy.stats import t as student

    diff = cur.log_value - base.log_value
    terms = []  # (variance of this case's contribution to diff, its degrees of freedom)
    for b, c in zip(base.cases, cur.cases):
        lb, lc = b.logs, c.logs
        dof = len(lb) + len(lc) - 2
        if dof < 1:
            return math.exp(diff) - 1, -1.0, math.inf
        mb, mc = sum(lb) / len(lb), sum(lc) / len(lc)
        pooled = (sum((x - mb) ** 2 for x in lb) + sum((x - mc) ** 2 for x in lc)) / dof
        terms.append((pooled * (1 / len(lb) + 1 / len(lc)), dof))
    var = sum(v for v, _ in terms)
    if var == 0:
        return math.exp(diff) - 1, math.exp(diff) - 1, math.exp(diff) - 1
    dof = var ** 2 / sum(v ** 2 / d for v, d in terms if v > 0)  # Welch-Satterthwaite
    half = float(student.ppf(0.5 + confidence / 2, dof)) * math.sqrt(var)
    return math.exp(diff) - 1, math.exp(diff - half) - 1, math.exp(diff + half) - 1


def judge(change: float, low: float, high: float, min_effect: float, noisy: bool = False) -> str:
    """The verdict of one metric from its change, the interval of the change, and whether any of its
    cases varied from run to run by more than the suite calls stable (bench.core.stats.UNSTABLE_REL_STDEV).
    `unstable` also when the interval cannot rule out a change of WIDE x the minimum effect either way:
    such an `ok` would say nothing."""
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
                notes.append(f"{len(c.values)} runs of a case spread {sd / mean:.0%} (stable: up to "
                             f"{UNSTABLE_REL_STDEV:.0%})")
    return notes


def compare_figures(base: dict[str, Figure], cur: dict[str, Figure], cur_not_ok: dict[str, dict],
                    same_machine: bool, host_differs: str = "the baseline came from another kind of machine",
                    cannot_run: dict[str, str] | None = None) -> list[dict]:
    """One row per gated figure. cannot_run: backend -> why it cannot run here; its baseline figures are skipped,
    not failed, when the current runs lack them (a gate without the optional Ray installed)."""
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
            row["baseline_runs"] = min(len(x.values) if x.per == "run" else 1 for x in b.cases)
        if c is not None:
            row["current"] = c.value()
            row["current_runs"] = min(len(x.values) if x.per == "run" else 1 for x in c.cases)
        if key in cur_not_ok and b is not None:
            row.update(verdict="failed", why=f"the current run ended {cur_not_ok[key]['status']}")
        elif key in cur_not_ok or b is None:
            row.update(verdict="new", why="not in the baseline" if key not in cur_not_ok
                       else f"not in the baseline; the current run ended {cur_not_ok[key]['status']}")
        elif c is None and key.split(" ")[1] in (cannot_run or {}):
            row.update(verdict="skipped", why=f"{key.split(' ')[1]} cannot run here: {cannot_run[key.split(' ')[1]]}")
        elif c is None:
            row.update(verdict="failed", why="in the baseline, missing from the current runs")
        elif rule.same_machine_only and not same_machine:
            row.update(verdict="skipped", why=f"absolute figure; host differs: {host_differs}")
        else:
            change, low, high = change_interval(b, c)
            noise = noisy_cases(b) + noisy_cases(c)
            row.update(change=change, ci_low=low, ci_high=high,
                       verdict=judge(change, low, high, rule.min_effect, noisy=bool(noise)))
            lone = " (a side has a single run: its windows stand in for runs, so the interval is optimistic)" \
                if min(row["baseline_runs"], row["current_runs"]) < 2 else ""
            row["why"] = {"regressed": f"below by {-change:.1%}, at least {rule.min_effect:.0%} and significant",
                          "improved": f"above by {change:.1%}, at least {rule.min_effect:.0%} and significant",
                          "unstable": "; ".join(noise) or f"interval too wide to rule out a change of "
                                                             f"{(1 + rule.min_effect) ** WIDE - 1:.0%}",
                          "ok": ""}[row["verdict"]] + (lone if row["verdict"] != "ok" else "")
        rows.append(row)
    return rows


def format_comparison(rows: list[dict]) -> str:
    def num(v, kind):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:,.0f}" if kind == "throughput" else f"{v:.3f}"

    lines = [f"{'metric':<44} {'baseline':>10} {'current':>10} {'change':>8} "
             f"{'interval (' + format(CONFIDENCE, '.1%') + ')':>18} {'gate':>5}  verdict"]
    def pct(v):
        return "<-99%" if v <= -0.99 else ">+999%" if v >= 9.99 else f"{v:+.1%}"

    for r in rows:
        change = "-" if r["change"] is None else f"{r['change']:+.1%}"
        ci = "-" if r["ci_low"] is None else f"{pct(r['ci_low'])}..{pct(r['ci_high'])}"
        verdict = r["verdict"] + (f" ({r['why']})" if r.get("why") and r["verdict"] != "ok" else "")
        lines.append(f"{r['metric']:<44} {num(r['baseline'], r['kind']):>10} {num(r['current'], r['kind']):>10} "
                     f"{change:>8} {ci:>18} {r['min_effect']:>5.0%}  {verdict}")
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
def machine_of(records: list) -> dict:
    env = next((r.environment for r in records if r.environment), {}) or {}
    return {k: env.get(k) for k in ("hostname", "platform", "python", "cpu_model", "cpu_count", "cpu_flags",
                                    "cpu_capability", "memory_bytes", "torch", "cuda_devices")} | {**(env.get("packages") or {}), "git": env.get("git")}


def host_match(base: dict, cur: dict) -> tuple[bool, str]:
    """Whether absolute figures measured on the current host can be compared with the baseline's, and if
    not, why: the facts of MACHINE_KEYS (where both sides recorded them) and the calibration work."""
    for key in MACHINE_KEYS:
        if base.get(key) is not None and cur.get(key) is not None and base.get(key) != cur.get(key):
            return False, f"{key} {base.get(key)} on the baseline's host, {cur.get(key)} here"
    cb, cc = base.get("calibration"), cur.get("calibration")
    if not cb or not cc:
        side = "the baseline" if not cb else "the current runs"
        return False, (f"no calibration recorded with {side}, so whether the hosts run equally fast is "
                       "unknown (refresh the baseline with `bench baseline`)")
    speed = {"gemm_gflops": cc["gemm_gflops"] / cb["gemm_gflops"], "conv_step_ms": cb["conv_step_ms"] / cc["conv_step_ms"]}
    off = {k: v for k, v in speed.items() if abs(math.log(v)) > math.log(1 + CALIBRATION_TOLERANCE)}
    if off:
        return False, "this host runs the calibration work at " + ", ".join(
            f"{v:.0%} ({k})" for k, v in off.items()) + " of the baseline host's speed"
    return True, ""


def latest_sweep(records: list, sweep_id: str | None = None) -> tuple[str | None, list]:
    """The records of one sweep: the one named, else the most recent sweep."""
    swept = [r for r in records if r.spec.sweep_id]
    if sweep_id is None:
        if not swept:
            return None, []
        sweep_id = max(swept, key=lambda r: r.created_at).spec.sweep_id
    return sweep_id, [r for r in swept if r.spec.sweep_id == sweep_id]


def write_baseline(path: str | Path, records: list, sweep_id: str | None, matrix=None,
                   calibration: dict | None = None) -> Path:
    """A baseline file: the runs, and the machine they came from with its calibration (host_match)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "created_at": time.time(),
                             "sweep_id": sweep_id, "machine": {**machine_of(records), "calibration": calibration},
                             "matrix": matrix,
                             "records": [r.to_dict() for r in records]})
    return path


def read_runs_file(path: str | Path, what: str) -> dict:
    """A baseline (or current) file, or a one-line error that says what to do."""
    path = Path(path)
    hint = "make one with `bench baseline` (or `nox -s baseline`)"
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{what} file {path} does not exist; {hint}") from None
    except IsADirectoryError:
        raise UsageError(f"{what} file {path} is a directory; give a file, such as "
                         f"{path / BASELINE_FILE} (what `bench baseline --dir {path}` writes)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} file {path} cannot be read ({getattr(exc, 'strerror', None) or exc}); "
                         f"{hint}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} file {path} is not readable JSON ({exc}); {hint}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("records"), list):
        raise UsageError(f"{what} file {path} is not a bench baseline file; {hint}")
    if data.get("version") != BASELINE_VERSION:
        raise UsageError(f"{what} file {path} has version {data.get('version')}, this bench reads "
                         f"{BASELINE_VERSION}; {hint}")
    if not data["records"]:
        raise UsageError(f"{what} file {path} holds no runs; {hint}")
    problem = machine_problem(data.get("machine"))
    if problem:
        raise UsageError(f"{what} file {path}: {problem}; {hint}")
    records = []
    for i, rec in enumerate(data["records"]):
        try:
            records.append(RunRecord.from_dict(rec))
        except (RecordError, UsageError, KeyError, TypeError) as exc:
            raise UsageError(f"{what} file {path}: run record {i} is malformed ({exc}); {hint}") from None
    return {**data, "records": records}


def machine_problem(machine) -> str | None:
    """What is wrong with a runs file's `machine` (what host_match reads), or None."""
    if not isinstance(machine, dict):
        return f"'machine' must be an object (the host the runs were made on), found {type(machine).__name__}"
    calibration = machine.get("calibration")
    if calibration in (None, {}):  # none recorded: host_match then leaves absolute figures ungated
        return None
    values = [calibration.get(k) for k in CALIBRATION_KEYS] if isinstance(calibration, dict) else [None]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
        return f"'machine.calibration' must be null or hold positive numbers {' and '.join(CALIBRATION_KEYS)}"
    return None


# ---------------------------------------------------------------- the harness's own hot paths
def compare_hot_paths(saved: dict, current: dict) -> tuple[int, list[str]]:
    """(exit code, lines) of the hot paths now against saved figures (pytest-benchmark JSON), by their
    fastest round. Host check first: the reference work must run within HOT_PATH_HOST_TOLERANCE of its
    saved time, else nothing is compared (the figures describe another host) and the lines say so."""
    def mins(data):
        return {b["name"]: b["stats"]["min"] for b in data.get("benchmarks", [])}

    base, now = mins(saved), mins(current)
    if REFERENCE_BENCHMARK not in base or REFERENCE_BENCHMARK not in now:
        return 0, [f"hot paths: skipped: no {REFERENCE_BENCHMARK} timing in the saved figures, so the host "
                   "cannot be matched; refresh them (`bench baseline --hot-paths-only`)"]
    host = now[REFERENCE_BENCHMARK] / base[REFERENCE_BENCHMARK]
    if abs(math.log(host)) > math.log(1 + HOT_PATH_HOST_TOLERANCE):
        return 0, [f"hot paths: skipped: host differs (the reference work takes {host:.2f} x its saved time); "
                   "refresh the saved figures on this host to gate them here"]
    lines = [f"{'hot path':<44} {'saved min':>12} {'now min':>12} {'ratio / host':>13}  verdict",
             f"{'(host: reference work at ' + format(host, '.2f') + ' x its saved time)':<44}"]
    failed = []
    for name in sorted(set(base) & set(now) - {REFERENCE_BENCHMARK}):
        ratio = now[name] / base[name] / host
        verdict = "SLOWER" if ratio > HOT_PATH_LIMIT else "ok"
        if verdict != "ok":
            failed.append(name)
        lines.append(f"{name:<44} {base[name] * 1e6:>10.1f}us {now[name] * 1e6:>10.1f}us {ratio:>13.2f}  {verdict}")
    lines += [f"{name:<44} {'-':>12} {now[name] * 1e6:>10.1f}us {'-':>13}  new" for name in sorted(set(now) - set(base))]
    lines.append(f"hot paths: {len(failed)} over {HOT_PATH_LIMIT:g} x their saved time" +
                 (f": {', '.join(failed)}" if failed else ""))
    return (1 if failed else 0), lines


def run_hot_paths(compare_with: str | None = None, save_to: str | None = None) -> int:
    """pytest-benchmark over tests/benchmarks: save the figures, or compare them with a saved file
    (compare_hot_paths)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    if importlib.util.find_spec("pytest_benchmark") is None:
        raise UsageError("the hot-path benchmarks need pytest-benchmark: pip install -e .[test]")
    if not HOT_PATH_TESTS.is_dir():
        raise UsageError(f"{HOT_PATH_TESTS} is missing; the hot-path benchmarks ship with a source checkout")
    saved = None
    if compare_with:
        try:
            saved = json.loads(Path(compare_with).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"hot-path figures {compare_with} cannot be read ({exc}); make them with "
                             "`bench baseline --hot-paths-only`") from None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(save_to).resolve() if save_to else Path(tmp) / "now.json"
        command = [sys.executable, "-m", "pytest", str(HOT_PATH_TESTS), "-q", "-p", "no:cacheprovider",
                   "--benchmark-only", "--benchmark-enable", "--benchmark-columns=min,median,mean,stddev,rounds",
                   f"--benchmark-json={out}"]
        print("$ " + " ".join(command[2:]), file=sys.stderr, flush=True)
        code = subprocess.run(command, cwd=HOT_PATH_TESTS.parent.parent).returncode
        if code or saved is None:
            return code
        code, lines = compare_hot_paths(saved, json.loads(out.read_text()))
    print("\n".join(lines), file=sys.stderr, flush=True)
    return code
