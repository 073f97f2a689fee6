"""One way to launch a process tree and reap it, for every backend.

The launcher starts in a session of its own. Every process of the run carries BENCH_RUN_TAG in its
environment, which children inherit even when a launcher moves them into sessions of their own (as
torchrun does with its workers) or when they are orphaned: teardown finds them by that tag as well as
by parentage, so nothing a run started outlives it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.cluster.hosts import reap_on_hosts
from bench.cluster.slurm import job_ending
from bench.core.errors import Interrupted
from bench.core.rundir import SHORT_TEMP_DIR, run_temp_prefix

TAG_VARIABLE = "BENCH_RUN_TAG"
TERM_GRACE_S = 3.0  # time given to SIGTERM before SIGKILL
KILL_WAIT_S = 5.0


@dataclass
class Outcome:
    """How the launcher ended: 'exited' (returncode set), 'timeout', 'interrupted', or an ending named by
    the on_poll watcher ('hung')."""

    ending: str
    returncode: int | None
    launched_at: float  # wall clock, comparable with the workers' timestamps
    ended_at: float
    log_bytes_before_teardown: int | None = None  # the launcher log as it was before we ended it
    reaped: list[dict[str, Any]] = field(default_factory=list)  # processes teardown had to end
    survivors: list[dict[str, Any]] = field(default_factory=list)  # processes that could not be ended
    reason: str | None = None  # why an interrupted (or timed-out) run ended, when not by the user (the deadline)

    def interruption(self) -> str:
        return self.reason or "interrupted by the user"

    def deadline(self, timeout: float) -> str:
        return self.reason or f"deadline of {timeout:g} s passed"


def _describe(proc: psutil.Process) -> dict[str, Any]:
    try:
        return {"pid": proc.pid, "name": proc.name(), "cmdline": " ".join(proc.cmdline())[:200]}
    except psutil.Error:
        return {"pid": proc.pid}


def carries_tag(pid: int, tag: str) -> bool:
    """Whether the process was started with the run's tag in its environment. Read from /proc's raw block, not
    psutil's parse of it: a process that renames itself (setproctitle, as Ray's agents do) may overwrite the
    start of that block with its title and NULs, and psutil stops at the first empty entry, missing the tag."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            block = f.read()
    except OSError:
        return False
    return f"\0{TAG_VARIABLE}={tag}\0".encode() in b"\0" + block + b"\0"


def run_processes(tag: str, root_pid: int | None = None) -> list[psutil.Process]:
    """Every live process of the run: the launcher's descendants, anything carrying the tag, and their
    descendants (a tagged daemon's children that renamed themselves, whatever their environment now reads)."""
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    roots = []
    if root_pid is not None:
        try:
            roots.append(psutil.Process(root_pid))
        except psutil.Error:
            pass
    for proc in psutil.process_iter():
        if proc.pid != me and proc.pid != root_pid and carries_tag(proc.pid, tag):
            roots.append(proc)
    for root in roots:
        try:
            for proc in [root, *root.children(recursive=True)]:
                if proc.pid != me:
                    found.setdefault(proc.pid, proc)
        except psutil.Error:
            continue
    alive = []
    for proc in found.values():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def _signal_all(procs: Iterable[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def scratch_prefix(tag: str | None) -> str:
    """How the temporary folder of each of a run's ranks is named (bench.harness.guard makes it; its name ends with
    the rank, its attempt and a random part): by the run's tag (run_temp_prefix), so that reap finds the folders a
    guard could not remove, ended by a SIGKILL before it could."""
    return f"{run_temp_prefix(tag)}rank" if tag else "bench-rank"


def remove_scratch(tag: str) -> None:
    """Remove the run's temporary folders outside its run directory (run_temp_prefix) that are left in this host's
    temporary folder or in SHORT_TEMP_DIR: a rank's, which its guard removes unless it was killed (by the SIGKILL
    after TERM_GRACE_S, a node loss, a killed rank), and Ray's runtime folder, which its driver removes while the
    runtime's processes, ended by the same teardown, may still be writing their logs into it."""
    for folder in run_temp_folders(tag):
        shutil.rmtree(folder, ignore_errors=True)


def run_temp_folders(tag: str) -> list[Path]:
    """The folders of the run tagged `tag` outside its run directory that are on this host now (run_temp_prefix):
    what remove_scratch removes, and what the tests find left. Only this user's own folders: the run's tag shows in
    the process list, and in a shared /tmp another user may have made a folder (or a link) under its name, which is
    theirs to remove, not this run's."""
    pattern = f"{glob.escape(run_temp_prefix(tag))}*"
    found = {folder for where in (Path(tempfile.gettempdir()), SHORT_TEMP_DIR) for folder in where.glob(pattern)}
    return sorted(folder for folder in found if _own_folder(folder))


def _own_folder(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def reap(tag: str, root_pid: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """End every process of the run: SIGTERM (and SIGCONT for stopped ones), then SIGKILL; then remove the run's
    temporary folders outside its run directory that are left (remove_scratch: its guards', its Ray runtime's)."""
    try:
        return _end_run_processes(tag, root_pid)
    finally:
        remove_scratch(tag)


def _end_run_processes(tag: str, root_pid: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    procs = run_processes(tag, root_pid)
    if not procs:
        return [], []
    reaped = [_describe(p) for p in procs]
    if root_pid is not None:
        try:
            os.killpg(root_pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    # Processes started meanwhile (a launcher restarting a worker) are found by a second look.
    late: list[psutil.Process] = []

    def second_look() -> list[psutil.Process]:
        late.extend(p for p in run_processes(tag, None) if p.pid not in {r["pid"] for r in reaped})
        return late

    still = end_processes(procs, TERM_GRACE_S, second_look)
    return reaped + [_describe(p) for p in late], [_describe(p) for p in still]


def end_processes(
    procs: list[psutil.Process], grace: float, second_look: Callable[[], list[psutil.Process]] = list
) -> list[psutil.Process]:
    """SIGTERM (and SIGCONT for stopped ones), `grace` seconds, then SIGKILL to what is left and to what
    second_look() finds then; returns what survived even that (the one way this project ends processes)."""
    _signal_all(procs, signal.SIGTERM)
    _signal_all(procs, signal.SIGCONT)
    _, left = psutil.wait_procs(procs, timeout=grace)
    alive = {p.pid: p for p in left}
    for proc in second_look():
        alive.setdefault(proc.pid, proc)
    _signal_all(alive.values(), signal.SIGKILL)
    _, still = psutil.wait_procs(list(alive.values()), timeout=KILL_WAIT_S)
    return list(still)


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def name_of(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return "?"


def processes_of(
    candidates: Iterable[tuple[psutil.Process, bool]], is_ours: Callable[[psutil.Process], bool]
) -> list[psutil.Process]:
    """The live processes among `candidates` ((process, known to be ours) pairs) that are ours (known, or
    is_ours(process)), with all their descendants; never this process or one it runs under. How the test
    clusters (bench.testbed.slurm, bench.testbed.ray) find their daemons, whoever started them."""
    spared = {os.getpid()} | {p.pid for p in psutil.Process().parents()}
    found: dict[int, psutil.Process] = {}
    for proc, known in candidates:
        if proc.pid in spared or proc.pid in found or not (known or is_ours(proc)):
            continue
        found[proc.pid] = proc
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            pass
    return [p for pid, p in sorted(found.items()) if pid not in spared and alive(p)]


def end_found(
    find: Callable[[], list[psutil.Process]], log: Callable[[str], object], grace: float = 5.0, rounds: int = 3
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """End what find() returns, looking again up to `rounds` times (a daemon may start a process meanwhile):
    (every process ended, those that survived even SIGKILL)."""
    ended: list[psutil.Process] = []
    survivors: list[psutil.Process] = []
    for _ in range(rounds):
        procs = [p for p in find() if alive(p)]
        if not procs:
            break
        log(f"ending {len(procs)} process(es)")
        ended += procs
        survivors = [p for p in end_processes(procs, grace) if alive(p)]
    return ended, survivors


def wait_reaped(ended: list[psutil.Process], timeout: float = 2.0) -> None:
    """Give init a moment to reap ended daemons (their parent), so that no <defunct> entry is left behind."""
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p.pid) and not alive(p) for p in ended) and time.monotonic() < deadline:
        time.sleep(0.05)


def launch(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start one launcher of a run in a session of its own, its output appended to log_path. Its
    processes carry env's run tag, so teardown finds them whoever started them: the run's launcher, or
    one started while the run goes on (a scale-up's second torchrun agent)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored for the block: a second one must not cut a teardown (or the judging of the
    first) short and leave processes behind or a run unrecorded."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interruption(before_launch: bool = False) -> tuple[str, str | None]:
    """How a run that got Ctrl-C or SIGTERM ended: (ending, reason). Inside a Slurm job Slurm says which it was:
    scancel (interrupted) or the job's time limit (timeout)."""
    with signals_held():  # asking Slurm takes a moment, and Slurm's own SIGTERM may follow its warning
        judged = job_ending()
    if judged:
        ending, reason = judged
        return ending, f"{reason}, before the launch" if before_launch else reason
    return "interrupted", "interrupted by the user before the launch" if before_launch else None


def supervise(
    cmd: list[str],
    env: dict[str, str],
    log_path: Path,
    timeout: float,
    on_poll: Callable[[], str | None] | None = None,
    poll_interval: float = 0.2,
    hosts: Sequence[str] = (),
    on_end: Callable[[], object] | None = None,
) -> Outcome:
    """Run cmd in its own session until it exits, the deadline passes, or the user interrupts; then on_end() (what
    ends beside the run by itself, as the GPU samplers on its hosts do, before the reaping would list it), then end
    everything of the run here and on every one of `hosts` (a run across hosts)."""
    tag = env[TAG_VARIABLE]
    launched_at = time.time()
    deadline = time.monotonic() + timeout
    proc: subprocess.Popen[bytes] | None = None
    ending, returncode, reason = "exited", None, None
    try:
        proc = launch(cmd, env, log_path)  # inside the try: a signal right after the launch still reaps it
        while True:
            try:
                returncode = proc.wait(timeout=poll_interval)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                ending = "timeout"
                break
            if on_poll is not None:
                stop = on_poll()  # a watcher may end the run, naming the ending (a fault run's "hung")
                if stop:
                    ending = stop
                    break
    except (KeyboardInterrupt, Interrupted):
        ending, reason = interruption()
    finally:
        ended_at = time.time()
        log_bytes = log_path.stat().st_size if log_path.exists() else None
        # A second Ctrl-C (or SIGTERM: Slurm sends one at the time limit after its warning) must not cut
        # teardown short and leave processes behind.
        with signals_held():
            if on_end is not None:
                on_end()
            reaped, survivors = reap(tag, proc.pid if proc is not None else None)
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            if hosts:
                reaped += reap_on_hosts(list(hosts), tag, sys.executable)
    return Outcome(
        ending=ending,
        returncode=returncode,
        launched_at=launched_at,
        ended_at=ended_at,
        log_bytes_before_teardown=log_bytes,
        reaped=reaped,
        survivors=survivors,
        reason=reason,
    )


def kill_in_this_netns(tag: str) -> list[dict[str, Any]]:
    """SIGKILL, at once and without a grace period, every process of the run in this process's network namespace:
    on a host, all of the run's processes there (a node loss; test hosts share one process table, and each is a
    network namespace)."""
    mine = os.stat("/proc/self/ns/net").st_ino
    victims = []
    for proc in run_processes(tag, None):
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == mine:
                victims.append(proc)
        except OSError:
            continue
    killed = [_describe(p) for p in victims]
    _signal_all(victims, signal.SIGKILL)
    psutil.wait_procs(victims, timeout=TERM_GRACE_S)
    return killed


def main(argv: list[str]) -> int:
    """`python -m bench.harness.supervisor reap TAG`: end the run's processes on this host (run over ssh on each host
    of a run across hosts); `kill TAG`: SIGKILL those in this host's network namespace at once (a node loss).
    Prints what it ended as JSON."""
    if len(argv) != 2 or argv[0] not in ("reap", "kill"):
        print("usage: python -m bench.harness.supervisor reap|kill TAG", file=sys.stderr)
        return 2
    if argv[0] == "kill":
        print(json.dumps({"killed": kill_in_this_netns(argv[1]), "time": time.time()}))
        return 0
    reaped, survivors = reap(argv[1], None)
    print(json.dumps({"reaped": reaped, "survivors": survivors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
