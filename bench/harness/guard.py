"""Per-rank guard: `python -m bench.harness.guard RUN_DIR BACKEND` runs one worker and records how it ended.

Launchers (torchrun, horovodrun, mpirun, the PS launcher) start this guard in place of the worker. The
guard captures the worker's output to a per-rank log and, whatever the ending (exit code, exception,
signal), writes the rank's exit file: so the failing rank, its exit code or signal (a SIGKILL from the kernel's
OOM killer named as such, where its memory cgroup counted it: bench.harness.oom) and its error tail are known the
same way under every launcher. It imports no torch and exits as its worker did, so the launcher sees the same
status it would have seen without it, even where the exit file cannot be written (a full disk): the rank's own
files (its result) are the measurement, and the parent says which exit file is missing (bench.harness.outcome).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType

from bench.core.console import guard_std_streams, note
from bench.core.registry import get_backend
from bench.core.rundir import LOG_DRAIN_S, CappedLog, RunDir, copy_output, tail
from bench.harness.oom import oom_killed_words, own_oom_count
from bench.harness.supervisor import TAG_VARIABLE, scratch_prefix

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _die_with_parent() -> None:
    # Linux: the worker gets SIGKILL if its guard dies, so a killed guard never leaves an orphan.
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str]) -> int:
    guard_std_streams()  # its output goes to the launcher's log: a full disk there must not change its exit status
    run_dir, backend = RunDir(argv[0]), get_backend(argv[1])
    rank, attempt = backend.launcher.rank_identity(os.environ)
    # A rank number may be reused by replacement processes their launcher does not number apart: each
    # process claims files of its own.
    attempt = run_dir.claim_attempt(rank, attempt)
    log_path = run_dir.rank_file(rank, attempt, "log")
    # The rank's temporary files go in a folder of its own, removed below however the rank ended: what its
    # framework would have removed at exit but a rank skips or never reaches (bench.rank.entry). Named by the run's
    # tag, so that the run's teardown removes it where this guard is killed first (bench.harness.supervisor.reap)
    scratch = tempfile.mkdtemp(prefix=f"{scratch_prefix(os.environ.get(TAG_VARIABLE))}{rank}.a{attempt}-")
    env = dict(os.environ, BENCH_RANK=str(rank), BENCH_ATTEMPT=str(attempt), BENCH_RANK_TMPDIR=scratch)
    received: list[str] = []

    oom_count = own_oom_count()  # its memory cgroup's OOM kills, which its rank's are counted in (bench.harness.oom)
    oom_before = oom_count.read() if oom_count is not None else None
    try:
        read_end, write_end = os.pipe()
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.rank.entry", str(run_dir.path)],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
        os.close(write_end)
        log = CappedLog(log_path)
        pump = threading.Thread(target=copy_output, args=(read_end, log), daemon=True)
        pump.start()

        def forward(signum: int, _frame: FrameType | None) -> None:
            received.append(signal.Signals(signum).name)
            try:
                child.send_signal(signum)
                if signum == signal.SIGTERM:
                    child.send_signal(signal.SIGCONT)  # a stopped worker must wake up to die
            except ProcessLookupError:
                pass

        for sig in FORWARDED:
            signal.signal(sig, forward)
        returncode = child.wait()
        exited_at = time.time()  # before its output is drained: the exit time orders the ranks that left (outcome)
        pump.join(LOG_DRAIN_S)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # a worker that left before its result (its error or none): its log's tail tells how
    ended_early = returncode != 0 or not run_dir.rank_file(rank, attempt, "result").exists()
    try:
        run_dir.write(
            rank,
            attempt,
            "exit",
            {
                "rank": rank,
                "attempt": attempt,
                "pid": child.pid,
                "time": exited_at,
                "returncode": returncode,
                "exit_code": returncode if returncode >= 0 else None,
                "signal": signal.Signals(-returncode).name if returncode < 0 else None,
                # A signal that reached the guard from outside means the launcher or the harness ended this
                # rank: a consequence of another failure, not its cause.
                "terminated_by": received[0] if received else None,
                # who sent a SIGKILL, where the kernel says it was its OOM killer (None: no OOM kill was counted)
                "oom_kill": oom_killed_words(oom_count, oom_before) if returncode == -signal.SIGKILL else None,
                "tail": tail(log_path) if ended_early else "",
            },
        )
    except OSError as exc:  # (a full disk) the rank's status still goes to the launcher, below
        how = f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"
        note(f"bench: rank {rank}'s exit file could not be written ({exc.strerror or exc}); it ended with {how}")
    if returncode < 0:  # end as the rank ended, so that the launcher sees the same signal
        if -returncode not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be caught, nor its handler reset
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
