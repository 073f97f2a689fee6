import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
# Short runs: the tests check behaviour, not figures.
FAST = ["--warmup-steps", "2", "--steps-per-window", "3", "--windows", "2"]


def programs_missing(*names: str, install: str) -> str | None:
    """Why a test that runs the system programs `names` cannot run here, naming the package that installs them
    (`install`, as apt-get takes it); None where every one is on PATH."""
    missing = [name for name in names if shutil.which(name) is None]
    return f"{', '.join(missing)} not found: apt-get install {install} (.ci/run does)" if missing else None


def needs_system(missing: str | None):
    """The mark of a test that needs a system package (`missing`: why it cannot run here, from programs_missing): it
    skips saying so, except in CI (CI=true), whose .ci/run installs every such package: there it runs, and fails
    saying what is missing, so that CI never passes by skipping it."""
    return pytest.mark.skipif(missing is not None and os.environ.get("CI") != "true", reason=missing or "")


def bench(*args, timeout=300, cwd=None, env=None):
    """Run the real CLI in a child process, as a user would (`env`: variables to set or replace)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("BENCH_STORE", None)
    return subprocess.run([sys.executable, "-m", "bench", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or ROOT, env=env)


def bench_in_process(*args):
    """Run the CLI's main() in this process (what `bench ARGS` runs, without an interpreter start per call),
    with its output captured; for input that must be refused before anything runs."""
    import contextlib
    import io
    import signal

    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["bench", *map(str, args)], code, out.getvalue(), err.getvalue())


def bench_json(*args, timeout=300):
    proc = bench(*args, "--json", timeout=timeout)
    try:
        return proc, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def run_tag_of(pid: int) -> str | None:
    """The BENCH_RUN_TAG a process was started with, from /proc's raw environment block: a process that renamed
    itself (Ray's agents) may have overwritten the start of the block, which hides the rest from psutil."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    tags = [e.split(b"=", 1)[1].decode(errors="replace") for e in entries if e.startswith(b"BENCH_RUN_TAG=")]
    return tags[0] if tags else None


def processes_of_run(run_id: str) -> list[psutil.Process]:
    """Live processes that carry the run's tag (what the supervisor uses to reap)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if run_tag_of(proc.pid) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_nothing_left(record: dict) -> None:
    assert processes_of_run(record["run_id"]) == []
    for row in record["rank_map"]:
        assert not psutil.pid_exists(row["pid"]) or \
            psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE, f"rank {row['rank']} survived"


@pytest.fixture(scope="session", autouse=True)
def lock_dir_of_this_session(tmp_path_factory):
    """The runs of this test session claim their cores in a folder of their own (bench.harness.cores): they still
    wait for each other, but not for another session's runs on this shared machine."""
    folder = tmp_path_factory.mktemp("bench-locks")
    before = os.environ.get("BENCH_LOCK_DIR")
    os.environ["BENCH_LOCK_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("BENCH_LOCK_DIR", None)
    else:
        os.environ["BENCH_LOCK_DIR"] = before


@pytest.fixture
def store(tmp_path):
    return tmp_path / "results" / "bench.sqlite"
