"""The parent side of a fault run: the driver the supervisor polls, which injects the fault when the victim is at
its step (a signal, a joining worker, a host cut off, lost or dropped) and watches for a hang."""

from __future__ import annotations

import os
import time

from bench.cluster import netcut
from bench.cluster.hosts import json_answer, run_on
from bench.core.console import note
from bench.core.rundir import write_json_atomic
from bench.tasks.fault.analysis import recovered
from bench.tasks.fault.spec import CUT_SCENARIOS, SIGNALS

HANG_CHECK_EVERY_S = 0.5
DISCOVERY_EVERY_S = 0.5  # how often the cluster's discovery script is run while bench waits for a host to leave it
DISCOVERY_TIMEOUT_S = 5.0  # one run of it at most (horovodrun's own runs of it are bounded too)


# ---------------------------------------------------------------- parent side
class FaultDriver:
    """Polled by the supervisor: injects the fault when the victim is at its step, then watches for a hang.
    `drop_host()` and `discovered(timeout_s)` are the elastic mode's (ElasticMode.drop_host, .discovered) for a
    drop-host fault."""

    def __init__(self, spec, run_dir, start_joiner, tag: str, drop_host=None, discovered=None):
        self.spec, self.run_dir, self.tag = spec, run_dir, tag
        self.start_joiner = start_joiner  # callable -> a description of what was started (join scenario)
        self.drop, self.discovered = drop_host, discovered
        self.fired_at: float | None = None
        self.next_check = 0.0
        self.joiner = None
        self.recovered = False
        self.reached: dict | None = None  # what the victim said when it reached the fault step
        self.waiting_since: float | None = None  # drop-host: since when the cluster's script is watched
        self.discovery_error: str | None = None

    def end_processes(self, host: str) -> dict:
        """SIGKILL every process of the run on `host` at once, over ssh: when, how many, whether any was."""
        import sys

        answer = json_answer(run_on(host, [sys.executable, "-m", "bench.harness.supervisor", "kill", self.tag]))
        if "killed" not in answer:
            return {"time": time.time(), "delivered": False, "why_not": answer["error"]}
        return {"time": answer["time"], "killed": len(answer["killed"]), "delivered": bool(answer["killed"])}

    def drop_host(self, reached: dict) -> dict | None:
        """drop-host: where bench answers for the launcher's host discovery, the host taken out of it and every
        process of the run there ended at once (as a cluster deletes a node's pods): the fault's time is the kill's.
        Where the cluster's script answers, bench changes nothing: it runs that script (at most every
        DISCOVERY_EVERY_S, each run bounded) until the host has left its answer, the fault's time; still named after
        --recovery-timeout, the fault is not delivered. None while it waits."""
        f = self.spec.fault
        base = {"scenario": f.scenario, "host": f.host, "rank": reached["rank"], "step": reached["step"]}
        if self.waiting_since is None:
            dropped_at = time.time()
            if self.drop():
                return {**base, "dropped_by": "bench", "dropped_at": dropped_at, **self.end_processes(f.host)}
            self.waiting_since = dropped_at
            note(
                f"bench fault: step {reached['step']} reached; waiting up to {f.recovery_timeout:g} s for the cluster "
                f"to drop {f.host} from the discovery script (in an MPIJob: kubectl delete pod of that worker)"
            )
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + DISCOVERY_EVERY_S
        waited = time.time() - self.waiting_since
        try:
            named = f.host in self.discovered(min(DISCOVERY_TIMEOUT_S, max(0.1, f.recovery_timeout - waited)))
            self.discovery_error = None
        except ValueError as exc:  # an answer being rewritten, say: asked again, and said if it never comes
            named, self.discovery_error = True, str(exc)
        if not named:
            return {**base, "dropped_by": "cluster", "time": time.time(), "waited_s": waited, "delivered": True}
        if waited <= f.recovery_timeout:
            return None
        why = f"the discovery script still names {f.host} {waited:.0f} s after step {reached['step']}: the cluster "
        why += (
            "did not drop it" if self.discovery_error is None else f"did not drop it (last run: {self.discovery_error})"
        )
        return {
            **base,
            "dropped_by": "cluster",
            "time": time.time(),
            "waited_s": waited,
            "delivered": False,
            "why_not": why,
        }

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
            ended = self.end_processes(host)
            if "killed" in ended:
                out.update(time=ended["time"], killed=ended["killed"])
                out["delivered"] = out["delivered"] and ended["delivered"]
            else:
                out.update(delivered=False, why_not=ended["why_not"])
        return out

    def __call__(self) -> str | None:
        run_dir = self.run_dir
        if self.fired_at is None:
            if self.reached is None and run_dir.fault_reached.exists():
                self.reached = run_dir.read_json(run_dir.fault_reached)
            reached = self.reached
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
            elif f.scenario == "drop-host":
                fired = self.drop_host(reached)
                if fired is None:
                    return None
                self.fired_at = fired["time"]
            elif f.scenario in CUT_SCENARIOS:
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
