"""A run's lifeline: a watcher process that ends the run and records it when the bench process dies, and holds
the run's deadline when the bench process cannot (stopped, say).

A bench process can die without running its teardown: SIGKILL, an OOM kill, a closed terminal's SIGHUP.
Its launchers would then be re-parented to init and train on (torchrun and horovodrun each have trees
of their own), and the run would never be recorded. So before a run is launched, bench starts this
watcher in a session of its own (a Ctrl-C or a hang-up of the terminal does not reach it) and holds the
only write end of a pipe to its stdin. Over it bench says, a line each: `deadline SECONDS` just before the launch,
`ended` once the launcher has ended, `record JSON` once the record is made, and `done` once it is kept. The kernel
closes that pipe whenever bench ends, however it ends:

- bench ends the run normally: it writes `done` first, and the watcher exits doing nothing;
- otherwise the watcher reads end-of-file without `done`: it ends every process carrying the run's tag
  (bench.harness.supervisor.reap) and, for a run with a run directory, stores the run's record (the one bench
  handed over or kept, or one built from what the ranks wrote, status `interrupted`).

A deadline passed by DEADLINE_GRACE_S with the launcher not yet ended (bench stopped with SIGSTOP or Ctrl-Z, or
stuck) is held here: the watcher writes the run directory's overdue file, ends the run's processes, and stores
the run as `timeout`; bench, once it goes on, finds the overdue file and records the same (`overdue_outcome`).

A run whose watcher died too (a reboot, or the watcher killed with bench) is found by the next command
that writes to its store (`recover`): a run directory not in the store whose owner and watcher are both
gone (its owner file, removed once the record is stored). Its record is the one it kept
(bench.harness.keep.kept_record), else one built then, status `interrupted`.

`python -m bench.harness.lifeline TAG PARENT_PID [RUN_DIR STORE]` is the watcher; `Lifeline` starts and releases it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from bench.cluster import kubeflow_pod
from bench.cluster.hosts import reap_on_hosts, restore_links
from bench.core.codec import RecordError, dumps
from bench.core.console import guard_std_streams
from bench.core.errors import BenchError, StoreError
from bench.core.records import RunRecord
from bench.core.registry import get_task
from bench.core.rundir import RunDir, write_json_atomic
from bench.core.spec import RunSpec
from bench.core.store import Store
from bench.harness.cores import overlaps_of
from bench.harness.keep import drop_spare, keep_record, kept_record, spare_record
from bench.harness.outcome import build_record
from bench.harness.supervisor import TAG_VARIABLE, Outcome, reap, run_processes

READY, DONE = b"ready\n", b"done\n"
START_TIMEOUT_S = 30.0
# after a run's deadline, the time its bench process has to end the run itself (its own teardown begins at once)
DEADLINE_GRACE_S = 5.0
# the longest one wait of the watcher: a deadline further off is waited for in parts, as select() takes no timeout past
# some 292 years (a run's --timeout is at most bench.core.spec.MAX_TIMEOUT_S; this holds whatever it is handed)
WAIT_PART_S = 3600.0


def _process_identity(pid: int) -> dict[str, float]:
    import psutil

    return {"pid": pid, "started": psutil.Process(pid).create_time()}


def _alive(identity: dict[str, Any] | None) -> bool:
    """Whether the process named by a _process_identity is still running (its pid not reused since)."""
    import psutil

    if not identity:
        return False
    try:
        proc = psutil.Process(identity["pid"])
        return bool(abs(proc.create_time() - identity["started"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class Lifeline:
    """`with Lifeline(tag, run_dir, store_path):` around everything from launch to the stored record. On a
    normal exit the watcher is released; on an exception (a defect after launch) it is not, so it finishes
    the run as it would after a kill. `holds`: file descriptors the watcher keeps open for as long as it lives (the
    run's claim on its cores, bench.harness.cores, whose lock then outlives a dead bench process until the run is
    ended)."""

    def __init__(
        self, tag: str, run_dir: RunDir | None = None, store_path: Path | None = None, holds: tuple[int, ...] = ()
    ):
        self.tag, self.run_dir, self.store_path, self.holds = tag, run_dir, store_path, tuple(holds)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Lifeline:
        args = [self.tag, str(os.getpid())]
        if self.run_dir is not None:
            args += [str(self.run_dir.path), str(self.store_path)]
        env = {k: v for k, v in os.environ.items() if k != TAG_VARIABLE}  # it must never reap itself
        log: IO[bytes] | int = open(self.run_dir.lifeline_log, "ab") if self.run_dir is not None else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.harness.lifeline", *args],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                pass_fds=self.holds,
            )
        finally:
            if not isinstance(log, int):
                log.close()
        # Launch only once it watches: its start must not overlap the run's start-up being timed.
        answered, _, _ = select.select([self._stdout], [], [], START_TIMEOUT_S)
        ready = self._stdout.readline() if answered else b""
        if ready != READY:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the run's lifeline did not start within {START_TIMEOUT_S:g} s (it said {ready!r})")
        if self.run_dir is not None:
            write_json_atomic(
                self.run_dir.owner_file,
                {"owner": _process_identity(os.getpid()), "lifeline": _process_identity(self.proc.pid)},
            )
        return self

    def hold_deadline(self, timeout: float) -> None:
        """Said just before the launch: the watcher ends the run `timeout` s (+ DEADLINE_GRACE_S) from now if it is
        still running then."""
        self._say(f"deadline {timeout!r}\n".encode())

    def launcher_ended(self) -> None:
        """The run's processes are ended (bench.harness.supervisor.supervise returned): no deadline to hold."""
        self._say(b"ended\n")

    def hand_over(self, record: RunRecord) -> None:
        """The record as made: what the watcher stores should bench die before it is kept."""
        self._say(b"record " + dumps(record.to_dict()).encode() + b"\n")

    @property
    def _watcher(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise RuntimeError("the run's lifeline is used before it was started (`with Lifeline(...)`)")
        return self.proc

    @property
    def pid(self) -> int:
        """The watcher's process id."""
        return self._watcher.pid

    @property
    def _stdin(self) -> IO[bytes]:
        stdin = self._watcher.stdin
        assert stdin is not None  # started with stdin=PIPE
        return stdin

    @property
    def _stdout(self) -> IO[bytes]:
        stdout = self._watcher.stdout
        assert stdout is not None  # started with stdout=PIPE
        return stdout

    def _say(self, line: bytes) -> None:
        try:
            self._stdin.write(line)
            self._stdin.flush()
        except OSError:  # the watcher is gone: it can do nothing more for the run
            pass

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self._stdin.write(DONE)
            self._stdin.close()
        except OSError:  # the watcher is gone already
            pass
        if exc_type is None:
            try:
                self._watcher.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
        self._stdout.close()


# ---------------------------------------------------------------- after the owner died
def built_record(run_dir: RunDir, outcome: Outcome) -> RunRecord:
    """The record of a run whose bench process did not make one, from its run directory and `outcome`."""
    spec = RunSpec.from_dict(run_dir.read_json(run_dir.spec_file))
    launch = run_dir.read_json(run_dir.launch_file) or {}
    task = get_task(spec.task)
    if "launched_at" in launch:
        outcome.launched_at = launch["launched_at"]
    conclusion = task.conclude(spec, run_dir, outcome, launch.get("before"))
    return build_record(
        run_dir.path.name,
        spec,
        run_dir,
        outcome,
        launch.get("environment", {}),
        launch.get("command", []),
        conclusion,
        launch.get("info", {}),
        overlaps_of(run_dir.path.name),
    )


def record_abandoned(
    run_dir: RunDir, store_path: Path, outcome: Outcome, handed_over: dict[str, Any] | None = None
) -> tuple[str, bool]:
    """Store the record of a run whose bench process did not: the one it handed over or kept
    (bench.harness.keep.kept_record), else one built now from the run directory with `outcome`. Returns (the status
    stored, whether the record was the run's own). Raises StoreError where the store does not take it (the record is
    then kept as bench.harness.keep.keep_record keeps it)."""
    kept = kept_record(run_dir)
    data = handed_over if handed_over is not None else kept[0] if kept is not None else None
    record = RunRecord.from_dict(data) if data is not None else built_record(run_dir, outcome)
    where = keep_record(record, run_dir, Store(store_path), retry_delays=())
    if not where.stored:
        if where.file is None:  # nothing a later command could store: said once, not before every later run
            run_dir.owner_file.unlink(missing_ok=True)
        raise StoreError(where.not_stored(record, store_path))
    run_dir.owner_file.unlink(missing_ok=True)  # stored: nothing left to recover
    drop_spare(record.run_id)
    return record.status, data is not None


def abandoned_outcome(
    died_at: float, owner_pid: int | str, reaped: list[dict[str, Any]], survivors: list[dict[str, Any]], by: str
) -> Outcome:
    return Outcome(
        ending="interrupted",
        returncode=None,
        launched_at=died_at,
        ended_at=died_at,
        reaped=reaped,
        survivors=survivors,
        reason=f"abandoned: the bench process running it (pid {owner_pid}) ended without recording it; "
        f"{by} ended the run's processes and recorded it",
    )


def _left_owned(store: Store) -> tuple[list[tuple[RunDir, dict[str, Any]]], set[str]]:
    """(run directories of `store` holding an owner file whose bench process and watcher are both gone, with the
    owner file's content; the run ids among them the store holds)."""
    runs = store.path.parent / "runs"
    found: list[tuple[RunDir, dict[str, Any]]] = []
    if not runs.is_dir():
        return found, set()
    for path in sorted(runs.iterdir()):
        run_dir = RunDir(path)
        owner = run_dir.read_json(run_dir.owner_file) if run_dir.owner_file.exists() else None
        if owner is not None and not _alive(owner.get("owner")) and not _alive(owner.get("lifeline")):
            found.append((run_dir, owner))
    return found, store.stored_run_ids([run_dir.path.name for run_dir, _ in found]) if found else set()


def unrecorded(store: Store) -> list[tuple[RunDir, dict[str, Any]]]:
    """Run directories of `store` left unstored with no watcher to store them: an owner file, the bench process and
    the watcher it names both gone, and no record of the run in the store. Reads only."""
    found, stored = _left_owned(store)
    return [
        (run_dir, owner)
        for run_dir, owner in found  # (one without a readable spec ended before it was a run)
        if run_dir.path.name not in stored and run_dir.read_json(run_dir.spec_file) is not None
    ]


def recover(store: Store) -> list[tuple[str, str, bool]]:
    """End what is left of every unrecorded abandoned run of `store` and store its record. Returns (run id, status
    stored, whether the record was the run's own) of each."""
    found, stored = _left_owned(store)
    recovered = []
    for run_dir, owner in found:
        run_id = run_dir.path.name
        if run_id in stored:  # (added with `bench import` of its spare folder, say)
            _settle(run_dir)
            continue
        if run_dir.read_json(run_dir.spec_file) is None:  # it ended before there was a run to record
            continue
        reaped, survivors = reap(run_id, None)
        try:
            status, own = record_abandoned(
                run_dir,
                store.path,
                abandoned_outcome(
                    time.time(), owner["owner"]["pid"], reaped, survivors, "the next bench command on its store"
                ),
            )
        except StoreError as exc:  # the store took no record now (where it is kept is said)
            print(f"bench: {exc}", file=sys.stderr)
            continue
        except (BenchError, ValueError, OSError) as exc:  # one unreadable run must not stop the next run
            print(
                f"bench: run {run_id} was abandoned and cannot be recorded ({exc}); its files are in {run_dir.path}",
                file=sys.stderr,
            )
            run_dir.owner_file.unlink(missing_ok=True)  # said once, not before every later run
            continue
        recovered.append((run_id, status, own))
    return recovered


def _settle(run_dir: RunDir) -> None:
    """A stored run's directory as a run leaves it: its record.json (from its spare folder, where it was kept), no
    owner file; left for the next command where record.json still cannot be written."""
    if not run_dir.record_file.exists():
        spare = spare_record(run_dir)
        if spare is not None:
            try:
                write_json_atomic(run_dir.record_file, spare)
            except OSError:
                return
    drop_spare(run_dir.path.name)
    run_dir.owner_file.unlink(missing_ok=True)


# ---------------------------------------------------------------- a deadline bench did not hold
def end_overdue(
    tag: str, owner_pid: str, run_dir: RunDir | None, store_path: Path | None, timeout: float
) -> Outcome | None:
    """End a run its bench process left running past its deadline: the overdue file first (a bench that goes on
    then finds why its launcher ended), the processes, and, while bench is still stopped, the run stored as
    `timeout`, its owner file kept (bench may go on and store its own record). None where nothing of the run is
    left to end."""
    if not run_processes(tag, None):
        return None  # it ended by itself: bench has only to say so
    how = "stopped" if _stopped(owner_pid) else "not ending it"
    reason = (
        f"deadline of {timeout:g} s passed while its bench process (pid {owner_pid}) was {how}; its lifeline "
        "ended the run"
    )
    said: dict[str, Any] = {"time": time.time(), "reason": reason}
    if run_dir is not None:
        said["log_bytes"] = run_dir.launcher_log.stat().st_size if run_dir.launcher_log.exists() else None
        _write_overdue(run_dir, said)
    reaped, survivors = reap(tag, None)
    if run_dir is not None:
        reaped += reap_remote(str(run_dir.path), tag)
    print(
        f"{time.strftime('%H:%M:%S')} {reason}: ended {len(reaped)} process(es), {len(survivors)} survived",
        file=sys.stderr,
        flush=True,
    )
    outcome = Outcome(
        ending="timeout",
        returncode=None,
        launched_at=said["time"],
        ended_at=said["time"],
        log_bytes_before_teardown=said.get("log_bytes"),
        reaped=reaped,
        survivors=survivors,
        reason=reason,
    )
    if run_dir is None or store_path is None:  # (the watcher of a run without a run directory has no store either)
        return outcome
    _write_overdue(run_dir, {**said, "reaped": reaped, "survivors": survivors})
    if _stopped(owner_pid):  # (a bench that went on meanwhile stores its own record, which says the same)
        try:
            record = built_record(run_dir, outcome)
            where = keep_record(record, run_dir, Store(store_path), retry_delays=())
            print(
                f"stored run {tag} as {record.status} in {store_path}"
                if where.stored
                else where.not_stored(record, store_path),
                file=sys.stderr,
                flush=True,
            )
        except (BenchError, ValueError, OSError) as exc:
            print(f"run {tag} cannot be recorded ({exc})", file=sys.stderr, flush=True)
    return outcome


def _stopped(pid: str) -> bool:
    import psutil

    try:
        return psutil.Process(int(pid)).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.Error, ValueError):
        return False


def _write_overdue(run_dir: RunDir, said: dict[str, Any]) -> None:
    try:
        write_json_atomic(run_dir.overdue_file, said)
    except OSError:  # (a full disk): the run is still ended; bench then records how its launcher ended
        pass


def overdue_outcome(run_dir: RunDir, outcome: Outcome) -> Outcome:
    """`outcome` as supervise saw it, made a `timeout` where the lifeline ended the run at its deadline (bench was
    stopped meanwhile, and saw its launcher end once it went on)."""
    said = run_dir.read_json(run_dir.overdue_file)
    if not isinstance(said, dict) or outcome.ending == "timeout":
        return outcome
    outcome.ending, outcome.reason = "timeout", said.get("reason")
    outcome.ended_at = said.get("time", outcome.ended_at)
    outcome.log_bytes_before_teardown = said.get("log_bytes", outcome.log_bytes_before_teardown)
    outcome.reaped = list(said.get("reaped", [])) + outcome.reaped
    outcome.survivors = list(said.get("survivors", [])) + outcome.survivors
    return outcome


def reap_remote(run_dir_path: str, tag: str) -> list[dict[str, Any]]:
    """What was ended of the run on its other hosts (a run across hosts), over ssh; their links restored."""
    data = RunDir(run_dir_path).read_json(RunDir(run_dir_path).spec_file)
    try:
        spec = RunSpec.from_dict(data) if data is not None else None
    except RecordError:
        spec = None
    if spec is None or not spec.hosts or kubeflow_pod.of_pods(spec.scheduler):  # pods: no ssh; each ends its own
        return []

    ended = reap_on_hosts([h["name"] for h in spec.hosts], tag, sys.executable)
    restore_links(spec)
    return ended


def watch(argv: list[str]) -> int:
    guard_std_streams()  # its log may be on a full disk: a line it cannot write must not stop it recording the run
    tag, owner_pid = argv[0], argv[1]
    run_dir, store_path = (RunDir(argv[2]), Path(argv[3])) if len(argv) >= 4 else (None, None)
    # Only the pipe ends this watcher: not the terminal's Ctrl-C or hang-up meant for bench.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    fd, pending = sys.stdin.fileno(), b""
    deadline: tuple[float, float] | None = None  # (when, by the monotonic clock; the run's timeout)
    handed_over: dict[str, Any] | None = None
    overdue: Outcome | None = None
    while True:  # until bench says `done`, or the kernel closes its end
        wait = None if deadline is None else min(WAIT_PART_S, max(0.0, deadline[0] - time.monotonic()))
        if not select.select([fd], [], [], wait)[0]:
            if deadline is not None and time.monotonic() >= deadline[0]:
                overdue = end_overdue(tag, owner_pid, run_dir, store_path, deadline[1])
                deadline = None
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            word, _, rest = line.partition(b" ")
            if word + b"\n" == DONE:
                return 0
            if word == b"deadline":
                deadline = (time.monotonic() + float(rest) + DEADLINE_GRACE_S, float(rest))
            elif word == b"ended":
                deadline = None
            elif word == b"record":
                handed_over = json.loads(rest)
    died_at = time.time()
    reaped, survivors = reap(tag, None)
    if run_dir is not None:
        reaped += reap_remote(str(run_dir.path), tag)
    print(
        f"{time.strftime('%H:%M:%S')} bench process {owner_pid} ended without releasing run {tag}: "
        f"ended {len(reaped)} process(es), {len(survivors)} survived",
        file=sys.stderr,
        flush=True,
    )
    if run_dir is not None and store_path is not None:
        outcome = overdue or abandoned_outcome(died_at, owner_pid, reaped, survivors, "its lifeline")
        try:
            status, _ = record_abandoned(run_dir, store_path, outcome, handed_over)
            print(f"recorded run {tag} as {status} in {store_path}", file=sys.stderr, flush=True)
        except (BenchError, ValueError, OSError) as exc:
            print(f"run {tag} cannot be recorded ({exc})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1:]))
