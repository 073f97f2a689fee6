"""Real runs through the CLI: torchrun, 2 gloo processes, the worker loop, the store."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAST, ROOT, assert_nothing_left, bench, bench_json, processes_of_run
from factories import write_mnist

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("workload", ["mnist_mlp", "resnet18"])
def test_two_process_elastic_run(workload, two_worker_run):
    run = two_worker_run("elastic", workload)  # shared with the contract's equivalence test
    proc, record, store = run.proc, run.record, run.store
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and record["error"] is None
    spec = record["spec"]
    assert (spec["world_size"], spec["device"], spec["threads"]) == (2, "cpu", 1)
    assert spec["image_size"] == (28 if workload == "mnist_mlp" else 32)  # the CPU size
    # the rank map comes from what torchrun gave each worker
    ranks = sorted(r["rank"] for r in record["rank_map"])
    assert ranks == [0, 1]
    for row in record["rank_map"]:
        assert row["local_rank"] == row["rank"] and row["group_rank"] == 0
        assert row["restart_count"] == 0 and row["world_size"] == 2 and row["host"]
    m = record["metrics"]
    thr = m["throughput"]
    assert thr["n"] == 2 and len(thr["per_window"]) == 2
    assert thr["ci_low"] <= thr["mean"] <= thr["ci_high"]
    # throughput is the global batch over the slowest rank's window
    expected = [spec["batch_size"] * 2 * 3 / t for t in m["window_times_s"]]
    assert thr["per_window"] == pytest.approx(expected)
    assert len(m["per_rank"]) == 2 and all(r["peak_rss_bytes"] > 0 for r in m["per_rank"])
    assert 0 < m["startup"]["rendezvous_s"] <= m["startup"]["launch_to_first_step_s"]
    # identical parameters on both ranks: DDP kept them in sync
    assert m["per_rank"][0]["param_checksum"] == pytest.approx(m["per_rank"][1]["param_checksum"])
    env = record["environment"]
    assert env["torch"].startswith("2.14.1") and env["variables"]["OMP_NUM_THREADS"] == "1"
    # what the host's GPU node is made of, recorded by the run (none here), and a CPU run's GPUs not sampled
    assert [n["host"] for n in env["gpu_nodes"]] == [os.uname().nodename]
    assert env["gpu_nodes"][0]["status"] in ("no GPU", "GPUs")
    assert record["gpu_usage"] == {"sampled": False, "reason": "a CPU run"}
    assert "bench.backends.shared.torchrun_agent" in record["command"]  # torchrun's main, bench's agent
    # listed from the store
    listing = bench("list", "--store", store)
    assert listing.returncode == 0 and record["run_id"] in listing.stdout
    assert_nothing_left(record)


def test_a_rank_that_exits_zero_mid_run_is_blamed_not_its_peer(store, tmp_path):
    """Rank 1 leaves with os._exit(0) at step 4; rank 0 then fails on the closed connection: rank 1 is the cause.
    The run leaves nothing in $TMPDIR: torchrun's agent, told to write no logs, makes no torchelastic_* folder there
    (it never removes one)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc, record = bench_json(
        "run",
        "--nproc",
        2,
        "--inject",
        "exit:1:4",
        "--timeout",
        120,
        "--store",
        store,
        *FAST,
        env={"TMPDIR": str(scratch)},
    )
    assert proc.returncode == 1 and record["status"] == "crashed"
    error = record["error"]
    assert (error["rank"], error["exit_code"], error["signal"], error["exception"]) == (1, 0, None, None)
    assert error["message"].startswith(
        "rank 1 exited (code 0) before the run ended, without an error or its result (its last report: "
    ), error["message"]
    assert "; rank 0 then failed: " in error["message"]
    assert "injected exit (code 0) at step 4" in error["tail"]
    assert_nothing_left(record)
    assert not list(scratch.glob("torchelastic_*")), sorted(p.name for p in scratch.iterdir())


NOISY = '''
import os
import sys

from workloads import Size, Workload


def build(num_classes, image):
    import torch.nn as nn

    if os.environ.get("BENCH_RANK") is not None:  # in the run's rank, not in the check before it
        for i in range(120_000):
            print(f"line {i:06d} " + "x" * 40)
        print("the last line", flush=True)
    return nn.Sequential(nn.Flatten(), nn.Linear(image * image, 16), nn.ReLU(), nn.Linear(16, num_classes))


NOISY = Workload(name="noisy", summary="prints 6 MB", channels=1, gpu=Size(16, 12, 4, 5), cpu=Size(16, 12, 4, 5),
                 fixed_image=False, build=build)
'''


def test_a_rank_that_prints_without_end_leaves_a_capped_log_with_its_tail(store, tmp_path):
    from bench.core.rundir import LOG_HEAD_BYTES, LOG_TAIL_BYTES, RunDir

    (tmp_path / "noisy.py").write_text(NOISY)
    proc, record = bench_json(
        "run", "--backend", "single", "--nproc", 1, "--workload", f"{tmp_path}/noisy.py:NOISY", "--store", store, *FAST
    )
    assert proc.returncode == 0 and record["status"] == "ok", proc.stderr
    log = RunDir(record["run_dir"]).rank_file(0, 0, "log")
    data = log.read_bytes()
    printed = 120_000 * len("line 000000 " + "x" * 40 + "\n")
    assert printed > 6_000_000 and len(data) <= LOG_HEAD_BYTES + LOG_TAIL_BYTES + 200
    assert data.startswith(b"line 000000 ")
    assert b"bytes of this rank's output dropped here; its log keeps the first 1048576 and the last 1048576" in data
    assert b"line 119999 " + b"x" * 40 + b"\nthe last line\n" in data[-LOG_TAIL_BYTES:]


def _run_dirs(store: Path):
    return list((store.parent / "runs").glob("*")) if (store.parent / "runs").exists() else []


def test_ctrl_c_ends_every_process_and_is_recorded(store):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--nproc",
            "2",
            "--inject",
            "hang:0:3",
            "--timeout",
            "120",
            "--store",
            str(store),
            "--json",
            *FAST,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # until both ranks joined the group: the run may first wait for another run's cores claim (tests side by side),
    # which a Slurm job at its time limit holds for over a minute
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = _run_dirs(store)
        if dirs and len(list((dirs[0] / "ranks").glob("rank*.joined.json"))) == 2:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"the ranks never joined: {proc.communicate()[1][-2000:]}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    record = json.loads(out)
    assert record["status"] == "interrupted"
    assert_nothing_left(record)


def test_two_runs_at_once_do_not_collide(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench",
                "run",
                "--nproc",
                "1",
                "--threads",
                "1",
                "--store",
                str(tmp_path / f"s{i}.sqlite"),
                "--json",
                *FAST,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out)["status"] == "ok"


def test_a_sweep_measures_recovery_from_a_killed_and_a_hung_worker(store):
    """The sweep's elasticity part for real, under Horovod's elastic mode: a worker killed (the survivor goes on) and
    one stopped (which Horovod does not come through: a result of the sweep, not its failure, so it exits 0), stored
    as fault runs of the sweep, their recovery read back per backend and fault."""
    proc = bench(
        "sweep",
        "--backend",
        "horovod",
        "--workload",
        "mnist_mlp",
        "--nproc",
        2,
        "--world-sizes",
        2,
        "--no-plain-loop",
        "--no-comm",
        "--repeats",
        1,
        "--faults",
        "kill,hang",
        "--fault-repeats",
        1,
        # the hung worker holds the run until this limit: Horovod's reset after the killed one takes well under a
        # second (docs/method.md, "In a sweep"), so 12 s has room and the test waits 18 s less than the default
        "--recovery-timeout",
        12,
        "--store",
        store,
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hung with no step 12 s after the fault" in proc.stderr  # the sweep's limit, not its default, said
    assert "[3/3]" in proc.stderr and "1 run(s) not ok as a result, not a failure" in proc.stderr
    from bench.core.store import Store
    from bench.results.frame import load_frame
    from bench.tasks.fault.results import recovery_cases

    frame = load_frame(Store(store))
    assert sorted(frame["task"]) == ["fault", "fault", "train"] and frame["sweep_id"].nunique() == 1
    assert frame["sweep_id"].notna().all()
    faults = frame[frame["task"] == "fault"]
    assert all(processes_of_run(run_id) == [] for run_id in faults["run_id"]), "a process of a fault run outlived it"
    cases = recovery_cases(faults)
    assert len(cases) == 2 and all(set(by) == {"horovod"} for by in cases.values())
    killed = next(by["horovod"] for case, by in cases.items() if "SIGKILL" in case)
    hung = next(by["horovod"] for case, by in cases.items() if "SIGSTOP" in case)
    assert killed.times and killed.median_s > 0 and killed.came_through[0].metrics.world_after == 1
    assert hung.times == [] and hung.failures() == "timeout in 1 run"
    assert {r.spec.fault.recovery_timeout for r in hung.records + killed.records} == {12.0}
    # the survivor's collective timed out after the sweep's 3 s, then no step came
    assert 2.5 < hung.records[0].metrics.hang_observed_s < 12 and hung.records[0].error.message.startswith("hung")


@pytest.mark.parametrize("data", ["digits", "mnist"])
def test_real_data_sources_through_the_cli(data, store, tmp_path):
    extra = []
    if data == "mnist":
        write_mnist(tmp_path, n=300)
        extra = ["--data-dir", tmp_path]
    proc, record = bench_json("run", "--nproc", 2, "--data", data, *extra, "--batch-size", 16, "--store", store, *FAST)
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and record["spec"]["data"] == data
    assert record["spec"]["num_classes"] == 10
