"""A store, its run directories and the files bench keeps in a temporary folder may sit in a folder every local user
may write to (/tmp): another user must not be able to point bench, run as root, at a file or folder of their choosing
(bench.core.shared_folders), whether or not the kernel's own guard (fs.protected_symlinks) is on. Each probe plants,
as that second user (a child process that drops to uid 65534), what they could plant in a sticky folder every user
may write to, then uses bench there as root: what the link points at stays as it was."""

import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.core.errors import StoreError, UsageError
from bench.core.rundir import RunDir, write_atomic
from bench.core.store import Store
from bench.harness.keep import drop_spare, kept_record, spare_folder
from conftest import FAST, ROOT, assert_one_line_error, assert_untouched, bench
from factories import train_record

OTHER_UID = 65534  # nobody
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to act as a second local user (uid 65534)")


def as_other_user(plant: Callable[[], object]) -> None:
    """Run `plant` in a child process that is the second local user: uid and gid 65534, no other groups."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            plant()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the second user could not plant its files"


def root_store(path: Path, run_id: str = "root-1") -> bytes:
    """A bench store of root's own, in a folder only root may enter; returns its bytes."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    Store(path).save(train_record(run_id, sweep_id=None))
    os.chmod(path, 0o600)
    return path.read_bytes()


def test_a_store_name_another_user_linked_is_refused_and_the_store_it_points_at_untouched(shared_tmp, tmp_path):
    theirs = root_store(tmp_path / "root" / "bench.sqlite")
    planted = shared_tmp / "bench.sqlite"
    as_other_user(lambda: os.symlink(tmp_path / "root" / "bench.sqlite", planted))
    done = bench("run", "--backend", "single", "--nproc", "1", *FAST, "--store", planted)
    assert_one_line_error(
        done, f"{planted} is a symbolic link of nobody (uid 65534) in {shared_tmp}", "a folder of your own"
    )
    assert_one_line_error(bench("list", "--store", planted), "is a symbolic link of nobody")
    assert (tmp_path / "root" / "bench.sqlite").read_bytes() == theirs
    assert sorted(p.name for p in shared_tmp.iterdir()) == ["bench.sqlite"]  # nothing made: no runs folder
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["bench.sqlite"]
    # a link of root's own there is root's to follow
    (shared_tmp / "mine.sqlite").symlink_to(tmp_path / "root" / "bench.sqlite")
    listed = bench("list", "--store", shared_tmp / "mine.sqlite")
    assert listed.returncode == 0 and "root-1" in listed.stdout, listed.stderr


def test_the_temporary_store_has_a_name_nobody_can_guess_and_is_never_made_through_a_link(shared_tmp, tmp_path):
    """The store is made whole in a temporary file first: a link planted where that file would be, under any name
    this process could have been expected to use, is never written through nor put in the store's place."""
    victim = tmp_path / "empty"
    victim.touch(mode=0o600)
    path = shared_tmp / "bench.sqlite"
    guesses = [f".bench.sqlite.{os.getpid()}.tmp", f".bench.sqlite.{os.getpid()}.tmp-journal"]
    as_other_user(lambda: [os.symlink(victim, shared_tmp / name) for name in guesses])
    store = Store(path)
    store.check_writable()
    store.save(train_record("root-1", sweep_id=None))
    assert victim.stat().st_size == 0 and victim.stat().st_uid == 0
    assert not path.is_symlink() and path.stat().st_uid == 0
    assert [r.run_id for r in Store(path).records()] == ["root-1"]
    # nothing of the store's making left beside it but the store and its runs folder
    assert sorted(p.name for p in shared_tmp.iterdir()) == sorted([*guesses, "bench.sqlite", "runs"])


def test_a_runs_folder_another_user_chose_is_refused_before_anything_runs(shared_tmp, tmp_path):
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    linked, made = shared_tmp / "linked", shared_tmp / "made"
    for folder in (linked, made):
        folder.mkdir()
        os.chmod(folder, 0o1777)
    as_other_user(lambda: (os.symlink(victim, linked / "runs"), os.mkdir(made / "runs", 0o777)))
    for folder, what in ((linked, "a symbolic link"), (made, "a folder")):
        done = bench("run", "--backend", "single", "--nproc", "1", *FAST, "--store", folder / "bench.sqlite")
        assert_one_line_error(
            done, f"run directory {folder / 'runs'}", f"is {what} of nobody (uid 65534)", "a folder of your own"
        )
    assert list(victim.iterdir()) == [] and list((made / "runs").iterdir()) == []


def test_a_run_directory_another_user_made_or_linked_in_a_shared_runs_folder_is_refused(shared_tmp, tmp_path):
    """A runs folder every user may write to (made so by root, say): the run's folder is only ever its own."""
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    store = Store(shared_tmp / "bench.sqlite")
    store.check_writable()
    runs = shared_tmp / "runs"
    os.chmod(runs, 0o1777)
    as_other_user(lambda: (os.symlink(victim, runs / "linked-run"), os.mkdir(runs / "their-run", 0o777)))
    for run_id, what in (("linked-run", "a symbolic link"), ("their-run", "a folder")):
        with pytest.raises(UsageError) as refused:
            RunDir(store.run_dir(run_id)).create()
        said = str(refused.value)
        assert "\n" not in said and f"{runs / run_id} is {what} of nobody (uid 65534)" in said, said
    assert list(victim.iterdir()) == [] and list((runs / "their-run").iterdir()) == []
    assert (RunDir(store.run_dir("root-run")).create().ranks).is_dir()  # a new one is made, and root's


def test_sqlite_files_another_user_put_beside_a_store_are_never_written(shared_tmp, secret):
    """SQLite opens the -wal, -shm and -journal beside a store by name, never through a link but without O_EXCL: one
    another user made first is refused, not written to (nor read from)."""
    path = shared_tmp / "bench.sqlite"
    Store(path).save(train_record("root-1", sweep_id=None))
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    assert not wal.exists() and not shm.exists()  # SQLite removes them when its last connection closes

    def plant() -> None:
        wal.touch()
        wal.chmod(0o666)

    as_other_user(plant)
    with pytest.raises(StoreError) as refused:
        Store(path).save(train_record("root-2", sweep_id=None))
    said = str(refused.value)
    assert "\n" not in said and f"{wal} beside it is a file of nobody (uid 65534)" in said, said
    assert wal.stat().st_uid == OTHER_UID and wal.stat().st_size == 0
    assert_one_line_error(bench("list", "--store", path), "-wal beside it is a file of nobody")
    wal.unlink()
    as_other_user(lambda: os.symlink(secret, shm))
    with pytest.raises(StoreError, match=f"{shm} beside it is a symbolic link of nobody"):
        Store(path).save(train_record("root-2", sweep_id=None))
    assert_untouched(secret)
    shm.unlink()
    Store(path).save(train_record("root-2", sweep_id=None))  # the files SQLite opens are root's own now
    assert [r.run_id for r in Store(path).records()] == ["root-1", "root-2"]
    assert sorted(p.name for p in shared_tmp.iterdir()) == ["bench.sqlite", "secret"]


def test_a_store_in_a_folder_every_user_may_write_that_is_not_sticky_is_refused(shared_tmp):
    folder = shared_tmp / "open"
    Store(folder / "bench.sqlite").save(train_record("root-1", sweep_id=None))
    os.chmod(folder, 0o777)
    assert_one_line_error(
        bench("list", "--store", folder / "bench.sqlite"), f"{folder} may be written by every user and is not sticky"
    )


def test_an_atomic_write_never_writes_through_a_link_under_its_temporary_name(shared_tmp, secret):
    out = shared_tmp / "out.json"
    as_other_user(lambda: os.symlink(secret, shared_tmp / f".out.json.{os.getppid()}.tmp"))
    write_atomic(out, "{}\n")
    assert_untouched(secret)
    assert out.read_text() == "{}\n" and not out.is_symlink() and out.stat().st_uid == 0


def test_records_kept_in_the_temporary_folder_are_read_and_removed_only_from_a_folder_of_ones_own(
    shared_tmp, tmp_path, monkeypatch
):
    """Where a full disk kept a run's record in $TMPDIR/bench-records-UID, another user who made that folder first
    can neither hand bench a record of theirs nor have bench remove files of their choosing."""
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    run_dir = RunDir(tmp_path / "runs" / "abandoned").create()  # a run whose record never reached its folder
    forged = spare_folder("abandoned")
    record = '{"run_id": "abandoned", "status": "ok"}'

    def plant() -> None:
        os.makedirs(forged, 0o755)
        (forged / "record.json").write_text(record)

    as_other_user(plant)
    assert kept_record(run_dir) is None
    drop_spare("abandoned")
    assert (forged / "record.json").read_text() == record
    # that folder a link of theirs to a folder of root's: nothing removed there either
    os.rename(forged.parent, shared_tmp / "theirs")
    roots = tmp_path / "root-records"
    (roots / "abandoned").mkdir(parents=True)
    (roots / "abandoned" / "record.json").write_text(record)
    as_other_user(lambda: os.symlink(roots, forged.parent))
    assert kept_record(run_dir) is None
    drop_spare("abandoned")
    assert (roots / "abandoned" / "record.json").read_text() == record


def test_the_teardown_removes_only_the_runs_own_temporary_folders(shared_tmp, tmp_path):
    """Another user's folder (or link) under a run's temporary name is theirs: the run's teardown leaves it."""
    tag = "shared-probe-20260101-000000-abcdef"
    mine = shared_tmp / f"bench-{tag}-rank0.a0-xyz"
    mine.mkdir()
    (mine / "scratch").write_text("root's scratch\n")
    theirs, linked = shared_tmp / f"bench-{tag}-theirs", shared_tmp / f"bench-{tag}-linked"
    victim = tmp_path / "root-only"
    victim.mkdir()
    (victim / "kept").write_text("root's\n")

    def plant() -> None:
        os.mkdir(theirs)
        (theirs / "file").write_text("theirs\n")
        os.symlink(victim, linked)

    as_other_user(plant)
    done = subprocess.run(
        [sys.executable, "-m", "bench.harness.supervisor", "reap", tag],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(shared_tmp)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not mine.exists()
    assert (theirs / "file").read_text() == "theirs\n" and linked.is_symlink()
    assert (victim / "kept").read_text() == "root's\n"


def test_rays_folder_outside_the_run_directory_is_made_private_and_never_taken_from_another_user(
    shared_tmp, tmp_path, monkeypatch
):
    """Where the run directory's path is too long for Ray's sockets, Ray's runtime folder is in /tmp under the run's
    name, which the process list shows: the driver makes it itself, private, and refuses a name another user took
    (a link to a folder of root's here) instead of handing Ray a folder it would write through."""
    import bench.backends.ray.driver as driver

    monkeypatch.setattr(driver, "SHORT_TEMP_DIR", shared_tmp)
    run_dir = RunDir(tmp_path / ("long-" * 20) / "run")
    folder, remove = driver.temp_dir(run_dir, "mine-1")
    assert remove and folder.parent == shared_tmp and not folder.is_symlink()
    assert folder.stat().st_uid == os.geteuid() and folder.stat().st_mode & 0o777 == 0o700
    victim = tmp_path / "root-only"
    victim.mkdir()
    as_other_user(lambda: os.symlink(victim, shared_tmp / "bench-theirs-1-ray"))
    with pytest.raises(SystemExit, match="exists already, made by someone else"):
        driver.temp_dir(run_dir, "theirs-1")
    assert list(victim.iterdir()) == []
