"""What the ray backend's driver and Ray Train's set-up time, in the run directory's ray.json: read by the launcher
(its start-up phases, the runtime's address for a joining node) and by the ranks (when their rendezvous began)."""

from __future__ import annotations

import json

from bench.core.rundir import write_json_atomic

TIMES_FILE = "ray.json"  # in the run directory


def times_of(run_dir) -> dict:
    path = run_dir.path / TIMES_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_times(run_dir, **values) -> None:
    """Merge `values` into the run's timing file (the driver and Ray Train's set-up both write there)."""
    write_json_atomic(run_dir.path / TIMES_FILE, {**times_of(run_dir), **values})
