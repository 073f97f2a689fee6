"""A 2 x 8-GPU cluster as every verb's `--dry-run` plans it on this machine, which has no GPU: each host's command,
the environment and the CPU binding of each rank; and the GPU gates a plan leaves to the hosts (Horovod built
with CUDA and NCCL) as a run on a GPU machine applies them. Nothing here launches anything."""

from __future__ import annotations

import json
import os
import sys

import pytest

from bench.core.registry import get_backend
from conftest import assert_one_line_error, bench_in_process

TWO_HOSTS = ["--hosts", "a:8,b:8"]
GPU_RANKS = "; ".join(f"local rank {r}: GPU {r}'s NUMA node's share" for r in range(8))


def launches(stdout: str) -> list[list[str]]:
    """The plan's launches, each its lines (the first: `launch i/n: ...`)."""
    blocks: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith("launch "):
            blocks.append([line])
        elif blocks and line.startswith("  "):
            blocks[-1].append(line)
    return blocks


def planned(*args: object) -> tuple[str, str]:
    proc = bench_in_process(*args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("dry run: ")
    return proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "verb",
    [
        ["run", "--gpus", "8"],
        ["run", "--backend", "all", "--gpus", "8"],
        ["fault", "--gpus", "8", "--kill-host", "b"],
        ["sweep", "--max-gpus", "8"],
        ["allreduce", "--gpus", "8"],
    ],
    ids=lambda verb: " ".join(verb),
)
def test_every_verb_plans_2_hosts_of_8_gpus_with_each_hosts_command_environment_and_cores(verb, nothing_runs):
    stdout, stderr = planned(*verb, *TWO_HOSTS)
    blocks = launches(stdout)
    assert blocks
    for lines in blocks:
        head, body = lines[0], lines[1:]
        assert " on cuda (GPU processes), 2 host(s): a x8, b x8" in head, head
        assert any(line.startswith("  env NCCL_SOCKET_IFNAME=") for line in body), lines
        cores = {line.split(":", 1)[0]: line for line in body if line.startswith("  cores of ")}
        assert any(line.startswith("  CPU binding (--cpu-bind ") for line in body), lines
        if "world size 16 " in head:  # each host's command (horovodrun's, on the first, names both), its ranks' cores
            on = {line.split(":", 1)[0]: line for line in body if line.startswith("  on ")}
            assert set(on) == {"  on a", "  on b"} or (set(on) == {"  on a"} and "a:8,b:8" in on["  on a"]), lines
            assert set(cores) == {"  cores of a", "  cores of b"}, lines
            if "--cpu-bind numa" in "".join(body):
                assert all(GPU_RANKS in line for line in cores.values()), cores
            else:  # a fault run's workers are left unbound: elastic agents' local ranks overlap
                assert all(line.endswith(": local ranks 0-7: not bound") for line in cores.values()), cores
    # with all, what cannot span two hosts is said and left out, not a refusal of the whole command
    if "all" in verb or verb[0] == "allreduce":
        assert "skipping ray: it starts its processes on one host, and 16 of them fill the slots of 2 hosts" in stderr


@pytest.mark.parametrize(
    "args",
    [
        ["fault", "--gpus", "8"],
        ["fault", "--gpus", "8", "--fault", "join"],
        ["fault", "--gpus", "2", "--fault", "hang", "--backend", "horovod"],
        ["sweep", "--max-gpus", "8"],
    ],
    ids=lambda args: " ".join(args),
)
def test_a_gpu_plan_on_this_machine_needs_no_local_gpu(args, nothing_runs):
    stdout, _ = planned(*args)
    gpus = args[args.index("--gpus" if "--gpus" in args else "--max-gpus") + 1]
    assert f"world size {gpus} on cuda (GPU processes), this machine" in stdout
    assert "  cores of this machine: " in stdout


def test_a_cpu_plan_names_each_ranks_cores_and_leaves_servers_unbound(nothing_runs):
    stdout, _ = planned("run", "--backend", "ps", "--nproc", 2, "--threads", 1)
    allowed = sorted(os.sched_getaffinity(0))
    ranks = [f"local rank {r}: core(s) {allowed[r % len(allowed)]}" for r in range(2)]
    assert f"  cores of this machine: {'; '.join(ranks)}; local rank 2 (server): not bound" in stdout.splitlines()


def test_a_ps_plan_across_gpu_hosts_names_each_hosts_server(nothing_runs):
    stdout, _ = planned("run", "--backend", "ps", "--gpus", 8, *TWO_HOSTS)
    for host in ("a", "b"):
        assert f"  cores of {host}: {GPU_RANKS}; local rank 8 (server): not bound" in stdout.splitlines()


# ---------------------------------------------------------------- Horovod's GPU gate
MPI_ONLY = {"version": "0.28.1", "MPI": True, "Gloo": True, "NCCL": False, "DDL": False, "CCL": False, "CUDA": False}


@pytest.fixture
def horovod_built(monkeypatch):
    """The horovod backend answering as if Horovod's build probe gave `flags` (the machine's own build is not
    the case under test)."""
    module = sys.modules[type(get_backend("horovod")).__module__]

    def built(**flags):
        monkeypatch.setattr(module, "check_build", lambda: (None, {**MPI_ONLY, **flags}))
        return get_backend("horovod")

    return built


@pytest.mark.parametrize("flags, lacking", [({}, "CUDA and NCCL"), ({"CUDA": True}, "NCCL"), ({"NCCL": True}, "CUDA")])
def test_horovod_without_cuda_or_nccl_cannot_run_on_gpus(horovod_built, flags, lacking):
    backend = horovod_built(**flags)
    why = backend.unavailable_reason("cuda")
    assert why is not None and "\n" not in why
    assert why.startswith(f"this Horovod was built without {lacking} ")
    assert "HOROVOD_GPU_OPERATIONS=NCCL python -m bench.tools.horovod_build --force" in why
    assert backend.unavailable_reason("cpu") is None  # its CPU runs go over Gloo or MPI as before


def test_horovod_with_cuda_and_nccl_can_and_a_plan_leaves_it_to_the_hosts(horovod_built, nothing_runs):
    assert horovod_built(CUDA=True, NCCL=True).unavailable_reason("cuda") is None
    horovod_built()  # a build here without GPU operations: the hosts' Horovod is what a GPU plan needs
    stdout, _ = planned("run", "--backend", "horovod", "--gpus", 8, *TWO_HOSTS)
    assert "horovodrun" in stdout


@pytest.mark.slow
def test_a_build_answer_kept_by_the_probe_before_cuda_was_asked_is_probed_again(tmp_path, monkeypatch):
    """An answer kept without the CUDA flag (by a probe that did not ask) is not read as a build without CUDA."""
    import bench.backends.horovod as horovod
    from bench.core.environment import gpu_driver_here

    if gpu_driver_here():
        pytest.skip("a GPU driver is here: the build is probed afresh every time")
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    key = horovod.build_key()
    assert key is not None and key.startswith("probe=")
    old_key = key.split("|", 1)[1]  # the key as the probe without CUDA kept it
    old_flags = {k: v for k, v in MPI_ONLY.items() if k != "CUDA"}
    (tmp_path / horovod.HOROVOD_BUILD_FILE).write_text(json.dumps({old_key: {"problem": None, "flags": old_flags}}))
    horovod.check_build.cache_clear()
    try:
        problem, flags = horovod.check_build()
    finally:
        horovod.check_build.cache_clear()
    assert problem is None and isinstance(flags["CUDA"], bool)
    assert set(json.loads((tmp_path / horovod.HOROVOD_BUILD_FILE).read_text())) == {old_key, key}


def test_ps_refuses_fp16_in_one_line_and_plans_bf16(nothing_runs):
    refused = bench_in_process("run", "--backend", "ps", "--gpus", 2, "--precision", "fp16", "--dry-run")
    assert_one_line_error(refused, "backend ps: --precision fp16", "use --precision bf16")
    stdout, _ = planned("run", "--backend", "ps", "--gpus", 2, "--precision", "bf16")
    assert "world size 2 on cuda" in stdout
