"""single: the plain one-process training loop, no launcher and no wrapper.

The reference every backend's scaling is also measured against (docs/method.md, "Scaling": efficiency
against the plain single-process loop), and the harness's own overhead check.
"""

from __future__ import annotations

from bench.backends.base import Backend, Launcher, ProcessGroup, rank_row
from bench.cluster.fanout import fanout_command


class DirectLauncher(Launcher):
    """The rank command itself: one process, started by the supervisor."""

    def command(self, spec, rank_command, run_id):
        if spec.hosts:  # the first host, as every backend's rank 0 is placed

            return fanout_command([(spec.hosts[0]["name"], list(rank_command))])
        return list(rank_command)

    def rank_identity(self, env):
        return 0, 0


class NoGroup(ProcessGroup):
    def init(self, spec):
        if spec.device == "cuda":
            import torch

            torch.cuda.set_device(0)
        return rank_row(rank=0, world_size=1, local_rank=0, local_world_size=1, group_rank=0, role_rank=0,
                        restart_count=0)


class SingleBackend(Backend):
    name = "single"
    summary = "one process, no distributed wrapper (the plain loop the others are measured against)"
    max_world_size = 1
    launcher = DirectLauncher()
    group_type = NoGroup


BACKEND = SingleBackend()
