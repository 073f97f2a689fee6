"""Restart from a checkpoint: the worker's state through faults under a launcher that restarts the workers (elastic's
torchrun, Ray Train). Worker side: torch imported at the top."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bench.backends.base import ElasticState, Position
from bench.core.rundir import write_atomic


class CheckpointRestart(ElasticState):
    """Restart-from-checkpoint: every process loads the latest checkpoint when there is one (whatever the launcher's
    restart count says: it stays 0 after a membership change), trains, and rank 0 saves one every C steps, written
    aside and renamed so that a kill never leaves half of one. identity() gives (local rank, restart count, group
    rank) from the environment the launcher set."""

    def __init__(self, model, optimizer, training_model, checkpoint, identity):
        self.plain_model, self.optimizer, self.model = model, optimizer, training_model
        self.checkpoint, self.identity = checkpoint, identity
        self.rank = 0

    def resume(self) -> Position:
        step = 0
        if self.checkpoint.exists():
            saved = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
            self.plain_model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            step = saved["step"]
        self.rank = dist.get_rank()
        return Position(step, self.rank, dist.get_world_size(), *self.identity())

    def commit(self, step, committed, detected) -> None:
        if self.rank != 0:
            return
        state = {"step": step, "model": self.plain_model.state_dict(), "optimizer": self.optimizer.state_dict()}
        # journalled before it becomes visible: a kill in between loses neither
        write_atomic(self.checkpoint, write=lambda tmp: torch.save(state, tmp), before_replace=committed)
