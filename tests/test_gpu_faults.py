"""Faults on GPUs (docs/method.md, "Faults on GPUs"), as far as a machine without a GPU can check them: the spec and
environment a GPU fault run is planned with (NCCL's timeout and error handling), what its record stores and the
page shows, `bench fault --gpus` refused here and accepted where the machine has GPUs, and a GPU sweep's fault
runs. Nothing here launches a GPU run."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import bench.core.spec
import bench.tasks.fault.scenarios
from bench.backends.shared.nccl import ASYNC_ERROR_HANDLING
from bench.cli import build_parser
from bench.cli.common import world_of
from bench.cli.fault import specs_of
from bench.core.dryrun import plan_only
from bench.core.errors import UsageError
from bench.core.records import upgrade
from bench.core.registry import get_backend, get_task
from bench.core.rundir import RunDir
from bench.report.sections import Folded, Table
from bench.results.frame import records_to_frame
from bench.tasks.fault import nccl_in_force
from bench.tasks.fault.report import report_part
from bench.tasks.fault.spec import build_spec
from bench.workflows.plan import SWEEP_FAULTS, plan_sweep, sweep_world_sizes
from factories import fault_record
from needs import needs

FAULT = dict(
    workload="mnist_mlp",
    fault="hang",
    rank=1,
    at_step=None,
    max_restarts=3,
    checkpoint_every=None,
    total_steps=None,
    comm_timeout=7.0,
    recovery_timeout=90.0,
)


# a GPU run is planned only over a torch that has NCCL (PyPI's default build has it, GPU or not)
needs_nccl = needs("nccl")


@pytest.fixture
def machine_with_gpus(monkeypatch):
    """This machine's GPU count as a GPU machine would report it (the one fact this machine cannot give)."""

    def with_gpus(count: int):
        for module in (bench.core.spec, bench.tasks.fault.scenarios):
            monkeypatch.setattr(module, "cuda_device_count", lambda: count)

    return with_gpus


@pytest.mark.parametrize(
    "backend, env",
    [
        ("elastic", {ASYNC_ERROR_HANDLING: "1"}),
        ("ray", {ASYNC_ERROR_HANDLING: "1"}),
        ("horovod", {"HOROVOD_STALL_CHECK_TIME_SECONDS": "7", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "14"}),
    ],
)
@needs_nccl
def test_a_gpu_fault_run_is_planned_over_nccl_with_its_timeout(backend, env):
    """Planned (--dry-run) on any machine: whether the backend has GPU operations is the hosts' to say."""
    with plan_only():
        spec = build_spec(backend=backend, world_size=2, device="cuda", **FAULT)
    assert spec.device == "cuda" and spec.task == "fault" and spec.world_size == 2
    assert spec.collective_timeout == 7.0  # the process group's timeout, which NCCL's watchdog enforces
    assert get_backend(backend).elastic.nccl_env(spec, spec.fault) == env
    assert nccl_in_force(spec) == {"timeout_s": 7.0, "async_error_handling": env.get(ASYNC_ERROR_HANDLING), "env": env}
    on_cpu = build_spec(backend=backend, world_size=2, **FAULT)
    assert on_cpu.device == "cpu" and nccl_in_force(on_cpu) is None
    assert get_backend(backend).elastic.nccl_env(on_cpu, on_cpu.fault) == {}


@needs_nccl
def test_the_fault_launch_carries_the_nccl_environment(tmp_path):
    spec = build_spec(backend="elastic", world_size=2, device="cuda", **FAULT)
    task, backend = get_task("fault"), get_backend("elastic")
    planned = task.launch(spec, backend, ["python", "-m", "bench.harness.guard"], "r1", RunDir(tmp_path), {}, False)
    assert planned.env[ASYNC_ERROR_HANDLING] == "1"
    assert "bench.backends.shared.torchrun_events" in planned.command  # torchrun's agent, its events kept
    on_cpu = build_spec(backend="elastic", world_size=2, **FAULT)
    assert ASYNC_ERROR_HANDLING not in task.launch(on_cpu, backend, ["x"], "r2", RunDir(tmp_path), {}, False).env


@needs_nccl
def test_a_join_on_gpus_needs_a_gpu_for_the_new_worker():
    join = {**FAULT, "fault": "join", "rank": 0}
    assert build_spec(backend="elastic", world_size=1, device="cuda", gpus_here=2, **join).world_size == 1
    with pytest.raises(UsageError, match=r"--gpus 1 or fewer"):
        build_spec(backend="elastic", world_size=2, device="cuda", gpus_here=2, **join)


@pytest.mark.skipif(bench.core.spec.cuda_device_count() > 0, reason="this machine has a GPU: the run would start")
def test_bench_fault_gpus_is_one_line_on_a_machine_without_gpus(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "fault", "--gpus", "1", "--store", str(tmp_path / "s.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0], proc.stderr
    assert lines[0].endswith("use --nproc 1 to run 1 CPU process over gloo"), proc.stderr
    assert list(tmp_path.iterdir()) == []  # refused before the store was made


@needs_nccl
def test_bench_fault_gpus_plans_gpu_runs_where_there_are_gpus(machine_with_gpus):
    machine_with_gpus(2)
    args = build_parser().parse_args(
        ["fault", "--gpus", "1", "--kill-rank", "0", "--fault", "hang", "--backend", "elastic", "--comm-timeout", "5"]
    )
    (spec,) = specs_of(args)
    assert (spec.device, spec.world_size, spec.fault.signal, spec.collective_timeout) == ("cuda", 1, "STOP", 5.0)
    too_many = build_parser().parse_args(["fault", "--gpus", "3", "--backend", "elastic"])
    with pytest.raises(UsageError, match="this machine has 2 CUDA device"):
        specs_of(too_many)


@needs_nccl
def test_a_gpu_sweep_plans_its_fault_runs_on_the_gpus(machine_with_gpus):
    machine_with_gpus(2)
    args = build_parser().parse_args(["sweep", "--max-gpus", "2", "--dry-run"])
    device, largest = world_of(args, None)
    assert (device, largest) == ("cuda", 2)
    with plan_only():  # what --dry-run plans on any machine: each backend's GPU operations are the hosts' to have
        plan = plan_sweep(
            ["elastic", "horovod"],
            ["mnist_mlp"],
            device,
            sweep_world_sizes(largest),
            options={},
            comm=None,
            sweep_id="s1",
            faults=["kill", "hang", "join"],
        )
    faults = [s for s in plan if s.task == "fault"]
    assert sorted((s.backend, s.fault.kind, s.repeat) for s in faults) == sorted(
        (b, k, r)
        for b in ("elastic", "horovod")
        for k in ("kill", "hang", "join")
        for r in range(SWEEP_FAULTS["repeats"])
    )
    assert all(s.device == "cuda" for s in plan)
    assert {nccl_in_force(s)["timeout_s"] for s in faults} == {3.0}  # the sweep's collective timeout
    assert all(s.world_size == (1 if s.fault.joining else 2) for s in faults)


def test_the_nccl_settings_are_stored_upgraded_and_shown():
    on_gpu = fault_record("g1", backend="elastic")
    nccl = {"timeout_s": 7.0, "async_error_handling": "1", "env": {ASYNC_ERROR_HANDLING: "1"}}
    on_gpu = dataclasses.replace(
        on_gpu,
        spec=dataclasses.replace(on_gpu.spec, device="cuda"),
        metrics=dataclasses.replace(on_gpu.metrics, nccl=nccl),
    )
    assert type(on_gpu).from_dict(on_gpu.to_dict()).metrics.nccl == nccl

    v9 = fault_record("c1").to_dict()
    v9["schema_version"] = 9
    del v9["metrics"]["nccl"]
    assert upgrade(v9)["metrics"]["nccl"] is None and upgrade(v9)["schema_version"] == 10

    # a Horovod join's Gloo timeout, longer than the collective timeout (its launcher records it)
    joined = fault_record("c3", backend="horovod", world_size=1, launch={"collective_timeout_s": 90})
    part = report_part(records_to_frame([on_gpu, fault_record("c1"), joined]), None)
    (table,) = [
        t for s in part.sections for b in s.blocks if isinstance(b, Folded) for t in b.blocks if isinstance(t, Table)
    ]
    cells = [c.text for row in table.rows for c in row.cells]
    assert f"NCCL timeout 7 s, {ASYNC_ERROR_HANDLING}=1" in cells
    assert "gloo, 10 s" in cells and "gloo, 90 s" in cells
    fault_task = get_task("fault")
    assert f"collectives: NCCL timeout 7 s, {ASYNC_ERROR_HANDLING}=1" in fault_task.summary_lines(on_gpu)
    assert not any(line.startswith("collectives") for line in fault_task.summary_lines(fault_record("c2")))
    said = fault_task.describe(on_gpu.spec)
    assert "2 GPU workers" in said and said.endswith(f"; NCCL timeout 10 s, {ASYNC_ERROR_HANDLING}=1")
