"""The entry point of every process of a run: `python -m bench.rank.entry RUN_DIR` (started by bench.harness.guard).
It reads the run's spec and runs its task's rank program (bench/tasks/<task>/rank.py, found through the registry),
with the start, error and result files written around it."""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
import tempfile
import time

from bench.core.registry import task_part
from bench.core.rundir import RunDir
from bench.core.spec import RunSpec


def main(argv: list[str]) -> int:
    t_process_start = time.time()
    use_own_temporary_folder(os.environ.get("BENCH_RANK_TMPDIR"))
    rank, attempt = int(os.environ.get("BENCH_RANK", 0)), int(os.environ.get("BENCH_ATTEMPT", 0))
    run_process(RunDir(argv[0]), rank, attempt, t_process_start)
    return 0


def use_own_temporary_folder(folder: str | None) -> None:
    """Python's temporary files in this process go in `folder`, its guard's, which the guard removes when the process
    has ended (bench.harness.guard). A framework that removes its temporary files at exit (TensorFlow's autograph
    writes a module per traced function and leaves its removal to atexit) would otherwise leave them in $TMPDIR on
    every run: a rank ends by os._exit, below, or by a signal, and neither runs atexit. torch's compile cache stays
    where it was ($TMPDIR/torchinductor_USER, torch's default), shared by the runs that reuse it. The environment's
    TMPDIR is unchanged: the libraries a launcher set up for the rank (MPI, Gloo) find their files where it said."""
    if not folder:
        return
    try:
        user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    except (KeyError, OSError):  # a uid with no name (a container's): torch's own fallback
        user = f"uid_{os.getuid()}"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"torchinductor_{user}"))
    tempfile.tempdir = folder


def run_process(run_dir: RunDir, rank: int, attempt: int, t_process_start: float) -> None:
    """One process of the run: its task's rank program (run_rank), with the start, error and result files written
    around it. bench.rank.entry's main runs it in the process its guard started; a backend whose launcher starts the
    processes and runs the rank's code in them itself (Ray Train's workers) calls it there."""
    spec = RunSpec.from_dict(json.loads(run_dir.spec_file.read_text()))
    run_dir.write(rank, attempt, "start", {"pid": os.getpid(), "time": t_process_start})
    try:
        result = task_part(spec.task, "rank").run_rank(spec, run_dir, rank, attempt, t_process_start)
    except BaseException as exc:
        # When it failed, not when it exited: a rank that fails because a peer died fails later than the
        # peer did, though it may exit first; the parent orders failures by this time.
        run_dir.write(
            rank, attempt, "error", {"time": time.time(), "type": type(exc).__name__, "message": str(exc)[:2000]}
        )
        raise
    run_dir.write(rank, attempt, "result", result.to_dict())


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The result is on disk. Skip the interpreter's teardown: once torch's compiler stack is imported (every
    # optimizer's constructor imports it) it takes seconds, which would only lengthen every launch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
