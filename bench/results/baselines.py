"""Baseline files of the regression gate (`bench baseline` writes them, `bench regress` and `bench compare`
read them, as they read a current runs file), and whether two hosts can be compared on absolute figures:
the facts of the machine a set of runs came from, with its calibration (docs/method.md, "Matching hosts")."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from bench.core.cgroups import quota_words
from bench.core.codec import RecordError
from bench.core.errors import UsageError
from bench.core.inputs import RUNS_FILE_LIMIT, read_text_file
from bench.core.records import RunRecord
from bench.core.rundir import write_json_atomic
from bench.results.sweeps import launches

BASELINE_FORMAT = "elastic-vs-horovod-bench baseline"
BASELINE_VERSION = 1
BASELINE_DIR = os.path.join("results", "baselines")
BASELINE_FILE = "cpu-gloo.json"
# Absolute figures travel between hosts only when these facts agree and the hosts ran the same calibration
# work (bench.core.environment.calibrate) within CALIBRATION_TOLERANCE of each other: a label is not a speed.
MACHINE_KEYS = ("cpu_model", "cpu_count", "cuda_devices", "cpu_flags", "cpu_capability")
CALIBRATION_KEYS = ("gemm_gflops", "conv_step_ms")  # bench.core.environment.calibrate's figures, compared by host_match
CALIBRATION_TOLERANCE = 0.15


def machine_facts(records: list) -> dict:
    """The facts of the machine the runs were made on (the first record's environment that has any), as a
    baseline file keeps them: what host_match compares, and what a person reads."""
    env = next((r.environment for r in records if r.environment), {}) or {}
    facts = {
        k: env.get(k)
        for k in (
            "hostname",
            "platform",
            "python",
            "cpu_model",
            "cpu_count",
            "cpu_flags",
            "cpu_capability",
            "memory_bytes",
            "torch",
            "cuda_devices",
        )
    }
    if "cpu_quota" in env:  # recorded since runs say it; None: no limit
        facts["cpu_quota"] = env["cpu_quota"]
    return facts | {**(env.get("packages") or {}), "git": env.get("git")}


def host_match(base: dict, cur: dict) -> tuple[bool, str]:
    """Whether absolute figures measured on the current host can be compared with the baseline's, and if
    not, why: the facts of MACHINE_KEYS (where both sides recorded them) and the calibration work."""
    for key in MACHINE_KEYS:
        if base.get(key) is not None and cur.get(key) is not None and base.get(key) != cur.get(key):
            return False, f"{key} {base.get(key)} on the baseline's host, {cur.get(key)} here"
    # a CPU quota (None where recorded: no limit) throttles what runs on the CPUs the facts above name
    if "cpu_quota" in base and "cpu_quota" in cur and base["cpu_quota"] != cur["cpu_quota"]:
        return False, (
            f"CPU quota {quota_words(base['cpu_quota'])} on the baseline's host, {quota_words(cur['cpu_quota'])} here"
        )
    cb, cc = base.get("calibration"), cur.get("calibration")
    if not cb or not cc:
        side = "the baseline" if not cb else "the current runs"
        return False, (
            f"no calibration recorded with {side}, so whether the hosts run equally fast is "
            "unknown (refresh the baseline with `bench baseline`)"
        )
    speed = calibration_speeds(cb, cc)
    off = {k: v for k, v in speed.items() if abs(math.log(v)) > math.log(1 + CALIBRATION_TOLERANCE)}
    if off:
        return False, "this host runs the calibration work at " + ", ".join(
            f"{v:.0%} ({k})" for k, v in off.items()
        ) + " of the baseline host's speed"
    return True, ""


def calibration_speeds(base: dict[str, float], cur: dict[str, float]) -> dict[str, float]:
    """Each calibration figure of this host as a speed against the baseline host's (below 1: slower here)."""
    return {
        "gemm_gflops": cur["gemm_gflops"] / base["gemm_gflops"],
        "conv_step_ms": base["conv_step_ms"] / cur["conv_step_ms"],
    }


def host_speed(base: dict, cur: dict) -> float | None:
    """How fast this host ran the calibration work against the baseline's host (as host_match reads it): the figure
    furthest from the baseline's, as a speed (below 1: slower here); None where a side recorded no calibration."""
    cb, cc = base.get("calibration"), cur.get("calibration")
    if not cb or not cc:
        return None
    return max(calibration_speeds(cb, cc).values(), key=lambda v: abs(math.log(v)))


def slower_calibration(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """Of two calibrations of one host, each figure at its slower (in the directions host_match reads them): a host
    vouches for its absolute figures only if it ran at the baseline's speed before its runs and after them. Best of 10
    at one moment hides a shared host that is slower most of the time (one measured at 68% to 95% of its baseline's
    speed from one call to the next, its runs 25% to 35% slower throughout)."""
    return {
        "gemm_gflops": min(first["gemm_gflops"], second["gemm_gflops"]),
        "conv_step_ms": max(first["conv_step_ms"], second["conv_step_ms"]),
    }


def latest_sweep(records: list, sweep_id: str | None = None) -> tuple[str | None, list]:
    """The records of one sweep: the one named, else the most recent sweep; a launch interrupted and run again by
    `bench sweep --resume` is its later run only (bench.results.sweeps.launches)."""
    swept = [r for r in records if r.spec.sweep_id]
    if sweep_id is None:
        if not swept:
            return None, []
        sweep_id = max(swept, key=lambda r: r.created_at).spec.sweep_id
    return sweep_id, launches([r for r in swept if r.spec.sweep_id == sweep_id])


def write_baseline(
    path: str | Path, records: list, sweep_id: str | None, matrix=None, calibration: dict | None = None
) -> Path:
    """A baseline file: the runs, and the machine they came from with its calibration (host_match)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path,
        {
            "format": BASELINE_FORMAT,
            "version": BASELINE_VERSION,
            "created_at": time.time(),
            "sweep_id": sweep_id,
            "machine": {**machine_facts(records), "calibration": calibration},
            "matrix": matrix,
            "records": [r.to_dict() for r in records],
        },
    )
    return path


def read_runs_file(path: str | Path, what: str) -> dict:
    """A baseline (or current) file, or a one-line error that says what to do."""
    path = Path(path)
    hint = "make one with `bench baseline` (or `nox -s baseline`)"
    if os.path.isdir(path):  # (os.path: a name too long for the file system is not a directory either)
        raise UsageError(
            f"{what} file {path} is a directory; give a file, such as "
            f"{path / BASELINE_FILE} (what `bench baseline --dir {path}` writes)"
        )
    text = read_text_file(path, f"{what} file", RUNS_FILE_LIMIT, hint)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:  # (arrays nested thousands deep: the decoder's stack)
        raise UsageError(f"{what} file {path} is not readable JSON ({exc}); {hint}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("records"), list):
        raise UsageError(f"{what} file {path} is not a bench baseline file; {hint}")
    if data.get("version") != BASELINE_VERSION:
        raise UsageError(
            f"{what} file {path} has version {data.get('version')}, this bench reads {BASELINE_VERSION}; {hint}"
        )
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
