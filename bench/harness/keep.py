"""Where a run's record goes when it is made: its run directory (record.json) and its store, and, where neither can
take it (a full disk), a folder of its own in the temporary directory; never lost without a word.

A store that fails for want of room is tried again for a few seconds (space freed meanwhile is used). A record
kept in a file but not stored is stored by the next command that writes to its store (bench.harness.lifeline.recover),
or by `bench import` of the folder holding it: that folder (the run directory, or the one in the temporary
directory) holds record.json and spec.json, as `bench import` wants.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.codec import dumps
from bench.core.console import note
from bench.core.errors import StoreError, StoreFull
from bench.core.records import RunRecord
from bench.core.rundir import RunDir, read_json, write_atomic
from bench.core.shared_folders import check_path
from bench.core.store import Store, os_reason

RETRY_DELAYS_S = (1.0, 2.0, 4.0)  # a store without room is tried again after each: 7 s in all


def spare_folder(run_id: str) -> Path:
    """The folder that holds a run's record when neither its store nor its run directory can: in $TMPDIR (or the
    system's temporary directory), one per user."""
    return Path(tempfile.gettempdir()) / f"bench-records-{os.getuid()}" / run_id


def own_spare_root(make: bool = False) -> Path | None:
    """The folder of this user's spare folders (made, for this user alone, where absent and `make`), where it is this
    user's own: a folder, not a link, that no other user may write to, reached through no link or folder another user
    chose (bench.core.shared_folders); None where it is not (another user may have made it first in a shared $TMPDIR:
    a record read from it could be one they wrote, a file removed there one they chose) or cannot be made."""
    try:
        root = spare_folder("-").parent
        check_path(root)
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(root, 0o700)
        mine = os.lstat(root)
    except OSError:  # (UnsafePath among them) no temporary directory at all, or one bench may not use
        return None
    if not stat.S_ISDIR(mine.st_mode) or mine.st_uid != os.geteuid() or mine.st_mode & 0o022:
        return None
    return root


def spare_record(run_dir: RunDir) -> dict[str, Any] | None:
    """The record kept in the run's spare folder, if there is one of this run."""
    if own_spare_root() is None:
        return None
    try:
        data = read_json(spare_folder(run_dir.path.name) / run_dir.record_file.name)
    except OSError:  # no temporary directory at all
        return None
    return data if isinstance(data, dict) and data.get("run_id") == run_dir.path.name else None


def kept_record(run_dir: RunDir) -> tuple[dict[str, Any], Path] | None:
    """(the record, the file it is in) for a run whose record was made: its record.json, else its spare folder's."""
    data = run_dir.read_json(run_dir.record_file)
    if isinstance(data, dict):
        return data, run_dir.record_file
    data = spare_record(run_dir)
    return (data, spare_folder(run_dir.path.name) / run_dir.record_file.name) if data is not None else None


def drop_spare(run_id: str) -> None:
    """Remove a run's spare folder (its record is stored)."""
    if own_spare_root() is None:
        return
    try:
        folder = spare_folder(run_id)
    except OSError:
        return
    for name in (RunDir.record_file.name, RunDir.spec_file.name):
        try:
            (folder / name).unlink(missing_ok=True)
        except OSError:
            return
    try:
        folder.rmdir()
    except OSError:
        pass


@dataclass
class Kept:
    """Where a record went: `stored`, else why not (`store_why`); the file holding it (`file`: the run directory's
    record.json, else the spare folder's; None: no file could take it), and why the run directory could not
    (`file_why`)."""

    stored: bool
    store_why: str | None
    file: Path | None
    file_why: str | None

    def not_stored(self, record: RunRecord, store_path: Path | None) -> str:
        """The one line saying where the record is and how to add it to the store."""
        head = (
            f"run {record.run_id} ended {record.status}, but its record could not be stored in {store_path} "
            f"({self.store_why})"
        )
        if self.file is None:
            return (
                f"{head}, nor written to its run directory or the temporary directory ({self.file_why}); it is "
                f"the JSON line above: save it as {Path(record.run_dir) / RunDir.record_file.name} and add it "
                f"with `bench import {record.run_dir} --store {store_path}`"
            )
        beside = "" if self.file_why is None else f", nor written to its run directory ({self.file_why})"
        return (
            f"{head}{beside}; it is kept in {self.file}: add it with `bench import {self.file.parent} --store "
            f"{store_path}` once there is room (the next run on this store adds it too)"
        )


def keep_record(
    record: RunRecord, run_dir: RunDir, store: Store, retry_delays: Sequence[float] = RETRY_DELAYS_S
) -> Kept:
    """Write the record to the run directory and the store, whatever fails: the store tried again after each of
    `retry_delays` while it has no room, and the record written to the spare folder where the run directory cannot
    take it either."""
    text = dumps(record.to_dict())
    file_why = _write(run_dir.record_file, text)
    store_why, full = _save(store, record)
    for i, delay in enumerate(retry_delays if full else ()):
        if i == 0:
            note(
                f"bench: run {record.run_id}: its store {store.path} has no room for the record ({store_why}); "
                f"trying again for {sum(retry_delays):g} s"
            )
        time.sleep(delay)
        if file_why is not None:
            file_why = _write(run_dir.record_file, text)
        store_why, full = _save(store, record)
        if store_why is None or not full:
            break
    file = run_dir.record_file if file_why is None else None
    if store_why is not None and file is None:
        file = _write_spare(record, run_dir, text)
        if file is None:
            note(text)  # the last place left: Kept.not_stored says what it is
    return Kept(stored=store_why is None, store_why=store_why, file=file, file_why=file_why)


def _write(path: Path, text: str) -> str | None:
    """None once written, else why not."""
    try:
        write_atomic(path, text)
        return None
    except OSError as exc:
        return os_reason(exc)


def _save(store: Store, record: RunRecord) -> tuple[str | None, bool]:
    """(None once stored, else why not; whether it failed for want of room)."""
    try:
        store.save(record)
        return None, False
    except StoreFull as exc:
        return exc.reason, True
    except StoreError as exc:
        return exc.reason, False


def _write_spare(record: RunRecord, run_dir: RunDir, text: str) -> Path | None:
    """The record and the run's spec in its spare folder, as a run directory holds them; None where that fails too."""
    if own_spare_root(make=True) is None:  # a shared /tmp: only a folder of one's own
        return None
    try:
        folder = spare_folder(record.run_id)
        folder.mkdir(mode=0o700, exist_ok=True)
        try:
            spec = run_dir.spec_file.read_text()
        except OSError:
            spec = dumps(record.spec.to_dict(), indent=1)  # as the runner writes it
        write_atomic(folder / run_dir.spec_file.name, spec)
        return write_atomic(folder / run_dir.record_file.name, text)
    except OSError:
        drop_spare(record.run_id)  # no half of it left there
        return None
