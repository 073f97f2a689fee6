"""A fault run's own settings, as its spec holds them (RunSpec.fault), and what the elastic mode reads of them."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.spec import TaskSettings


@dataclass(frozen=True, kw_only=True)
class FaultSettings(TaskSettings):
    """The fault (bench.tasks.fault.spec.SCENARIOS): a signal to one rank (kill), one more worker (join), a host lost,
    cut off or dropped by the cluster (kill-host, partition-host, drop-host), at step at_step of total_steps, with a
    commit every checkpoint_every steps and the elastic mode allowed max_restarts restarts; collectives time out after
    comm_timeout seconds, and a run with no step within recovery_timeout seconds of the fault is hung. A backend's
    elastic mode is given these (bench.backends.base.ElasticMode.launch) and reads `joining`, `max_restarts`,
    `recovery_timeout` and `host`."""

    scenario: str
    rank: int  # the rank signalled (kill); 0 otherwise
    host: str | None = None  # the host lost, cut off or dropped; runs recorded before host faults have no such key
    at_step: int
    signal: str | None  # kill: KILL, TERM or STOP (bench.tasks.fault.spec.SIGNALS); None otherwise
    max_restarts: int
    checkpoint_every: int
    total_steps: int
    comm_timeout: float
    recovery_timeout: float

    @property
    def collective_timeout(self) -> float:
        return self.comm_timeout  # short, so that a stopped peer is noticed (RunSpec.collective_timeout)

    @property
    def joining(self) -> bool:
        """Whether the fault is one more worker joining (a scale-up) rather than one lost."""
        return self.scenario == "join"

    @property
    def kind(self) -> str:
        """The fault in a word (bench.tasks.fault.spec.FAULT_KINDS' names; a polite stop is `term`, a host lost or
        cut off its scenario's name)."""
        if self.scenario == "kill":
            return {"KILL": "kill", "STOP": "hang", "TERM": "term"}[self.signal]
        return self.scenario
