"""The store: typed records in and out, schema checks; a writer killed mid-run and concurrent writers
(real processes, marked slow)."""

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from bench.core.errors import StoreError
from bench.core.records import SCHEMA_VERSION, RunRecord
from bench.core.store import Store
from bench.results.frame import load_frame
from conftest import ROOT
from factories import train_record


def fake_record(i: int) -> RunRecord:
    rec = train_record(f"run-{i:06d}", per_window=[990.0 + i, 1010.0 + i], created_at=1.0e9 + i,
                       status="ok" if i % 3 else "crashed", sweep_id=None)
    rec.environment["payload"] = "x" * 20000  # big enough that a write spans several pages
    return rec


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from bench.core.store import Store
    from test_store import fake_record
    store = Store(sys.argv[1])
    i = 0
    while True:
        store.save(fake_record(i))
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
    assert records[-1] == fake_record(len(records) - 1)  # the last record whole, not half-written
    frame = load_frame(Store(path))
    assert len(frame) == len(records) and set(frame["status"]) == {"ok", "crashed"}
    Store(path).save(fake_record(10**6))  # and it still takes new records
    assert len(Store(path).records()) == len(records) + 1


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "bench.sqlite"
    Store(path).save(fake_record(1))
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        Store(path).records()


def test_record_round_trip_and_frame_columns(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.save(fake_record(7))
    (rec,) = store.records()
    assert rec == fake_record(7)
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
        from test_store import fake_record
        base = int(sys.argv[2])
        for i in range(base, base + 30):
            Store(sys.argv[1]).save(fake_record(i))
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
    store.save(fake_record(1))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET record = '{cut short'")
    capsys.readouterr()
    assert store.records() == []  # a record this bench cannot read is skipped, in one line naming it
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "skipped run run-000001" in line and "not valid JSON" in line, line


def test_reading_never_changes_the_file(tmp_path):
    """Reads open the store read-only: not even its journal mode changes (WAL is set by writers)."""
    path = tmp_path / "bench.sqlite"
    Store(path).save(fake_record(1))
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
    for name, says in (("empty.sqlite", "is an empty file, not a bench store"),
                       ("other.sqlite", "an SQLite file but not a bench store")):
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
@pytest.mark.parametrize("make_bad", [
    lambda p: p.write_bytes(b"not a database " * 100),
    lambda p: p.mkdir(),
])
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

    rec = fake_record(7)
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
    for path, says in ((empty.path, "does not exist"), (broken.path, "not readable JSON"),
                       (tmp_path / "nowhere", "not a run directory")):
        proc = bench_in_process("import", path, "--store", store)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr


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
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "--backend", "single", "--nproc", "1",
                             "--warmup-steps", "2", "--steps-per-window", "20", "--windows", "20", "--store", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
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
