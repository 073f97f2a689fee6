"""The store: atomic records, a writer killed mid-run, schema checks."""

import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from bench import SCHEMA_VERSION
from bench.errors import StoreError
from bench.store import Store
from conftest import ROOT


def fake_record(i: int) -> dict:
    return {"schema_version": SCHEMA_VERSION, "run_id": f"run-{i:06d}", "created_at": 1.0e9 + i,
            "status": "ok" if i % 3 else "crashed", "error": None,
            "spec": {"backend": "elastic", "workload": "mnist_mlp", "world_size": 2, "device": "cpu",
                     "batch_size": 64, "threads": 1, "data": "synthetic", "image_size": 28,
                     "sweep_id": None},
            "metrics": {"throughput": {"mean": 1000.0 + i, "ci_low": 990.0, "ci_high": 1010.0}},
            "payload": "x" * 20000}  # big enough that a write spans several pages


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from bench.store import Store
    from test_store import fake_record
    store = Store(sys.argv[1])
    i = 0
    while True:
        store.save(fake_record(i))
        i += 1
        print(i, flush=True)
""")


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
    assert [r["run_id"] for r in records] == [f"run-{i:06d}" for i in range(len(records))]
    frame = Store(path).load()
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
    frame = store.load()
    row = frame.iloc[0]
    assert row["throughput"] == 1007.0 and row["global_batch"] == 128 and row["status"] == "ok"
    assert str(frame["created_at"].dt.tz) == "UTC"


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "bench.sqlite"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'tests')!r})
        from bench.store import Store
        from test_store import fake_record
        base = int(sys.argv[2])
        for i in range(base, base + 30):
            Store(sys.argv[1]).save(fake_record(i))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(k * 1000)]) for k in range(3)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    assert len(Store(path).records()) == 90
