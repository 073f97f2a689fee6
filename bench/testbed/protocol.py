"""What every test cluster provides, and what they share: the test hosts (bench.testbed.hosts), the Slurm and the
Ray cluster on them (bench.testbed.slurm, bench.testbed.ray).

A test cluster is a module that follows Cluster below. Its files lie under its STATE_DIR, with a state file there
(StateFile) that up() writes as it builds, marked complete once all of it is up. Its up(...) takes what it is
built from (a host count, CPUs per node), replaces one already here (the hosts reuse identical ones that answer)
and returns what it built; a failure, or Ctrl-C, takes down everything the call started (build_or_roll_back) and
raises SetupError. Its down() finds what it removes by name, not only through the state file, so it also clears
what a crashed up() left. bench.testbed.teardown takes them all down in their order: a cluster before the hosts
it runs on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from bench.core.errors import EXIT_RUN_FAILED, BenchError, UsageError
from bench.core.rundir import read_json, write_json_atomic
from bench.harness.supervisor import name_of, wait_reaped

CMD_TIMEOUT = 15
TAIL_LINES = 6  # of each log, in an error message
# the daemons' tools live in the sbin folders, which a user's PATH may lack
TOOL_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


class SetupError(BenchError):
    """A command that builds or removes a test cluster failed; the message names it."""

    exit_code = EXIT_RUN_FAILED


class Cluster(Protocol):
    """What a test cluster module provides (up() aside: what it is built from differs)."""

    NAME: str  # in messages: "test hosts", "Slurm test cluster"
    ROOT_ONLY: str  # why only root may build it, as the refusal to anyone else says (require_root)
    STATE_DIR: Path

    def unavailable_reason(self) -> str | None:
        """Why it cannot be built here (not root, a program missing), or None (require_usable)."""

    def down(self, log: Callable[[str], None] | None = None) -> bool:
        """Remove everything of it, also what a crashed up() left; False when nothing was here. Safe to repeat."""

    def leftovers(self) -> list[str]:
        """What of it is on this machine now, in words; empty when nothing is."""

    def status(self) -> list[dict]:
        """One row per host or node, with its state; empty when it is not up."""

    def all_up(self, rows: list[dict]) -> bool:
        """Whether status()'s rows show all of it up and answering."""


class StateFile:
    """A test cluster's STATE_DIR/state.json: what up() built. Written whole or not at all, so down() and status()
    never read half of it."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "state.json"

    def read(self) -> dict | None:
        return read_json(self.path)

    def write(self, state: dict) -> None:
        write_json_atomic(self.path, state)


# ---------------------------------------------------------------- preconditions
def require_usable(problem: str | None) -> None:
    """Refuse (UsageError) with the cluster's unavailable_reason(), if it has one."""
    if problem:
        raise UsageError(problem)


def root_problem(root_only: str) -> str | None:
    return f"{root_only}: run it with sudo" if os.geteuid() != 0 else None


def require_root(root_only: str) -> None:
    """Refuse anyone but root, saying why the cluster is root's (its ROOT_ONLY)."""
    require_usable(root_problem(root_only))


# ---------------------------------------------------------------- commands
def tool(name: str) -> str | None:
    return shutil.which(name, path=TOOL_PATH)


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def bounded(cmd: list[str], timeout: float, what: str, finish: str, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with stdin closed; a SetupError naming `what` when it cannot start or does not `finish`
    ("finish", "start") within the timeout."""
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        raise SetupError(f"{what} did not {finish} within {timeout:g} s") from None
    except OSError as exc:
        raise SetupError(f"{what} could not start: {exc}") from None


def run(cmd: list[str], timeout: float = CMD_TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; any failure is one SetupError naming it."""
    shown = f"`{' '.join(cmd)}`"
    proc = bounded(
        [tool(cmd[0]) or cmd[0], *cmd[1:]], timeout, shown, "finish", capture_output=True, text=True, **kwargs
    )
    if proc.returncode != 0:
        raise SetupError(f"{shown} failed (exit {proc.returncode}): {last_line(proc.stderr or proc.stdout)}")
    return proc


def start_logged(what: str, cmd: list[str], out: Path, timeout: float, env: dict[str, str], tails) -> None:
    """Run a command that starts daemons in the background and returns (a daemon that forks itself, `ray start`),
    what it prints going to `out`; a SetupError naming `what`, with tails() (the logs' last lines), when it fails or
    does not return within `timeout`."""
    with open(out, "w") as f:
        try:
            proc = bounded(cmd, timeout, what, "start", stdout=f, stderr=subprocess.STDOUT, env=env)
        except SetupError as exc:
            raise SetupError(f"{exc}\n{tails()}") from None
    if proc.returncode != 0:
        raise SetupError(f"{what} failed to start (exit {proc.returncode})\n{tails()}")


def tails_of(paths: list[Path], nothing: str) -> str:
    """The last lines of each of the logs that has any, for an error message; `nothing` when none has."""
    parts = []
    for path in paths:
        try:
            lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            parts.append(f"--- {path} (last lines)\n" + "\n".join(lines[-TAIL_LINES:]))
    return "\n".join(parts) if parts else nothing


# ---------------------------------------------------------------- ports
def port_free(port: int, address: str = "0.0.0.0") -> bool:
    """Whether a test cluster's daemon can bind the port here (SO_REUSEADDR, as slurmctld and Ray's gRPC servers
    bind: a connection in TIME_WAIT owns nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def require_port_free(port: int, whose: str, address: str = "0.0.0.0") -> None:
    if not port_free(port, address):
        raise SetupError(f"port {port} ({whose}) is taken on this machine: free it, or take down what listens there")


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- up and down
def build_or_roll_back(build: Callable[[], None], take_down: Callable[[], object], log) -> None:
    """build(); when it fails or is interrupted, take_down() what it started, then raise what ended it."""
    try:
        build()
    except BaseException:
        try:
            take_down()
        except BenchError as exc:
            log(f"taking down the failed set-up also failed: {exc}")
        raise


def names_path_under(text: str, directory: Path) -> bool:
    """Whether a command-line argument (or an open file's path) is the directory or names a path under it, also as
    an option's value (--temp-dir=..., -f ...)."""
    root = str(directory)
    return text == root or text.startswith(root + "/") or f"={root}/" in text or f" {root}/" in text


def daemon_leftovers(state_dir: Path, processes: list) -> list[str]:
    """A daemon cluster's leftovers(): its state directory, if any, and its live processes."""
    found = [str(state_dir)] if state_dir.exists() else []
    return found + [f"{name_of(p)} (pid {p.pid})" for p in processes]


def finish_removal(state_dir: Path, ended: list, survivors: list, what: str) -> None:
    """The end of a daemon cluster's down() (bench.testbed.slurm, bench.testbed.ray): its state directory removed,
    the daemons it ended reaped by init, and a SetupError naming any process of it that survived SIGKILL."""
    if state_dir.exists():
        try:
            shutil.rmtree(state_dir)
        except OSError as exc:
            raise SetupError(f"removing {state_dir}: {exc}") from None
    wait_reaped(ended)
    if survivors:
        raise SetupError(
            f"processes of the {what} survived SIGKILL: " + ", ".join(f"{name_of(p)} (pid {p.pid})" for p in survivors)
        )
