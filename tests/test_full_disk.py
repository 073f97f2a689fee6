"""A full disk loses nothing and leaves nothing half-made: a run whose disk fills after its last window ends with its
own status, its record kept where there is room (its run directory, else a folder in $TMPDIR, else the JSON on
stderr) and a one-line message saying how to add it (`bench import`), exit 1; the next command on the store adds it
once there is room, and nothing calls it abandoned. A store is made whole or not at all, and a failed or interrupted
write leaves no temporary file.

The disk is a small tmpfs mounted here (root only), filled with a file sized from its free space; it is unmounted
whatever the test does."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from bench.core.rundir import RunDir, write_atomic
from bench.core.store import Store
from bench.harness import keep
from bench.harness.keep import keep_record, spare_folder
from bench.harness.lifeline import recover
from bench.harness.outcome import process_status, unrecorded_exits
from conftest import FAST, ROOT, bench_in_process, fill
from factories import RunDirBuilder, outcome, train_record, train_results, train_spec


def temporary_files(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob("*") if p.name.endswith(".tmp") or ".tmp-" in p.name]


def whole_store_or_none(path: Path) -> None:
    """The store at `path` is absent, or a bench store every reader opens."""
    if path.exists():
        Store(path).records()  # raises on anything but a whole store


def one_error_line(stderr: str, verb: str = "run") -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith(f"bench {verb}: error: ")]
    assert len(lines) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


# ---------------------------------------------------------------- a real run, its disk filled after its last window
def start_run_on(disk: Path, tmp_path: Path):
    """A short run storing into `disk`, its spare folder ($TMPDIR) beside the test: (store, spare root, process)."""
    store, spare_root = disk / "bench.sqlite", tmp_path / "tmp"
    spare_root.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(spare_root))
    env.pop("BENCH_STORE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", "--backend", "single", "--nproc", "1", *FAST, "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    return store, spare_root, proc


@pytest.mark.slow
def test_a_run_whose_disk_fills_after_its_last_window_keeps_its_record_and_says_how_to_add_it(
    disk, tmp_path, monkeypatch
):
    """The bench process is stopped (SIGSTOP) once its rank has written its exit file, the disk filled to the last
    byte, and the process let go on: the run and its record are made, and nothing on that disk can take them."""
    store, spare_root, proc = start_run_on(disk, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while not list(disk.glob("runs/*/ranks/*.exit.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.01)
        proc.send_signal(signal.SIGSTOP)
        try:
            filler = fill(disk)
        finally:
            proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    run_dir = RunDir(next((disk / "runs").iterdir()))
    run_id = run_dir.path.name
    spare = spare_root / f"bench-records-{os.getuid()}" / run_id  # (spare_folder in bench's own $TMPDIR)
    assert proc.returncode == 1, err
    said = one_error_line(err)
    assert f"run {run_id} ended ok, but its record could not be stored in {store}" in said
    assert f"it is kept in {spare / 'record.json'}: add it with `bench import {spare} --store {store}`" in said
    assert "trying again" in err  # the store was tried again before the record went elsewhere
    assert temporary_files(disk, spare_root) == []
    whole_store_or_none(store)
    monkeypatch.setattr("tempfile.tempdir", str(spare_root))  # the later commands here: the same $TMPDIR as the run's
    listed = bench_in_process("list", "--store", store)
    assert f"run {run_id} ended ok but is not stored yet" in listed.stderr and "abandoned" not in listed.stderr

    filler.unlink()  # room again: the next command on the store adds the record, with the run's own status
    assert recover(Store(store)) == [(run_id, "ok", True)]
    stored = {r.run_id: r for r in Store(store).records()}[run_id]
    assert stored.status == "ok" and stored.metrics.throughput.mean > 0
    assert json.loads(run_dir.record_file.read_text())["run_id"] == run_id and not spare.exists()
    assert not run_dir.owner_file.exists()
    other = tmp_path / "other.sqlite"  # and the run directory, whole again, imports like any other
    assert bench_in_process("import", run_dir.path, "--store", other).returncode == 0
    assert [r.status for r in Store(other).records()] == ["ok"]
    assert temporary_files(disk, spare_root) == []


def the_guard(run: subprocess.Popen, disk: Path, deadline: float) -> psutil.Process:
    """The guard of the run's one rank, once it has started the rank."""
    while True:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-2000:]
        for proc in psutil.Process(run.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if (
                    "bench.harness.guard" in proc.cmdline()
                    and str(disk) in " ".join(proc.cmdline())
                    and proc.children()
                ):
                    return proc
        time.sleep(0.01)


@pytest.mark.slow
def test_a_rank_whose_exit_file_meets_a_full_disk_keeps_its_measurement(disk, tmp_path, monkeypatch):
    """The disk fills between the rank's result and its exit file: the guard (stopped from the rank's start until the
    rank has written its result and ended, the disk filled meanwhile) cannot write the exit file, and still exits as
    the rank did. The run is ok with its figures; its events say which exit file is missing and that the disk is
    full; the record, which the full disk cannot take either, is kept and stored once there is room."""
    store, spare_root, proc = start_run_on(disk, tmp_path)
    try:
        deadline = time.monotonic() + 240
        guard = the_guard(proc, disk, deadline)
        guard.suspend()
        try:
            [rank] = guard.children()
            while rank.status() != psutil.STATUS_ZOMBIE:  # it has written its result and ended
                assert time.monotonic() < deadline, proc.communicate()[1][-2000:]
                time.sleep(0.01)
            assert list(disk.glob("runs/*/ranks/rank0.a0.result.json"))
            filler = fill(disk)
        finally:
            guard.resume()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    run_dir = RunDir(next((disk / "runs").iterdir()))
    run_id = run_dir.path.name
    assert proc.returncode == 1, err  # the record could not be stored: it is kept, as any record the disk cannot take
    assert f"run {run_id} ended ok, but its record could not be stored in {store}" in one_error_line(err)
    missing = (
        f"bench: run {run_id}: rank 0 (attempt 0) wrote its result, but its exit file is missing: its guard "
        f"could not write it: the disk of {run_dir.path} is full ("
    )
    assert missing in err and "Traceback" not in err, err
    assert not run_dir.rank_file(0, 0, "exit").exists()

    filler.unlink()
    monkeypatch.setattr("tempfile.tempdir", str(spare_root))  # (where the run kept its record: its $TMPDIR)
    assert recover(Store(store)) == [(run_id, "ok", True)]
    [stored] = Store(store).records()
    assert stored.status == "ok" and stored.error is None and stored.metrics.throughput.mean > 0
    [unrecorded] = [e for e in stored.events if e["kind"] == "rank_exit_unrecorded"]
    assert (unrecorded["rank"], unrecorded["attempt"]) == (0, 0) and missing.split(": ", 2)[2] in unrecorded["message"]
    assert [e["returncode"] for e in stored.events if e["kind"] == "launcher_exited"] == [0]
    assert temporary_files(disk, spare_root) == []


def test_what_a_full_disk_cut_short_is_said_to_be_the_disk(disk):
    """A run directory on a full disk: a launcher that failed with no rank's failure recorded, and a rank without its
    result, are said to be on a full disk, where the missing file may be; a rank whose result is there but whose exit
    file is not is an event of the record (its result counts), saying why where the disk says."""
    spec = train_spec(world_size=2)
    results = train_results(spec, [[0.1, 0.1], [0.1, 0.1]])
    builder = RunDirBuilder(disk / "run", spec).finished(results[0]).joined(1)
    builder.run_dir.write(1, 0, "result", results[1].to_dict())  # (its exit file is what the disk could not take)
    run_dir = builder.run_dir
    assert [e["message"] for e in unrecorded_exits(run_dir, outcome())] == [
        "rank 1 (attempt 0) wrote its result, but its exit file is missing: its guard could not write it (a full disk "
        "that had room again by the end, or the file removed); its result is kept, its exit time is not among the "
        "events"
    ]
    filler = fill(disk)
    full = f"the disk of {run_dir.path} is full ("
    [event] = unrecorded_exits(run_dir, outcome())
    assert (event["kind"], event["rank"]) == ("rank_exit_unrecorded", 1)
    assert f"could not write it: {full}" in event["message"]
    assert unrecorded_exits(run_dir, outcome(returncode=1)) == []  # (a failed launcher is said in the error)
    assert process_status(spec, run_dir, outcome()) == ("ok", None)
    status, error = process_status(spec, run_dir, outcome(returncode=1))
    assert status == "failed" and error.message.startswith(
        f"launcher exited with 1, no rank's failure is recorded, and {full}"
    )
    assert "what a rank or its guard had to write may be what is missing" in error.message
    (run_dir.ranks / "rank1.a0.result.json").unlink()
    status, error = process_status(spec, run_dir, outcome())
    assert status == "failed" and error.message.startswith(f"rank(s) [1] produced no result ({full}")
    filler.unlink()
    status, error = process_status(spec, run_dir, outcome(returncode=1))
    assert error.message == "launcher exited with 1 and no rank failed"


def test_a_record_kept_in_the_temporary_directory_is_added_by_bench_import(disk, tmp_path, monkeypatch):
    """The record of a run whose store and run directory are full goes to $TMPDIR's spare folder, which `bench import`
    takes; the run directory is then made whole by the next command on the store."""
    store = small_store(disk)
    run_dir, rec = made_run(disk, "20250101-000000-aaaaaa")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    filler = fill(disk)
    kept = keep_record(rec, run_dir, store, retry_delays=())
    assert not kept.stored and kept.file == spare_folder(rec.run_id) / "record.json"
    assert kept.file.parent.parent.parent == tmp_path
    assert "nor written to its run directory (No space left on device)" in kept.not_stored(rec, store.path)
    assert temporary_files(disk, tmp_path) == []
    filler.unlink()
    proc = bench_in_process("import", kept.file.parent, "--store", store.path)
    assert proc.returncode == 0, proc.stderr
    assert rec.run_id in {r.run_id for r in store.records()}
    assert recover(store) == []  # stored already: its run directory is only made whole
    assert json.loads(run_dir.record_file.read_text())["run_id"] == rec.run_id
    assert not run_dir.owner_file.exists() and not kept.file.exists()


def test_a_record_with_no_room_anywhere_is_printed_whole(disk, monkeypatch, capsys):
    store = small_store(disk)
    run_dir, rec = made_run(disk, "20250101-000000-bbbbbb")
    monkeypatch.setattr("tempfile.tempdir", str(disk / "tmp"))  # the temporary directory is on the full disk too
    (disk / "tmp").mkdir()
    fill(disk)
    kept = keep_record(rec, run_dir, store, retry_delays=())
    assert not kept.stored and kept.file is None
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [json.loads(line)["run_id"] for line in printed] == [rec.run_id]
    said = kept.not_stored(rec, store.path)
    assert "it is the JSON line above: save it as" in said and f"`bench import {rec.run_dir} --store" in said
    assert temporary_files(disk) == [] and not spare_folder(rec.run_id).exists()


def test_a_store_without_room_is_tried_again_and_takes_the_record_once_there_is(disk, monkeypatch):
    store = small_store(disk)
    run_dir, rec = made_run(disk, "20250101-000000-cccccc")
    filler = fill(disk)
    said = []

    def room_freed_meanwhile(line):  # (the moment bench says it tries again; the space comes back then)
        said.append(line)
        filler.unlink()

    monkeypatch.setattr(keep, "note", room_freed_meanwhile)
    kept = keep_record(rec, run_dir, store, retry_delays=(0.1,))
    assert kept.stored and len(said) == 1 and "has no room for the record" in said[0] and "trying again" in said[0]
    assert rec.run_id in {r.run_id for r in store.records()}


def small_store(disk: Path) -> Store:
    store = Store(disk / "bench.sqlite")
    store.check_writable()
    return store


def made_run(disk: Path, run_id: str):
    """A run directory as a run leaves it before its record (spec and owner file), and the record made for it."""
    run_dir = RunDir(disk / "runs" / run_id).create()
    rec = train_record(run_id, run_dir=str(run_dir.path))
    run_dir.spec_file.write_text(json.dumps(rec.spec.to_dict(), indent=1))
    run_dir.owner_file.write_text(json.dumps({"owner": {"pid": 1, "started": 0.0}, "lifeline": None}))
    return run_dir, rec


# ---------------------------------------------------------------- a store made whole or not at all
@pytest.mark.parametrize("free_kib", [0, 4, 24, 40])
def test_a_store_is_made_whole_or_not_at_all(disk, free_kib):
    """Too little room for a store that can take a record (its file, and SQLite's 32 KiB -shm file beside it): one
    line, exit 2, and nothing made: no store, no folder, no temporary file."""
    fill(disk, free_kib * 1024)
    store = disk / "results" / "bench.sqlite"
    proc = bench_in_process("run", "--backend", "single", "--nproc", "1", *FAST, "--store", store)
    said = one_error_line(proc.stderr)
    assert proc.returncode == 2 and ("cannot be written" in said or "cannot be made" in said), proc.stderr
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_store_made_where_there_is_room_is_whole(disk):
    fill(disk, 256 * 1024)
    (disk / "bench.sqlite").touch()  # an empty file in its place is made a store as well
    store = small_store(disk)
    assert store.records() == [] and store.stored_run_ids(["x"]) == set()
    assert sorted(p.name for p in disk.iterdir()) == ["bench.sqlite", "filler", "runs"]


# ---------------------------------------------------------------- no temporary file after a failed write
def test_a_write_without_room_leaves_the_old_file_and_no_temporary_file(disk):
    path = disk / "page.html"
    path.write_text("old")
    fill(disk)
    with pytest.raises(OSError):
        write_atomic(path, "x" * 100_000)
    assert path.read_text() == "old" and temporary_files(disk) == []


def test_bench_report_without_room_says_so_and_leaves_no_temporary_file(disk, tmp_path):
    store = Store(tmp_path / "bench.sqlite")
    store.save(train_record("r1"))
    fill(disk, 16 * 1024)  # room to check the folder is writable, not for the page (some 40 KB)
    proc = bench_in_process("report", "--store", store.path, "-o", disk / "report.html")
    said = one_error_line(proc.stderr, "report")
    assert proc.returncode == 2 and "no space left on device" in said, proc.stderr
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_write_interrupted_from_within_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "record.json"
    path.write_text("old")

    def interrupted_half_way(tmp):
        Path(tmp).write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, write=interrupted_half_way)
    assert path.read_text() == "old" and temporary_files(tmp_path) == []


WRITER = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from bench.core.errors import Interrupted
    from bench.core.rundir import write_atomic

    def interrupted(signum, frame):  # what bench's command line does with SIGTERM
        raise Interrupted()

    signal.signal(signal.SIGTERM, interrupted)
    # Ctrl-C as Python sets it up: a test run started in the background of a script inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def slow(tmp):
        Path(tmp).write_text("half of it")
        print("writing", flush=True)
        time.sleep(60)

    try:
        write_atomic(sys.argv[1], write=slow)
    except (KeyboardInterrupt, Interrupted):
        sys.exit(130)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_write_leaves_the_old_file_and_no_temporary_file(tmp_path, sig):
    path = tmp_path / "report.html"
    path.write_text("old")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert len(temporary_files(tmp_path)) == 1  # the write is half done
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 130
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
    assert path.read_text() == "old" and temporary_files(tmp_path) == []
