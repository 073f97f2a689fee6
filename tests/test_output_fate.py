"""Output that cannot be written never ends or loses a run: a pipe whose reader leaves early (`bench ... | head -1`)
or a full device (`>/dev/full`, `2>/dev/full`) on stdout or stderr leaves the run going, its record stored, and the
exit status the run's (0 only for ok); the loss is said once on stderr where stderr still works. So does a stream
closed before bench starts (`>&-`, `2>&-`). Real processes, through real pipes, /dev/full and closed descriptors."""

import json
import os
import subprocess
import sys

import pytest

from bench.core.console import GuardedStream
from bench.core.store import Store
from conftest import FAST, ROOT, processes_of_run
from factories import train_record

SMALL = ["--backend", "elastic", "--nproc", 2, *FAST]


def start(*args, stdout, stderr, closed=()):
    """`bench ARGS` in a child process; `closed`: its descriptors closed before it starts, as `>&-` leaves them."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("BENCH_STORE", "PYTHONUNBUFFERED"):  # stdout buffered, as a user's shell starts bench
        env.pop(name, None)

    def close():
        for fd in closed:
            os.close(fd)

    return subprocess.Popen(
        [sys.executable, "-m", "bench", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=ROOT,
        env=env,
        preexec_fn=close if closed else None,
    )


def stored(store) -> list:
    return [(r.status, r.run_id) for r in Store(store).records()]


def test_a_failed_write_is_dropped_and_remembered_not_raised():
    read, write = os.pipe()
    os.close(read)  # the reader gone: the next write is EPIPE
    stream = GuardedStream(open(write, "w", buffering=1))
    stream.write("a line\n")
    stream.flush()
    assert stream.lost == "Broken pipe"
    stream.write("another\n")  # dropped: the descriptor now points at /dev/null
    stream.flush()
    assert os.readlink(f"/proc/self/fd/{stream.fileno()}") == os.devnull
    stream.close()


def test_a_listing_into_a_closed_pipe_exits_0_and_says_so(tmp_path):
    """`bench list` prints its table into stdout's buffer, flushed at the end: there, not at interpreter exit (exit
    120 and 'Exception ignored ... BrokenPipeError'), the closed pipe is found and said once."""
    store = tmp_path / "b.sqlite"
    Store(store).save(train_record())
    read, write = os.pipe()
    os.close(read)
    err = tmp_path / "err"
    with open(err, "wb") as errors:
        proc = start("list", "--store", store, stdout=write, stderr=errors)
    os.close(write)
    assert proc.wait(timeout=120) == 0
    assert err.read_text().splitlines() == [
        "bench list: its output on stdout could not be written (Broken pipe) and is lost; the exit status is still "
        "the outcome's, and every run it made is stored"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("args, status, code", [([], "ok", 0), (["--inject", "crash:1:3"], "crashed", 1)])
def test_a_reader_that_leaves_early_neither_ends_the_run_nor_hides_its_fate(store, args, status, code):
    """`bench run ... 2>&1 | head -1`: every line after the first meets a closed pipe, the summary on stdout too;
    the launcher and the ranks write to their logs, so they train on."""
    proc = start("run", *SMALL, *args, "--store", store, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first = proc.stdout.readline()
    proc.stdout.close()
    assert first.startswith(b"bench run: elastic mnist_mlp"), first
    assert proc.wait(timeout=300) == code
    [(got, run_id)] = stored(store)
    assert got == status
    assert processes_of_run(run_id) == []


@pytest.mark.slow
def test_json_into_a_full_device_is_said_on_stderr_and_the_run_keeps_its_status(store, tmp_path):
    err = tmp_path / "err"
    with open("/dev/full", "wb") as full, open(err, "wb") as errors:
        proc = start("run", *SMALL, "--json", "--store", store, stdout=full, stderr=errors)
        assert proc.wait(timeout=300) == 0
    [(status, run_id)] = stored(store)
    assert status == "ok"
    lines = err.read_text().splitlines()
    assert lines[-2] == f"stored run {run_id} in {store}"
    assert lines[-1].startswith("bench run: its output on stdout could not be written (No space left on device)")
    assert "Traceback" not in err.read_text() and "internal error" not in err.read_text()


@pytest.mark.slow
def test_stderr_on_a_full_device_loses_only_the_notes(store):
    """Nothing is launched before the first note: a note that cannot be written must not stop the run."""
    with open("/dev/full", "wb") as full:
        proc = start("run", *SMALL, "--store", store, stdout=subprocess.PIPE, stderr=full)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    [(status, _)] = stored(store)
    assert status == "ok"
    assert out.decode().startswith("status: ok")


@pytest.mark.slow
def test_both_streams_on_a_full_device_still_exit_by_the_run(store):
    with open("/dev/full", "wb") as full:
        proc = start("run", *SMALL, "--inject", "crash:1:3", "--store", store, stdout=full, stderr=full)
        assert proc.wait(timeout=300) == 1
    [(status, _)] = stored(store)
    assert status == "crashed"


ONE_RANK = ["--backend", "single", "--nproc", 1, *FAST]
LOST_STDOUT = (
    "bench run: its output on stdout could not be written (it was closed when bench started) and is lost; "
    "the exit status is still the outcome's, and every run it made is stored"
)


@pytest.mark.slow
def test_a_run_with_stdout_closed_exits_by_the_run_and_says_its_output_is_lost(store, tmp_path):
    """`bench run ... >&-`: Python starts bench with sys.stdout None."""
    err = tmp_path / "err"
    with open(err, "wb") as errors:
        proc = start("run", *ONE_RANK, "--store", store, stdout=None, stderr=errors, closed=(1,))
        assert proc.wait(timeout=300) == 0, err.read_text()
    [(status, run_id)] = stored(store)
    said = err.read_text()
    assert status == "ok" and "Traceback" not in said and "internal error" not in said, said
    assert said.splitlines()[-2:] == [f"stored run {run_id} in {store}", LOST_STDOUT]


@pytest.mark.slow
def test_a_run_with_stderr_closed_keeps_its_notes_off_stdout(store):
    """`bench run --json ... 2>&-`: the notes are lost, never printed to stdout in place of stderr; stdout is the
    record's JSON alone."""
    proc = start("run", *ONE_RANK, "--json", "--store", store, stdout=subprocess.PIPE, stderr=None, closed=(2,))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:]
    [(status, run_id)] = stored(store)
    record = json.loads(out)
    assert status == "ok" and (record["run_id"], record["status"]) == (run_id, "ok")


@pytest.mark.slow
@pytest.mark.parametrize("args, status, code", [([], "ok", 0), (["--inject", "crash:0:3"], "crashed", 1)])
def test_a_run_with_both_streams_closed_exits_by_the_run(store, tmp_path, args, status, code):
    """`bench run ... <&- >&- 2>&-`: nothing to say anything on; the exit status and the record are the run's."""
    proc = start("run", *ONE_RANK, *args, "--store", store, stdout=None, stderr=None, closed=(0, 1, 2))
    assert proc.wait(timeout=300) == code
    [(got, run_id)] = stored(store)
    assert got == status and processes_of_run(run_id) == []
