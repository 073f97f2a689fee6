"""The durable results store: one SQLite file in WAL mode, one row per run.

Each record is written in one transaction, so a writer killed at any moment leaves the store as it
was before or after that record, never half-written. The table keeps the fields people filter on
as columns and the whole record as JSON; PRAGMA user_version holds the schema version.

Reading creates and changes no file, so that the read commands work on a read-only file system: a file that
is not a store (an empty one, another program's database) is refused as it is. How a store is opened for
reading (Store._read) depends on SQLite's two files beside a WAL store, which a writer makes when it connects
and removes when the last connection closes:
- with -wal and -shm there and the -wal holding changes (a writer is connected, or one was killed): read-only
  (mode=ro), through them, so that SQLite's locks order the read against the writer and records still in the
  -wal are read; nothing is made;
- without a -wal, or with an empty one (every record is in the store file itself; SQLite leaves an empty -wal and a
  short -shm where it could not grow the -shm, on a full disk, and reading through them would need room):
  immutable=1, which makes no -wal or -shm (mode=ro would make both) and takes no locks; a writer that starts
  during the read would go unseen by SQLite, so the read is kept only if the file and its -wal are as they were
  before it, else made again;
- a -wal holding changes without its -shm (SQLite cannot read it without making one) is refused in one line.
A record the running bench cannot read (a newer schema, a broken one, bytes that are not UTF-8) is skipped with one
line naming it: records are fetched as bytes and decoded one by one, so a row that does not decode is that row's
problem alone. A store holding records of a newer schema is refused for writing (check_usable), before anything is
launched.

A write changes the store only with its record: the upgrade of an older store (its user_version raised to this
bench's schema, the schema_version column added) is made in the transaction that stores the record (save), never
by a check or a write that is refused, so that a refused run leaves an older store to the older bench that made it.

A sweep (bench.workflows.sweep) also keeps one row of a second table, `sweeps`: its plan (the specs of every
launch it will make, as JSON with the schema they were written with), its state (running, complete, interrupted)
and the bench process that runs it. The table is made by the first sweep that writes to a store (a store without
it holds no sweep's plan: reads find none); the store's schema (user_version) is not raised for it, so a bench
that predates the table reads and writes such a store as before, and ignores the table.

Stores grow to tens of thousands of runs, so what is asked often is answered from columns and indexes, not by
decoding every record: the latest runs (`records(last=N)`: an index on created_at) and the schema each record was
written with (the schema_version column, filled by `save`, indexed), which check_usable asks before every run.
Stores made before that column are read as they are (read-only opens cannot change a file; newer_records reads
their records' JSON instead), and the first record stored adds the column and its indexes (_upgrade).

A store in a folder other local users may write to (/tmp) is used only where no other user chose what bench opens
there (bench.core.shared_folders, whether or not the kernel's fs.protected_symlinks is on): a store path that passes
through a link, file or folder of another user's in a sticky folder every user may write to (the store's own name
among them), or through a folder every user may write to that is not sticky, is refused in one line, for reading as
for writing; so are a runs folder beside it and a run directory in it (bench.core.rundir.RunDir.create) that another
user linked or made. A new store is made in a folder of this process's own under a name nobody can guess (mkdtemp),
then linked into place, so no link can have been planted where SQLite makes it. SQLite makes the -wal, -shm and
-journal beside the store (beside the file a link of one's own names) by name: it opens each without following a link
(O_NOFOLLOW, as its Unix VFS opens every file), but without O_EXCL, and it cannot refuse a link in the store's own path
from Python (SQLITE_OPEN_NOFOLLOW is a flag of sqlite3_open_v2, not a URI parameter, and Python's sqlite3 does not
pass it): hence the path check above, and, in such a folder, a -wal, -shm or -journal that is another user's or not a
regular file with one name is refused, and a write makes the -wal and -shm itself, exclusively, where they are absent.
What is left open: SQLite removes its -wal and -shm when the last connection closes, and a user who makes one in the
moment between that and another bench's open of the store, after that bench's check, could still hand SQLite a file
of theirs. A store in a folder of one's own is not exposed to any of this.

The store is --store, else $BENCH_STORE, else results/bench.sqlite; an empty BENCH_STORE counts as
unset, as `BENCH_STORE= bench list` means in a shell.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from bench.core.codec import RecordError
from bench.core.console import note
from bench.core.errors import StoreError, StoreFull
from bench.core.inputs import shown
from bench.core.records import SCHEMA_VERSION, RunRecord
from bench.core.shared_folders import UnsafePath, check_path, is_shared, open_file, open_or_create, owner

DEFAULT_STORE = Path("results") / "bench.sqlite"
T = TypeVar("T")  # what a read of the store gives (Store._read)
# the columns of every store's runs table, whichever bench made it
COLUMNS = (
    "run_id",
    "created_at",
    "status",
    "backend",
    "workload",
    "world_size",
    "device",
    "batch_size",
    "sweep_id",
    "throughput",
    "record",
)
# the schema the row's record was written with: NULL in a row written by a bench that did not know the column
VERSION_COLUMN = "schema_version"
INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_by_time ON runs (created_at)",
    "CREATE INDEX IF NOT EXISTS runs_by_schema ON runs (schema_version)",
)
CREATE = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,
    backend TEXT NOT NULL,
    workload TEXT NOT NULL,
    world_size INTEGER NOT NULL,
    device TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    sweep_id TEXT,
    throughput REAL,
    record TEXT NOT NULL,
    schema_version INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_case ON runs (workload, backend, world_size);
""" + "".join(f"{index};\n" for index in INDEXES)
# a sweep's plan and state (bench.results.sweeps says what a row means); made when the first sweep starts
SWEEPS_TABLE = """
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    state TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    planned INTEGER NOT NULL,
    owner TEXT,
    why TEXT,
    plan TEXT NOT NULL
)"""
SWEEP_COLUMNS = (
    "sweep_id",
    "created_at",
    "updated_at",
    "state",
    "title",
    "description",
    "planned",
    "owner",
    "why",
    "plan",
)
FETCH_ROWS = 500  # records fetched at once by records(last=N) (each one an SQL variable: SQLite allows 999 at least)
READ_TRIES = 3  # reads of a store a writer changed during each of them, before the reader gives up
# SQLite's codes for a file system without room (Python before 3.11 names neither): a write, the -shm file grown
SQLITE_FULL, SQLITE_IOERR_SHMSIZE = 13, 4874


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block (as it was after it). For work that makes many objects that
    stay alive (decoding a store's records makes millions, and no reference cycle): each of the collector's full
    passes meanwhile would walk every object made so far, and a 30,000-run store would spend a third of its decoding
    there. Cyclic garbage made in the block is collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def default_store_path() -> Path:
    return Path(os.environ.get("BENCH_STORE") or DEFAULT_STORE)


def os_reason(exc: OSError) -> str:
    """An OSError's reason without the path it repeats (the messages name the path once)."""
    return exc.strerror or str(exc)


def check_folder_writable(folder: Path, create: bool) -> list[Path]:
    """Raise OSError (its strerror says why) unless a file can be written in `folder`: made first with
    `create` (and removed again when no file can be written there), else its nearest existing folder is tried,
    so that nothing is left behind. Returns the folders it made, deepest first."""
    made: list[Path] = []
    try:
        made = check_path(folder, make=create)  # (UnsafePath, which is an OSError, where another user chose a part)
    except UnsafePath:
        raise
    except OSError:  # a file in the way, say: found and said below
        pass
    existing = folder
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            where = "it" if existing == folder else str(existing)
            raise NotADirectoryError(errno.ENOTDIR, f"{where} is a file, not a folder")
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check-")
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError:
        remove_folders(made)
        raise
    return made


def remove_folders(made: list[Path]) -> None:
    """Remove folders made here, deepest first, each only while it is empty (another process may use it now)."""
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()


def no_space(exc: sqlite3.Error) -> bool:
    """Whether SQLite failed for want of room on the store's file system: SQLITE_FULL, or the -shm file it could not
    grow (SQLITE_IOERR_SHMSIZE); by the message where Python does not say the code."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "database or disk is full" in str(exc)
    return code in (SQLITE_FULL, SQLITE_IOERR_SHMSIZE)


def space_left(folder: Path) -> str:
    """'; its file system has 24 KiB free' where `folder`'s file system is nearly full (under 1 MiB), else ''."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    return f"; its file system has {free // 1024} KiB free" if free < 1 << 20 else ""


class Store:
    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path else default_store_path()
        self.skipped: dict[str, str] = {}  # the runs records() last skipped, each with why (the report lists them)

    def _unreadable(self, why: object) -> StoreError:
        return StoreError(
            f"results store {self.path} cannot be read ({why}); move it aside or pass --store with another path",
            reason=f"it cannot be read: {why}",
        )

    def _unusable(self, why: object) -> StoreError:
        return StoreError(
            f"results store {self.path} cannot be used ({why}); pass --store with another path",
            reason=f"it cannot be used: {why}",
        )

    def _check_path(self) -> None:
        """Refuse a store whose path passes through a link, file or folder another user chose
        (bench.core.shared_folders): bench would read and write the file that user points it at."""
        try:
            check_path(self.path)
        except UnsafePath as exc:
            raise self._chosen_by_another(exc.problem) from None

    def _chosen_by_another(self, problem: str) -> StoreError:
        return StoreError(
            f"results store {self.path} cannot be used ({problem}): another user could point bench at a file of "
            "their choosing there; remove what they put there, or pass --store with a path in a folder of your own",
            reason=f"it cannot be used: {problem}",
        )

    def _stat(self) -> os.stat_result | None:
        """The store file's status, or None where there is none; a path that cannot be a store is refused, and so is
        one another user chose a part of (_check_path)."""
        self._check_path()
        try:
            st = self.path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # a name too long for the file system, a loop of links
            raise self._unusable(os_reason(exc)) from None
        if stat.S_ISDIR(st.st_mode):
            raise self._unusable("it is a directory; give a file path")
        if not stat.S_ISREG(st.st_mode):
            raise self._unusable("it is not a file")
        return st

    def _connect(self, create: bool, immutable: bool = False) -> sqlite3.Connection:
        """A connection to the store: read-only (`immutable`: SQLite's immutable=1, see Store._read), or with
        `create` read-write (the store made if absent)."""
        st = self._stat()
        if not create and st is None:
            raise StoreError(
                f"no results store at {self.path}; run `bench run` or `bench sweep` first, or pass --store PATH"
            )
        if not create and st is not None and st.st_size == 0:
            raise StoreError(
                f"results store {self.path} is an empty file, not a bench store; a run with this "
                "--store makes one there, or pass --store with another path"
            )
        if create:
            try:
                check_path(self.path.parent, make=True)
            except UnsafePath as exc:
                raise self._chosen_by_another(exc.problem) from None
            except OSError as exc:
                raise self._unusable(f"its folder cannot be made: {os_reason(exc)}") from None
            if st is None or st.st_size == 0:
                self._create(replace_empty=st is not None)
            # again, now that the store is there: in a shared folder another user may have put a link or file at its
            # name meanwhile, and once it is checked nobody else can replace it there
            self._check_path()
        self._check_beside(create)
        conn = None
        try:
            if create:
                conn = sqlite3.connect(self.path, timeout=30.0)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            else:
                query = "mode=ro&immutable=1" if immutable else "mode=ro"
                conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{query}", uri=True, timeout=30.0)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.DatabaseError, OSError) as exc:
            if conn is not None:
                conn.close()  # an open file would keep a read-only mount from being unmounted, say
            if create and isinstance(exc, sqlite3.DatabaseError) and no_space(exc):
                raise self._full(exc) from None
            raise self._unreadable(exc if isinstance(exc, sqlite3.DatabaseError) else os_reason(exc)) from None
        if version > SCHEMA_VERSION:
            conn.close()
            raise StoreError(
                f"results store {self.path} has schema {version}, newer than this bench "
                f"({SCHEMA_VERSION}); update bench or pass --store with another path"
            )
        if "runs" not in tables:  # (a store bench makes has its table from the start: _create)
            conn.close()
            raise self._unreadable("it is an SQLite file but not a bench store")
        # (an older store is upgraded by save, in the transaction of the record it stores: _upgrade)
        return conn

    def _check_beside(self, create: bool) -> None:
        """In a shared folder (bench.core.shared_folders), the files SQLite keeps beside the store (-wal, -shm and
        -journal, beside the file a link names) must be regular files of this user's or the folder owner's: SQLite
        opens them by name, never through a link but without O_EXCL, and would write the store's records into (or
        read them from) a file another user made. For a write, the -wal and -shm are made here first where they are
        absent, exclusively and with the store's own mode (as SQLite makes them), so that SQLite opens this user's."""
        real = Path(os.path.realpath(self.path))
        try:
            folder_fd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # no folder to look in: the connect says why
        try:
            folder = os.fstat(folder_fd)
            if not is_shared(folder):
                return
            try:
                mode = stat.S_IMODE(os.stat(real).st_mode) & 0o666
            except OSError:
                mode = 0o644
            for suffix in ("-wal", "-shm", "-journal"):
                name = f"{real.name}{suffix}"
                found = _side_file(folder_fd, name, mode if create and suffix != "-journal" else None)
                if found is None or (not isinstance(found, str) and found.st_uid in (os.geteuid(), folder.st_uid)):
                    continue
                if isinstance(found, str):
                    with contextlib.suppress(OSError):
                        found += f" of {owner(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_uid)}"
                else:
                    found = f"is a file of {owner(found.st_uid)}"
                raise self._chosen_by_another(
                    f"{real.parent / name} beside it {found}, in a folder every user may write to, and SQLite would "
                    "open it"
                )
        finally:
            os.close(folder_fd)

    def _full(self, exc: sqlite3.Error) -> StoreFull:
        why = (
            f"no room to grow its -shm file: {exc}"
            if getattr(exc, "sqlite_errorcode", None) == SQLITE_IOERR_SHMSIZE
            else str(exc)
        )
        why += space_left(self.path.parent)
        return StoreFull(
            f"results store {self.path} cannot be written ({why}); free some space there or pass --store "
            "with another path",
            reason=why,
        )

    def _create(self, replace_empty: bool) -> None:
        """Make the store whole or not at all: its table is made in a temporary file beside it, which is switched
        to WAL and made to take the write lock (SQLite's -shm file needs room too), then put in place (linked, so
        that a store another bench made meanwhile is kept; an empty file at the path is replaced). On any failure,
        a signal included, nothing is left: no store, no temporary file."""
        try:
            # a folder of this process's own, under a name nobody can guess and that only this user may enter: the
            # temporary store and the files SQLite makes beside it are out of every other user's reach
            folder = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent))
            try:
                tmp = folder / self.path.name
                self._build(tmp)
                self._put_in_place(tmp, replace_empty)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        except sqlite3.DatabaseError as exc:  # said once the temporary files are gone: the free space is then true
            if no_space(exc):
                raise self._full(exc) from None
            raise StoreError(
                f"results store {self.path} cannot be made ({exc}); pass --store with another path"
            ) from None
        except OSError as exc:
            raise StoreError(
                f"results store {self.path} cannot be made ({os_reason(exc)}"
                f"{space_left(self.path.parent)}); pass --store with another path"
            ) from None

    @staticmethod
    def _build(tmp: Path) -> None:
        conn = sqlite3.connect(tmp)
        try:
            with conn:
                conn.executescript(CREATE)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise sqlite3.OperationalError(f"it cannot be switched to WAL mode (it stays {mode})")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())

    def _put_in_place(self, tmp: Path, replace_empty: bool) -> None:
        if replace_empty:
            if self.path.stat().st_size == 0:  # still empty: no writer has made it a store meanwhile
                os.replace(tmp, self.path)
        else:
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return  # another bench made the store meanwhile: that one is used
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                    raise
                if self.path.exists():  # a file system without hard links: renamed, unless one is there now
                    return
                os.rename(tmp, self.path)
        with contextlib.suppress(OSError):  # the new name on disk, not only the file's data
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    @staticmethod
    def _upgrade(conn: sqlite3.Connection) -> None:
        """An older store made current, inside the caller's write transaction (its write lock taken: another writer
        may be upgrading it too), so that it is upgraded together with the record stored, or not at all:
        - a store made before the schema_version column: the column added, filled from each record's JSON, and
          indexed with created_at;
        - its user_version raised to this bench's schema (never lowered): older records stay as written (each carries
          its version and is upgraded when read); the store's version says which bench may add to it, so an older
          bench refuses a store holding a newer record."""
        if VERSION_COLUMN not in table_columns(conn):
            conn.create_function("stored_version", 1, stored_version, deterministic=True)
            conn.execute(f"ALTER TABLE runs ADD COLUMN {VERSION_COLUMN} INTEGER")
            # (the record as bytes: a row that is not UTF-8 gets no version, instead of failing the write)
            conn.execute(f"UPDATE runs SET {VERSION_COLUMN} = stored_version(CAST(record AS BLOB))")
            for index in INDEXES:  # (executescript would commit first)
                conn.execute(index)
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def check_writable(self) -> None:
        """Open (or create) the store and take its write lock for a moment: a store that cannot take a
        record is found before a run is launched, not after it has measured. Refused, it leaves no folder it made."""
        self.check_usable()  # what can be found without creating anything first: bad input creates nothing
        made = self._check_runs_folder(create=True)
        try:
            conn = self._connect(create=True)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.DatabaseError as exc:
                if no_space(exc):
                    raise self._full(exc) from None
                raise StoreError(
                    f"results store {self.path} cannot be written ({exc}); pass --store with a writable path"
                ) from None
            finally:
                conn.close()
        except BaseException:
            remove_folders(made)
            raise

    def check_usable(self) -> None:
        """What check_writable refuses, found without creating anything: for a command that takes its store
        before it plans its runs (the first run makes the store and its run directories)."""
        st = self._stat()
        if st is not None and st.st_size:
            newer = self._read(newer_records)  # a foreign, unreadable or newer file is refused on the way
            if newer:
                run_id, version = newer
                raise StoreError(
                    f"results store {self.path} holds records of schema {version} (run {shown(run_id)}), "
                    f"newer than this bench ({SCHEMA_VERSION}); update bench or pass --store with "
                    "another path"
                )
        self._check_runs_folder(create=False)

    def _check_runs_folder(self, create: bool) -> list[Path]:
        """The folders it made (with `create`), deepest first."""
        runs = self.path.parent / "runs"
        try:
            return check_folder_writable(runs, create)
        except UnsafePath as exc:
            raise StoreError(
                f"run directory {runs} cannot be used ({exc.problem}): another user could point bench at a folder "
                "of their choosing there; remove what they put there, or pass --store with a path in a folder of "
                "your own"
            ) from None
        except OSError as exc:
            raise StoreError(
                f"run directory {runs} cannot be written ({os_reason(exc)}); every run keeps its "
                "files there, beside the store: pass --store with a path in a writable folder"
            ) from None

    def run_dir(self, run_id: str) -> Path:
        """Where a run's raw files (spec, logs, per-rank files) are kept, beside the store: an absolute path, since
        the processes of a run across hosts start elsewhere (in the home folder of an ssh login) and find it there."""
        return (self.path.parent / "runs" / run_id).absolute()

    def save(self, record: RunRecord) -> None:
        spec = record.spec
        # the index columns of a run that trains nothing hold "" and 0 (the record itself holds None)
        row = (
            record.run_id,
            record.created_at,
            record.status.value,
            spec.backend,
            spec.workload or "",
            spec.world_size,
            spec.device,
            spec.batch_size or 0,
            spec.sweep_id,
            record.task.frame_columns(record).get("throughput"),
            json.dumps(record.to_dict(), allow_nan=False),
            record.schema_version,
        )
        columns = (*COLUMNS, VERSION_COLUMN)

        def insert(conn: sqlite3.Connection) -> None:
            self._upgrade(conn)  # in the record's transaction: a refused write leaves an older store as it was
            conn.execute(
                f"INSERT OR REPLACE INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row
            )

        self._write(insert)

    def stored_run_ids(self, run_ids: list[str]) -> set[str]:
        """Those of `run_ids` whose record is in the store (none where there is no store yet)."""
        st = self._stat()
        if st is None or st.st_size == 0:
            return set()
        marks = ", ".join("?" * len(run_ids))
        rows = self._read(
            lambda conn: conn.execute(f"SELECT run_id FROM runs WHERE run_id IN ({marks})", list(run_ids)).fetchall()
        )
        return {row[0] for row in rows}

    def records(self, last: int | None = None) -> list[RunRecord]:
        """Every stored record this bench can read, oldest first, upgraded to the current schema
        (bench.core.records); each one it cannot read is skipped with one line naming it. With `last`, only the
        latest `last` of them: the rows are read newest first and decoded until there are that many."""
        with collector_paused():
            if last is None:
                query = f"SELECT {ROW_BYTES} FROM runs ORDER BY {OLDEST_FIRST}"
                read = [
                    (run_id_text(run_id), decoded(raw))
                    for run_id, raw in self._read(lambda c: c.execute(query).fetchall())
                ]
            else:
                read = self._read(lambda conn: latest_decoded(conn, last))[::-1]
        self.skipped = {run_id: got for run_id, got in read if isinstance(got, str)}
        for run_id, got in read:
            if isinstance(got, str):
                note(f"bench: skipped run {shown(run_id)} of {self.path}: this bench cannot read its record ({got})")
        return [got for _, got in read if not isinstance(got, str)]

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """work(connection) on the store opened for reading without creating or changing a file (the module's
        docstring says how), made again when a writer changed the store during an immutable read."""
        self._check_path()
        self._check_beside(create=False)  # before the -wal and -shm found below are trusted to say a writer is there
        real = os.path.realpath(self.path)  # SQLite keeps a linked store's -wal and -shm beside the file linked to
        wal, shm = Path(f"{real}-wal"), Path(f"{real}-shm")
        for _ in range(READ_TRIES):
            wal_size = _size(wal)
            # (a writer that closes between this look and the open below leaves SQLite to make the two files again,
            # as any reader of a live WAL store would)
            live = bool(wal_size) and shm.exists()
            if not live and wal_size:
                raise self._unreadable(
                    "its -wal file holds changes but the -shm file SQLite reads it with is "
                    "missing, and reading would make one; copy the store with both files"
                )
            before = self._state(wal)
            conn = self._connect(create=False, immutable=not live)
            try:
                result = work(conn)
            except sqlite3.DatabaseError as exc:
                if not live and self._state(wal) != before:
                    continue  # a writer changed the file under the read: read it again
                raise self._unreadable(exc) from None
            finally:
                conn.close()
            if live or self._state(wal) == before:
                return result
        raise self._unreadable(f"a writer changed it during each of {READ_TRIES} reads; try again")

    def _state(self, wal: Path) -> tuple[int, int, int, int, int | None] | None:
        """What a writer changes: the store file (its identity, size and times) and its -wal's size."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, _size(wal)

    # ---------------------------------------------------------------- sweeps (the `sweeps` table)
    def begin_sweep(self, row: dict[str, Any]) -> None:
        """Store a new sweep's row (SWEEP_COLUMNS), the table made first where the store has none."""

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(SWEEPS_TABLE)
            conn.execute(
                f"INSERT INTO sweeps ({', '.join(SWEEP_COLUMNS)}) VALUES ({', '.join('?' * len(SWEEP_COLUMNS))})",
                [row[c] for c in SWEEP_COLUMNS],
            )

        self._write(insert)

    def update_sweep(
        self, sweep_id: str, check: Callable[[dict[str, Any] | None], object] | None = None, **fields: Any
    ) -> None:
        """Set `fields` of a sweep's row in one transaction; check(row), given, first sees the row as it is then (a
        dict, None where there is none) under the write lock and raises to leave it unchanged."""

        def update(conn: sqlite3.Connection) -> None:
            if check is not None:
                check(_sweep_row(conn, sweep_id))
            conn.execute(
                f"UPDATE sweeps SET {', '.join(f'{k} = ?' for k in fields)} WHERE sweep_id = ?",
                [*fields.values(), sweep_id],
            )

        self._write(update)

    def _write(self, work: Callable[[sqlite3.Connection], object]) -> None:
        """work(connection) in one write transaction (the write lock taken first), committed, or rolled back on any
        error (a signal included)."""
        conn = self._connect(create=True)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                work(conn)
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        except sqlite3.DatabaseError as exc:
            if no_space(exc):
                raise self._full(exc) from None
            raise StoreError(f"cannot write to results store {self.path}: {exc}", reason=str(exc)) from None
        finally:
            conn.close()

    def sweeps(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        """The sweeps' rows (SWEEP_COLUMNS), oldest first (of `sweep_id` only, where given); none where there is no
        store, or no sweep table. Creates nothing."""
        st = self._stat()
        if st is None or st.st_size == 0:
            return []

        def rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sweeps'").fetchone():
                return []
            where, values = (" WHERE sweep_id = ?", [sweep_id]) if sweep_id is not None else ("", [])
            found = conn.execute(
                f"SELECT {', '.join(SWEEP_COLUMNS)} FROM sweeps{where} ORDER BY created_at, rowid", values
            ).fetchall()
            return [dict(zip(SWEEP_COLUMNS, r)) for r in found]

        return self._read(rows)

    def sweep_records(self, sweep_id: str) -> list[RunRecord]:
        """The stored records of one sweep this bench can read, oldest first (one it cannot is skipped, said as
        records() says it)."""
        st = self._stat()
        if st is None or st.st_size == 0:
            return []
        query = f"SELECT {ROW_BYTES} FROM runs WHERE sweep_id = ? ORDER BY {OLDEST_FIRST}"
        with collector_paused():
            read = [
                (run_id_text(run_id), decoded(raw))
                for run_id, raw in self._read(lambda c: c.execute(query, (sweep_id,)).fetchall())
            ]
        for run_id, got in read:
            if isinstance(got, str):
                note(f"bench: skipped run {shown(run_id)} of {self.path}: this bench cannot read its record ({got})")
        return [got for _, got in read if not isinstance(got, str)]


def _sweep_row(conn: sqlite3.Connection, sweep_id: str) -> dict[str, Any] | None:
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sweeps'").fetchone():
        return None
    found = conn.execute(f"SELECT {', '.join(SWEEP_COLUMNS)} FROM sweeps WHERE sweep_id = ?", (sweep_id,)).fetchone()
    return dict(zip(SWEEP_COLUMNS, found)) if found else None


def _side_file(folder_fd: int, name: str, make_mode: int | None) -> os.stat_result | str | None:
    """A file beside a store in a shared folder: its status where it is a regular file with one name (made here with
    `make_mode`, where given, if it is absent), None where it is absent, else what it is instead ('is a symbolic
    link')."""
    try:
        if make_mode is None:
            fd, made = open_file(folder_fd, name, os.O_RDONLY), False
        else:
            fd, made = open_or_create(folder_fd, name, os.O_RDONLY, make_mode)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link"
        return "is not a regular file with one name" if exc.errno == errno.EPERM else f"cannot be opened ({exc})"
    try:
        if made and make_mode is not None:
            os.fchmod(fd, make_mode)  # just made: the store's own mode, whatever the umask left of it
        return os.fstat(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


# the order of the runs: the order they were made in (then stored in); both orders read the created_at index
OLDEST_FIRST, NEWEST_FIRST = "created_at, rowid", "created_at DESC, rowid DESC"
# a row's run id and record as SQLite holds them, bytes: sqlite3 would decode text inside fetchall, where one row that
# is not UTF-8 fails the whole read; each row is decoded on its own instead (run_id_text, decoded)
ROW_BYTES = "CAST(run_id AS BLOB), CAST(record AS BLOB)"


def run_id_text(raw: object) -> str:
    """A row's run id as text, to name the row by (bytes that are not UTF-8 as backslash escapes); the record's own
    run id is the one checked when it is decoded."""
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)


def decoded(raw: bytes | str) -> RunRecord | str:
    """A stored record's JSON (bytes, as ROW_BYTES fetches it) as the record (upgraded to the current schema), or why
    this bench cannot read it, in one line."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        return f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
    try:
        data = json.loads(text)
    except (ValueError, TypeError):  # TypeError: a value that is not text at all
        return "not valid JSON"
    try:
        return RunRecord.from_dict(data)
    except RecordError as exc:
        why = str(exc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a shape no upgrade expects
        why = f"malformed: {type(exc).__name__}: {exc}"
    return " ".join(why.split())  # one line, whatever the record held


def latest_decoded(conn: sqlite3.Connection, count: int) -> list[tuple[str, RunRecord | str]]:
    """(run id, decoded) of the latest rows, newest first, until `count` of them are records this bench can read: the
    order is found from created_at alone (its index, or in a store made before it a sort of that column only), and the
    records are fetched a few at a time, so only as many are read and decoded as that takes."""
    out, readable = [], 0
    newest = conn.execute(f"SELECT rowid FROM runs ORDER BY {NEWEST_FIRST}")
    while readable < count and (rowids := [rowid for (rowid,) in newest.fetchmany(min(count - readable, FETCH_ROWS))]):
        rows = {
            rowid: (run_id, raw)
            for rowid, run_id, raw in conn.execute(
                f"SELECT rowid, {ROW_BYTES} FROM runs WHERE rowid IN ({', '.join('?' * len(rowids))})", rowids
            )
        }
        for run_id, raw in map(rows.__getitem__, rowids):
            got = decoded(raw)
            out.append((run_id_text(run_id), got))
            readable += not isinstance(got, str)
    return out


def table_columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(runs)")}


def stored_version(raw: bytes | str) -> int | None:
    """The schema_version a stored record's JSON (text, or bytes that must be UTF-8) says, where it is an integer
    (what newer_records compares)."""
    try:
        version = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw).get("schema_version")
    except (ValueError, TypeError, AttributeError):  # (UnicodeDecodeError is a ValueError)
        return None
    return version if type(version) is int else None  # not a bool, not a float


def newer_records(conn: sqlite3.Connection) -> tuple[str, int] | None:
    """(run id, schema version) of a stored record of a schema newer than this bench's, or None: from the
    schema_version column where the store has it (an index lookup), from the JSON of the rows it does not say for
    (all of them in a store made before the column; in a newer one, those an older bench wrote)."""
    unsaid = []  # the rows whose column says no schema
    if VERSION_COLUMN in table_columns(conn):
        found = conn.execute(
            f"SELECT CAST(run_id AS BLOB), {VERSION_COLUMN} FROM runs WHERE {VERSION_COLUMN} > ? LIMIT 1",
            (SCHEMA_VERSION,),
        ).fetchone()
        if found:
            return run_id_text(found[0]), found[1]
        unsaid = [f"{VERSION_COLUMN} IS NULL"]
    version_of = "CASE WHEN json_valid(record) THEN json_extract(record, '$.schema_version') END"
    newer = " AND ".join([*unsaid, f"typeof({version_of}) = 'integer'", f"{version_of} > ?"])
    try:
        found = conn.execute(
            f"SELECT CAST(run_id AS BLOB), {version_of} FROM runs WHERE {newer} LIMIT 1", (SCHEMA_VERSION,)
        ).fetchone()
        return (run_id_text(found[0]), found[1]) if found else None
    except sqlite3.OperationalError as exc:
        if "no such function" not in str(exc):
            raise
    rows = f"SELECT {ROW_BYTES} FROM runs{''.join(f' WHERE {c}' for c in unsaid)}"
    for run_id, raw in conn.execute(rows):  # an SQLite built without JSON
        version = stored_version(raw)
        if version is not None and version > SCHEMA_VERSION:
            return run_id_text(run_id), version
    return None
