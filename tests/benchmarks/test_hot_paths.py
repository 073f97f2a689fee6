"""pytest-benchmark over the harness's own hot paths, so the suite never slows what it measures.

Under `nox -s tests` these run once each as plain tests (benchmarking is disabled there); `bench regress`
runs them as benchmarks and compares them with results/baselines/hot-paths.json
(bench.results.hot_paths.compare_hot_paths): only when the yardstick work below runs at its saved speed (the same
kind of host), each figure over the yardstick's ratio, failing past bench.results.hot_paths.HOT_PATH_LIMIT. What each
one times:
- the yardstick work: a fixed mix of what the hot paths do (Python objects, JSON, a small synced file
  write, a scipy quantile, small numpy algebra), which the harness's code never changes;
- the step loop: what the harness adds around an optimizer step inside a timed window (StepLoop and
  timed_windows, with a step that does nothing), per step;
- the progress file a rank writes after each window;
- a record write into the SQLite store;
- aggregating per-rank results into a run's metrics;
- the regression gate's comparison of a sweep;
- the HTML report of the committed sample store.
"""

import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from bench.core.rundir import RunDir
from bench.core.store import Store
from bench.rank.kit import StepLoop, timed_windows
from bench.results.figures import figures
from bench.results.frame import load_frame
from bench.results.gate import compare_figures
from factories import train_results

SAMPLE_STORE = Path(__file__).resolve().parent.parent.parent / "reports" / "sample" / "bench.sqlite"
STEPS = 1000


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    # a copy: opening the committed store must never touch it
    path = tmp_path_factory.mktemp("sample") / "bench.sqlite"
    shutil.copy(SAMPLE_STORE, path)
    return Store(path)


@pytest.fixture(scope="module")
def sample_records(sample_store):
    return sample_store.records()


def yardstick_work(path: Path) -> int:
    """The host's speed at the kinds of work the hot paths do; fixed, never touched by the harness's code."""
    import numpy as np
    from scipy.stats import t

    doc = {"runs": [{"id": i, "windows": [i * 0.5 + k for k in range(20)], "name": f"run-{i}"} for i in range(200)]}
    text = json.dumps(doc)
    total = sum(len(r["windows"]) for r in json.loads(text)["runs"])
    table = {}
    for i in range(5000):
        table.setdefault(i % 97, []).append(i)
    with open(path, "w") as fh:
        fh.write(text[:4096])
        fh.flush()
        os.fsync(fh.fileno())
    a = np.arange(64.0).reshape(16, 4) + 1.0
    np.linalg.lstsq(a, np.arange(16.0), rcond=None)
    return total + len(table) + int(t.ppf(0.975, 7) * 0)


def test_yardstick_work(benchmark, tmp_path):
    assert benchmark(yardstick_work, tmp_path / "ref.json") == 200 * 20 + 97


def test_step_loop_overhead_per_1000_steps(benchmark):
    """A window of 1000 steps whose step does nothing: what the harness adds per step, x 1000
    (the per-window progress file is timed on its own below)."""
    step = StepLoop(lambda: None, inject={"kind": "crash", "step": -2})  # armed, never fired
    times, _ = benchmark(timed_windows, step, 1, STEPS, lambda: None, lambda: None, lambda window: None)
    assert len(times) == 1 and step.done >= STEPS


def test_progress_file_write(benchmark, tmp_path):
    run_dir = RunDir(tmp_path / "run").create()
    benchmark(run_dir.write, 0, 0, "progress", {"steps": 100, "window": 3, "time": 1.0})
    assert json.loads(run_dir.rank_file(0, 0, "progress").read_text())["steps"] == 100


def test_record_write(benchmark, tmp_path, sample_records):
    store = Store(tmp_path / "bench.sqlite")
    record = copy.deepcopy(next(r for r in sample_records if r.ok))
    counter = iter(range(10**9))

    def save():
        record.run_id = f"bench-{next(counter)}"
        store.save(record)

    benchmark(save)
    saved = store.records()
    assert len(saved) >= 1 and saved[-1].metrics == record.metrics


def test_aggregate_metrics(benchmark, sample_records):
    """The training task's metrics from two workers' results (what TrainTask.conclude computes)."""
    from bench.tasks.train import train_metrics

    rec = next(
        r
        for r in sample_records
        if r.ok and r.spec.task == "train" and r.spec.world_size == 2 and not r.spec.roles.get("server")
    )
    windows = rec.metrics.window_times_s
    results = train_results(rec.spec, [windows, windows])
    metrics = benchmark(train_metrics, rec.spec, results, 0.0)
    assert metrics.throughput.n == len(windows) and metrics.window_times_s == windows


def test_gate_comparison(benchmark, sample_records):
    figs, _ = figures(sample_records)
    assert figs
    rows = benchmark(compare_figures, figs, figs, {}, True)
    assert {r["verdict"] for r in rows} <= {"ok", "unstable"} and len(rows) == len(figs)


def test_report_generation(benchmark, sample_store):
    from bench.report.page import render_report

    frame = load_frame(sample_store)
    page = benchmark.pedantic(render_report, args=(frame, "sample"), rounds=3, iterations=1)
    assert "<html" in page
