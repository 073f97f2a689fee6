"""Run one RunSpec end to end: run directory, launch (the task's), supervision, record, store."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

from bench.aggregate import build_record
from bench.backends import get_backend
from bench.environment import PROJECT_ROOT, fingerprint
from bench.records import RunRecord
from bench.rundir import RunDir
from bench.spec import RunSpec
from bench.store import Store
from bench.supervisor import TAG_VARIABLE, supervise
from bench.tasks import get_task


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


def execute(spec: RunSpec, store: Store, show_progress: bool = True) -> RunRecord:
    """Launch, supervise and record one run; the record is stored whatever the ending."""
    run_id = new_run_id()
    run_dir = RunDir(store.run_dir(run_id)).create()
    run_dir.spec_file.write_text(json.dumps(spec.to_dict(), indent=1))  # never changed after this
    backend, task = get_backend(spec.backend), get_task(spec.task)
    rank_command = [sys.executable, "-m", "bench.guard", str(run_dir.path), spec.backend]
    env = {**worker_environment(spec, tag=run_id), **backend.launcher.env(spec)}
    launch = task.launch(spec, backend, rank_command, run_id, run_dir, env, show_progress)
    env.update(launch.env)
    environment = fingerprint(env)
    before = task.before_launch(spec)
    outcome = supervise(launch.command, env, run_dir.launcher_log, spec.timeout, on_poll=launch.watcher,
                        poll_interval=launch.poll_interval)
    record = build_record(run_id, spec, run_dir, outcome, environment, launch.command,
                          task.conclude(spec, run_dir, outcome, before), launch.info)
    store.save(record)
    return record
