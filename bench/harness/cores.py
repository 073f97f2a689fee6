"""One benchmark at a time per set of cores: the claim every run takes on the machine before it starts.

Two bench runs on the same cores measure each other, not the backends. So every run (bench.harness.runner.execute)
first claims what it will use: the CPUs of the bench process's affinity, which its ranks inherit (every CPU of the
machine for a run across hosts: test hosts are namespaces of this machine and share them), and the GPUs of a GPU
run. Claims live in one folder every bench process on the machine shares (`$BENCH_LOCK_DIR`, else DEFAULT_LOCK_DIR):

- `RUN_ID.claim`: the run's claim (JSON: run id, what runs, pid, store, resources, since, state), flocked by its
  owner for as long as it lives. The kernel drops that lock when the process ends, however it ends (the run's
  lifeline holds it too, until it has ended the run's processes), so a claim nobody holds the lock of is a dead
  process's, and the next bench that looks removes it;
- `RUN_ID.shared`: one JSON line for each run that started on the claimed resources while this one ran (made by
  the run with its claim, writable by every user);
- `registry.lock`: flocked while a bench process reads and changes the claims (milliseconds), so that two never
  decide at once.

Another local user may write to that folder too, so nothing in it is trusted (docs/method.md, "One benchmark at a
time"): the folder must belong to this user or root, files are opened through the folder's descriptor and never
through a link, only the file a run has just made for others to append to is writable by them, and a claim blocks
only while a live bench process that wrote it holds it.

A run whose resources a running run holds waits, in the order runs arrived, saying which run holds them, up to
`--cores-timeout` seconds, then is refused (exit 2). With `--allow-shared` it runs at once alongside; both runs'
records then name each other (RunRecord.shared_with), and such runs are left out of every comparison and the gate
(docs/method.md, "One benchmark at a time").
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.core.console import format_duration, note
from bench.core.errors import BenchError, CoresInUse, UsageError
from bench.core.shared_folders import UnsafePath, check_path, folder_problem, open_file, open_or_create, owner
from bench.core.spec import RunSpec

LOCK_DIR_VARIABLE = "BENCH_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/bench-locks")  # one per machine, for every user: not a per-user runtime folder
DEFAULT_WAIT_S = 3600.0  # about the longest a default run takes (its deadline is 900 s), several times over
POLL_S = 0.2
SAY_AGAIN_S = 60.0  # a waiting run repeats who it waits for this often


@dataclass
class Sharing:
    """What runs of this process do when their resources are claimed: wait up to `wait_s`, or (`allow`) run
    alongside, marked."""

    allow: bool = False
    wait_s: float = DEFAULT_WAIT_S


_sharing = Sharing()


def set_sharing(allow: bool, wait_s: float) -> None:
    """The sharing rule for every run this process makes from now on (the CLI's --allow-shared, --cores-timeout)."""
    global _sharing
    _sharing = Sharing(allow, wait_s)


def sharing() -> Sharing:
    return _sharing


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)


def cpu_resources(every_cpu: bool = False) -> list[str]:
    """`cpuN` for each CPU of this process's affinity, which its children inherit; every CPU of the machine where
    `every_cpu` (a run across test hosts, namespaces of this machine) or where no affinity can be read."""
    cpus: Iterable[int]
    if every_cpu or not hasattr(os, "sched_getaffinity"):
        cpus = range(os.cpu_count() or 1)
    else:
        cpus = sorted(os.sched_getaffinity(0))
    return [f"cpu{c}" for c in cpus]


def run_resources(spec: RunSpec) -> list[str]:
    """What a run occupies on this machine: `cpuN` for each CPU its processes may use, `gpuID` for each GPU it
    takes (local rank r takes the r-th visible device)."""
    out = cpu_resources(every_cpu=bool(spec.hosts))
    if spec.device == "cuda":
        visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        out += [f"gpu{d}" for d in (visible or [str(i) for i in range(spec.world_size)])[: spec.world_size]]
    return out


def resources_text(resources: Iterable[str]) -> str:
    """'CPUs 0-3, 6 and GPUs 0-1' for a list of resource names."""
    parts = []
    for kind, label in (("cpu", "CPU"), ("gpu", "GPU")):
        ids = [r[len(kind) :] for r in resources if r.startswith(kind)]
        if not ids:
            continue
        if all(i.isdigit() for i in ids):
            nums, spans = sorted({int(i) for i in ids}), list[list[int]]()
            for n in nums:
                if spans and n == spans[-1][1] + 1:
                    spans[-1][1] = n
                else:
                    spans.append([n, n])
            ids = [f"{a}-{b}" if b > a else str(a) for a, b in spans]
        parts.append(f"{label}{'s' if len(ids) > 1 or '-' in ids[0] else ''} {', '.join(ids)}")
    return " and ".join(parts) or "nothing"


def describe_claim(claim: dict[str, Any]) -> str:
    """'run ID (what; pid P, since HH:MM:SS, store S)'; what another user's claim says is shown as printable text."""
    since = time.strftime("%H:%M:%S", time.localtime(claim.get("since", 0)))
    store = f", store {printable(claim['store'])}" if claim.get("store") else ""
    what = printable(claim.get("label") or "a bench run")
    return f"run {claim.get('run_id')} ({what}; pid {claim.get('pid')}, since {since}{store})"


def printable(text: object, limit: int = 200) -> str:
    """Text from a file anybody may write, for one line of a message: control characters escaped, length capped."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return shown if len(shown) <= limit else shown[:limit] + "..."


# ---------------------------------------------------------------- the folder, and the files in it
# The folder is shared by every user of the machine, so nothing in it is trusted: it is used only when it belongs to
# this user or root (and, where others may write to it, is sticky, as /tmp is, so that nobody replaces another's
# file); every file is opened relative to the folder's own descriptor, never through a symbolic link, and only if it
# is a regular file with one name; a file is made world-writable only by the process that has just created it; and
# what another process wrote (run ids, pids, labels) is checked before it names a file or blocks a run. The path to
# the folder passes through no link or folder another user chose (bench.core.shared_folders, which holds these checks
# for every file bench makes where other users may write).

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
REGISTRY = "registry.lock"
REGISTRY_WAIT_S = 60.0  # the registry is held for milliseconds; longer means a process holds it on purpose
MAX_CLAIM_BYTES = 1 << 16
MAX_SHARED_BYTES = 1 << 20
STATES = ("waiting", "running", "ended")


def valid_run_id(value: object) -> bool:
    """Whether a run id read from a file could name a file of the folder: a bench run id or test tag, never a path."""
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None and ".." not in value


class LockFolderRefused(UsageError):
    pass


def _refuse(folder: Path, problem: str) -> LockFolderRefused:
    return LockFolderRefused(
        f"the cores' lock folder {printable(folder)} {problem}: another user could replace the files bench opens "
        f"there; remove it (root can make it for every user: install -d -m 1777 {printable(folder)}), or set "
        f"{LOCK_DIR_VARIABLE} to a folder of your own (runs then wait only for runs that use that folder)"
    )


def open_folder(folder: Path, create: bool = True) -> int:
    """A descriptor of the claims folder, checked (LockFolderRefused says what is wrong with it in one line); made,
    sticky and writable for every user, if it does not exist and `create`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    made = False
    try:
        try:
            check_path(folder.parent)
            fd = os.open(folder, flags)
        except FileNotFoundError:
            if not create:
                raise
            check_path(folder.parent, make=True)  # never made through another user's link
            try:
                os.mkdir(folder, 0o700)
                made = True
            except FileExistsError:  # made at the same moment by another bench
                pass
            fd = os.open(folder, flags)
    except UnsafePath as exc:
        raise _refuse(folder, f"lies past a part another user chose ({exc.problem})") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(folder, "is a symbolic link or not a folder") from None
        raise
    info = os.fstat(fd)
    if made and info.st_uid == os.geteuid():
        os.fchmod(fd, 0o1777)  # one folder for every user of the machine: this process has just made it
        return fd
    problem = folder_problem(info)
    if problem:
        os.close(fd)
        raise _refuse(folder, problem)
    return fd


def check_lock_folder() -> None:
    """Refuse (LockFolderRefused, one line) a claims folder bench may not use, making it if it does not exist."""
    try:
        os.close(open_folder(lock_dir()))
    except OSError as exc:
        raise UsageError(
            f"cannot make the cores' lock folder {printable(lock_dir())} ({exc.strerror or exc}): set "
            f"{LOCK_DIR_VARIABLE} to a folder every bench process here can write"
        ) from None


def _unlink(folder_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=folder_fd)
    except OSError:  # gone already, or another user's in a sticky folder
        pass


@contextmanager
def _registry(folder_fd: int, folder: Path) -> Iterator[None]:
    """Hold the lock on the claims folder while the claims are read and changed (at most REGISTRY_WAIT_S to get it)."""
    try:
        fd = open_or_create(folder_fd, REGISTRY, os.O_RDONLY)[0]  # flock needs no write access
    except OSError as exc:
        raise _refuse(folder, f"has a {REGISTRY} that bench cannot use ({exc.strerror or exc})") from None
    try:
        deadline = time.monotonic() + REGISTRY_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CoresInUse(
                        f"{printable(folder / REGISTRY)} (of {owner(os.fstat(fd).st_uid)}) has been locked for "
                        f"{REGISTRY_WAIT_S:g} s, where bench holds it for milliseconds: end the process that holds "
                        f"it (fuser {printable(folder / REGISTRY)}), or set {LOCK_DIR_VARIABLE} to a folder of your "
                        "own"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _read_claim(fd: int, run_id: str) -> dict[str, Any] | None:
    """A claim as bench writes it, or None for anything else (its values checked, not trusted)."""
    try:
        claim = json.loads(os.pread(fd, MAX_CLAIM_BYTES + 1, 0) or b"{}")
    except ValueError:
        return None
    if not isinstance(claim, dict) or claim.get("run_id") != run_id or claim.get("state") not in STATES:
        return None
    resources, since, seen = claim.get("resources"), claim.get("since"), claim.get("seen")
    seen = seen if isinstance(seen, list) else []
    holders = claim.get("holders") or [{"pid": claim.get("pid"), "start": claim.get("start")}]
    if not (
        isinstance(resources, list)
        and all(isinstance(r, str) for r in resources)
        and isinstance(since, (int, float))
        and isinstance(holders, list)
        and all(isinstance(h, dict) and type(h.get("pid")) is int and h["pid"] > 0 for h in holders)
    ):
        return None
    return {
        "run_id": run_id,
        "label": claim.get("label"),
        "store": claim.get("store"),
        "pid": holders[0]["pid"],
        "resources": resources,
        "since": since,
        "state": claim["state"],
        "holders": holders,
        "seen": [b for b in (_checked_brief(s) for s in seen if isinstance(s, dict)) if b],
    }


def _checked_brief(entry: dict[str, Any]) -> dict[str, Any] | None:
    """An entry naming a run (a claim's `seen`, a line of a `.shared` file), or None if it is not one bench wrote."""
    if not valid_run_id(entry.get("run_id")):
        return None
    if any(entry.get(k) is not None and not isinstance(entry.get(k), str) for k in ("label", "store")):
        return None
    return _brief(entry)


def process_facts(pid: int) -> dict[str, Any] | None:
    """What /proc says of a live process: its effective uid, its start time (clock ticks after boot: with the pid,
    it names one process, whatever reuses the pid later) and its command line; None if there is no such process,
    {} if it exists but cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            start = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open(f"/proc/{pid}/status", "rb") as f:
            uid = int(next(line for line in f if line.startswith(b"Uid:")).split()[2])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError, StopIteration):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return {}
    return {"uid": uid, "start": start, "argv": argv}


def names_bench(argv: list[str]) -> bool:
    """Whether a command line runs bench: its entry point (`bench VERB`), `python -m bench[.module]`, or a program
    that imports it (`python -c '... bench ...'`)."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "bench" or (i and argv[i - 1] == "-m" and arg.split(".")[0] == "bench"):
            return True
        if i and argv[i - 1] == "-c" and re.search(r"\bfrom bench\b|\bimport bench\b", arg):
            return True
    return False


def _held_by_bench(claim: dict[str, Any], owner_uid: int) -> bool:
    """Whether a locked claim is a live bench run's: one of the processes it names (the run's bench process, its
    lifeline) is alive, is the one that wrote it (same start time), runs as the claim file's owner and, for another
    user's claim, runs bench. A claim that fails this (a forged one, or one whose pid was reused) never blocks."""
    for holder in claim["holders"]:
        if holder["pid"] == os.getpid():
            return True
        facts = process_facts(holder["pid"])
        if facts is None:
            continue
        if not facts:  # alive, but this user may not read /proc of it (hidepid): the lock is all there is to go on
            return True
        if (
            holder.get("start") in (None, facts["start"])
            and facts["uid"] == owner_uid
            and (owner_uid == os.geteuid() or names_bench(facts["argv"]))
        ):
            return True
    return False


def _own_start() -> int | None:
    facts = process_facts(os.getpid())
    return int(facts["start"]) if facts else None


class CoreClaim:
    """`with CoreClaim(run_id, label, store, resources):` around a run, from before anything of it starts until its
    record is stored: returns once the resources are the run's (or, with sharing allowed, at once); `finish()` when
    the run's processes have ended; `shared_with` the runs it overlapped."""

    def __init__(self, run_id: str, label: str, store: str | None, resources: list[str], rule: Sharing | None = None):
        if not valid_run_id(run_id):
            raise ValueError(f"not a run id: {run_id!r}")
        self.run_id, self.label, self.store, self.resources = run_id, label, store, list(resources)
        self.rule = rule or sharing()
        self.folder = lock_dir()
        self.name = f"{run_id}.claim"
        self.folder_fd: int | None = None
        self.fd: int | None = None
        self.state = "waiting"
        self.since = time.time()
        self.holders = [{"pid": os.getpid(), "start": _own_start()}]
        self.seen: list[dict[str, Any]] = []  # running runs it started alongside
        self.shared_with: list[dict[str, Any]] = []  # set by finish(): every run it overlapped

    @property
    def path(self) -> Path:
        return self.folder / self.name

    @property
    def _folder_fd(self) -> int:
        """The claims folder's descriptor, held from `with CoreClaim(...)` to the claim's release."""
        if self.folder_fd is None:
            raise RuntimeError(f"the claim of run {self.run_id} is used outside `with CoreClaim(...)`")
        return self.folder_fd

    @property
    def claim_fd(self) -> int:
        """The claim file's descriptor, held (and flocked) from `with CoreClaim(...)` to the claim's release."""
        if self.fd is None:
            raise RuntimeError(f"the claim of run {self.run_id} is used outside `with CoreClaim(...)`")
        return self.fd

    # ---------------------------------------------------------------- the claim's own file
    def _entry(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "label": self.label,
            "store": self.store,
            "pid": os.getpid(),
            "holders": self.holders,
            "resources": self.resources,
            "since": self.since,
            "state": self.state,
            "seen": self.seen,
        }

    def _write(self) -> None:
        data = json.dumps(self._entry()).encode()
        os.ftruncate(self.claim_fd, 0)
        os.pwrite(self.claim_fd, data, 0)

    def add_holder(self, pid: int) -> None:
        """Another process holds the claim's lock too (the run's lifeline): the claim stays live while it does."""
        facts = process_facts(pid)
        with _registry(self._folder_fd, self.folder):
            self.holders.append({"pid": pid, "start": facts.get("start") if facts else None})
            self._write()

    def _others(self) -> list[dict[str, Any]]:
        """The live claims of other runs on any of this run's resources; those of dead processes are removed, and
        anything else in the folder (a forged claim, a claim whose processes are not bench's) is passed over."""
        mine, found = set(self.resources), list[dict[str, Any]]()
        for name in os.listdir(self._folder_fd):
            run_id = name[: -len(".claim")]
            if not name.endswith(".claim") or name == self.name or not valid_run_id(run_id):
                continue
            try:
                fd = open_file(self._folder_fd, name, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its owner (or its lifeline) holds it: if it is a live bench run
                    claim = _read_claim(fd, run_id)
                    if claim and mine & set(claim["resources"]) and _held_by_bench(claim, os.fstat(fd).st_uid):
                        found.append(claim)
                else:  # nobody holds it: its process ended without removing it
                    _unlink(self._folder_fd, name)
                    _unlink(self._folder_fd, f"{run_id}.shared")
            finally:
                os.close(fd)
        return found

    def _mark(self, other: dict[str, Any]) -> None:
        """Tell a running run that this one started alongside it: a line appended to the file its owner made for
        that (only if it is a regular file of that owner's; another's is passed over)."""
        line = json.dumps({"run_id": self.run_id, "label": self.label, "store": self.store}) + "\n"
        try:
            owner = os.stat(f"{other['run_id']}.claim", dir_fd=self._folder_fd, follow_symlinks=False).st_uid
            fd = open_file(self._folder_fd, f"{other['run_id']}.shared", os.O_WRONLY | os.O_APPEND)
        except OSError:
            return
        try:
            if os.fstat(fd).st_uid == owner:
                os.write(fd, line.encode())
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- taking and releasing
    def __enter__(self) -> CoreClaim:
        try:
            self.folder_fd = open_folder(self.folder)
            with _registry(self.folder_fd, self.folder):  # made and locked at once: a claim nobody locks is a dead
                # process's; made anew (O_EXCL): a file planted under its name is never opened
                self.fd = open_file(self.folder_fd, self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                shared = open_file(self.folder_fd, f"{self.run_id}.shared", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                os.fchmod(shared, 0o622)  # just made, for the runs of other users that start alongside to append to
                os.close(shared)
        except BenchError:
            self._release()
            raise
        except FileExistsError:
            self._release()
            raise _refuse(
                self.folder,
                f"already holds a file named {self.name} or {self.run_id}.shared, which this new run was to make",
            ) from None
        except OSError as exc:
            self._release()
            raise UsageError(
                f"cannot claim the cores in {printable(self.folder)} ({exc.strerror or exc}): every "
                f"bench run on this machine claims them there; set {LOCK_DIR_VARIABLE} to a folder "
                "every bench process here can write"
            ) from None
        try:
            self._take()
        except BaseException:
            self._release()
            raise
        return self

    def _take(self) -> None:
        started, said_at = time.monotonic(), None
        while True:
            with _registry(self._folder_fd, self.folder):
                self._write()
                others = self._others()
                running = [c for c in others if c.get("state") == "running"]
                ahead = [
                    c
                    for c in others
                    if c.get("state") == "waiting"
                    and (c.get("since", 0), c.get("run_id", "")) < (self.since, self.run_id)
                ]
                if not running and (not ahead or self.rule.allow):
                    self.state = "running"
                    self._write()
                    return
                if self.rule.allow:
                    self.state, self.seen = "running", [_brief(c) for c in running]
                    self._write()
                    for other in running:
                        self._mark(other)
                    note(
                        f"bench: run {self.run_id} shares {resources_text(self._common(running))} with "
                        f"{'; '.join(describe_claim(c) for c in running)} (--allow-shared): the records of both are "
                        "marked and left out of verdicts and the gate"
                    )
                    return
            holder = (running or ahead)[0]
            waited = time.monotonic() - started
            what = resources_text(self._common([holder]))
            held = "in use by" if running else "claimed first by"
            if waited >= self.rule.wait_s:
                raise CoresInUse(
                    f"{what} still {held} {describe_claim(holder)} after waiting {format_duration(waited)}: one "
                    "benchmark at a time per set of cores; wait for it to end, give --cores-timeout SECONDS to wait "
                    "longer, or pass --allow-shared to run alongside it (the records of both are then marked and "
                    "left out of verdicts and the gate)"
                )
            if said_at is None or time.monotonic() - said_at >= SAY_AGAIN_S:
                note(
                    f"bench: {what} {held} {describe_claim(holder)}; run {self.run_id} waits for them (up to "
                    f"{format_duration(self.rule.wait_s)}, --cores-timeout; --allow-shared runs alongside, marked)"
                )
                said_at = time.monotonic()
            time.sleep(POLL_S)

    def _common(self, claims: list[dict[str, Any]]) -> list[str]:
        theirs = {r for c in claims for r in c.get("resources") or ()}
        return [r for r in self.resources if r in theirs]

    def finish(self) -> list[dict[str, Any]]:
        """The run's processes have ended: its resources are free for the next run, and the runs it overlapped
        (those it started alongside, and those that started alongside it) are known. Returns them."""
        with _registry(self._folder_fd, self.folder):
            self.state = "ended"
            self._write()
            self.shared_with = overlaps_of(self.run_id)
        return self.shared_with

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release()

    def _release(self) -> None:
        try:
            if self.fd is not None:
                with _registry(self._folder_fd, self.folder):
                    _unlink(self._folder_fd, self.name)
                    _unlink(self._folder_fd, f"{self.run_id}.shared")
        finally:
            for fd in (self.fd, self.folder_fd):
                if fd is not None:
                    os.close(fd)
            self.fd = self.folder_fd = None


def overlaps_of(run_id: str) -> list[dict[str, Any]]:
    """The runs that ran on a run's resources while it ran, as its claim files say (those it started alongside,
    then those that started alongside it); none once its claim is gone. Also read by the run's lifeline, which
    records a run whose bench process died. Entries that are not a run's, as bench writes them, are passed over."""
    found: dict[str, dict[str, Any]] = {}
    try:
        folder_fd = open_folder(lock_dir(), create=False)
    except (OSError, BenchError):
        return []
    try:
        entries: list[Any] = []
        reads: tuple[tuple[str, Callable[[bytes], list[Any]]], ...] = (
            (f"{run_id}.claim", lambda data: json.loads(data or b"{}").get("seen") or []),
            (f"{run_id}.shared", lambda data: [json.loads(line) for line in data.splitlines() if line.strip()]),
        )
        for name, read in reads:
            try:
                fd = open_file(folder_fd, name, os.O_RDONLY)
            except OSError:
                continue
            try:
                entries += read(os.pread(fd, MAX_SHARED_BYTES, 0))
            except (OSError, ValueError, AttributeError):
                pass
            finally:
                os.close(fd)
        for entry in entries:
            brief = _checked_brief(entry) if isinstance(entry, dict) else None
            if brief and brief["run_id"] != run_id:
                found.setdefault(brief["run_id"], brief)
    finally:
        os.close(folder_fd)
    return list(found.values())


def _brief(claim: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of a run it overlapped."""
    return {"run_id": claim.get("run_id"), "label": claim.get("label"), "store": claim.get("store")}
