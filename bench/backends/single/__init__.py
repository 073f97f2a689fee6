"""single: the plain one-process training loop, no launcher and no wrapper.

The baseline every backend's scaling is also measured against (docs/method.md, "Scaling": efficiency
against the plain single-process loop), and the harness's own overhead check.
"""

from __future__ import annotations

from bench.backends.base import Backend, CommSchedule
from bench.backends.single.launcher import DirectLauncher


class SingleBackend(Backend):
    name = "single"
    summary = "one process, no distributed wrapper (the plain loop the others are measured against)"
    launcher = DirectLauncher()
    group = "bench.backends.single.group"
    max_world_size = 1

    def comm_schedule(self, options):
        return CommSchedule("none")  # one process: no gradient to exchange


BACKEND = SingleBackend()
