"""The parent side of a fault run: the driver the supervisor polls, which injects the fault when the victim is at
its step (a signal, a joining worker, a host cut off or lost) and watches for a hang."""

from __future__ import annotations

import os
import time

from bench.cluster import netcut
from bench.cluster.hosts import json_answer, run_on
from bench.core.rundir import write_json_atomic
from bench.tasks.fault.analysis import recovered
from bench.tasks.fault.spec import HOST_SCENARIOS, SIGNALS

HANG_CHECK_EVERY_S = 0.5


# ---------------------------------------------------------------- parent side
class FaultDriver:
    """Polled by the supervisor: injects the fault when the victim is at its step, then watches for a hang."""

    def __init__(self, spec, run_dir, start_joiner, tag: str):
        self.spec, self.run_dir, self.tag = spec, run_dir, tag
        self.start_joiner = start_joiner  # callable -> a description of what was started (join scenario)
        self.fired_at: float | None = None
        self.next_check = 0.0
        self.joiner = None
        self.recovered = False

    def lose_host(self, host: str, kill: bool) -> dict:
        """Cut `host` off from the others and, for a node loss, SIGKILL every process of the run there (after the
        cut, so that nothing they send as they end reaches the others): when that was done, and how."""
        import sys

        hosts = [h["name"] for h in self.spec.hosts]
        done = netcut.cut(hosts, host, sys.executable)
        out = {"time": done["time"], "cut_took_s": done["took_s"], "delivered": not done["errors"]}
        if done["errors"]:
            out["why_not"] = "; ".join(f"{h}: {why}" for h, why in done["errors"].items())
        if kill:
            answer = json_answer(run_on(host, [sys.executable, "-m", "bench.harness.supervisor", "kill", self.tag]))
            if "killed" in answer:
                out.update(time=answer["time"], killed=len(answer["killed"]))
                out["delivered"] = out["delivered"] and bool(answer["killed"])
            else:
                out.update(delivered=False, why_not=answer["error"])
        return out

    def __call__(self) -> str | None:
        run_dir = self.run_dir
        if self.fired_at is None:
            reached = run_dir.read_json(run_dir.fault_reached) if run_dir.fault_reached.exists() else None
            if reached is None:
                return None
            f = self.spec.fault
            if f.scenario == "kill":
                self.fired_at = time.time()
                try:
                    os.kill(reached["pid"], SIGNALS[f.signal])
                    delivered = True
                except ProcessLookupError:
                    delivered = False
                fired = {
                    "scenario": "kill",
                    "time": self.fired_at,
                    "signal": f.signal,
                    "pid": reached["pid"],
                    "rank": reached["rank"],
                    "step": reached["step"],
                    "delivered": delivered,
                }
            elif f.scenario in HOST_SCENARIOS:
                fired = {
                    "scenario": f.scenario,
                    "host": f.host,
                    "rank": reached["rank"],
                    "step": reached["step"],
                    **self.lose_host(f.host, f.scenario == "kill-host"),
                }
                self.fired_at = fired["time"]
            else:
                self.fired_at = time.time()
                self.joiner = self.start_joiner()
                fired = {"scenario": "join", "time": self.fired_at, "step": reached["step"], **self.joiner}
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
