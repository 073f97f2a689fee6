"""single's launcher: none, the rank command itself."""

from __future__ import annotations

from bench.backends.base import Launcher
from bench.cluster.fanout import fanout_command


class DirectLauncher(Launcher):
    """The rank command itself: one process, started by the supervisor."""

    def command(self, spec, rank_command, run_id):
        if spec.hosts:  # the first host, as every backend's rank 0 is placed
            return fanout_command([(spec.hosts[0]["name"], list(rank_command))])
        return list(rank_command)

    def rank_identity(self, env):
        return 0, 0
