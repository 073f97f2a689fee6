"""The store: typed records in and out, schema checks; a writer killed mid-run and concurrent writers
(real processes, marked slow)."""

import contextlib
import dataclasses
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from bench.core.errors import StoreError
from bench.core.records import SCHEMA_VERSION
from bench.core.store import Store
from bench.results.frame import load_frame
from conftest import ROOT, fill
from factories import large_record

WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from bench.core.store import Store
    from factories import large_record
    store = Store(sys.argv[1])
    i = 0
    while True:
        store.save(large_record(i))
        i += 1
        print(i, flush=True)
""")


@pytest.mark.slow
def test_store_survives_a_writer_killed_mid_run(tmp_path):
    path = tmp_path / "bench.sqlite"
    script = WRITER.format(root=str(ROOT), tests=str(ROOT / "tests"))
    writer = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
    written = 0
    while written < 40:
        line = writer.stdout.readline()
        assert line, "the writer stopped early"
        written = int(line)
    writer.send_signal(signal.SIGKILL)  # mid-way through the next write
    writer.wait()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    records = Store(path).records()
    assert len(records) >= written
    assert [r.run_id for r in records] == [f"run-{i:06d}" for i in range(len(records))]
    assert records[-1] == large_record(len(records) - 1)  # the last record whole, not half-written
    frame = load_frame(Store(path))
    assert len(frame) == len(records) and set(frame["status"]) == {"ok", "crashed"}
    Store(path).save(large_record(10**6))  # and it still takes new records
    assert len(Store(path).records()) == len(records) + 1


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "bench.sqlite"
    Store(path).save(large_record(1))
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        Store(path).records()


def test_record_round_trip_and_frame_columns(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.save(large_record(7))
    (rec,) = store.records()
    assert rec == large_record(7)
    frame = load_frame(store)
    row = frame.iloc[0]
    assert row["throughput"] == 1007.0 and row["global_batch"] == 128 and row["status"] == "ok"
    assert str(frame["created_at"].dt.tz) == "UTC"


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "bench.sqlite"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'tests')!r})
        from bench.core.store import Store
        from factories import large_record
        base = int(sys.argv[2])
        for i in range(base, base + 30):
            Store(sys.argv[1]).save(large_record(i))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(k * 1000)]) for k in range(3)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    assert len(Store(path).records()) == 90


def test_what_is_not_a_readable_store_is_said_in_one_line(tmp_path, capsys):
    with pytest.raises(StoreError, match="no results store at .*; run `bench run`"):
        Store(tmp_path / "absent.sqlite").records()
    (tmp_path / "folder.sqlite").mkdir()
    with pytest.raises(StoreError, match="it is a directory; give a file path"):
        Store(tmp_path / "folder.sqlite").records()
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(StoreError, match="an SQLite file but not a bench store"):
        Store(tmp_path / "other.sqlite").records()
    (tmp_path / "garbage.sqlite").write_bytes(b"\x00not sqlite at all" * 100)
    with pytest.raises(StoreError, match="cannot be read"):
        Store(tmp_path / "garbage.sqlite").records()
    store = Store(tmp_path / "bench.sqlite")
    store.save(large_record(1))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET record = '{cut short'")
    capsys.readouterr()
    assert store.records() == []  # a record this bench cannot read is skipped, in one line naming it
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "skipped run run-000001" in line and "not valid JSON" in line, line


def test_reading_never_changes_the_file(tmp_path):
    """Reads open the store read-only: not even its journal mode changes (WAL is set by writers)."""
    path = tmp_path / "bench.sqlite"
    Store(path).save(large_record(1))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    before = path.read_bytes()
    assert [r.run_id for r in Store(path).records()] == ["run-000001"]
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    (tmp_path / "empty.sqlite").touch()
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:
        conn.execute("PRAGMA user_version = 1")  # a database with no tables
    for name, says in (
        ("empty.sqlite", "is an empty file, not a bench store"),
        ("other.sqlite", "an SQLite file but not a bench store"),
    ):
        before = (tmp_path / name).read_bytes()
        with pytest.raises(StoreError, match=says):
            Store(tmp_path / name).records()
        assert (tmp_path / name).read_bytes() == before


def test_an_empty_bench_store_variable_means_the_default(monkeypatch):
    from bench.core.store import DEFAULT_STORE

    monkeypatch.setenv("BENCH_STORE", "")
    assert Store().path == DEFAULT_STORE
    monkeypatch.setenv("BENCH_STORE", "elsewhere.sqlite")
    assert str(Store().path) == "elsewhere.sqlite"


# ---------------------------------------------------------------- a measured run is never lost
@pytest.mark.parametrize("make_bad", [lambda p: p.write_bytes(b"not a database " * 100), lambda p: p.mkdir()])
def test_a_store_that_cannot_take_a_record_is_refused_before_anything_runs(tmp_path, make_bad):
    from bench.harness.runner import execute
    from factories import train_spec

    bad = tmp_path / "bench.sqlite"
    make_bad(bad)
    with pytest.raises(StoreError, match="--store"):
        execute(train_spec("single", world_size=1), Store(bad))
    assert not (tmp_path / "runs").exists(), "nothing may be launched for a store that cannot be written"
    good = Store(tmp_path / "new" / "bench.sqlite")
    good.check_writable()
    assert good.path.is_file() and (good.path.parent / "runs").is_dir()


def test_bench_import_adds_a_kept_record_and_refuses_what_is_not_one(tmp_path):
    from bench.core.rundir import RunDir, write_json_atomic
    from conftest import bench_in_process

    rec = large_record(7)
    run_dir = RunDir(tmp_path / "runs" / rec.run_id).create()
    run_dir.spec_file.write_text(json.dumps(rec.spec.to_dict(), indent=1))  # as bench.harness.runner writes it
    write_json_atomic(run_dir.record_file, rec.to_dict())
    store = tmp_path / "other" / "bench.sqlite"
    proc = bench_in_process("import", run_dir.path, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert [r.run_id for r in Store(store).records()] == [rec.run_id]
    assert Store(store).records()[0].metrics == rec.metrics
    empty = RunDir(tmp_path / "runs" / "empty").create()
    broken = RunDir(tmp_path / "runs" / "broken").create()
    broken.record_file.write_text("{")
    for path, says in (
        (empty.path, "does not exist"),
        (broken.path, "not readable JSON"),
        (tmp_path / "nowhere", "not a run directory"),
    ):
        proc = bench_in_process("import", path, "--store", store)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr


# ---------------------------------------------------------------- records as lines of a log: bench import -
def import_log(text: str, store, monkeypatch):
    """`bench import -` with `text` on stdin (as `kubectl logs POD | bench import -` gives it)."""
    import io

    from conftest import bench_in_process

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    return bench_in_process("import", "-", "--store", store)


def test_record_lines_in_a_log_are_imported_once_and_its_other_lines_passed_over(tmp_path, monkeypatch):
    """Two real runs' records (the sample store's) printed as `bench run --record-lines` prints them, among a pod's
    other log lines, one after a timestamp (kubectl logs --timestamps) and one twice."""
    from bench.core.codec import record_line

    first, second = legacy_store(tmp_path / "sample.sqlite").records()[:2]
    log = [
        "bench run: elastic mnist_mlp, 2 CPU process(es), gloo",
        "  window 2/2",
        record_line(first.to_dict()),
        "stored run in /results/bench.sqlite",
        f"2026-12-03T09:00:00.123456789Z {record_line(second.to_dict())}",
        record_line(first.to_dict()),  # the same pod's log read twice
    ]
    store = tmp_path / "k8s.sqlite"
    proc = import_log("\n".join(log) + "\n", store, monkeypatch)
    assert proc.returncode == 0 and proc.stderr.count("stored run") == 2, proc.stderr
    assert sorted((r.run_id, json.dumps(r.to_dict())) for r in Store(store).records()) == sorted(
        (r.run_id, json.dumps(r.to_dict())) for r in (first, second)
    )
    again = import_log(log[2] + "\n", store, monkeypatch)  # a record already there is not stored twice
    assert again.returncode == 0 and f"run {first.run_id} is already in" in again.stderr, again.stderr
    assert len(Store(store).records()) == 2


def test_a_cut_or_changed_record_line_is_one_line_of_error_naming_it(tmp_path, monkeypatch):
    from bench.core.codec import record_line
    from conftest import assert_one_line_error, bench_in_process

    [record] = legacy_store(tmp_path / "sample.sqlite").records()[:1]
    line = record_line(record.to_dict())
    store = tmp_path / "k8s.sqlite"
    changed = line.replace(record.run_id, record.run_id[:-1] + "x")
    for text, says in (
        (
            f"{line}\nlog\n{line[: len(line) // 2]}\n",
            "stdin line 3: a bench-record line, but its record is not the one",
        ),
        (f"{line}\n{changed}\n", "stdin line 2: a bench-record line, but its record is not the one"),
        (f"{line}\n{record_line({'run_id': 'x'})}\n", "stdin line 2: a bench-record line, but"),
        ("bench run: elastic mnist_mlp\n", "no bench-record line on stdin"),
    ):
        assert_one_line_error(import_log(text, store, monkeypatch), says)
        assert not store.exists()  # nothing stored: not even the good line before it
    assert_one_line_error(bench_in_process("import", "-", tmp_path, "--store", store), "comes alone")
    assert_one_line_error(
        bench_in_process("run", "--record-lines", "--json", "--store", store), "--record-lines with --json"
    )
    assert not store.exists()


@pytest.mark.slow
def test_a_run_whose_store_breaks_while_it_runs_is_kept_and_can_be_imported(tmp_path):
    """The store turns into garbage while a real run goes on: the run ends, exit 1, its record is kept in its
    run directory, and `bench import` adds it to another store."""
    import os
    import time

    from conftest import bench_in_process

    store = tmp_path / "bench.sqlite"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BENCH_STORE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--backend",
            "single",
            "--nproc",
            "1",
            "--warmup-steps",
            "2",
            "--steps-per-window",
            "20",
            "--windows",
            "20",
            "--store",
            str(store),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "runs").glob("*/spec.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    store.write_bytes(b"not a database " * 100)  # the run has started: its store is checked already
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "could not be stored" in err and "bench import" in err
    run_dir = next((tmp_path / "runs").iterdir())
    kept = json.loads((run_dir / "record.json").read_text())
    assert kept["status"] == "ok" and kept["metrics"]["throughput"]["mean"] > 0
    other = tmp_path / "other.sqlite"
    assert bench_in_process("import", run_dir, "--store", other).returncode == 0
    assert Store(other).records()[0].run_id == kept["run_id"]


# ---------------------------------------------------------------- what is asked often is not a scan of every record
def legacy_store(path) -> Store:
    """A store as benches wrote them before the schema_version column (the sample store of 2026-12-01: records of
    schemas 2 to 5, the store at user_version 5), copied."""
    import shutil

    shutil.copyfile(ROOT / "tests" / "data" / "store-v5.sqlite", path)
    return Store(path)


def columns_of(path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[1] for row in conn.execute("PRAGMA table_info(runs)")}


def test_the_last_runs_are_read_without_the_others(tmp_path, capsys):
    """records(last=N) decodes the latest rows only: an unreadable record older than them goes unread (no line
    skips it), one among them is skipped and the next older one read instead; oldest first, as records() orders
    them, equal times in the order they were stored."""
    store = Store(tmp_path / "bench.sqlite")
    for i in range(6):
        store.save(large_record(i))
    store.save(dataclasses.replace(large_record(6), created_at=large_record(5).created_at))
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE runs SET record = '{cut short' WHERE run_id IN ('run-000000', 'run-000004')")
    capsys.readouterr()
    ids = [r.run_id for r in store.records()]
    assert ids == ["run-000001", "run-000002", "run-000003", "run-000005", "run-000006"]
    assert capsys.readouterr().err.count("skipped run") == 2
    assert [r.run_id for r in store.records(last=2)] == ids[-2:]
    assert capsys.readouterr().err == ""  # the unreadable ones are older: not read at all
    assert [r.run_id for r in store.records(last=3)] == ids[-3:]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "skipped run run-000004" in line
    assert [r.run_id for r in store.records(last=50)] == ids


def test_each_record_s_schema_is_a_column_that_save_fills(tmp_path):
    store = Store(tmp_path / "bench.sqlite")
    store.save(large_record(1))
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("SELECT schema_version FROM runs").fetchall() == [(SCHEMA_VERSION,)]
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_by_time", "runs_by_schema"} <= indexes


def test_the_check_before_a_run_asks_the_column_not_the_records(tmp_path):
    """Where a row's schema_version column says its schema, check_usable takes it (the record's JSON is not read);
    where it says none (a row an older bench wrote), the record's JSON is read."""
    store = Store(tmp_path / "bench.sqlite")
    store.save(large_record(1))
    store.save(large_record(2))
    newer = json.dumps({**large_record(2).to_dict(), "schema_version": SCHEMA_VERSION + 1})
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE runs SET record = ? WHERE run_id = 'run-000002'", (newer,))
    store.check_usable()  # its column still says the current schema
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE runs SET schema_version = NULL WHERE run_id = 'run-000002'")
    with pytest.raises(StoreError, match=f"holds records of schema {SCHEMA_VERSION + 1} \\(run run-000002\\)"):
        store.check_usable()
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE runs SET schema_version = ? WHERE run_id = 'run-000002'", (SCHEMA_VERSION + 1,))
        conn.execute("UPDATE runs SET record = ? WHERE run_id = 'run-000002'", (json.dumps(large_record(2).to_dict()),))
    with pytest.raises(StoreError, match=f"holds records of schema {SCHEMA_VERSION + 1} \\(run run-000002\\)"):
        store.check_usable()


def test_a_store_made_before_the_column_is_read_as_it_is_and_given_it_by_the_first_write(tmp_path):
    store = legacy_store(tmp_path / "bench.sqlite")
    assert "schema_version" not in columns_of(store.path)
    before = store.path.read_bytes()
    records = store.records()
    assert [r.run_id for r in store.records(last=3)] == [r.run_id for r in records[-3:]]
    store.check_usable()
    assert store.path.read_bytes() == before  # read paths change nothing, so the column is not added there
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        written = {
            run_id: json.loads(text)["schema_version"]
            for run_id, text in conn.execute("SELECT run_id, record FROM runs")
        }
    assert set(written.values()) == {2, 3, 4, 5}  # records of four schemas, each as it was written
    store.check_writable()
    assert store.path.read_bytes() == before  # the check before a run stores nothing, so it upgrades nothing
    store.save(large_record(1))  # the first record stored brings the column, in its own transaction
    assert "schema_version" in columns_of(store.path)
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert dict(conn.execute("SELECT run_id, schema_version FROM runs WHERE run_id != 'run-000001'")) == written
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_by_time", "runs_by_schema"} <= indexes
    assert store.records() == [large_record(1), *records]  # the oldest run of all


def test_the_script_that_makes_a_large_store_makes_new_launches_of_the_sample_s_runs(tmp_path):
    """scripts/scale_store.py (docs/studies/store-scale.md): whole copies of the sample, each with fresh run and sweep
    ids and later than the one before, readable as the sample is; the sample itself untouched."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale_store", ROOT / "scripts" / "scale_store.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    sample = legacy_store(tmp_path / "sample.sqlite")
    before = sample.path.read_bytes()
    target = tmp_path / "large.sqlite"
    assert script.main(["--source", str(sample.path), "--runs", "600", str(target)]) == 0
    assert sample.path.read_bytes() == before
    originals, copies = sample.records(), Store(target).records()
    made = -(-600 // len(originals))  # whole copies: at least 600
    assert len(copies) == made * len(originals) and made > 1
    assert len({r.run_id for r in copies}) == len(copies) and all(r.run_dir.endswith(r.run_id) for r in copies)
    sweep_ids = {r.spec.sweep_id for r in originals if r.spec.sweep_id}
    assert len({r.spec.sweep_id for r in copies if r.spec.sweep_id}) == made * len(sweep_ids)
    first, last = copies[: len(originals)], copies[-len(originals) :]  # the first copy is the sample itself
    assert [r.run_id for r in first] == [r.run_id for r in originals]
    assert not {r.spec.sweep_id for r in last} & sweep_ids and min(r.created_at for r in last) > max(
        r.created_at for r in copies[: -len(originals)]
    )
    for copy, run in zip(last, originals):  # the same run, but for its ids and times
        assert dataclasses.replace(copy.spec, sweep_id=run.spec.sweep_id) == run.spec and copy.metrics == run.metrics
        assert copy.status == run.status and copy.rank_map == run.rank_map


# ---------------------------------------------------------------- a row that is not UTF-8, a write that is refused
def break_utf8(path, run_id: str) -> None:
    """The record of `run_id` made not UTF-8: one byte inside its JSON (the backend's name) turned into 0xff, the
    row's value still of type TEXT, as a damaged file or a foreign writer could leave it."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        (raw,) = conn.execute("SELECT CAST(record AS BLOB) FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        assert b'"backend": "elastic"' in raw
        conn.execute(
            "UPDATE runs SET record = CAST(? AS TEXT) WHERE run_id = ?",
            (raw.replace(b'"backend": "elastic"', b'"backend": "ela\xffstic"', 1), run_id),
        )
    with contextlib.closing(sqlite3.connect(path)) as conn:  # what sqlite3 makes of it when it decodes the rows itself
        assert conn.execute("SELECT typeof(record) FROM runs WHERE run_id = ?", (run_id,)).fetchone() == ("text",)
        with pytest.raises(sqlite3.OperationalError, match="Could not decode to UTF-8"):
            conn.execute("SELECT record FROM runs").fetchall()


def test_a_record_that_is_not_utf_8_is_skipped_naming_it_and_the_others_are_read(tmp_path, capsys):
    from conftest import bench

    store = Store(tmp_path / "bench.sqlite")
    for i in range(4):
        store.save(large_record(i))
    break_utf8(store.path, "run-000002")
    capsys.readouterr()
    assert [r.run_id for r in store.records()] == ["run-000000", "run-000001", "run-000003"]
    assert [r.run_id for r in store.records(last=2)] == ["run-000001", "run-000003"]
    store.check_usable()  # the check before a run reads the store too
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 2 and all(
        line.startswith(f"bench: skipped run run-000002 of {store.path}: ") and "not UTF-8: byte 0xff at offset" in line
        for line in said
    ), said

    listed = bench("list", "--store", store.path)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["run-000000", "run-000001", "run-000003"]
    (line,) = listed.stderr.strip().splitlines()
    assert line.startswith("bench: skipped run run-000002 of ") and "not UTF-8" in line, line
    page = tmp_path / "report.html"
    reported = bench("report", "--store", store.path, "-o", page)
    assert reported.returncode == 0, reported.stderr
    (line,) = reported.stderr.strip().splitlines()
    assert line.startswith("bench: skipped run run-000002 of ") and "not UTF-8" in line, line
    assert f"Store {store.path}: 3 runs (1 ok)" in page.read_text(encoding="utf-8")


def test_a_store_made_before_the_column_takes_a_record_beside_one_that_is_not_utf_8(tmp_path):
    """The first record stored fills the new column from every record's JSON: a record that is not UTF-8 gets none
    (and stays skipped), instead of failing the write."""
    store = legacy_store(tmp_path / "bench.sqlite")
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        broken = conn.execute(
            "SELECT run_id FROM runs WHERE record LIKE '%\"backend\": \"elastic\"%' ORDER BY created_at LIMIT 1"
        ).fetchone()[0]
    break_utf8(store.path, broken)
    readable = [r.run_id for r in store.records()]
    assert broken not in readable
    store.save(large_record(1))
    assert [r.run_id for r in store.records()] == ["run-000001", *readable]
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        versions = dict(conn.execute("SELECT run_id, schema_version FROM runs"))
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert versions[broken] is None and versions["run-000001"] == SCHEMA_VERSION
    assert readable and all(versions[run_id] in (2, 3, 4, 5) for run_id in readable)


def store_state(path) -> tuple[int, list, bytes]:
    """What an older bench would see of a store: its user_version, its tables and indexes, its bytes (read without
    changing them)."""
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    return version, schema, path.read_bytes()


def test_a_refused_run_leaves_an_older_store_as_it_was(tmp_path, monkeypatch):
    """`bench run` checks its store (check_writable), then is refused (its cores are another run's, and it may not
    wait): an older store keeps its user_version, its table and every byte, so the older bench still takes it."""
    import os

    # claims of their own: the session's folder may hold another test's run (tests side by side), and this holder
    # must be the one the run meets
    monkeypatch.setenv("BENCH_LOCK_DIR", str(tmp_path / "locks"))

    from bench.harness.cores import CoreClaim, Sharing
    from conftest import FAST, bench

    store = legacy_store(tmp_path / "bench.sqlite")
    before = store_state(store.path)
    assert before[0] == 5 < SCHEMA_VERSION and "schema_version" not in columns_of(store.path)
    cpus = [f"cpu{c}" for c in sorted(os.sched_getaffinity(0))]  # what a run of this machine claims
    with CoreClaim("holder-of-the-cores", "a test holder", None, cpus, Sharing(wait_s=0)):
        proc = bench(
            "run",
            "--backend",
            "single",
            "--nproc",
            "1",
            "--workload",
            "mnist_mlp",
            *FAST,
            "--wait-for-cores",
            "0",
            "--store",
            store.path,
        )
    assert proc.returncode == 2 and "still in use by run holder-of-the-cores" in proc.stderr, proc.stderr
    assert store_state(store.path) == before
    assert not list((tmp_path / "runs").glob("*"))  # refused before anything of the run was made
    store.save(large_record(1))  # a record stored upgrades it, with the record
    assert store_state(store.path)[0] == SCHEMA_VERSION and "schema_version" in columns_of(store.path)


def test_a_write_without_room_leaves_an_older_store_as_it_was(disk, tmp_path):
    """`bench import` into an older store on a full disk: the record cannot be stored (one line, exit 2), and the
    store is as it was: the upgrade that would have come with the record (the new column filled for every row, the
    user_version) is not kept without it."""
    from bench.core.rundir import RunDir, write_json_atomic
    from conftest import bench_in_process

    older = legacy_store(tmp_path / "sample.sqlite").path
    with contextlib.closing(sqlite3.connect(older)) as conn:  # its first 60 runs, to fit the small disk with room
        with conn:
            conn.execute("DELETE FROM runs WHERE rowid NOT IN (SELECT rowid FROM runs ORDER BY created_at LIMIT 60)")
        conn.execute("VACUUM")
    path = disk / "bench.sqlite"
    path.write_bytes(older.read_bytes())
    before = store_state(path)
    assert before[0] == 5 < SCHEMA_VERSION and "schema_version" not in columns_of(path)
    rec = large_record(7)
    run_dir = RunDir(tmp_path / "runs" / rec.run_id).create()
    run_dir.spec_file.write_text(json.dumps(rec.spec.to_dict(), indent=1))
    write_json_atomic(run_dir.record_file, rec.to_dict())
    assert len(before[2]) > 3 * 128 * 1024
    fill(disk, 128 * 1024)  # room for SQLite's -shm file and a few pages, not for the upgrade
    proc = bench_in_process("import", run_dir.path, "--store", path)
    assert proc.returncode == 2 and "cannot be written" in proc.stderr and "full" in proc.stderr, proc.stderr
    assert store_state(path) == before
    assert not [p.name for p in disk.iterdir() if p.name.startswith("bench.sqlite-") or ".tmp" in p.name]
