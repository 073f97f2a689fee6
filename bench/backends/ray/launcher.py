"""ray's parent side: the driver it starts as the run's launcher (bench.backends.ray.driver; Ray starts the ranks), and
Ray Train's fault tolerance as the elastic mode (the driver told how many failures to take, and whether a node
joins; the `ray` command that joins it). No framework imported."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from bench.backends.base import ElasticMode, Launcher
from bench.backends.ray.times import times_of
from bench.backends.shared.nccl import torch_nccl_fault_env

SETUP_HINT = "pip install -e '.[ray]'"
JOINER_OBJECT_STORE_BYTES = 100 * 1000 * 1000  # Ray's least; the node only hosts a worker


def ray_program() -> str | None:
    """The `ray` command of the environment bench runs in (the same Ray and Python as the run's runtime), or None
    when there is none."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else shutil.which("ray")


def scaling(spec, join: bool = False) -> dict:
    """Ray Train's ScalingConfig for the run (the driver passes it as it is; a dry run shows it): one worker per
    process, each with the run's threads as CPUs and, on GPUs, one GPU, which Ray places and makes the worker's
    (CUDA_VISIBLE_DEVICES) on whichever node has it. A join: Train V2's elastic worker count (RayTrainElastic)."""
    return {
        "num_workers": (spec.world_size, spec.world_size + 1) if join else spec.world_size,
        "use_gpu": spec.device == "cuda",
        "resources_per_worker": {"CPU": spec.threads, **({"GPU": 1} if spec.device == "cuda" else {})},
    }


class RayLauncher(Launcher):
    """The driver, started by the supervisor like any launcher; Ray starts the ranks."""

    def plan_notes(self, spec):
        address = spec.backend_options.get("ray_address")
        where = f"the Ray cluster at {address}" if address else "a local Ray runtime started for the run"
        config = scaling(spec)
        return [
            f"Ray Train on {where}: ScalingConfig(num_workers={config['num_workers']}, use_gpu={config['use_gpu']}, "
            f"resources_per_worker={config['resources_per_worker']}); process group "
            + (
                "NCCL; Ray sets each worker's CUDA_VISIBLE_DEVICES to the GPUs it gave it"
                if spec.device == "cuda"
                else "gloo"
            )
        ]

    def command(self, spec, rank_command, run_id):
        # rank_command is bench.harness.guard's (python -m bench.harness.guard RUN_DIR BACKEND): Ray starts the ranks
        # itself and runs the per-rank code in its workers, so the driver takes the run directory from it
        return [sys.executable, "-m", "bench.backends.ray.driver", rank_command[-2], run_id]

    def rank_identity(self, env):
        return int(env.get("BENCH_RANK", 0)), int(env.get("BENCH_ATTEMPT", 0))

    def startup_phases(self, run_dir):
        """Ray's own start-up: the driver's interpreter and `import ray`, starting the local runtime (or
        connecting to a cluster), making the TorchTrainer (importing Ray Train), placing the Train workers (fit()
        called to Ray Train starting the process group's set-up in them: its controller, the placement group, the
        worker actors), and that set-up."""
        t = times_of(run_dir)
        phases = {}
        for name, start, end in (
            ("driver start", "launched_at", "ray_imported"),
            ("ray runtime start", "ray_init_start", "ray_init_end"),
            ("trainer set-up", "ray_init_end", "fit_start"),
            ("worker placement", "fit_start", "process_group_start"),
            ("process group set-up", "process_group_start", "process_group_end"),
        ):
            if t.get(start) is not None and t.get(end) is not None:
                phases[name] = max(0.0, t[end] - t[start])
        return phases


class RayTrainElastic(ElasticMode):
    """Ray Train's fault tolerance: FailureConfig(max_failures=--max-restarts). When a worker fails, Ray Train
    ends the worker group and starts a new one (new actors, a new process group) at the same size; the new
    workers resume from the latest checkpoint, which rank 0 writes every C steps.

    A join is Train V2's elastic worker count: the trainer runs with ScalingConfig(num_workers=(N, N + 1)) on a
    local runtime with the CPUs of N workers only, and the joining "worker" is a new Ray node with one worker's
    CPUs (`ray start --address` to the run's runtime). Ray Train's elastic policy sees the room, every
    --ray-resize-interval seconds, and restarts the worker group at N + 1, resuming from the checkpoint."""

    def problem(self, scenario, world_size, options=None, hosts=None):
        if scenario.joins and (options or {}).get("ray_address"):
            return (
                "a Ray join adds a node to the run's own runtime; with --ray-address the cluster is another's: "
                "drop --ray-address (or add a node to your cluster yourself)"
            )
        return None

    def launch(self, spec, fault, rank_command, run_id, run_dir):
        # a local runtime turns token authentication on unless RAY_AUTH_MODE says otherwise, but `ray start
        # --address` turns it on only when told: the joining node is told what the runtime does
        extra = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")} if fault.joining else {}
        # the driver's trainer takes --max-restarts failures, and in a join grows when a node joins
        command = [
            *RayLauncher().command(spec, rank_command, run_id),
            "--max-failures",
            str(fault.max_restarts),
            *(["--join"] if fault.joining else []),
        ]
        return command, extra, {}

    def nccl_env(self, spec, fault):
        # the driver's local runtime, and so its workers, inherit it; Ray Train sets the same value when unset
        return torch_nccl_fault_env(spec)

    def join(self, spec, fault, rank_command, run_id, run_dir, info):
        address, ray = times_of(run_dir).get("gcs_address"), ray_program()
        if not address or not ray:
            raise RuntimeError(
                "the run's Ray runtime has not said its address; nothing to join"
                if ray
                else f"the `ray` command was not found; {SETUP_HINT}"
            )
        return [
            ray,
            "start",
            f"--address={address}",
            f"--num-cpus={spec.threads}",
            f"--num-gpus={1 if spec.device == 'cuda' else 0}",
            "--block",
            "--disable-usage-stats",
            f"--object-store-memory={JOINER_OBJECT_STORE_BYTES}",
        ]
