"""The workload a run names, as the parent needs it before anything starts: built in, or the user's own loaded and
checked in a process of its own within a time limit.

A user's workload is the user's code: its import, its build() and a batch through its model (and, under
`--data workload`, its datasets()) may take any time or never end. So the parent never runs it: a child
(`python -m bench.rank.workload_probe`) does, in a session of its own and carrying a tag of its own, and answers
with what the parent needs (the workload's declarations as a WorkloadInfo, where its code came from). The parent
says what it is waiting for every few seconds and, once the limit passes (--check-timeout, never more than the
run's --timeout), ends the child and everything it started and refuses the workload in one line; nothing has been
created by then.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

from bench.core.console import note
from bench.core.environment import PROJECT_ROOT
from bench.core.errors import UsageError
from bench.core.spec import DEFAULTS
from bench.harness.lifeline import Lifeline
from bench.harness.supervisor import TAG_VARIABLE, reap, signals_held
from workloads import WORKLOADS, WorkloadError, get_workload
from workloads.base import WorkloadInfo
from workloads.external import canonical, describe, is_address

CHECK_TIMEOUT_S = 60.0  # the default limit: ample for an import, a build and one batch of a model on a CPU
FIRST_NOTE_S = 10.0  # a check quieter than this says nothing (an import of torch alone can take seconds)
NOTE_EVERY_S = 10.0

# (canonical address, with its data sets) -> workload_of's answer: a sweep's specs check a workload once
Checked = tuple[str, WorkloadInfo, str | None]  # what workload_of answers
_CHECKED: dict[tuple[str, bool], Checked] = {}


def check_limit(check_timeout: float | None, timeout: float | None) -> float:
    """The check's time limit: --check-timeout (default CHECK_TIMEOUT_S), never more than the run's --timeout."""
    return min(
        CHECK_TIMEOUT_S if check_timeout is None else check_timeout, DEFAULTS["timeout"] if timeout is None else timeout
    )


def workload_of(
    address: str, *, with_data: bool = False, check_timeout: float | None = None, timeout: float | None = None
) -> Checked:
    """(the address as the spec keeps it, its workloads.base.WorkloadInfo, where its code came from or None for a
    built-in one). `with_data`: the run reads the workload's own data sets (`--data workload`), so they are made
    and described too. A user's workload is loaded and checked in a child process (module docstring), within
    check_limit(check_timeout, timeout); UsageError, one line, for one that cannot be used or that takes longer."""
    try:
        if address in WORKLOADS:
            return address, describe(WORKLOADS[address], with_data), None
        if not is_address(address):
            get_workload(address)  # an unknown name: its one-line refusal
        address = canonical(address)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    for key in ((address, True), (address, with_data)):
        if key in _CHECKED:
            return _CHECKED[key]
    answer = _probe(address, with_data, check_limit(check_timeout, timeout))
    _CHECKED[address, with_data] = address, WorkloadInfo.from_dict(answer["info"]), answer["source"]
    return _CHECKED[address, with_data]


def _probe(address: str, with_data: bool, limit: float) -> dict[str, Any]:
    """workloads.external.probe's answer, from a child process ended at `limit` seconds at the latest."""
    command = [sys.executable, "-m", "bench.rank.workload_probe", address, *(["--data"] if with_data else [])]
    return child_answer(
        command, f"--workload {address}", "loading and checking it", limit, f"loading and checking workload {address}"
    )


def child_answer(command: list[str], what: str, doing: str, limit: float, waiting: str = "") -> dict[str, Any]:
    """The answer of a child that runs a user's code or torch away from this process (`python -m bench.rank.X`,
    printing one line of JSON: {"answer": ...} or {"error": the one-line refusal}), ended at `limit` seconds at
    the latest with everything it started. `what` names the input (such as "--workload ADDRESS") and `doing` what
    the child does, for the one-line errors; `waiting` what the notes while it runs say (default: both)."""
    tag = f"workload-check-{secrets.token_hex(4)}"
    started = time.monotonic()
    # this checkout's bench, as a run's processes import it (bench.harness.runner.worker_environment)
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    # the lifeline ends the check (by its tag) if this bench process dies meanwhile, as it ends a run
    with (
        Lifeline(tag),
        subprocess.Popen(
            command,
            env={**os.environ, TAG_VARIABLE: tag, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        ) as child,
    ):
        try:
            out, err = _wait(child, what, doing, started, limit, waiting or f"{doing}: {what}")
        finally:
            with signals_held():  # a second Ctrl-C must not leave the child (or what it started) running
                reap(tag, child.pid)
                if child.poll() is None:
                    child.kill()
    try:
        reply = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        how = (
            f"exit code {child.returncode}"
            if child.returncode >= 0
            else f"signal {signal.Signals(-child.returncode).name}"
        )
        last = next((line.strip() for line in reversed(err.decode(errors="replace").splitlines()) if line.strip()), "")
        raise UsageError(
            f"{what}: {doing} ended without an answer ({how})" + (f": {last[:200]}" if last else "")
        ) from None
    if "error" in reply:
        raise UsageError(reply["error"])
    answer: dict[str, Any] = reply["answer"]
    return answer


def _wait(
    child: subprocess.Popen[bytes], what: str, doing: str, started: float, limit: float, waiting: str
) -> tuple[bytes, bytes]:
    """The child's (stdout, stderr) once it exits; a line on stderr every NOTE_EVERY_S from FIRST_NOTE_S on, and
    UsageError once `limit` has passed."""
    next_note = FIRST_NOTE_S
    while True:
        elapsed = time.monotonic() - started
        try:
            return child.communicate(timeout=max(0.0, min(next_note, limit) - elapsed))
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.monotonic() - started
        if elapsed >= limit:
            raise UsageError(
                f"{what}: {doing} took longer than {limit:g} s "
                "(--check-timeout, at most --timeout) and was stopped; its import, build() or "
                "datasets() may never return"
            )
        if elapsed >= next_note:
            note(f"bench: {waiting} ({math.floor(elapsed)} s so far, limit {limit:g} s)")
            next_note += NOTE_EVERY_S
