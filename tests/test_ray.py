"""The ray backend: Ray Train's TorchTrainer running the suite's ranks, through the CLI, with real Ray runtimes.

Each run starts a local Ray runtime (seconds on 2 cores), so the runs are few: one per workload (the MLP's also
checked against elastic's parameters), a crash, a hang, and a communication sweep."""

import json
import socket
import time
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import psutil
import pytest

from conftest import FAST, assert_nothing_left, bench, bench_json, run_tag_of

ray_missing = pytest.mark.skipif(find_spec("ray") is None,
                                 reason="Ray is not installed (pip install -e '.[ray]')")


def ray_processes_of(record: dict) -> list[str]:
    """Live processes of Ray that belong to the run: its tag in their environment, or its run directory (or the
    short temporary folder named after the run) in their command line (raylet, gcs_server, workers, agents)."""
    marks = (record["run_dir"], f"bench-ray-{record['run_id']}")
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.cmdline())
            if run_tag_of(proc.pid) == record["run_id"] or any(m in cmdline for m in marks):
                found.append(f"{proc.pid} {cmdline[:120]}")
        except psutil.Error:
            continue
    return found


def assert_no_ray_left(record: dict) -> None:
    assert ray_processes_of(record) == []
    assert_nothing_left(record)
    assert not Path(f"/tmp/bench-ray-{record['run_id']}").exists(), "the run's Ray folder under /tmp was left"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


# ---------------------------------------------------------------- refused before anything runs
@ray_missing
def test_unreachable_ray_address_is_one_line_within_seconds(store):
    started = time.monotonic()
    proc = bench("run", "--backend", "ray", "--ray-address", f"127.0.0.1:{closed_port()}", "--store", store, *FAST)
    assert proc.returncode == 2
    assert time.monotonic() - started < 20
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ray-address" in lines[0] and "no Ray cluster answers" in lines[0], proc.stderr
    assert not store.exists()


@ray_missing
def test_ray_address_of_the_wrong_form_and_for_another_backend(store):
    proc = bench("run", "--backend", "ray", "--ray-address", "localhost", "--store", store)
    assert proc.returncode == 2 and "HOST:PORT" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = bench("run", "--backend", "elastic", "--ray-address", "localhost:6379", "--store", store)
    assert proc.returncode == 2 and "option of backend ray" in proc.stderr


def test_doctor_says_whether_ray_can_run():
    """What `bench doctor` prints for each backend (its availability and its own lines), for ray."""
    from bench.core.registry import get_backend

    ray = get_backend("ray")
    if find_spec("ray") is not None:
        assert ray.unavailable_reason("cpu") is None and ray.doctor_lines() == [f"ray {version('ray')}"]
    else:
        assert ray.unavailable_reason("cpu") == "Ray is not installed; pip install -e '.[ray]'"
        assert ray.doctor_lines() == []


# ---------------------------------------------------------------- real runs
@ray_missing
@pytest.mark.slow
def test_two_worker_resnet18_run(tmp_path):
    # a store given by a relative path, as `--store results/x.sqlite` from a checkout: the run directory is then
    # relative too, and Ray Train's storage and Ray's workers need it absolute
    proc = bench("run", "--backend", "ray", "--workload", "resnet18", "--nproc", 2, "--store", "rel/bench.sqlite",
                 *FAST, "--json", timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["status"] == "ok" and record["spec"]["image_size"] == 32
    # the rank map is what Ray Train gave each worker
    rows = sorted(record["rank_map"], key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["group_rank"], r["world_size"]) for r in rows] == [(0, 0, 0, 2),
                                                                                               (1, 1, 0, 2)]
    m = record["metrics"]
    assert m["per_rank"][0]["param_checksum"] == pytest.approx(m["per_rank"][1]["param_checksum"])
    # Ray's own start-up, recorded with the others' figures
    phases = m["startup"]["launcher_phases"]
    assert set(phases) == {"driver start", "ray runtime start", "trainer set-up", "worker placement",
                           "process group set-up"}
    assert all(v >= 0 for v in phases.values())
    assert phases["ray runtime start"] > 0 and m["startup"]["launch_to_first_step_s"] > phases["ray runtime start"]
    assert record["spec"]["backend_options"] == {"ddp_bucket_mb": 25.0, "ray_address": None,
                                                  "ray_resize_interval": 60.0}
    assert "bench.backends.ray_driver" in record["command"]
    assert_no_ray_left(record)


@ray_missing
@pytest.mark.slow
def test_mlp_run_has_the_same_parameters_as_elastic(store):
    """Same seed, data and per-worker batch: prepare_model's DDP averages the same gradients as elastic's."""
    import torch

    common = ["--workload", "mnist_mlp", "--nproc", 2, "--save-params", "--seed", 3, "--store", store, *FAST]
    params, records = {}, {}
    for backend in ("elastic", "ray"):
        proc, record = bench_json("run", "--backend", backend, *common, timeout=400)
        assert proc.returncode == 0, proc.stderr
        records[backend] = record
        params[backend] = torch.load(Path(record["run_dir"]) / "ranks" / "rank0.a0.params.pt")
    moved = 0
    for name, value in params["elastic"].items():
        if value.is_floating_point():
            torch.testing.assert_close(params["ray"][name], value, rtol=1e-4, atol=1e-5, msg=name)
            moved += 1
    assert moved > 0
    ray_run = records["ray"]
    assert ray_run["status"] == "ok" and ray_run["spec"]["threads"] == 1
    assert all(r["threads"]["torch"] == 1 for r in ray_run["metrics"]["per_rank"])
    assert_no_ray_left(ray_run)


@ray_missing
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["crash"])  # a SIGKILLed worker: test_killed_worker_is_replaced... and by hand
def test_crashed_worker_is_named(kind, store):
    proc, record = bench_json("run", "--backend", "ray", "--nproc", 2, "--inject", f"{kind}:1:4", "--store", store,
                              *FAST, timeout=400)
    assert proc.returncode == 1 and record["status"] == "crashed", record["error"]
    error = record["error"]
    assert error["rank"] == 1
    if kind == "crash":
        assert error["exception"] == "RuntimeError"
        assert error["message"] == "rank 1 raised RuntimeError: injected crash at step 4 (exited with exit code 1)"
        assert "injected crash at step 4" in error["tail"]
    else:  # SIGKILLed: Ray Train sees its worker die, and no exit status reaches the driver
        assert error["exception"] is None and error["message"].startswith("rank 1 ended with no exit status")
        assert "the Ray worker process died" in error["tail"]
    assert_no_ray_left(record)


@ray_missing
@pytest.mark.slow
def test_hung_worker_is_ended_at_the_deadline(store):
    proc, record = bench_json("run", "--backend", "ray", "--nproc", 2, "--inject", "hang:1:3", "--timeout", 60,
                              "--store", store, *FAST, timeout=400)
    assert proc.returncode == 1 and record["status"] == "timeout", record["error"]
    assert {row["rank"] for row in record["error"]["ranks"]} == {0, 1}
    assert record["error"]["message"] == "deadline of 60 s passed"
    assert_no_ray_left(record)


@ray_missing
@pytest.mark.slow
def test_allreduce_sweep_has_no_wrong_element(store):
    proc, record = bench_json("allreduce", "--backend", "ray", "--nproc", 2, "--ops", "allreduce,allgather",
                              "--max-bytes", "1M", "--iters", 5, "--warmup-iters", 2, "--store", store, timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and record["metrics"]["wrong"] == 0
    assert {r["op"] for r in record["metrics"]["rows"]} == {"allreduce", "allgather"}
    assert_no_ray_left(record)


@ray_missing
@pytest.mark.slow
def test_killed_worker_is_replaced_and_resumes_the_checkpoint(store):
    """bench fault under Ray Train's FailureConfig: the worker group is replaced at the same size and resumes from
    the last checkpoint, holding 2-worker SGD's parameters."""
    from test_fault import SHORT, assert_resumed_params_are_two_worker_sgd

    proc, record = bench_json("fault", "--backend", "ray", "--nproc", 2, "--kill-rank", 1, *SHORT, "--save-params",
                              "--store", store, timeout=400)
    assert proc.returncode == 0 and record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert f["fault"]["signal"] == "KILL" and f["fault"]["step"] == 25 and f["fault"]["delivered"]
    assert (f["world_before"], f["world_after"]) == (2, 2)
    assert f["restarts"] == 1 and f["resumed_from_step"] == 20 and f["steps_redone"] == 5
    assert 0 < f["detection_s"] <= f["recovery_s"] and f["steps_completed"] == 60
    before = [r for r in record["rank_map"] if r["phase"] == "before"]
    after = [r for r in record["rank_map"] if r["phase"] == "after"]
    assert [r["rank"] for r in before] == [0, 1] == [r["rank"] for r in after]
    assert not {r["pid"] for r in before} & {r["pid"] for r in after}
    assert len(f["resume_checks"]) == 2 and all(c["equal"] for c in f["resume_checks"])
    assert_resumed_params_are_two_worker_sgd(record, steps=20, processes=2)
    assert_no_ray_left(record)


@ray_missing
@pytest.mark.slow
def test_a_joining_node_grows_the_worker_group(store):
    """bench fault --join under Train V2's elastic worker count: a node with one worker's CPUs joins the run's
    runtime, and Ray Train restarts the group at 2 workers from the checkpoint; nothing of the joined node is
    left (its agents rename themselves, hiding the run's tag from a plain read of their environment)."""
    from test_fault import SHORT

    proc, record = bench_json("fault", "--backend", "ray", "--nproc", 1, "--threads", 1, "--join",
                              "--ray-resize-interval", 2, *SHORT, "--store", store, timeout=400)
    assert proc.returncode == 0 and record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert f["scenario"] == "join" and (f["world_before"], f["world_after"]) == (1, 2)
    assert f["recovery_s"] > 0 and f["resumed_from_step"] % 10 == 0
    after = sorted(r["rank"] for r in record["rank_map"] if r["phase"] == "after")
    assert after == [0, 1] and all(c["equal"] for c in f["resume_checks"])
    assert_no_ray_left(record)


def test_a_join_on_a_cluster_of_anothers_is_refused(store):
    proc = bench("fault", "--backend", "ray", "--join", "--ray-address", "127.0.0.1:6379", "--store", store)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "adds a node to the run's own runtime" in proc.stderr


@ray_missing
@pytest.mark.slow
def test_the_bare_ray_loop_leaves_no_ray_session_behind():
    """The self-check's bare TorchTrainer script keeps Ray's session files in its own folder and removes it."""
    import os
    import subprocess

    from bench.workflows.reference import BARE_LOOPS, read_figure

    def left():
        tmp = Path("/tmp")
        sessions = set((tmp / "ray").iterdir()) if (tmp / "ray").is_dir() else set()
        return sessions | set(tmp.glob("bare-ray-*"))

    before = left()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(BARE_LOOPS["ray"].command(2, ["--workload", "mnist_mlp", "--threads", "1", "--steps", "20"]),
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert read_figure(proc.stdout, "throughput") > 0
    assert left() <= before
    assert not [p for p in psutil.process_iter(["name"]) if p.info["name"] in ("raylet", "gcs_server")]
