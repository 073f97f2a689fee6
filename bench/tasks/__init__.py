"""Task registry: what kind of run a spec is (`spec.task`) -> the plug-in that owns it.

A task owns its spec fields and their validation, what each process runs, an optional parent-side
watcher, how its record's status and metrics are computed, and its terminal and report views
(bench.tasks.base.Task). Nothing outside this package tests which task a run is: adding one is a new
module here plus a line below.
"""

from __future__ import annotations

import importlib

from bench.errors import UsageError

TASK_MODULES = {
    "train": "bench.tasks.train",  # the measured training loop
    "comm": "bench.tasks.comm",  # a communication sweep in nccl-tests' conventions
    "fault": "bench.tasks.fault",  # training through an injected fault under a backend's elastic mode
    "converge": "bench.tasks.converge",  # time to a held-out accuracy on a real data set
}


def get_task(name: str):
    if name not in TASK_MODULES:
        raise UsageError(f"unknown task {name!r}; this bench knows {', '.join(TASK_MODULES)}")
    return importlib.import_module(TASK_MODULES[name]).TASK


def all_tasks() -> list:
    return [get_task(name) for name in TASK_MODULES]
