"""A communication sweep's own settings, as its spec holds them (RunSpec.comm)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.spec import TaskSettings


@dataclass(frozen=True, kw_only=True)
class CommSettings(TaskSettings):
    """What a sweep times: each of `ops` at every size from min_bytes to max_bytes (doubling), of `dtype`, each size
    warmup_iters untimed and iters timed calls (bench.rank.collectives)."""

    ops: list[str]
    dtype: str
    min_bytes: int
    max_bytes: int
    warmup_iters: int
    iters: int
