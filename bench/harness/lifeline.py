"""A run's lifeline: a watcher process that ends the run and records it when the bench process dies.

A bench process can die without running its teardown: SIGKILL, an OOM kill, a closed terminal's SIGHUP.
Its launchers would then be re-parented to init and train on (torchrun and horovodrun each have trees
of their own), and the run would never be recorded. So before a run is launched, bench starts this
watcher in a session of its own (a Ctrl-C or a hang-up of the terminal does not reach it) and holds the
only write end of a pipe to its stdin. The kernel closes that pipe whenever bench ends, however it ends:

- bench ends the run normally: it writes `done` first, and the watcher exits doing nothing;
- otherwise the watcher reads end-of-file without `done`: it ends every process carrying the run's tag
  (bench.harness.supervisor.reap) and, for a run with a run directory, stores the run's record (the one bench
  wrote, or one built from what the ranks wrote, status `interrupted`).

A run whose watcher died too (a reboot, or the watcher killed with bench) is found by the next command
that writes to its store (`recover`): a run directory with no record whose owner and watcher are both
gone (its owner file, removed once the record is stored).

`python -m bench.harness.lifeline TAG PARENT_PID [RUN_DIR STORE]` is the watcher; `Lifeline` starts and releases it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.cluster.hosts import reap_on_hosts, restore_links
from bench.core.codec import RecordError
from bench.core.errors import BenchError
from bench.core.records import RunRecord
from bench.core.registry import get_task
from bench.core.rundir import RunDir, write_json_atomic
from bench.core.spec import RunSpec
from bench.core.store import Store
from bench.harness.cores import overlaps_of
from bench.harness.outcome import build_record
from bench.harness.supervisor import TAG_VARIABLE, Outcome, reap

READY, DONE = b"ready\n", b"done\n"
START_TIMEOUT_S = 30.0


def _process_identity(pid: int) -> dict:
    import psutil

    return {"pid": pid, "started": psutil.Process(pid).create_time()}


def _alive(identity: dict | None) -> bool:
    """Whether the process named by a _process_identity is still running (its pid not reused since)."""
    import psutil

    if not identity:
        return False
    try:
        proc = psutil.Process(identity["pid"])
        return abs(proc.create_time() - identity["started"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Lifeline:
    """`with Lifeline(tag, run_dir, store_path):` around everything from launch to the stored record. On a
    normal exit the watcher is released; on an exception (a defect after launch) it is not, so it finishes
    the run as it would after a kill. `holds`: file descriptors the watcher keeps open for as long as it lives (the
    run's claim on its cores, bench.harness.cores, whose lock then outlives a dead bench process until the run is
    ended)."""

    def __init__(self, tag: str, run_dir=None, store_path: Path | None = None, holds: tuple[int, ...] = ()):
        self.tag, self.run_dir, self.store_path, self.holds = tag, run_dir, store_path, tuple(holds)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Lifeline":
        args = [self.tag, str(os.getpid())]
        if self.run_dir is not None:
            args += [str(self.run_dir.path), str(self.store_path)]
        env = {k: v for k, v in os.environ.items() if k != TAG_VARIABLE}  # it must never reap itself
        log = open(self.run_dir.lifeline_log, "ab") if self.run_dir is not None else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "bench.harness.lifeline", *args], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True, pass_fds=self.holds)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        # Launch only once it watches: its start must not overlap the run's start-up being timed.
        answered, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        ready = self.proc.stdout.readline() if answered else b""
        if ready != READY:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the run's lifeline did not start within {START_TIMEOUT_S:g} s (it said {ready!r})")
        if self.run_dir is not None:
            write_json_atomic(self.run_dir.owner_file, {"owner": _process_identity(os.getpid()),
                                                               "lifeline": _process_identity(self.proc.pid)})
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.proc.stdin.write(DONE)
            self.proc.stdin.close()
        except OSError:  # the watcher is gone already
            pass
        if exc_type is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.stdout.close()


# ---------------------------------------------------------------- after the owner died
def record_abandoned(run_dir, store_path: Path, outcome: Outcome) -> str:
    """Store the record of a run whose bench process died: the record it wrote, or one built now from the
    run directory with `outcome`. Returns the status stored."""
    data = run_dir.read_json(run_dir.record_file)
    if data is not None:
        record = RunRecord.from_dict(data)
    else:
        spec = RunSpec.from_dict(run_dir.read_json(run_dir.spec_file))
        launch = run_dir.read_json(run_dir.launch_file) or {}
        task = get_task(spec.task)
        if "launched_at" in launch:
            outcome.launched_at = launch["launched_at"]
        conclusion = task.conclude(spec, run_dir, outcome, launch.get("before"))
        record = build_record(run_dir.path.name, spec, run_dir, outcome, launch.get("environment", {}),
                              launch.get("command", []), conclusion, launch.get("info", {}),
                              overlaps_of(run_dir.path.name))
        write_json_atomic(run_dir.record_file, record.to_dict())
    Store(store_path).save(record)
    run_dir.owner_file.unlink(missing_ok=True)  # stored: nothing left to recover
    return record.status


def abandoned_outcome(died_at: float, owner_pid: int | str, reaped: list, survivors: list, by: str) -> Outcome:
    return Outcome(ending="interrupted", returncode=None, launched_at=died_at, ended_at=died_at, reaped=reaped,
                   survivors=survivors,
                   reason=f"abandoned: the bench process running it (pid {owner_pid}) ended without recording it; "
                          f"{by} ended the run's processes and recorded it")


def unrecorded(store) -> list:
    """Run directories of `store` abandoned with no watcher left to record them: an owner file and no stored
    record, the bench process and the watcher it names both gone. Reads only."""
    runs = store.path.parent / "runs"
    found = []
    if not runs.is_dir():
        return found
    for path in sorted(runs.iterdir()):
        run_dir = RunDir(path)
        owner = run_dir.read_json(run_dir.owner_file) if run_dir.owner_file.exists() else None
        if owner is None or _alive(owner.get("owner")) or _alive(owner.get("lifeline")):
            continue
        if run_dir.read_json(run_dir.spec_file) is not None:  # else it ended before there was a run to record
            found.append((run_dir, owner))
    return found


def recover(store) -> list[str]:
    """End what is left of every unrecorded abandoned run of `store` and record it. Returns their ids."""
    recovered = []
    for run_dir, owner in unrecorded(store):
        run_id = run_dir.path.name
        reaped, survivors = reap(run_id, None)
        try:
            record_abandoned(run_dir, store.path, abandoned_outcome(time.time(), owner["owner"]["pid"], reaped, survivors,
                                                          "the next bench command on its store"))
        except (BenchError, ValueError, OSError) as exc:  # one unreadable run must not stop the next run
            print(f"bench: run {run_id} was abandoned and cannot be recorded ({exc}); its files are in "
                  f"{run_dir.path}", file=sys.stderr)
            run_dir.owner_file.unlink(missing_ok=True)  # said once, not before every later run
            continue
        recovered.append(run_id)
    return recovered


def reap_remote(run_dir_path: str, tag: str) -> list[dict]:
    """What was ended of the run on its other hosts (a run across hosts), over ssh; their links restored."""
    data = RunDir(run_dir_path).read_json(RunDir(run_dir_path).spec_file)
    try:
        spec = RunSpec.from_dict(data) if data is not None else None
    except RecordError:
        spec = None
    if spec is None or not spec.hosts:
        return []

    ended = reap_on_hosts([h["name"] for h in spec.hosts], tag, sys.executable)
    restore_links(spec)
    return ended


def watch(argv: list[str]) -> int:
    tag, owner_pid = argv[0], argv[1]
    # Only the pipe ends this watcher: not the terminal's Ctrl-C or hang-up meant for bench.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    said = sys.stdin.buffer.read()  # until bench writes `done`, or the kernel closes its end
    if said.startswith(DONE):
        return 0
    died_at = time.time()
    reaped, survivors = reap(tag, None)
    if len(argv) >= 4:
        reaped += reap_remote(argv[2], tag)
    print(f"{time.strftime('%H:%M:%S')} bench process {owner_pid} ended without releasing run {tag}: "
          f"ended {len(reaped)} process(es), {len(survivors)} survived", file=sys.stderr, flush=True)
    if len(argv) >= 4:
        status = record_abandoned(RunDir(argv[2]), Path(argv[3]), abandoned_outcome(died_at, owner_pid, reaped, survivors,
                                                                                    "its lifeline"))
        print(f"recorded run {tag} as {status} in {argv[3]}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1:]))
