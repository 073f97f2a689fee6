"""The ray backend: Ray Train's TorchTrainer running the suite's ranks, through the CLI, with real Ray runtimes.

Each run starts a local Ray runtime (seconds on 2 cores), so the runs are few: ResNet18 with the rank map and start-up
phases Ray gave, a communication sweep, a joining node, and the bare loop (its crash, kill, hang, fault and
equivalence with elastic: tests/test_backend_contract.py)."""

import json
import socket
import time
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import psutil
import pytest

from conftest import FAST, SHORT, assert_nothing_left, bench, bench_json
from needs import needs

pytestmark = pytest.mark.claims_apart  # Ray's runs wait for its runtime most of their time (conftest.py)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


# ---------------------------------------------------------------- refused before anything runs
@needs("ray")
def test_unreachable_ray_address_is_one_line_within_seconds(store):
    started = time.monotonic()
    proc = bench("run", "--backend", "ray", "--ray-address", f"127.0.0.1:{closed_port()}", "--store", store, *FAST)
    assert proc.returncode == 2
    assert time.monotonic() - started < 20
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ray-address" in lines[0] and "no Ray cluster answers" in lines[0], proc.stderr
    assert not store.exists()


@needs("ray")
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
@needs("ray")
@pytest.mark.slow
def test_two_worker_resnet18_run(tmp_path):
    # a store given by a relative path, as `--store results/x.sqlite` from a checkout: the run directory is then
    # relative too, and Ray Train's storage and Ray's workers need it absolute
    proc = bench(
        "run",
        "--backend",
        "ray",
        "--workload",
        "resnet18",
        "--nproc",
        2,
        "--store",
        "rel/bench.sqlite",
        *FAST,
        "--json",
        timeout=400,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["status"] == "ok" and record["spec"]["image_size"] == 32
    # the rank map is what Ray Train gave each worker
    rows = sorted(record["rank_map"], key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["group_rank"], r["world_size"]) for r in rows] == [
        (0, 0, 0, 2),
        (1, 1, 0, 2),
    ]
    m = record["metrics"]
    assert m["per_rank"][0]["param_checksum"] == pytest.approx(m["per_rank"][1]["param_checksum"])
    # Ray's own start-up, recorded with the others' figures
    phases = m["startup"]["launcher_phases"]
    assert set(phases) == {
        "driver start",
        "ray runtime start",
        "trainer set-up",
        "worker placement",
        "process group set-up",
    }
    assert all(v >= 0 for v in phases.values())
    assert phases["ray runtime start"] > 0 and m["startup"]["launch_to_first_step_s"] > phases["ray runtime start"]
    assert record["spec"]["backend_options"] == {
        "ddp_bucket_mb": 25.0,
        "ray_address": None,
        "ray_resize_interval": 60.0,
    }
    assert "bench.backends.ray.driver" in record["command"]
    assert_nothing_left(record)


@needs("ray")
@pytest.mark.slow
def test_allreduce_sweep_has_no_wrong_element(store):
    proc, record = bench_json(
        "allreduce",
        "--backend",
        "ray",
        "--nproc",
        2,
        "--ops",
        "allreduce,allgather",
        "--max-bytes",
        "1M",
        "--iters",
        5,
        "--warmup-iters",
        2,
        "--store",
        store,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and record["metrics"]["wrong"] == 0
    assert {r["op"] for r in record["metrics"]["rows"]} == {"allreduce", "allgather"}
    assert_nothing_left(record)


@needs("ray")
@pytest.mark.slow
def test_a_joining_node_grows_the_worker_group(store):
    """bench fault --join under Train V2's elastic worker count: a node with one worker's CPUs joins the run's
    runtime, and Ray Train restarts the group at 2 workers from the checkpoint; nothing of the joined node is
    left (its agents rename themselves, hiding the run's tag from a plain read of their environment)."""
    proc, record = bench_json(
        "fault",
        "--backend",
        "ray",
        "--nproc",
        1,
        "--threads",
        1,
        "--fault",
        "join",
        "--ray-resize-interval",
        2,
        *SHORT,
        "--store",
        store,
        timeout=400,
    )
    assert proc.returncode == 0 and record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert f["scenario"] == "join" and (f["world_before"], f["world_after"]) == (1, 2)
    assert f["recovery_s"] > 0 and f["resumed_from_step"] % 10 == 0
    after = sorted(r["rank"] for r in record["rank_map"] if r["phase"] == "after")
    assert after == [0, 1] and f["resume_checks"] and all(c["equal"] for c in f["resume_checks"])
    assert_nothing_left(record)


def test_a_join_on_a_cluster_of_anothers_is_refused(store):
    proc = bench("fault", "--backend", "ray", "--fault", "join", "--ray-address", "127.0.0.1:6379", "--store", store)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "adds a node to the run's own runtime" in proc.stderr


@needs("ray")
@pytest.mark.slow
def test_the_bare_ray_loop_leaves_no_ray_session_behind():
    """The self-check's bare TorchTrainer script keeps Ray's session files in its own folder and removes it."""
    import os
    import subprocess

    from bench.workflows.bare_loops import BARE_LOOPS, read_figure

    def left():
        tmp = Path("/tmp")
        sessions = set((tmp / "ray").iterdir()) if (tmp / "ray").is_dir() else set()
        return sessions | set(tmp.glob("bare-ray-*"))

    from bench.harness.cores import CoreClaim, cpu_resources

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    # claimed as a run is, so that no run of Ray starts a runtime of its own meanwhile, which this test would find
    with CoreClaim(f"bare-ray-loop-{os.getpid()}", "the bare Ray loop", None, cpu_resources()):
        before = left()
        proc = subprocess.run(
            BARE_LOOPS["ray"].command(2, ["--workload", "mnist_mlp", "--threads", "1", "--steps", "20"]),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert read_figure(proc.stdout, "throughput") > 0
        assert left() <= before
        assert not [p for p in psutil.process_iter(["name"]) if p.info["name"] in ("raylet", "gcs_server")]
