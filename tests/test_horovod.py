"""The Horovod backend through the CLI: Gloo and MPI controllers, tuned options, a rank that exits 0, a broken
install (its hang, crash, kill, fault and equivalence with elastic: tests/test_backend_contract.py).

These tests need the Horovod that `python -m bench.tools.horovod_build` installs (the nox sessions run it);
without it they fail with that instruction rather than skip, so CI can never pass by skipping them. The MPI
controllers' test also needs OpenMPI, a system package: without it that test skips, naming the package (in CI, which
installs it, it runs).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import FAST, ROOT, assert_nothing_left, bench_json
from needs import needs

pytestmark = pytest.mark.slow


def test_horovod_is_installed_and_built_as_expected():
    from bench.backends.horovod import built_with, check_build, horovodrun_path

    problem, flags = check_build()
    assert problem is None, problem
    # the flags are Horovod's own: the same as `horovodrun --check-build` ticks
    text = subprocess.run([horovodrun_path(), "--check-build"], capture_output=True, text=True, timeout=120).stdout
    assert "[X] PyTorch" in text and built_with("Gloo") and flags["version"] in text
    ticked = {
        line.strip()[3:].strip()
        for line in text.split("Available Tensor Operations:")[1].splitlines()
        if line.strip().startswith("[X]")
    }
    assert ticked == {name for name in ("MPI", "Gloo", "NCCL", "DDL", "CCL") if built_with(name)}


def test_a_working_builds_check_is_kept_by_what_it_depends_on(tmp_path, monkeypatch):
    """The build probe (a child importing horovod.torch, seconds) runs once per installation and library path."""
    import bench.backends.horovod as horovod
    from bench.core.environment import gpu_driver_here

    if gpu_driver_here():
        pytest.skip("a GPU driver is here: the build is probed afresh every time")
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    probes = []
    real_probe = horovod._probe_build
    monkeypatch.setattr(horovod, "_probe_build", lambda: probes.append(1) or real_probe())

    def checked():
        horovod.check_build.cache_clear()
        return horovod.check_build()

    try:
        first = checked()
        assert first[0] is None and first[1]["Gloo"] and len(probes) == 1
        assert checked() == first and len(probes) == 1  # read from the cache folder
        monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # where libraries are found: probed again, kept beside
        assert checked() == first and len(probes) == 2
        assert len(json.loads((tmp_path / horovod.HOROVOD_BUILD_FILE).read_text())) == 2
    finally:
        horovod.check_build.cache_clear()


@pytest.mark.parametrize("workload", ["mnist_mlp", "resnet18"])
def test_two_process_horovod_run(workload, two_worker_run):
    run = two_worker_run("horovod", workload)  # shared with the contract's equivalence test
    proc, record = run.proc, run.record
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok"
    spec = record["spec"]
    assert spec["backend_options"] == {
        "launcher": "gloo",
        "hvd_compression": "none",
        "hvd_backward_passes": 1,
        "hvd_op": "average",
        "hvd_fusion_mb": None,
        "hvd_cycle_ms": None,
        "hvd_discovery_script": None,  # an option of fault runs, recorded with its default as every option is
    }
    assert (spec["threads"], spec["image_size"]) == (1, 28 if workload == "mnist_mlp" else 32)
    assert sorted(r["rank"] for r in record["rank_map"]) == [0, 1]
    assert all(r["local_world_size"] == 2 and r["group_rank"] == 0 for r in record["rank_map"])
    m = record["metrics"]
    assert m["throughput"]["ci_low"] <= m["throughput"]["mean"] <= m["throughput"]["ci_high"]
    assert m["per_rank"][0]["param_checksum"] == pytest.approx(m["per_rank"][1]["param_checksum"])
    assert record["environment"]["variables"]["OMP_NUM_THREADS"] == "1"  # set by the harness, as for elastic
    assert "--gloo" in record["command"]
    # pinned by default (--cpu-bind auto): each rank on its own core, and with it every thread Horovod and gloo
    # started before the rank's code ran (its background loop, gloo's I/O)
    placed = [r["threads"] for r in m["per_rank"]]
    assert spec["cpu_bind"] == "cores"
    assert sorted(t["affinity"] for t in placed) == [[0], [1]]
    assert all(t["process_threads"] >= 3 and t["threads_off_affinity"] == 0 for t in placed), placed
    assert_nothing_left(record)


# Horovod's MPI controllers: OpenMPI's mpirun, and a Horovod built with MPI, which the set-up does where OpenMPI's
# compiler wrapper (mpicxx, libopenmpi-dev) is found (bench.tools.horovod_build)
@needs("mpi")
@pytest.mark.parametrize("launcher, marker", [("mpi", "--mpi"), ("mpirun", "-bind-to")])
def test_mpi_controllers(launcher, marker, store):
    proc, record = bench_json(
        "run", "--backend", "horovod", "--hvd-launcher", launcher, "--nproc", 2, "--store", store, *FAST
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and marker in record["command"]
    assert sorted(r["rank"] for r in record["rank_map"]) == [0, 1]
    assert_nothing_left(record)


def test_tuned_options_are_applied_and_recorded(store):
    proc, record = bench_json(
        "run",
        "--backend",
        "horovod",
        "--nproc",
        2,
        "--hvd-compression",
        "fp16",
        "--hvd-backward-passes",
        2,
        "--hvd-fusion-mb",
        8,
        "--hvd-cycle-ms",
        2,
        "--cpu-bind",
        "none",
        "--store",
        store,
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    spec = record["spec"]
    assert spec["cpu_bind"] == "none"  # left to the scheduler: every rank may run anywhere
    ranks = record["metrics"]["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["threads"]["affinity"] == sorted(os.sched_getaffinity(0)) for r in ranks)
    assert spec["backward_passes"] == 2
    assert spec["backend_options"]["hvd_compression"] == "fp16"
    assert record["environment"]["variables"]["HOROVOD_FUSION_THRESHOLD"] == str(8 * 2**20)
    assert record["environment"]["variables"]["HOROVOD_CYCLE_TIME"] == "2.0"
    # two micro-batches per step: the throughput counts both
    m = record["metrics"]
    expected = [spec["batch_size"] * 2 * 2 * spec["steps_per_window"] / t for t in m["window_times_s"]]
    assert m["throughput"]["per_window"] == pytest.approx(expected)


def test_a_horovod_rank_that_exits_zero_mid_run_is_blamed(store):
    """Rank 1 leaves with os._exit(0) at step 4: rank 0's "Horovod has been shut down" is its consequence."""
    proc, record = bench_json(
        "run", "--backend", "horovod", "--nproc", 2, "--inject", "exit:1:4", "--timeout", 120, "--store", store, *FAST
    )
    assert proc.returncode == 1 and record["status"] == "crashed", record["error"]
    error = record["error"]
    assert (error["rank"], error["exit_code"], error["signal"], error["exception"]) == (1, 0, None, None)
    assert error["message"].startswith("rank 1 exited (code 0) before the run ended, without an error or its result")
    assert "injected exit (code 0) at step 4" in error["tail"]
    assert_nothing_left(record)


def test_broken_horovod_install_is_one_line(tmp_path, store):
    """A Horovod that does not import (as after a torch upgrade) names the command that fixes it."""
    fake = tmp_path / "shadow" / "horovod"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('undefined symbol: _ZN3c1017RegisterOperators')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)]))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--backend", "horovod", "--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "python -m bench.tools.horovod_build --force" in lines[0], proc.stderr
    assert "undefined symbol" in lines[0]


def test_doctor_says_which_frameworks_horovod_was_built_with():
    """One Horovod build for both frameworks: with TensorFlow installed, bench.tools.horovod_build builds its
    TensorFlow library too, and `bench doctor` names both."""
    import importlib.util

    from bench.backends.horovod import BACKEND, TENSOR_OPERATIONS, built_frameworks, built_list, built_with

    expected = ["PyTorch"] + (["TensorFlow"] if importlib.util.find_spec("tensorflow") else [])
    assert built_frameworks() == expected
    lines = BACKEND.doctor_lines()
    assert f"Horovod built with: {', '.join(expected)}" in lines
    # the controllers and tensor operations are the probe's flags (the same as --check-build ticks: tested above)
    controllers = next(line for line in lines if line.startswith("controllers: "))
    assert controllers.startswith("controllers: MPI, Gloo" if built_with("MPI") else "controllers: Gloo (not: MPI)")
    assert "tensor operations: " + built_list(TENSOR_OPERATIONS) in lines
