"""The harness's own hot paths (tests/benchmarks: what it adds around a step, a record write, the gate's
comparison, the report, ...) timed with pytest-benchmark and compared with the saved figures
(results/baselines/hot-paths.json), as `bench regress` and `bench baseline` do (docs/method.md, "Hot paths").

They are compared on the fastest of many rounds (the one least disturbed by other work on a shared machine),
with a wide margin (HOT_PATH_LIMIT): what they must catch is a hot path grown by a multiple (a file write per
step), not a few percent.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.core.errors import UsageError
from bench.core.inputs import RUNS_FILE_LIMIT, read_text_file

HOT_PATHS_FILE = "hot-paths.json"  # beside the baseline file (bench.results.baselines.BASELINE_DIR)
HOT_PATH_TESTS = Path(__file__).resolve().parents[2] / "tests" / "benchmarks"  # in a source checkout
# The hot paths are compared only when the yardstick work timed in the same pytest run (YARDSTICK_BENCHMARK)
# ran within HOT_PATH_HOST_TOLERANCE of its saved time; each figure is then divided by the yardstick's
# ratio, and one over HOT_PATH_LIMIT x its saved time fails.
YARDSTICK_BENCHMARK = "test_yardstick_work"
FORMER_NAMES = {"test_reference_work": YARDSTICK_BENCHMARK}  # figures saved before the rename still match the host
HOT_PATH_HOST_TOLERANCE = 0.25
HOT_PATH_LIMIT = 2.5  # above what the same code on the same host varies by, minutes apart (docs/method.md)


def compare_hot_paths(saved: dict, current: dict) -> tuple[int, list[str]]:
    """(exit code, lines) of the hot paths now against saved figures (pytest-benchmark JSON), by their
    fastest round. Host check first: the yardstick work must run within HOT_PATH_HOST_TOLERANCE of its
    saved time, else nothing is compared (the figures describe another host) and the lines say so."""

    def mins(data):
        return {FORMER_NAMES.get(b["name"], b["name"]): b["stats"]["min"] for b in data.get("benchmarks", [])}

    base, now = mins(saved), mins(current)
    if YARDSTICK_BENCHMARK not in base or YARDSTICK_BENCHMARK not in now:
        return 0, [
            f"hot paths: skipped: no {YARDSTICK_BENCHMARK} timing in the saved figures, so the host "
            "cannot be matched; refresh them (`bench baseline --hot-paths-only`)"
        ]
    host = now[YARDSTICK_BENCHMARK] / base[YARDSTICK_BENCHMARK]
    if abs(math.log(host)) > math.log(1 + HOT_PATH_HOST_TOLERANCE):
        return 0, [
            f"hot paths: skipped: host differs (the yardstick work takes {host:.2f} x its saved time); "
            "refresh the saved figures on this host to gate them here"
        ]
    lines = [
        f"{'hot path':<44} {'saved min':>12} {'now min':>12} {'ratio / host':>13}  verdict",
        f"{'(host: yardstick work at ' + format(host, '.2f') + ' x its saved time)':<44}",
    ]
    failed = []
    for name in sorted(set(base) & set(now) - {YARDSTICK_BENCHMARK}):
        ratio = now[name] / base[name] / host
        verdict = "SLOWER" if ratio > HOT_PATH_LIMIT else "ok"
        if verdict != "ok":
            failed.append(name)
        lines.append(f"{name:<44} {base[name] * 1e6:>10.1f}us {now[name] * 1e6:>10.1f}us {ratio:>13.2f}  {verdict}")
    lines += [
        f"{name:<44} {'-':>12} {now[name] * 1e6:>10.1f}us {'-':>13}  new" for name in sorted(set(now) - set(base))
    ]
    lines.append(
        f"hot paths: {len(failed)} over {HOT_PATH_LIMIT:g} x their saved time"
        + (f": {', '.join(failed)}" if failed else "")
    )
    return (1 if failed else 0), lines


def own_pytest_environment() -> dict[str, str]:
    """The environment for the benchmarks' pytest (run_hot_paths): this one without a calling pytest-xdist worker's
    variables (pytest-benchmark then turns itself off, and --benchmark-only fails) and without the user's
    PYTEST_ADDOPTS (say -n auto): run_hot_paths's command holds every option that pytest takes."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_") and k != "PYTEST_ADDOPTS"}


def run_hot_paths(compare_with: str | None = None, save_to: str | None = None) -> int:
    """pytest-benchmark over tests/benchmarks: save the figures, or compare them with a saved file
    (compare_hot_paths)."""
    if importlib.util.find_spec("pytest_benchmark") is None:
        raise UsageError("the hot-path benchmarks need pytest-benchmark: pip install -e .[test]")
    if not HOT_PATH_TESTS.is_dir():
        raise UsageError(f"{HOT_PATH_TESTS} is missing; the hot-path benchmarks ship with a source checkout")
    saved = None
    if compare_with:
        hint = "make them with `bench baseline --hot-paths-only`"
        text = read_text_file(compare_with, "hot-path figures", RUNS_FILE_LIMIT, hint)
        try:
            saved = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"hot-path figures {compare_with} cannot be read ({exc}); {hint}") from None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(save_to).resolve() if save_to else Path(tmp) / "now.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(HOT_PATH_TESTS),
            "-q",
            "-p",
            "no:cacheprovider",
            "--benchmark-only",
            "--benchmark-enable",
            "--benchmark-columns=min,median,mean,stddev,rounds",
            f"--benchmark-json={out}",
        ]
        print("$ " + " ".join(command[2:]), file=sys.stderr, flush=True)
        code = subprocess.run(command, cwd=HOT_PATH_TESTS.parent.parent, env=own_pytest_environment()).returncode
        if code or saved is None:
            return code
        code, lines = compare_hot_paths(saved, json.loads(out.read_text()))
    print("\n".join(lines), file=sys.stderr, flush=True)
    return code
