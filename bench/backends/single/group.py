"""single's process group: none to join; the one process is rank 0 of 1. Imported by the run's process only: torch at
the top."""

from __future__ import annotations

import torch

from bench.backends.base import ProcessGroup, rank_row


class NoGroup(ProcessGroup):
    def init(self, spec):
        if spec.device == "cuda":
            torch.cuda.set_device(0)
        return rank_row(
            rank=0, world_size=1, local_rank=0, local_world_size=1, group_rank=0, role_rank=0, restart_count=0
        )


GROUP = NoGroup
