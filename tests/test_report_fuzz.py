"""One bad record never costs the page: what a record holds (odd text, extreme or non-finite figures, deep nesting)
is shown as written, refused at `bench import` in one line, or, already in a store, left out of the page with a
note that names it; the page is written whatever the store holds."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
import sys
from pathlib import Path

import pytest
from markupsafe import escape

from bench.core.codec import MAX_DEPTH, record_line
from bench.core.records import RunRecord
from bench.core.rundir import RunDir
from bench.core.store import Store
from conftest import assert_one_line_error, bench, bench_in_process
from factories import comm_record, comm_row, fault_record, train_record

# a fault run's samples/s around its fault (the fault at t = 0), enough for the throughput-over-time plot
TIMELINE = {"t0": 0.0, "bin_s": 1.0, "t": [-2.0, -1.0, 0.0, 1.0, 2.0], "samples_per_s": [10.0, 10.0, 0.0, 5.0, 10.0]}


def run_dir_of(folder: Path, data: dict, text: str | None = None) -> Path:
    """A run directory for `data` (a record's JSON) as a run leaves it: record.json (`text`, else the JSON of `data`)
    and spec.json."""
    run_dir = RunDir(folder / data["run_id"]).create()
    run_dir.spec_file.write_text(json.dumps(data["spec"]))
    run_dir.record_file.write_text(json.dumps(data) if text is None else text)
    return run_dir.path


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def import_stdin(text: str, store: Path, monkeypatch) -> object:
    """`bench import -` with `text` on stdin."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    return bench_in_process("import", "-", "--store", store)


# ---------------------------------------------------------------- bench import
@pytest.mark.parametrize(
    "field, value, said",
    [
        ("metrics.throughput.mean", "1e999", "Infinity"),
        ("metrics.throughput.per_window[1]", '"NaN"', "NaN"),
        ("metrics.startup.rendezvous_s", "-1e999", "-Infinity"),
    ],
)
def test_a_non_finite_figure_is_refused_at_import_in_one_line_naming_the_run_and_the_field(
    tmp_path, field, value, said
):
    data = train_record("t1").to_dict()
    marker = 123.25  # a value no other field holds: the one to replace
    if field == "metrics.throughput.mean":
        data["metrics"]["throughput"]["mean"] = marker
    elif field == "metrics.throughput.per_window[1]":
        data["metrics"]["throughput"]["per_window"][1] = marker
    else:
        data["metrics"]["startup"]["rendezvous_s"] = marker
    text = json.dumps(data).replace(str(marker), value)
    store = tmp_path / "bench.sqlite"
    proc = bench_in_process("import", run_dir_of(tmp_path / "runs", data, text), "--store", store)
    assert_one_line_error(proc, f"record t1.{field}: {said} is not a finite number")
    assert not store.exists()


def test_deeply_nested_json_is_refused_at_import_in_one_line_saying_the_bound(tmp_path, monkeypatch):
    """Nested past Python's own recursion (which fails the JSON parser), and nested just past the bound (which the
    parser takes): a record file and a record line on stdin alike."""
    store = tmp_path / "bench.sqlite"
    data = train_record("t1").to_dict()
    bound = f"more than {MAX_DEPTH} levels deep"
    for depth in (100_000, MAX_DEPTH + 1):
        text = json.dumps(data).replace('"launch": {}', f'"launch": {{"deep": {nested(depth)}}}')
        proc = bench_in_process("import", run_dir_of(tmp_path / f"d{depth}", data, text), "--store", store)
        assert_one_line_error(proc, "record.json", bound)
    line = record_line(dict(data, launch={"deep": json.loads(nested(MAX_DEPTH + 1))}))
    assert_one_line_error(import_stdin(f"{line}\n", store, monkeypatch), "stdin line 1", bound)
    assert not store.exists()
    # at the bound, taken: the record and its launch are the two levels above the value
    fine = record_line(dict(data, launch={"deep": json.loads(nested(MAX_DEPTH - 2))}))
    assert import_stdin(f"{fine}\n", store, monkeypatch).returncode == 0


def test_import_of_a_kept_record_removes_its_copy_in_the_temporary_directory(tmp_path, monkeypatch):
    """A record kept in its spare folder ($TMPDIR/bench-records-UID/RUN_ID, where neither its store nor its run
    directory could take it) and imported from there: once stored, it is back in its run directory and the copy is
    gone. Where the import fails, the copy, then the only one, stays."""
    from bench.harness.keep import spare_folder

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))  # bench's $TMPDIR, here
    (tmp_path / "tmp").mkdir()
    own = RunDir(tmp_path / "results" / "runs" / "t1").create()  # its run directory: no record.json (a full disk)
    data = dict(train_record("t1").to_dict(), run_dir=str(own.path))
    own.spec_file.write_text(json.dumps(data["spec"]))
    spare = spare_folder("t1")  # as bench.harness.keep writes it: the record and the spec
    spare.mkdir(mode=0o700, parents=True)
    (spare / "record.json").write_text(json.dumps(data))
    (spare / "spec.json").write_text(json.dumps(data["spec"]))
    unwritable = tmp_path / "a-file"
    unwritable.write_text("")
    refused = bench_in_process("import", spare, "--store", unwritable / "bench.sqlite")
    assert refused.returncode == 2, refused.stderr
    assert (spare / "record.json").exists() and not own.record_file.exists()  # kept: the record is nowhere else

    store = tmp_path / "results" / "bench.sqlite"
    proc = bench_in_process("import", spare, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert f"its kept copy in {spare} is removed" in proc.stderr
    assert [r.run_id for r in Store(store).records()] == ["t1"]
    assert json.loads(own.record_file.read_text()) == data
    assert not spare.exists()


# ---------------------------------------------------------------- a store already holding a bad record
def test_a_store_with_a_non_finite_figure_reports_and_lists_with_a_note(tmp_path):
    store = Store(tmp_path / "bench.sqlite")
    bad = train_record("bad", per_window=[100.0, 101.0])
    bad.metrics.throughput.mean = math.inf  # stored as written, bypassing import
    for rec in (train_record("e1"), train_record("h1", backend="horovod"), bad):
        store.save(rec)
    page = tmp_path / "report.html"
    proc = bench_in_process("report", "--store", store.path, "-o", page)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    why = "record bad.metrics.throughput.mean: Infinity is not a finite number"
    assert f"skipped run bad of {store.path}" in proc.stderr and why in proc.stderr
    assert "1 stored run(s) left out" in html and why in html and "2 runs (2 ok)" in html
    listed = bench_in_process("list", "--store", store.path)
    assert listed.returncode == 0 and why in listed.stderr
    assert "e1" in listed.stdout and "h1" in listed.stdout and "bad" not in listed.stdout


def test_text_with_dollars_in_a_plot_is_drawn_as_written(tmp_path):
    """A workload's path (the fault plot's title) and hosts' names (the host map's tick labels) with `$` in them,
    which matplotlib would read as formulas, one of them broken."""
    store = Store(tmp_path / "bench.sqlite")
    workload = "/home/u/$\\frac{a}$/$x$.py:net"
    for i, backend in enumerate(("elastic", "horovod")):
        rec = fault_record(f"f{i}", backend, metrics={"timeline": TIMELINE})
        rec.spec = dataclasses.replace(rec.spec, workload=workload)
        for row in rec.rank_map:
            row.host = f"h$${row.rank}"
        store.save(rec)
    page = tmp_path / "report.html"
    proc = bench_in_process("report", "--store", store.path, "-o", page)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert f"throughput over time, {escape(workload)}" in html and "hosts with the ranks" in html


def test_every_text_a_figure_holds_is_drawn_as_written_and_a_log_axis_keeps_its_numbers():
    from matplotlib.cbook import is_math_text

    from bench.report.sections import figure_png, pyplot

    plt = pyplot()
    fig, (ax, log) = plt.subplots(1, 2)
    ax.plot([0, 1], [0, 1], label="$\\frac{a}$ line")
    ax.set_title("$x$ title")
    ax.set_xlabel("$$")
    ax.annotate("$y$", (0.5, 0.5))
    ax.set_yticks([0, 1], ["$a$", "b\ud800\x1b[2J"])
    ax.legend()
    log.plot([4, 2**20], [1, 2])
    log.set_xscale("log", base=2)
    assert figure_png(fig)
    texts = [ax.title, ax.xaxis.label, *ax.texts, *ax.get_legend().get_texts(), *ax.get_yticklabels()]
    assert [t.get_text() for t in texts] == [
        "\\$x\\$ title",
        "\\$\\$",
        "\\$y\\$",
        "\\$\\frac{a}\\$ line",
        "\\$a\\$",
        "b\\ud800\\x1b[2J",
    ]
    assert not any(is_math_text(t.get_text()) for t in texts)
    assert all(is_math_text(t.get_text()) for t in log.get_xticklabels() if t.get_text())  # 2^k, as before


# ---------------------------------------------------------------- the page, whatever the store holds
ODD = [
    "$",
    "$$",
    "\\",
    "_^{}",
    "$\\frac{a}{b}$",
    "$\\frac{a}$",
    "<script>alert(1)</script>",
    "\x1b[2J",
    "x" * 4000,
    "naïve 中文 ✓ Ω",
    "שלום \u202eevil",
    "a\x00b",
    "\udc80",
    "&amp; \"q\" 'q' %s {0}",
]
# what a workload's path may hold (bench.core.inputs.workload_problem: no control character; and text SQLite can index)
IN_A_PATH = [s for s in ODD if s.isprintable() and not any("\ud800" <= c <= "\udfff" for c in s)]
EXTREME = [1e308, -1e308, 1e-308, 5e-324, 0.0, -1.0]
NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
# fields with a default, left out of some records' JSON (a path of keys into it)
OPTIONAL = [
    ("launch",),
    ("shared_with",),
    ("error", "tail"),
    ("metrics", "profile"),
    ("metrics", "input_wait_share"),
    ("metrics", "other_roles"),
    ("metrics", "ceiling"),
    ("metrics", "throughput", "per_window"),
    ("metrics", "throughput", "unit"),
    ("metrics", "startup", "launch_to_first_step_s"),
    ("metrics", "startup", "launcher_phases"),
]


def odd_record(rng: random.Random, i: int) -> tuple[RunRecord, str | None]:
    """Run number i, of any kind, with odd text where a record holds text, extreme figures, and for about one in
    eight a non-finite figure: (the record, the field that is not finite or None)."""
    run_id = f"r{i:03d}"
    kind = rng.choice(["train", "train", "comm", "fault", "failed"])
    backend = rng.choice(["elastic", "horovod", "single"] if kind == "train" else ["elastic", "horovod"])
    world = 1 if backend == "single" else rng.choice([1, 2, 4])
    workload = rng.choice(["mnist_mlp", f"/w/{rng.choice(IN_A_PATH)}/m.py:net"])
    sweep = rng.choice(["s1", "s2", None])
    if kind == "train":
        v = rng.choice([1.5, 100.0, 1e300, -5.0])  # (the factory derives window times and a spread from them)
        windows = [v, v * 1.01, v * 0.99] if abs(v) < 1e100 else [v] * 3
        rec = train_record(run_id, backend, world, windows, 1000.0 + i, sweep_id=sweep, workload=workload)
        m = rec.metrics
        if rng.random() < 0.3:
            m.throughput.mean = rng.choice(EXTREME)
        if rng.random() < 0.2:
            m.startup.launch_to_first_step_s = rng.choice([*EXTREME, None])
        m.peak_rss_bytes_max, m.param_count = rng.choice([(2**27, 1000), (10**30, 10**40)])
    elif kind == "comm":
        world = max(world, 2)
        rows = [comm_row(size=size, world_size=world, time_us=rng.choice([100.0, 1e-3, 1e6])) for size in (4, 1024)]
        rows[-1].busbw_gbps = rng.choice([rows[-1].busbw_gbps, *EXTREME])
        rec = comm_record(run_id, backend, world, rows, rng.choice([4.0, None]), 1000.0 + i, sweep_id=sweep)
        rec.metrics.fit = rng.choice([None, rec.metrics.fit])
    elif kind == "fault":
        timeline = dict(TIMELINE, samples_per_s=[10.0, rng.choice([10.0, 1e300, 5e-324]), 0.0, 5.0, 10.0])
        metrics = {"timeline": rng.choice([timeline, {}]), "detected_by": rng.choice([*ODD, None])}
        metrics["recovery_s"] = rng.choice([1.5, 2.5, None, *EXTREME])
        rec = fault_record(run_id, backend, created_at=1000.0 + i, metrics=metrics)
        rec.spec = dataclasses.replace(rec.spec, workload=f"/w/{rng.choice(IN_A_PATH)}/m.py:net")
    else:
        status = rng.choice(["crashed", "failed", "timeout", "interrupted", "diverged"])
        rec = train_record(run_id, backend, world, status=status, created_at=1000.0 + i, workload=workload)
        rec.error.message, rec.error.tail = rng.choice(ODD), rng.choice(ODD)
    rec.duration_s = rng.choice([10.0, 1e308, 0.0])
    rec.environment = rng.choice(
        [{}, {"cpu_model": rng.choice(ODD), "hostname": rng.choice(ODD), "cpu_count": rng.choice([2, 10**30])}]
    )
    if rng.random() < 0.3:
        rec.environment["variables"] = {"OMP_NUM_THREADS": rng.choice(ODD)}
    if rng.random() < 0.2:  # a run across hosts: the host map draws its hosts' names
        for row in rec.rank_map:
            row.host = f"{rng.choice(ODD)}-{row.rank}"
    poisoned = None
    if rec.metrics is not None and rng.random() < 0.125:
        word = rng.choice(list(NON_FINITE))
        if kind == "comm":
            field, holder = "metrics.rows[0].busbw_gbps", rec.metrics.rows[0]
        elif kind == "fault":
            field, holder = "metrics.recovery_s", rec.metrics
        else:
            field, holder = rng.choice(
                [
                    ("metrics.throughput.mean", rec.metrics.throughput),
                    ("metrics.startup.rendezvous_s", rec.metrics.startup),
                    ("metrics.straggler_ratio", rec.metrics),
                ]
            )
        setattr(holder, field.rsplit(".", 1)[1].split("[")[0], NON_FINITE[word])
        poisoned = f"record {run_id}.{field}: {word} is not a finite number"
    return rec, poisoned


@pytest.mark.slow
def test_the_page_is_written_whatever_the_stored_records_hold(tmp_path):
    """240 records of every kind, seeded: odd text, extreme figures, non-finite figures stored bypassing import,
    optional fields left out. One page, through the real CLI: written, every run on it or named as left out with
    why, and the records' text shown, never run (no script, no terminal escape, no NUL)."""
    rng = random.Random(20261206)
    store = Store(tmp_path / "bench.sqlite")
    poisoned = {}
    for i in range(240):
        rec, why = odd_record(rng, i)
        data = rec.to_dict()
        for *path, name in OPTIONAL:
            holder = data
            for key in path:
                holder = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(holder, dict) and name in holder and rng.random() < 0.3:
                del holder[name]
        if why is None:
            rec = RunRecord.from_dict(data)  # (one poisoned cannot be read: it is stored as built)
        else:
            poisoned[rec.run_id] = why
        store.save(rec)
    assert 10 <= len(poisoned) <= 60, len(poisoned)
    page = tmp_path / "out" / "report.html"
    proc = bench("report", "--store", store.path, "-o", page, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert f"{240 - len(poisoned)} runs (" in html and f"{len(poisoned)} stored run(s) left out" in html
    for run_id, why in poisoned.items():
        assert f"skipped run {run_id} of" in proc.stderr and str(escape(why)) in html, run_id
    assert proc.stderr.count("skipped run ") == len(poisoned)
    shown = [f"r{i:03d}" for i in range(240) if f"r{i:03d}" not in poisoned]
    assert [run_id for run_id in shown if run_id not in html] == []
    assert "<script" not in html.lower() and "&lt;script&gt;" in html
    assert "\x1b" not in html and "\x00" not in html and "\\x1b[2J" in html
