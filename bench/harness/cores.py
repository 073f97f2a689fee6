"""One benchmark at a time per set of cores: the claim every run takes on the machine before it starts.

Two bench runs on the same cores measure each other, not the backends. So every run (bench.harness.runner.execute)
first claims what it will use: the CPUs of the bench process's affinity, which its ranks inherit (every CPU of the
machine for a run across hosts: test hosts are namespaces of this machine and share them), and the GPUs of a GPU
run. Claims live in one folder every bench process on the machine shares (`$BENCH_LOCK_DIR`, else DEFAULT_LOCK_DIR):

- `RUN_ID.claim`: the run's claim (JSON: run id, what runs, pid, store, resources, since, state), flocked by its
  owner for as long as it lives. The kernel drops that lock when the process ends, however it ends (the run's
  lifeline holds it too, until it has ended the run's processes), so a claim nobody holds the lock of is a dead
  process's, and the next bench that looks removes it;
- `RUN_ID.shared`: one JSON line for each run that started on the claimed resources while this one ran;
- `registry.lock`: flocked while a bench process reads and changes the claims (milliseconds), so that two never
  decide at once.

A run whose resources a running run holds waits, in the order runs arrived, saying which run holds them, up to
`--wait-for-cores` seconds, then is refused (exit 2). With `--allow-shared` it runs at once alongside; both runs'
records then name each other (RunRecord.shared_with), and such runs are left out of every comparison and the gate
(docs/method.md, "One benchmark at a time").
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.core.console import format_duration, note
from bench.core.errors import CoresInUse, UsageError

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
    """The sharing rule for every run this process makes from now on (the CLI's --allow-shared, --wait-for-cores)."""
    global _sharing
    _sharing = Sharing(allow, wait_s)


def sharing() -> Sharing:
    return _sharing


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)


def run_resources(spec) -> list[str]:
    """What a run occupies on this machine: `cpuN` for each CPU its processes may use, `gpuID` for each GPU it
    takes (local rank r takes the r-th visible device)."""
    if spec.hosts or not hasattr(os, "sched_getaffinity"):
        cpus = range(os.cpu_count() or 1)
    else:
        cpus = sorted(os.sched_getaffinity(0))
    out = [f"cpu{c}" for c in cpus]
    if spec.device == "cuda":
        visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        out += [f"gpu{d}" for d in (visible or [str(i) for i in range(spec.world_size)])[:spec.world_size]]
    return out


def resources_text(resources) -> str:
    """'CPUs 0-3, 6 and GPUs 0-1' for a list of resource names."""
    parts = []
    for kind, label in (("cpu", "CPU"), ("gpu", "GPU")):
        ids = [r[len(kind):] for r in resources if r.startswith(kind)]
        if not ids:
            continue
        if all(i.isdigit() for i in ids):
            nums, spans = sorted({int(i) for i in ids}), []
            for n in nums:
                if spans and n == spans[-1][1] + 1:
                    spans[-1][1] = n
                else:
                    spans.append([n, n])
            ids = [f"{a}-{b}" if b > a else str(a) for a, b in spans]
        parts.append(f"{label}{'s' if len(ids) > 1 or '-' in ids[0] else ''} {', '.join(ids)}")
    return " and ".join(parts) or "nothing"


def describe_claim(claim: dict) -> str:
    """'run ID (what; pid P, since HH:MM:SS, store S)'."""
    since = time.strftime("%H:%M:%S", time.localtime(claim.get("since", 0)))
    store = f", store {claim['store']}" if claim.get("store") else ""
    what = claim.get("label") or "a bench run"
    return f"run {claim.get('run_id')} ({what}; pid {claim.get('pid')}, since {since}{store})"


def _open_shared(path: Path, flags: int) -> int:
    """An fd of a file in the lock folder that every user may write (the folder is sticky, as /tmp is)."""
    fd = os.open(path, flags | os.O_CREAT, 0o666)
    try:
        os.fchmod(fd, 0o666)
    except OSError:  # another user's file: it is theirs to open up
        pass
    return fd


@contextmanager
def _registry(folder: Path):
    """Hold the lock on the claims folder while the claims are read and changed."""
    fd = _open_shared(folder / "registry.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


class CoreClaim:
    """`with CoreClaim(run_id, label, store, resources):` around a run, from before anything of it starts until its
    record is stored: returns once the resources are the run's (or, with sharing allowed, at once); `finish()` when
    the run's processes have ended; `shared_with` the runs it overlapped."""

    def __init__(self, run_id: str, label: str, store: str | None, resources: list[str],
                 rule: Sharing | None = None):
        self.run_id, self.label, self.store, self.resources = run_id, label, store, list(resources)
        self.rule = rule or sharing()
        self.folder = lock_dir()
        self.path = self.folder / f"{run_id}.claim"
        self.fd: int | None = None
        self.state = "waiting"
        self.since = time.time()
        self.seen: list[dict] = []  # running runs it started alongside
        self.shared_with: list[dict] = []  # set by finish(): every run it overlapped

    # ---------------------------------------------------------------- the claim's own file
    def _entry(self) -> dict:
        return {"run_id": self.run_id, "label": self.label, "store": self.store, "pid": os.getpid(),
                "resources": self.resources, "since": self.since, "state": self.state, "seen": self.seen}

    def _write(self) -> None:
        data = json.dumps(self._entry()).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def _others(self) -> list[dict]:
        """The live claims of other runs on any of this run's resources; those of dead processes are removed."""
        mine, found = set(self.resources), []
        for path in self.folder.glob("*.claim"):
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its owner (or its lifeline) is alive
                    claim = json.loads(os.pread(fd, 1 << 20, 0) or b"{}")
                    if mine & set(claim.get("resources") or ()):
                        found.append(claim)
                else:  # nobody holds it: its process ended without removing it
                    for stale in (path, path.with_suffix(".shared")):
                        try:
                            stale.unlink()
                        except OSError:
                            pass
            except ValueError:  # not JSON: nothing a bench wrote
                pass
            finally:
                os.close(fd)
        return found

    def _mark(self, other: dict) -> None:
        """Tell a running run that this one started alongside it."""
        line = json.dumps({"run_id": self.run_id, "label": self.label, "store": self.store}) + "\n"
        fd = _open_shared(self.folder / f"{other['run_id']}.shared", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- taking and releasing
    def __enter__(self) -> "CoreClaim":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            try:
                os.chmod(self.folder, 0o1777)
            except OSError:  # another user's folder: made so by its maker
                pass
            with _registry(self.folder):  # created and locked at once: a claim nobody locks is a dead process's
                self.fd = _open_shared(self.path, os.O_RDWR)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise UsageError(f"cannot claim the cores in {self.folder} ({exc.strerror or exc}): every bench run on "
                             f"this machine claims them there; set {LOCK_DIR_VARIABLE} to a folder every bench process "
                             "here can write") from None
        try:
            self._take()
        except BaseException:
            self._release()
            raise
        return self

    def _take(self) -> None:
        started, said_at = time.monotonic(), None
        while True:
            with _registry(self.folder):
                self._write()
                others = self._others()
                running = [c for c in others if c.get("state") == "running"]
                ahead = [c for c in others if c.get("state") == "waiting"
                         and (c.get("since", 0), c.get("run_id", "")) < (self.since, self.run_id)]
                if not running and (not ahead or self.rule.allow):
                    self.state = "running"
                    self._write()
                    return
                if self.rule.allow:
                    self.state, self.seen = "running", [_brief(c) for c in running]
                    self._write()
                    for other in running:
                        self._mark(other)
                    note(f"bench: run {self.run_id} shares {resources_text(self._common(running))} with "
                         f"{'; '.join(describe_claim(c) for c in running)} (--allow-shared): the records of both are "
                         "marked and left out of verdicts and the gate")
                    return
            holder = (running or ahead)[0]
            waited = time.monotonic() - started
            what = resources_text(self._common([holder]))
            held = "in use by" if running else "claimed first by"
            if waited >= self.rule.wait_s:
                raise CoresInUse(
                    f"{what} still {held} {describe_claim(holder)} after waiting {format_duration(waited)}: one "
                    "benchmark at a time per set of cores; wait for it to end, give --wait-for-cores SECONDS to wait "
                    "longer, or pass --allow-shared to run alongside it (the records of both are then marked and "
                    "left out of verdicts and the gate)")
            if said_at is None or time.monotonic() - said_at >= SAY_AGAIN_S:
                note(f"bench: {what} {held} {describe_claim(holder)}; run {self.run_id} waits for them (up to "
                     f"{format_duration(self.rule.wait_s)}, --wait-for-cores; --allow-shared runs alongside, marked)")
                said_at = time.monotonic()
            time.sleep(POLL_S)

    def _common(self, claims: list[dict]) -> list[str]:
        theirs = {r for c in claims for r in c.get("resources") or ()}
        return [r for r in self.resources if r in theirs]

    def finish(self) -> list[dict]:
        """The run's processes have ended: its resources are free for the next run, and the runs it overlapped
        (those it started alongside, and those that started alongside it) are known. Returns them."""
        with _registry(self.folder):
            self.state = "ended"
            self._write()
            self.shared_with = overlaps_of(self.run_id)
        return self.shared_with

    def __exit__(self, exc_type, exc, tb) -> None:
        self._release()

    def _release(self) -> None:
        if self.fd is None:
            return
        try:
            with _registry(self.folder):
                for path in (self.path, self.path.with_suffix(".shared")):
                    try:
                        path.unlink()
                    except OSError:
                        pass
        finally:
            os.close(self.fd)
            self.fd = None


def overlaps_of(run_id: str) -> list[dict]:
    """The runs that ran on a run's resources while it ran, as its claim files say (those it started alongside,
    then those that started alongside it); none once its claim is gone. Also read by the run's lifeline, which
    records a run whose bench process died."""
    folder, found = lock_dir(), {}
    try:
        seen = json.loads((folder / f"{run_id}.claim").read_text() or "{}").get("seen") or []
    except (OSError, ValueError):
        seen = []
    try:
        later = [json.loads(line) for line in (folder / f"{run_id}.shared").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        later = []
    for entry in seen + later:
        found.setdefault(entry.get("run_id"), _brief(entry))
    return list(found.values())


def _brief(claim: dict) -> dict:
    """What a record keeps of a run it overlapped."""
    return {"run_id": claim.get("run_id"), "label": claim.get("label"), "store": claim.get("store")}
