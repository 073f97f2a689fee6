"""A fault run's own settings, as its spec holds them (RunSpec.fault), and what the elastic mode reads of them."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.spec import TaskSettings
from bench.tasks.fault.scenarios import scenario_of


@dataclass(frozen=True, kw_only=True)
class FaultSettings(TaskSettings):
    """The fault (an entry of bench.tasks.fault.scenarios, stored as its `scenario` and `signal`): a signal to one
    rank (kill), one more worker (join), a host lost, cut off or dropped by the cluster, at step at_step of
    total_steps, with a commit every checkpoint_every steps and the elastic mode allowed max_restarts restarts;
    collectives time out after comm_timeout seconds, and a run with no step within recovery_timeout seconds of the
    fault is hung. A backend's elastic mode is given these (bench.backends.base.ElasticMode.launch) and reads
    `joining`, `max_restarts`, `recovery_timeout` and `host`."""

    scenario: str
    rank: int  # the rank signalled (kill); 0 otherwise
    host: str | None = None  # the host lost, cut off or dropped; runs recorded before host faults have no such key
    at_step: int
    signal: str | None  # kill: KILL, TERM or STOP (bench.tasks.fault.scenarios.SIGNALS); None otherwise
    max_restarts: int
    checkpoint_every: int
    total_steps: int
    comm_timeout: float
    recovery_timeout: float

    @property
    def collective_timeout(self) -> float:
        return self.comm_timeout  # short, so that a stopped peer is noticed (RunSpec.collective_timeout)

    @property
    def join_timeout(self) -> float:
        return self.recovery_timeout  # a group formed again after the fault: until the run would be called hung

    @property
    def joining(self) -> bool:
        """Whether the fault is one more worker joining (a scale-up) rather than one lost."""
        return scenario_of(self).joins

    @property
    def kind(self) -> str:
        """The fault in a word: its scenario's (kill, hang, term, join, kill-host, ...)."""
        return scenario_of(self).word
