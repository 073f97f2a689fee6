"""Read commands read: they work on a read-only file system and create no file beside the store (no -wal, no
-shm, no runs/ folder), they read what a connected writer has committed, they skip in one line each a record
this bench cannot read; a write to a store holding records of a newer schema is refused before anything runs.

A read-only file system is a tmpfs mounted read-only (root only: root ignores permission bits, so a folder
without write permission would prove nothing); it is unmounted whatever the test does."""

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from bench.core.records import SCHEMA_VERSION
from bench.core.store import COLUMNS, Store
from conftest import ROOT, assert_one_line_error, bench_in_process
from factories import train_record

SAMPLE = ROOT / "reports" / "sample" / "bench.sqlite"  # committed, in WAL mode, without -wal or -shm

# every verb that only reads a store, as a user gives it ({out}: a writable folder for what the verb writes)
READ_VERBS = {
    "list": ["list"],
    "report": ["report", "-o", "{out}/report.html"],
    "agreement": ["agreement"],
    "compare --aa": ["compare", "--aa"],
}
SMALL = (
    "report",
)  # verbs given a small store made here (the same kind: WAL, no -wal): the sample's page takes seconds


@contextlib.contextmanager
def read_only_mount(folder: Path, files):
    """`files` copied onto a tmpfs mounted at `folder`, which is then made read-only; unmounted on the way out."""
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (and root ignores permission bits, so nothing less would do)")
    if shutil.which("mount") is None:
        pytest.skip("mount not found: apt-get install mount")
    folder.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        for file in files:
            shutil.copy(file, folder)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(folder)], check=True)  # something still holds a file open


def folder_state(folder: Path) -> dict:
    """Every file under `folder`: its content and modification time."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
    }


def argv_of(verb: str, store: Path, out: Path) -> list[str]:
    return [str(a).format(out=out) for a in READ_VERBS[verb]] + ["--store", str(store)]


def small_store(path: Path, ids=("good-1", "good-2")) -> Store:
    store = Store(path)
    for i, run_id in enumerate(ids):
        store.save(train_record(run_id, created_at=1000.0 + i, sweep_id=None))
    return store


def row(record: dict, run_id: str | None = None) -> tuple:
    """A row of the runs table holding `record` (its JSON text, or text given as it is)."""
    text = record if isinstance(record, str) else json.dumps(record)
    return (run_id, 2000.0, "ok", "elastic", "mnist_mlp", 2, "cpu", 64, None, 100.0, text)


def insert(path: Path, rows) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)


@contextlib.contextmanager
def live_writer(path: Path, run_id: str):
    """A writer connected to the store that has committed one more record, still in its -wal (not checkpointed)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_autocheckpoint=0")
        with conn:
            conn.execute(
                f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                row(train_record(run_id, created_at=3000.0, sweep_id=None).to_dict(), run_id),
            )
        assert Path(f"{path}-wal").stat().st_size > 0 and Path(f"{path}-shm").exists()
        yield conn
    finally:
        conn.close()


def store_for(verb: str, tmp_path: Path) -> Path:
    return small_store(tmp_path / "small" / "bench.sqlite").path if verb in SMALL else SAMPLE


# ---------------------------------------------------------------- a store at rest: the committed sample
@pytest.mark.parametrize("verb", list(READ_VERBS))
def test_a_wal_store_is_read_on_a_read_only_file_system(verb, tmp_path_factory, tmp_path):
    with read_only_mount(tmp_path_factory.mktemp("ro") / "mount", [store_for(verb, tmp_path)]) as folder:
        proc = bench_in_process(*argv_of(verb, folder / "bench.sqlite", tmp_path))
        assert proc.returncode in (0, 1), proc.stderr  # 1: agreement and the A/A rates may find contradictions
        assert "cannot be read" not in proc.stderr and proc.stdout.strip(), proc.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["bench.sqlite"]


@pytest.mark.parametrize("verb", list(READ_VERBS))
def test_reading_creates_and_changes_no_file(verb, tmp_path):
    """In a writable folder SQLite's mode=ro would make a -wal and a -shm beside a WAL store: nothing is made."""
    folder = tmp_path / "store"
    folder.mkdir()
    shutil.copy(store_for(verb, tmp_path), folder)
    before = folder_state(folder)
    proc = bench_in_process(*argv_of(verb, folder / "bench.sqlite", tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    assert folder_state(folder) == before


# ---------------------------------------------------------------- a writer at work
def test_a_connected_writer_s_records_are_read_through_its_wal(tmp_path, tmp_path_factory):
    """With a writer connected the store is read through its -wal and -shm (which exist already): a record
    committed and not yet checkpointed is read, here and from a copy on a read-only file system."""
    path = small_store(tmp_path / "bench.sqlite").path
    with live_writer(path, "in-the-wal"):
        names = sorted(p.name for p in tmp_path.iterdir())
        assert [r.run_id for r in Store(path).records()] == ["good-1", "good-2", "in-the-wal"]
        assert sorted(p.name for p in tmp_path.iterdir()) == names
        copies = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        with read_only_mount(tmp_path_factory.mktemp("ro") / "mount", copies) as folder:
            assert [r.run_id for r in Store(folder / "bench.sqlite").records()] == ["good-1", "good-2", "in-the-wal"]


def test_a_store_given_by_a_link_is_read_through_the_wal_beside_the_file_it_links_to(tmp_path):
    path = small_store(tmp_path / "real" / "bench.sqlite").path
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "bench.sqlite").symlink_to(path)
    with live_writer(path, "in-the-wal"):
        assert [r.run_id for r in Store(tmp_path / "link" / "bench.sqlite").records()][-1] == "in-the-wal"
    assert sorted(p.name for p in (tmp_path / "link").iterdir()) == ["bench.sqlite"]
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert_one_line_error(bench_in_process("list", "--store", tmp_path / "loop"), "cannot be used (Too many levels")


def test_a_writer_that_comes_by_during_an_immutable_read_is_not_missed(tmp_path):
    """The store read without locks (no -wal: immutable) is changed by a writer during the read: that read is
    thrown away and made again, and sees the writer's record."""
    store = small_store(tmp_path / "bench.sqlite")
    reads = []

    def read(conn):
        ids = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY created_at")]
        if not reads:
            Store(store.path).save(train_record("came-by", created_at=5000.0, sweep_id=None))
        reads.append(ids)
        return ids

    assert store._read(read) == ["good-1", "good-2", "came-by"]
    assert len(reads) == 2


def test_a_wal_holding_changes_without_its_shm_is_refused_without_making_one(tmp_path):
    path = small_store(tmp_path / "bench.sqlite").path
    copy = tmp_path / "copy"
    copy.mkdir()
    with live_writer(path, "in-the-wal"):
        shutil.copy(path, copy)
        shutil.copy(f"{path}-wal", copy)
    before = folder_state(copy)
    assert_one_line_error(
        bench_in_process("list", "--store", copy / "bench.sqlite"),
        "its -wal file holds changes",
        "-shm",
        "copy the store with both files",
    )
    assert folder_state(copy) == before


# ---------------------------------------------------------------- records this bench cannot read
def unreadable_rows() -> dict[str, tuple[tuple, str]]:
    """run id -> (the row, what the line that skips it says)."""
    good = train_record("x", sweep_id=None).to_dict()
    made = {
        "newer": ({**good, "schema_version": 99}, "has schema 99, newer than this bench"),
        "text-version": ({**good, "schema_version": "5"}, "schema_version '5' is not an integer"),
        "float-version": ({**good, "schema_version": 99.5}, "schema_version 99.5 is not an integer"),
        "cut-short": ('{"schema_version": 6, "run', "not valid JSON"),
        "../../evil": (good, "run_id: not a valid name (it holds a path separator)"),
    }
    return {
        run_id: (row(record if isinstance(record, str) else {**record, "run_id": run_id}, run_id), says)
        for run_id, (record, says) in made.items()
    }


@pytest.mark.parametrize("verb", ["list", "report"])
def test_a_record_this_bench_cannot_read_is_skipped_in_one_line_naming_it(verb, tmp_path):
    path = small_store(tmp_path / "bench.sqlite").path
    bad = unreadable_rows()
    insert(path, [r for r, _ in bad.values()])
    proc = bench_in_process(*argv_of(verb, path, tmp_path))
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if "skipped run" in line]
    assert len(skipped) == len(bad), proc.stderr
    for run_id, (_, says) in bad.items():
        named = run_id if "/" not in run_id else repr(run_id)  # a name that is not one is quoted
        (line,) = [line for line in skipped if f"skipped run {named} of {path}: " in line]
        assert says in line, line
    if verb == "list":
        assert "good-1" in proc.stdout and "good-2" in proc.stdout and "evil" not in proc.stdout
    else:
        assert (tmp_path / "report.html").is_file()


# ---------------------------------------------------------------- writing beside newer records
def run_dir_to_import(folder: Path) -> Path:
    rec = train_record("to-import", sweep_id=None)
    run = folder / rec.run_id
    run.mkdir()
    (run / "record.json").write_text(json.dumps(rec.to_dict()))
    (run / "spec.json").write_text(json.dumps(rec.spec.to_dict()))
    return run


@pytest.mark.parametrize("argv", [["run", "--backend", "single", "--nproc", "1"], ["sweep"], ["import", "{run}"]])
def test_a_write_to_a_store_holding_newer_records_is_refused_before_anything_runs(argv, tmp_path, nothing_runs):
    path = small_store(tmp_path / "results" / "bench.sqlite").path
    newer = train_record("from-a-newer-bench", sweep_id=None).to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    insert(path, [row(newer, newer["run_id"])])
    run = run_dir_to_import(tmp_path)
    nothing_runs.snapshot()
    before = folder_state(tmp_path)
    proc = bench_in_process(*[a.format(run=run) for a in argv], "--store", path)
    assert_one_line_error(
        proc,
        f"{path} holds records of schema {SCHEMA_VERSION + 1} (run from-a-newer-bench)",
        f"newer than this bench ({SCHEMA_VERSION})",
        "update bench",
    )
    assert folder_state(tmp_path) == before
