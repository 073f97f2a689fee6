"""The files of one run: spec, launcher log, per-rank start/progress/result/exit files, and the files
a fault run or an elastic launcher keeps. Every file name of a run directory is spelled here.

Every rank writes its own files (atomically), so the parent can tell after any ending, clean or not,
how far each rank got and how it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

from bench.core.codec import dumps
from bench.core.errors import UsageError
from bench.core.shared_folders import UnsafePath, check_path

RANK_FILE = re.compile(r"rank(\d+)\.a(\d+)\.(\w+)(?:\.jsonl?)?$")


def write_atomic(
    path: str | os.PathLike[str],
    content: str | bytes | None = None,
    *,
    write: Callable[[Path], object] | None = None,
    mode: int | None = None,
    before_replace: Callable[[], object] | None = None,
) -> Path:
    """Write `path` whole or not at all: a reader never sees half a file, and a writer that fails or is ended
    (an exception, Ctrl-C) leaves the old file or none, and no temporary file. The content is `content` (text or
    bytes), or what `write(temporary_path)` writes (torch.save); `mode` sets the file's permissions;
    `before_replace()` runs once the data is on disk and before it becomes visible (a journal entry that must
    never miss a file that exists). The data is flushed to disk before the rename. The temporary file is
    new_temporary's: in a folder others may write to (an output given in /tmp), nobody can have put a link there for
    it to write through."""
    path = Path(path)
    if write is None:
        if content is None:
            raise TypeError("write_atomic writes `content` or what `write` writes: it was given neither")
        data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = new_temporary(path, 0o666 if mode is None else 0o600)  # the umask applies
    try:
        if write is not None:
            os.close(fd)  # write() opens the file by its name, which is this process's own now
            write(tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return path


def new_temporary(path: Path, mode: int) -> tuple[int, Path]:
    """(descriptor, path) of a new file beside `path` (.NAME.PID.RANDOM.tmp), made exclusively and never through a
    link: a name nobody can guess, so that in a folder others may write to nobody has put a file or link there
    first."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode), tmp
        except FileExistsError:  # (one in four billion)
            continue


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """`data` as strict JSON (bench.core.codec.dumps: non-finite floats as their words), written atomically."""
    return write_atomic(path, dumps(data))


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file, or None when it is absent or unreadable (a writer killed mid-way)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


class RunFile:
    """A file of every run directory, named once: RunDir().spec_file is its path in that run's directory."""

    def __init__(self, name: str):
        self.name = name

    @overload
    def __get__(self, run_dir: None, owner: type | None = None) -> RunFile: ...

    @overload
    def __get__(self, run_dir: RunDir, owner: type | None = None) -> Path: ...

    def __get__(self, run_dir: RunDir | None, owner: type | None = None) -> RunFile | Path:
        return self if run_dir is None else run_dir.path / self.name


class RunDir:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.ranks = self.path / "ranks"

    def create(self) -> RunDir:
        """Make the run's folders, never through a link or folder another user chose (bench.core.shared_folders: a
        store's runs folder in /tmp is shared, and a run's id shows in the process list), checked once made: another
        user's is refused in one line (UsageError)."""
        try:
            check_path(self.ranks, make=True)
        except UnsafePath as exc:
            raise UsageError(
                f"run directory {self.path} cannot be used ({exc.problem}): another user could point bench at a "
                "folder of their choosing there; remove what they put there, or pass --store with a path in a folder "
                "of your own"
            ) from None
        return self

    spec_file = RunFile("spec.json")
    launcher_log = RunFile("launcher.log")
    # the run's record as JSON, written before the store is: a run is never lost with its store
    record_file = RunFile("record.json")
    # what the parent launched (command, environment, task's before-launch figures), written just before the launch:
    # what a lifeline needs to record the run if the parent dies
    launch_file = RunFile("launch.json")
    # the bench process running this run and its lifeline (bench.harness.lifeline); removed once the record is stored,
    # so a run directory holding one after both are gone was abandoned unrecorded
    owner_file = RunFile("owner.json")
    lifeline_log = RunFile("lifeline.log")
    # written by the lifeline when it ended the run at its deadline, the bench process not doing so (stopped, say)
    overdue_file = RunFile("overdue.json")
    # output of a launcher started while the run goes on (a scale-up's second agent)
    joiner_log = RunFile("joiner.log")
    # written by the victim (or rank 0, for a join) when it reaches the fault step
    fault_reached = RunFile("fault-reached.json")
    # written by the parent when the signal is sent or the joiner started
    fault_fired = RunFile("fault-fired.json")
    # an elastic agent's own events and metrics, one JSON line each
    agent_events = RunFile("agent-events.jsonl")
    checkpoint = RunFile("checkpoint.pt")
    # the hosts a discovery script reports (Horovod's elastic mode)
    hosts_file = RunFile("hosts.txt")
    discovery_script = RunFile("discover-hosts.sh")

    def params_file(self, rank: int, attempt: int) -> Path:
        """A process's final parameters (--save-params)."""
        return self.ranks / f"rank{rank}.a{attempt}.params.pt"

    def resumed_params_file(self, step: int, pid: int) -> Path:
        """The parameters a process resumed from in a fault run (--save-params)."""
        return self.path / f"resumed-step{step}-pid{pid}.params.pt"

    def read_json(self, path: Path) -> Any:
        """A JSON file of this run, or None when it is absent or unreadable (a writer killed mid-way)."""
        return read_json(path)

    def json_lines(self, path: Path) -> list[Any]:
        """Every readable line of a JSON-lines file (a line cut short by a kill is skipped)."""
        try:
            text = path.read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def rank_file(self, rank: int, attempt: int, kind: str) -> Path:
        suffix = ".log" if kind == "log" else ".json"
        return self.ranks / f"rank{rank}.a{attempt}.{kind}{suffix}"

    def journal_file(self, rank: int, attempt: int) -> Path:
        """A worker's event journal in a fault run: JSON lines, appended as events happen."""
        return self.ranks / f"rank{rank}.a{attempt}.journal.jsonl"

    def journal_lines(self) -> list[dict[str, Any]]:
        """Every journal line of every process, in time order, each with its file's rank and attempt."""
        lines: list[dict[str, Any]] = []
        if not self.ranks.is_dir():
            return lines
        for path in sorted(self.ranks.glob("rank*.a*.journal.jsonl")):
            match = RANK_FILE.match(path.name)
            if match is None:  # not a journal bench wrote (a rank or attempt that is not a number)
                continue
            for entry in self.json_lines(path):
                lines.append({**entry, "file_rank": int(match.group(1)), "attempt": int(match.group(2))})
        lines.sort(key=lambda e: e["t"])
        return lines

    def claim_attempt(self, rank: int, start: int) -> int:
        """The first attempt number from `start` whose log no process has taken yet, taken atomically.

        In fault runs a rank number is reused by replacement processes that their launcher does not
        number apart (Horovod's elastic mode; torchrun after a membership change): each process gets
        files of its own."""
        attempt = start
        while True:
            try:
                fd = os.open(self.rank_file(rank, attempt, "log"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
                return attempt
            except FileExistsError:
                attempt += 1

    def write(self, rank: int, attempt: int, kind: str, data: Any) -> None:
        write_json_atomic(self.rank_file(rank, attempt, kind), data)

    def read_all(self, kind: str) -> dict[tuple[int, int], dict[str, Any]]:
        """{(rank, attempt): data} for every readable file of this kind."""
        found: dict[tuple[int, int], dict[str, Any]] = {}
        if not self.ranks.is_dir():
            return found
        for path in self.ranks.glob(f"rank*.a*.{kind}.json"):
            match = RANK_FILE.match(path.name)
            if match is None:  # not a file bench wrote
                continue
            try:
                found[(int(match.group(1)), int(match.group(2)))] = json.loads(path.read_text())
            except (OSError, ValueError, AttributeError):
                continue  # a rank killed mid-write leaves only its .tmp file, which is never read
        return found

    def latest(self, kind: str) -> dict[int, dict[str, Any]]:
        """{rank: data} from each rank's last attempt."""
        best: dict[int, tuple[int, dict[str, Any]]] = {}
        for (rank, attempt), data in self.read_all(kind).items():
            if rank not in best or attempt > best[rank][0]:
                best[rank] = (attempt, data)
        return {rank: data for rank, (_, data) in sorted(best.items())}


# Where a run makes a temporary folder outside its run directory (a rank's scratch, Ray's runtime where the run
# directory's path is too long for its sockets), in this host's temporary folder or in SHORT_TEMP_DIR
SHORT_TEMP_DIR = Path("/tmp")


def run_temp_prefix(tag: str) -> str:
    """How each temporary folder of the run tagged `tag` outside its run directory begins (then what it is): the
    teardown (bench.harness.supervisor.reap) removes every one of them once the run's processes have ended, whichever
    process made it and whether or not it was ended before it could remove it."""
    return f"bench-{tag}-"


# Less room than this on a run directory's disk, and the small files of a run (a rank's exit file, the record) may not
# fit: the disk is full for the run's purposes.
FULL_BELOW_BYTES = 64 * 1024


def full_disk(path: str | os.PathLike[str]) -> str | None:
    """'the disk of PATH is full (N bytes free)' where the file system holding `path` has less than FULL_BELOW_BYTES
    that this process may write (root may use the blocks a file system keeps for it), else None (also where it cannot
    be asked)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    return f"the disk of {path} is full ({free} bytes free)" if free < FULL_BELOW_BYTES else None


def tail(path: Path, lines: int = 30, max_bytes: int = 16384, upto: int | None = None) -> str:
    """The last lines of a log (of its first `upto` bytes when given), for error reports."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell() if upto is None else min(upto, fh.tell())
            start = max(0, size - max_bytes)
            fh.seek(start)
            text = fh.read(size - start).decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


# A rank's log keeps the first LOG_HEAD_BYTES of its output and the last LOG_TAIL_BYTES, with one line between them
# saying how many bytes were dropped there: a rank that prints without end cannot fill the disk, and the start (how
# it began) and the end (how it ended, what the error tail shows) are both kept. While the rank runs, the file may
# hold up to LOG_TAIL_BYTES more before it is cut back (so that it is not rewritten at every write).
LOG_HEAD_BYTES = 1 << 20
LOG_TAIL_BYTES = 1 << 20
LOG_DRAIN_S = 2.0  # once a rank's process has ended, how long its output may still arrive (from a child outliving it)
DROPPED_LINE = (
    "\n[bench: {n} bytes of this rank's output dropped here; its log keeps the first {head} and the last "
    "{tail} bytes]\n"
)


class CappedLog:
    """A rank's log, written as its output arrives (`write`), capped as LOG_HEAD_BYTES and LOG_TAIL_BYTES say;
    `close()` cuts it to its final size."""

    def __init__(self, path: Path, head: int = LOG_HEAD_BYTES, tail_bytes: int = LOG_TAIL_BYTES):
        self.fh = open(path, "r+b")
        self.fh.seek(0, os.SEEK_END)
        self.head, self.tail = head, tail_bytes
        self.dropped = 0
        self.marked = False  # whether the file holds the dropped line (after the head)

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.fh.flush()  # read while the rank runs (an error tail, a progress check)
        if self.fh.tell() > self.head + 2 * self.tail + len(self._line()):
            self._cut()

    def _line(self) -> bytes:
        return DROPPED_LINE.format(n=self.dropped, head=self.head, tail=self.tail).encode()

    def _cut(self) -> None:
        """Keep the head, the dropped line and the last `tail` bytes (from the start of a line, where one begins
        near the cut)."""
        size = self.fh.tell()
        start = self.head + (len(self._line()) if self.marked else 0)  # the line now in the file
        keep_from = max(start, size - self.tail)
        if keep_from <= start:
            return
        self.fh.seek(keep_from)
        kept = self.fh.read(size - keep_from)
        newline = kept.find(b"\n", 0, 4096)
        if 0 <= newline < len(kept) - 1:
            kept = kept[newline + 1 :]
        self.dropped += size - start - len(kept)
        self.fh.seek(self.head)
        self.fh.truncate()
        self.fh.write(self._line() + kept)
        self.fh.flush()
        self.marked = True

    def close(self) -> None:
        if self.fh.tell() > self.head + self.tail + (len(self._line()) if self.marked else 0):
            self._cut()
        self.fh.close()


def copy_output(read_end: int, log: CappedLog) -> None:
    """A rank's output, from the read end of its pipe, into its log until every process holding the write end has
    closed it (run in a thread of the process that keeps the log: bench.harness.guard, a Ray worker's rank_main)."""
    writable = True
    try:
        while True:
            data = os.read(read_end, 1 << 16)
            if not data:
                break
            if writable:
                try:
                    log.write(data)
                except OSError:  # a full disk: the rank's output is dropped, never its pipe closed under it
                    writable = False
    finally:
        try:
            log.close()
        except OSError:
            pass
        os.close(read_end)
