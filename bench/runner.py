"""Run one RunSpec end to end: run directory, launcher command, supervision, record, store."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

from bench.aggregate import build_record
from bench.backends import get_backend
from bench.comm import attach_ceiling, measure_ceiling
from bench.environment import PROJECT_ROOT, fingerprint
from bench.rundir import RunDir
from bench.spec import RunSpec
from bench.store import Store
from bench.supervisor import TAG_VARIABLE, supervise


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def worker_environment(spec: RunSpec, tag: str) -> dict[str, str]:
    """The environment every rank starts with, whatever the launcher: the harness sets the threads."""
    env = dict(os.environ)
    env.update({
        TAG_VARIABLE: tag,
        "OMP_NUM_THREADS": str(spec.threads),
        "MKL_NUM_THREADS": str(spec.threads),
        "PYTHONUNBUFFERED": "1",
        # the workers import exactly this checkout's harness
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p),
    })
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run never touches a GPU, on any machine
    return env


class ProgressPrinter:
    """Prints a line whenever rank 0 finishes a phase, read from its progress file."""

    def __init__(self, spec: RunSpec, run_dir: RunDir, stream=sys.stderr, prefix: str = "  "):
        self.spec, self.run_dir, self.stream, self.prefix = spec, run_dir, stream, prefix
        self.last = None

    def __call__(self):
        window = self.run_dir.latest("progress").get(0, {}).get("window")
        if window is None or window == self.last:
            return
        self.last = window
        text = "warm-up done" if window == 0 else f"window {window}/{self.spec.windows}"
        print(f"{self.prefix}{text}", file=self.stream, flush=True)


def execute(spec: RunSpec, store: Store, show_progress: bool = True) -> dict:
    """Launch, supervise and record one run; the record is stored whatever the ending."""
    run_id = new_run_id()
    run_dir = RunDir(store.run_dir(run_id)).create()
    run_dir.spec_file.write_text(json.dumps(spec.to_dict(), indent=1))
    backend = get_backend(spec.backend)
    rank_command = [sys.executable, "-m", "bench.guard", str(run_dir.path), spec.backend]
    env = {**worker_environment(spec, tag=run_id), **backend.launch_env(spec)}
    poll_interval = 0.2
    if spec.task == "fault":
        from bench.fault import FaultDriver
        from bench.supervisor import launch

        command, extra = backend.fault_launch(spec, rank_command, run_id, run_dir)
        env.update(extra, BENCH_FAULT_RUN="1")

        def start_joiner():
            joiner = backend.fault_join(spec, rank_command, run_id, run_dir)
            if joiner is None:
                return {"joiner": "discovery"}
            return {"joiner_pid": launch(joiner, env, run_dir.path / "joiner.log").pid, "joiner_command": joiner}

        watcher = FaultDriver(spec, run_dir, start_joiner)
        poll_interval = 0.005  # the victim waits at its fault step for this poll to signal it
    else:
        command = backend.launch_command(spec, rank_command, run_id)
        watcher = ProgressPrinter(spec, run_dir) if show_progress and spec.task == "train" else None
    environment = fingerprint(env)
    # A sweep's ceiling is measured in the parent just before launch: same run, nothing else running.
    ceiling = measure_ceiling(spec.device) if spec.task == "comm" else None
    outcome = supervise(command, env, run_dir.launcher_log, spec.timeout, on_poll=watcher,
                        poll_interval=poll_interval)
    record = build_record(run_id, spec, run_dir, outcome, environment)
    record["command"] = command
    if ceiling is not None:
        attach_ceiling(record, ceiling)
    store.save(record)
    return record
