"""No run outlives the bench process that started it: a SIGKILL of bench (no teardown of its own) still ends
every process of the run within seconds and stores the run as interrupted, under every launcher; a run whose
lifeline died too is reaped and recorded by the next command on its store."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from bench.core.rundir import run_temp_prefix
from bench.harness.lifeline import DEADLINE_GRACE_S
from conftest import ROOT, bench, processes_of_run

LEFT_WITHIN_S = 10.0


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


def gone_within(tag: str, timeout: float) -> float:
    """Seconds until no process carries the tag (fails the test after `timeout`)."""
    start = time.monotonic()
    wait_for(lambda: not processes_of_run(tag), timeout, f"the processes of {tag} to end")
    return time.monotonic() - start


def stored(store, run_id: str) -> dict | None:
    with sqlite3.connect(store) as conn:
        row = conn.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return json.loads(row[0]) if row else None


# ---------------------------------------------------------------- the mechanism, without torch
OWNER = textwrap.dedent("""
    import os, subprocess, sys, time
    from bench.harness.lifeline import Lifeline
    tag = sys.argv[1]
    with Lifeline(tag) as lifeline:
        # a launcher of its own session, as torchrun's workers and horovodrun's tree are
        subprocess.Popen(["sleep", "600"], env=dict(os.environ, BENCH_RUN_TAG=tag), start_new_session=True)
        if len(sys.argv) > 3:
            lifeline.hold_deadline(float(sys.argv[3]))
        print("launched", flush=True)
        time.sleep(600 if sys.argv[2] == "hold" else 0)
""")


def start_owner(tag: str, mode: str, *deadline: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, tag, mode, *deadline],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.stdout.readline().strip() == "launched"
    return proc


@pytest.mark.parametrize("deadline", [(), ("1e10",)], ids=["no deadline", "a deadline past what select() takes"])
def test_a_killed_owner_leaves_nothing_behind(deadline):
    """Also where the deadline it holds is further off than one select() can wait: the watcher waits for it in parts,
    and still ends the run when its owner dies."""
    tag = f"lifeline-test-{os.getpid()}-kill{len(deadline)}"
    owner = start_owner(tag, "hold", *deadline)
    try:
        # seen through /proc, which on a loaded machine may lag the owner's word by a moment
        wait_for(lambda: processes_of_run(tag), 10, "the tagged process to be seen running")
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        gone_within(tag, LEFT_WITHIN_S)
    finally:
        owner.kill()
        for proc in processes_of_run(tag):
            proc.kill()


def test_a_released_lifeline_ends_nothing():
    """An owner that leaves its `with` normally releases the watcher: what it started is its own business."""
    tag = f"lifeline-test-{os.getpid()}-release"
    owner = start_owner(tag, "release")
    try:
        assert owner.wait(timeout=30) == 0
        time.sleep(1.0)  # a watcher that wrongly reaped would have done so by now
        assert processes_of_run(tag), "a released lifeline must not end the owner's processes"
    finally:
        for proc in processes_of_run(tag):
            proc.kill()


def test_teardown_removes_the_temporary_folder_of_a_rank_it_had_to_kill(tmp_path, monkeypatch):
    """A rank's guard removes its temporary folder when the rank ends, unless the guard itself is killed first (the
    SIGKILL after the grace period that SIGTERM gets): then the run's teardown removes it, and only its own run's."""
    from bench.harness.supervisor import TAG_VARIABLE, TERM_GRACE_S, scratch_prefix, supervise

    tag = f"lifeline-test-{os.getpid()}-scratch"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where this process, so teardown, looks
    another = tmp_path / f"{scratch_prefix('another-run')}0.a0-kept"
    another.mkdir()
    # a guard that SIGTERM does not end, holding its folder as bench.harness.guard names it
    guard = (
        "import signal, tempfile, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"tempfile.mkdtemp(prefix={scratch_prefix(tag) + '1.a0-'!r}); print('made', flush=True); time.sleep(600)"
    )
    log = tmp_path / "launcher.log"
    outcome = supervise(
        [sys.executable, "-c", guard], dict(os.environ, TMPDIR=str(tmp_path), **{TAG_VARIABLE: tag}), log, timeout=5
    )
    assert outcome.ending == "timeout" and log.read_text().strip() == "made"
    assert [p["cmdline"].split()[0] for p in outcome.reaped] == [sys.executable]
    assert outcome.ended_at - outcome.launched_at < 5 + TERM_GRACE_S + 5 and processes_of_run(tag) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [another.name, log.name]


def test_teardown_removes_the_runs_folders_outside_its_run_directory_once_its_processes_ended(tmp_path, monkeypatch):
    """Ray's runtime folder, made in the short temporary folder where the run directory's path is too long for Ray's
    sockets, is the run's (its name starts with run_temp_prefix): the driver removes it on the teardown's SIGTERM,
    while the runtime's processes, ended by the same SIGTERM, may still write their logs into it. The teardown removes
    it once every process of the run has ended, and leaves another run's."""
    from bench.backends.ray.driver import temp_dir
    from bench.core.rundir import RunDir
    from bench.harness import supervisor
    from bench.harness.supervisor import TAG_VARIABLE, supervise

    tag = f"lifeline-test-{os.getpid()}-ray"
    short = tmp_path / "short"
    short.mkdir()
    monkeypatch.setattr(supervisor, "SHORT_TEMP_DIR", short)
    folder, removed_afterwards = temp_dir(RunDir(tmp_path / ("x" * 120) / "runs" / tag), tag)
    assert removed_afterwards and folder.parent == Path("/tmp") and folder.name.startswith(run_temp_prefix(tag))
    ours, another = short / folder.name, short / f"{run_temp_prefix('another-run')}ray"
    another.mkdir()
    # a runtime process that writes its log into the folder as it shuts down, after the driver removed it
    runtime = (
        "import os, signal, sys, time\n"
        f"folder = {str(ours)!r}\n"
        "def shut_down(*_):\n"
        "    os.makedirs(os.path.join(folder, 'session_latest', 'logs'), exist_ok=True)\n"
        "    open(os.path.join(folder, 'session_latest', 'logs', 'raylet.out'), 'w').write('exiting')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, shut_down)\n"
        "os.makedirs(folder); print('made', flush=True); time.sleep(600)\n"
    )
    log = tmp_path / "launcher.log"
    outcome = supervise([sys.executable, "-c", runtime], dict(os.environ, **{TAG_VARIABLE: tag}), log, timeout=3)
    assert outcome.ending == "timeout" and log.read_text().strip() == "made" and processes_of_run(tag) == []
    assert sorted(p.name for p in short.iterdir()) == [another.name]


# ---------------------------------------------------------------- real runs under every launcher
LONG = ["--nproc", "2", "--warmup-steps", "1", "--steps-per-window", "30", "--windows", "200", "--timeout", "300"]


def start_long_run(store, backend: str) -> tuple[subprocess.Popen, str]:
    """`bench run` in a child, once its ranks have reported progress: (the bench process, the run id)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BENCH_STORE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", "--backend", backend, "--store", str(store), *LONG],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    runs = store.parent / "runs"
    try:
        progress = wait_for(
            lambda: list(runs.glob("*/ranks/*progress*")) if runs.is_dir() else [],
            180,
            f"{backend} ranks to report progress",
        )
    except AssertionError:
        proc.kill()
        raise AssertionError(f"no progress; bench said: {proc.communicate()[1][-2000:]}") from None
    return proc, progress[0].parent.parent.name


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["elastic", "horovod", "ps"])
def test_sigkill_of_bench_ends_the_run_and_records_it(backend, store):
    proc, run_id = start_long_run(store, backend)
    try:
        assert processes_of_run(run_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        took = gone_within(run_id, LEFT_WITHIN_S)
        record = wait_for(lambda: stored(store, run_id), LEFT_WITHIN_S, "the run's record")
    finally:
        proc.kill()
        for left in processes_of_run(run_id):
            left.kill()
    assert record["status"] == "interrupted"
    assert record["error"]["message"].startswith("abandoned: the bench process running it")
    assert "its lifeline" in record["error"]["message"]
    assert any(e["kind"] == "reaped" for e in record["events"])
    assert not (store.parent / "runs" / run_id / "owner.json").exists()
    print(f"{backend}: nothing left {took:.1f} s after the SIGKILL")


@pytest.mark.slow
def test_the_next_command_records_a_run_whose_lifeline_died_too(store):
    proc, run_id = start_long_run(store, "elastic")
    owner = json.loads((store.parent / "runs" / run_id / "owner.json").read_text())
    try:
        os.kill(owner["lifeline"]["pid"], signal.SIGKILL)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(1.0)
        assert processes_of_run(run_id), "with its lifeline gone too, the orphans run on until the next command"
        listed = bench("list", "--store", store)
        assert f"run {run_id} was abandoned" in listed.stderr and stored(store, run_id) is None  # a read: no write
        nxt = bench(
            "run", "--store", store, "--nproc", "1", "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2"
        )
    finally:
        proc.kill()
        for left in processes_of_run(run_id):
            left.kill()
    assert nxt.returncode == 0, nxt.stderr
    assert f"recorded run {run_id} as interrupted" in nxt.stderr
    assert processes_of_run(run_id) == []
    record = stored(store, run_id)
    assert record["status"] == "interrupted" and "the next bench command" in record["error"]["message"]


def test_ctrl_c_before_the_launch_is_recorded_as_interrupted(store, monkeypatch):
    """A Ctrl-C while the run is being prepared (a launcher's own checks) is a run interrupted before its
    launch, stored like one interrupted after it; nothing is left to recover."""
    from bench.core.registry import get_task
    from bench.core.store import Store
    from bench.harness.runner import execute
    from bench.tasks.train import build_spec

    spec = build_spec(backend="elastic", workload="mnist_mlp", world_size=1, device="cpu")

    def interrupted_while_preparing(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(get_task("train")), "launch", interrupted_while_preparing)
    record = execute(spec, Store(store), show_progress=False)
    assert record.status == "interrupted"
    assert record.error.message == "interrupted by the user before the launch"
    assert stored(store, record.run_id)["status"] == "interrupted"
    assert not (store.parent / "runs" / record.run_id / "owner.json").exists()


def test_a_slurm_time_limit_before_the_launch_is_recorded_as_a_timeout(store, monkeypatch):
    """Slurm may send the script's warning as the job starts (up to 60 s early): a run still being prepared is
    then stored as `timeout`, as Slurm judges it, not as interrupted by a user."""
    from bench.cluster import slurm
    from bench.core.registry import get_task
    from bench.core.store import Store
    from bench.harness.runner import execute
    from bench.tasks.train import build_spec

    spec = build_spec(backend="elastic", workload="mnist_mlp", world_size=1, device="cpu")
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setattr(
        slurm, "_scontrol", lambda *args: f"JobId=7 JobState=RUNNING TimeLimit=00:01:00 StartTime={started}"
    )

    def term_while_preparing(*args, **kwargs):
        from bench.core.errors import Interrupted

        raise Interrupted()

    monkeypatch.setattr(type(get_task("train")), "launch", term_while_preparing)
    record = execute(spec, Store(store), show_progress=False)
    assert record.status == "timeout"
    assert record.error.message == "the Slurm job 7 reached its time limit (00:01:00), before the launch"
    assert stored(store, record.run_id)["status"] == "timeout"


# ---------------------------------------------------------------- the deadline without the bench process
@pytest.mark.slow
def test_a_stopped_bench_process_does_not_keep_its_run_past_the_deadline(store):
    """`bench run --timeout 10` stopped (SIGSTOP) once launched: its lifeline ends the run's processes at the deadline
    (+ DEADLINE_GRACE_S) and stores the run as `timeout`; bench, let go on, records `timeout` too and exits 1. It costs
    one small run held to its deadline: some 20 s."""
    timeout = 10
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BENCH_STORE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--backend",
            "elastic",
            "--nproc",
            "1",
            "--warmup-steps",
            "1",
            "--steps-per-window",
            "30",
            "--windows",
            "200",
            "--timeout",
            str(timeout),
            "--store",
            str(store),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    runs = store.parent / "runs"
    run_id = None
    try:
        launch = wait_for(lambda: list(runs.glob("*/launch.json")) if runs.is_dir() else [], 180, "the launch")
        run_id = launch[0].parent.name
        wait_for(lambda: processes_of_run(run_id), 30, "the run's processes")
        proc.send_signal(signal.SIGSTOP)
        took = gone_within(run_id, timeout + DEADLINE_GRACE_S + 30)
        assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED  # ended with bench still stopped
        by_lifeline = wait_for(lambda: stored(store, run_id), LEFT_WITHIN_S, "the lifeline's record")
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        for left in processes_of_run(run_id) if run_id else []:
            left.kill()
    assert by_lifeline["status"] == "timeout"
    assert proc.returncode == 1 and "Traceback" not in err and "internal error" not in err, err
    record = stored(store, run_id)
    assert record["status"] == "timeout"
    assert record["error"]["message"] == (
        f"deadline of {timeout} s passed while its bench process (pid {proc.pid}) "
        "was stopped; its lifeline ended the run"
    )
    assert any(e["kind"] == "reaped" for e in record["events"])
    assert not (runs / run_id / "owner.json").exists()
    print(f"the run's processes ended {took:.1f} s after bench was stopped")
