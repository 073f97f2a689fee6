"""The parent side of a fault run: the driver the supervisor polls, which has the fault delivered when the victim is
at its step (by the scenario's entry: a signal, a joining worker, a host cut off, lost or dropped) and watches for a
hang."""

from __future__ import annotations

import time

from bench.core.rundir import write_json_atomic
from bench.tasks.fault.analysis import recovered
from bench.tasks.fault.scenarios import FaultRun, scenario_of

HANG_CHECK_EVERY_S = 0.5


# ---------------------------------------------------------------- parent side
class FaultDriver:
    """Polled by the supervisor: has the fault delivered when the victim is at its step (Scenario.deliverer), then
    watches for a hang. `elastic` is the run's elastic mode and `info` what its launch said, for a scenario delivered
    by work of the mode's own (drop-host's)."""

    def __init__(self, spec, run_dir, start_joiner, tag: str, elastic=None, info: dict | None = None):
        self.spec, self.run_dir, self.tag = spec, run_dir, tag
        run = FaultRun(spec, run_dir, tag, elastic=elastic, info=info, start_joiner=start_joiner)
        self.deliver = scenario_of(spec.fault).deliverer(run)
        self.fired_at: float | None = None
        self.next_check = 0.0
        self.recovered = False
        self.reached: dict | None = None  # what the victim said when it reached the fault step

    def __call__(self) -> str | None:
        run_dir = self.run_dir
        if self.fired_at is None:
            if self.reached is None and run_dir.fault_reached.exists():
                self.reached = run_dir.read_json(run_dir.fault_reached)
            if self.reached is None:
                return None
            fired = self.deliver(self.reached)
            if fired is None:  # not yet (a host the cluster has still to drop)
                return None
            self.fired_at = fired["time"]
            write_json_atomic(run_dir.fault_fired, fired)
            return None
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + HANG_CHECK_EVERY_S
        if self.recovered or time.time() - self.fired_at <= self.spec.fault.recovery_timeout:
            return None
        self.recovered = recovered(self.run_dir.journal_lines(), self.fired_at) is not None
        return None if self.recovered else "hung"
