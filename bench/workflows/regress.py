"""The regression gate's workflows: run the fixed matrix and compare it with the baseline (`bench regress`),
refresh the baseline (`bench baseline`), confirm a failure by running its cases again.

The method (what is compared, and how) is bench.results' (figures, gate, baselines, hot_paths); this module runs
things and prints. Progress and
verdicts go to stderr; stdout carries only a comparison (a table, or JSON when asked).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from bench.core.environment import calibrate
from bench.core.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, Interrupted, UsageError
from bench.core.records import RunStatus
from bench.core.registry import BACKEND_MODULES, get_backend
from bench.core.spec import resolve_device
from bench.core.store import check_folder_writable, os_reason
from bench.harness.runner import run_specs
from bench.results.baselines import (
    BASELINE_FILE,
    host_match,
    host_speed,
    latest_sweep,
    machine_facts,
    read_runs_file,
    slower_calibration,
    write_baseline,
)
from bench.results.figures import figures
from bench.results.gate import FAILING_VERDICTS, compare_figures, format_comparison
from bench.results.hot_paths import HOT_PATHS_FILE, run_hot_paths
from bench.workflows.plan import SWEEP_DEFAULTS, comm_options
from bench.workflows.sweep import run_benchmark_sweep

# The fixed regression matrix is the default sweep of a 2-core machine: both workloads at their CPU size,
# world sizes 1 and 2, the primary pair (elastic, horovod) where it can run, the plain loop, and an
# allreduce sweep up to a bandwidth-bound message, with a sweep's windows; each case REGRESS_REPEATS times
# (a baseline: BASELINE_REPEATS). So a default sweep of such a machine can serve as a baseline (its fault runs are
# not gated: the matrix has none). Besides, in the
# same sweep, Ray Train at 2 workers on the MLP only (where Ray is installed): each of its launches starts a Ray
# runtime first, which is slow (docs/method.md, "Regression gate"), so one case keeps CI's time; its throughput
# and ratio to the plain loop are gated. (The parameter server is left out for the same reason: its runs are
# tested, not gated.)
REGRESS_MATRIX = dict(
    nproc=2,
    world_sizes=[1, 2],
    workloads=["mnist_mlp", "resnet18"],
    windows=SWEEP_DEFAULTS["windows"],
    warmup_steps=SWEEP_DEFAULTS["warmup_steps"],
    comm_max_bytes=SWEEP_DEFAULTS["max_bytes"],
    extra_cases={"ray": ["mnist_mlp"]},
)
REGRESS_REPEATS = 3
BASELINE_REPEATS = 5
# Where `bench regress` and `bench baseline` (and so `nox -s regress` and `nox -s baseline`) keep their runs by
# default: a store of the gate's own, so that its sweeps never mix with the results `bench report` reads.
REGRESS_STORE = Path("results") / "regress.sqlite"


def regress_command(repeats: int, timeout: float | None = None) -> list[str]:
    """The `bench sweep` command line that runs the same matrix but its companion backend's case (a sweep gives every
    backend the same workloads), recorded in the baseline file, for people."""
    m = REGRESS_MATRIX
    argv = [
        "bench",
        "sweep",
        "--max-nproc",
        str(m["nproc"]),
        "--world-sizes",
        ",".join(map(str, m["world_sizes"])),
        "--workload",
        ",".join(m["workloads"]),
        "--windows",
        str(m["windows"]),
        "--warmup-steps",
        str(m["warmup_steps"]),
        "--max-bytes",
        m["comm_max_bytes"],
        "--repeats",
        str(repeats),
        "--no-faults",
    ]
    return argv + (["--timeout", f"{timeout:g}"] if timeout is not None else [])


def run_matrix(
    store,
    title: str,
    repeats: int,
    *,
    inject_delay: str | None = None,
    timeout: float | None = None,
    before_launches: Callable[[], None] | None = None,
) -> tuple[str, list]:
    """Run the regression matrix as one sweep into `store`: (sweep id, records). before_launches: called once the
    matrix is planned and checked, before its first launch."""
    m = REGRESS_MATRIX
    device, _ = resolve_device(m["nproc"], None)
    return run_benchmark_sweep(
        store,
        title,
        backends="primary",
        extra_cases=m["extra_cases"],
        workloads=m["workloads"],
        device=device,
        world_sizes=m["world_sizes"],
        options={
            "windows": m["windows"],
            "warmup_steps": m["warmup_steps"],
            "step_delay": inject_delay,
            "timeout": timeout,
        },
        comm=comm_options({"max_bytes": m["comm_max_bytes"]}),
        repeats=repeats,
        before_launches=before_launches,
    )


def failing_list(rows: list[dict]) -> str:
    """The failing metrics of a comparison, with their change, on one line."""
    return "; ".join(
        f"{r['metric']} {r['verdict']}" + (f" {r['change']:+.1%}" if r["change"] is not None else "")
        for r in rows
        if r["verdict"] in FAILING_VERDICTS
    )


def timed_calibration() -> dict[str, float]:
    """The host's calibration work (bench.core.environment.calibrate), timed now, said on stderr."""
    print("bench: timing the host's calibration work (a few seconds)", file=sys.stderr, flush=True)
    return calibrate()


def run_matrix_calibrated(store, title: str, repeats: int, **options) -> tuple[str, list, dict[str, float]]:
    """run_matrix with the host's calibration timed once the matrix is checked (bad input is refused before anything
    is timed), before its first launch: (sweep id, records, that calibration; empty if nothing was launched), for
    this_host to judge with the one after the runs."""
    before: dict[str, float] = {}
    sweep_id, records = run_matrix(
        store, title, repeats, before_launches=lambda: before.update(timed_calibration()), **options
    )
    return sweep_id, records, before


def this_host(records: list, before: dict[str, float] | None = None) -> dict:
    """The machine of runs made on this host, with its calibration measured now (bench.core.environment), or the
    slower of now and `before`, timed before the runs (slower_calibration)."""
    now = timed_calibration()
    return {**machine_facts(records), "calibration": now if before is None else slower_calibration(before, now)}


def unavailable_backends(records: list) -> dict[str, str]:
    """backend -> why it cannot run here, for each backend of `records` that cannot (on their device)."""
    out = {}
    for backend, device in sorted({(r.spec.backend, r.spec.device) for r in records}):
        if backend in BACKEND_MODULES and backend not in out:
            problem = get_backend(backend).unavailable_reason(device)
            if problem:
                out[backend] = problem
    return out


def compare_and_print(
    baseline: dict, current: list, as_json: bool, out=None, machine: dict | None = None
) -> tuple[int, list[dict]]:
    """Compare runs (RunRecords) with a baseline file's contents; print the table (or, as_json, the JSON) on
    `out` (default stdout) and a one-line summary on stderr that names every failing metric. `machine`:
    where the current runs were made (default: from their records, without a calibration).
    Returns (exit code, rows)."""
    base_figs, _ = figures(baseline["records"])
    cur_figs, cur_not_ok = figures(current)
    if not cur_figs and not cur_not_ok:
        raise UsageError(
            "the current runs hold no figure the gate compares (training or communication "
            "runs of a sweep); run `bench regress` or `bench sweep` first"
        )
    machine = machine if machine is not None else machine_facts(current)
    same, why = host_match(baseline["machine"], machine)
    # asked only about backends whose baseline figures the current runs lack (a probe of Horovod takes seconds)
    lacking = {key.split(" ")[1] for key in base_figs if key not in cur_figs and key not in cur_not_ok}
    rows = compare_figures(
        base_figs,
        cur_figs,
        cur_not_ok,
        same_machine=same,
        host_differs=why,
        cannot_run=unavailable_backends([r for r in baseline["records"] if r.spec.backend in lacking]),
        host_speed=host_speed(baseline["machine"], machine) if same else None,
    )
    out = out or sys.stdout
    if as_json:
        print(
            json.dumps(
                {
                    "baseline_machine": baseline["machine"],
                    "current_machine": machine,
                    "same_host": same,
                    "host_differs": why or None,
                    "rows": rows,
                },
                indent=1,
            ),
            file=out,
        )
    else:
        print(format_comparison(rows), file=out, flush=True)
    if not same:
        print(
            f"bench compare: absolute throughput is not gated here (host differs: {why}); the ratios within "
            "each sweep still are, where the cases they divide by run at the baseline's speed",
            file=sys.stderr,
        )
    counts = {v: sum(r["verdict"] == v for r in rows) for v in dict.fromkeys(r["verdict"] for r in rows)}
    bad = [r for r in rows if r["verdict"] in FAILING_VERDICTS]
    print(
        "bench compare: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + ("" if not bad else "; failing: " + failing_list(rows)),
        file=sys.stderr,
    )
    return (EXIT_RUN_FAILED if bad else EXIT_OK), rows


def confirm_failures(records: list, rows: list[dict], store, title: str) -> list:
    """Run every case behind a failing metric again, as many times as it ran, and add those runs to the
    comparison: a real slowdown reproduces, a chance one (a burst of other work on a shared machine)
    rarely survives twice the runs. Returns the records with the new ones added."""
    failing = [r for r in rows if r["verdict"] in FAILING_VERDICTS]
    by_id = {r.run_id: r for r in records}
    cases: dict[tuple, list] = {}
    for run_id in dict.fromkeys(i for r in failing for i in r["run_ids"]):
        record = by_id[run_id]
        spec = record.spec
        cases.setdefault((spec.task, spec.backend, record.task.case(spec), spec.world_size), []).append(spec)
    plan = [dataclasses.replace(spec, repeat=spec.repeat + len(specs)) for specs in cases.values() for spec in specs]
    print(
        f"{title}: confirming {len(failing)} failing metric(s): {len(cases)} case(s) run again",
        file=sys.stderr,
        flush=True,
    )
    again = run_specs(plan, store, f"{title} (again)")
    if any(r.status == RunStatus.INTERRUPTED for r in again):
        raise Interrupted()
    return records + again


def check_baseline_dir(folder: str) -> None:
    """A baseline folder that cannot be written is refused before the runs that fill it."""
    try:
        check_folder_writable(Path(folder), create=False)
    except OSError as exc:
        raise UsageError(
            f"--dir {folder}: the baseline cannot be written there ({os_reason(exc)}); give a folder you can write to"
        ) from None


def save_hot_paths(folder: str) -> int:
    """Record the harness's own hot-path benchmarks in folder/hot-paths.json."""
    hot = os.path.join(folder, HOT_PATHS_FILE)
    code = run_hot_paths(save_to=hot)
    print(f"bench baseline: harness hot paths {'written to ' + hot if code == 0 else 'failed'}", file=sys.stderr)
    return EXIT_OK if code == 0 else EXIT_RUN_FAILED


def baseline(
    store,
    folder: str,
    *,
    repeats: int = BASELINE_REPEATS,
    timeout: float | None = None,
    from_store=None,
    sweep_id: str | None = None,
    hot_paths: bool = True,
) -> int:
    """Write folder/cpu-gloo.json from a fresh run of the matrix into `store` (or, given from_store, from a
    sweep already there: sweep_id, else the latest), then the hot-path figures unless hot_paths is False. A fresh
    run's host is calibrated as `bench regress` calibrates its own: before the runs and after, the slower of each
    figure, so that both sides of the gate's host check are timed alike."""
    before: dict[str, float] = {}
    if from_store is not None:
        sweep_id, records = latest_sweep(from_store.records(), sweep_id)
        if not records:
            raise UsageError(f"no sweep in {from_store.path}; run `bench sweep` or drop --from-store")
        matrix = None
    else:
        sweep_id, records, before = run_matrix_calibrated(store, "bench baseline", repeats, timeout=timeout)
        matrix = regress_command(repeats, timeout)
    not_ok = [r for r in records if not r.comparable]
    if not_ok:
        print(
            f"bench baseline: {len(not_ok)} run(s) not ok or not alone on their cores "
            f"({', '.join(r.spec.backend + ' ' + r.status + (' shared' if r.shared_with else '') for r in not_ok)}); "
            "a baseline must be clean: fix them and run again",
            file=sys.stderr,
        )
        return EXIT_RUN_FAILED
    calibration = this_host(records, before or None)["calibration"] if from_store is None else None
    path = write_baseline(os.path.join(folder, BASELINE_FILE), records, sweep_id, matrix, calibration)
    print(f"bench baseline: {len(records)} runs of sweep {sweep_id} written to {path}", file=sys.stderr)
    return save_hot_paths(folder) if hot_paths else EXIT_OK


def regress(
    store,
    folder: str,
    *,
    repeats: int = REGRESS_REPEATS,
    inject_delay: str | None = None,
    timeout: float | None = None,
    confirm: bool = True,
    hot_paths: bool = True,
    as_json: bool = False,
) -> int:
    """Run the matrix into `store`, compare it with folder/cpu-gloo.json (confirming failures by running
    their cases again, unless confirm is False), then the hot paths against folder/hot-paths.json.
    With as_json, stdout carries only the final comparison."""
    runs_file, hot_file = os.path.join(folder, BASELINE_FILE), os.path.join(folder, HOT_PATHS_FILE)
    base = read_runs_file(runs_file, "baseline")  # before minutes of runs, not after
    if hot_paths and not os.path.isfile(hot_file):
        raise UsageError(f"{hot_file} does not exist; make it with `bench baseline` (or pass --no-hot-paths)")
    _, records, before = run_matrix_calibrated(
        store, "bench regress", repeats, inject_delay=inject_delay, timeout=timeout
    )
    if any(r.status == RunStatus.INTERRUPTED for r in records):
        return EXIT_INTERRUPTED
    out = sys.stderr if as_json else None
    machine = this_host(records, before or None)
    code, rows = compare_and_print(base, records, as_json=False, out=out, machine=machine)
    if code and confirm:
        records = confirm_failures(records, rows, store, "bench regress")
        print("bench regress: after running them again:", file=sys.stderr)
        code, rows = compare_and_print(base, records, as_json=False, out=out, machine=machine)
    if as_json:
        print(json.dumps({"rows": rows}, indent=1))
    failures = [failing_list(rows)] if code else []
    if hot_paths:
        hot_code = run_hot_paths(compare_with=hot_file)
        print(
            f"bench regress: harness hot paths {'not over' if hot_code == 0 else 'OVER'} their limit "
            f"against {hot_file}",
            file=sys.stderr,
        )
        if hot_code:
            failures.append("harness hot paths slower than hot-paths.json allows (table above)")
    print(f"bench regress: FAILED: {'; '.join(failures)}" if failures else "bench regress: passed", file=sys.stderr)
    return EXIT_RUN_FAILED if failures else EXIT_OK
