"""The fault scenarios, one entry each (SCENARIOS): the user's word (also its name), the flag that asks for it, what
a record stores of it (its `scenario` and `signal`), its traits, its checks, how the parent delivers it and how it is
said. Everything else reads the entries: the CLI's words, flags and help, the sweep's faults, the spec's checks
(bench.tasks.fault.spec), the driver (bench.tasks.fault.driver), a record's words (bench.tasks.fault, .results), and
the elastic modes, which say from an entry's traits whether they make it (bench.backends.base.ElasticMode.supports),
never from its name. docs/architecture.md, "Adding a fault scenario"."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from bench.backends.base import ElasticMode
from bench.cluster import netcut
from bench.cluster.hosts import json_answer, run_on
from bench.core.console import note
from bench.core.dryrun import planning
from bench.core.errors import UsageError
from bench.core.spec import cuda_device_count

FAULT_FLAG = "--fault"  # the flag whose value is the word, for the scenarios on one machine
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}
DISCOVERY_EVERY_S = 0.5  # how often the cluster's discovery script is run while bench waits for a host to leave it
DISCOVERY_TIMEOUT_S = 5.0  # one run of it at most (horovodrun's own runs of it are bounded too)

Fired = dict[str, Any]  # what the parent did and when, as the run's fault file and its record keep it


def secs(value) -> str:
    return "-" if value is None else f"{value:.2f} s"


def listed(items: Iterable[str], last: str = "and") -> str:
    """'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


@runtime_checkable
class DropsHosts(Protocol):
    """An elastic mode's own work for a host the cluster drops (drop-host's `hook`): `drop_host` takes fault.host out
    of what the launcher's host discovery answers, where bench writes that answer (True: bench then ends the run's
    processes there, as the cluster would), False where the launcher reads the cluster's own discovery, which only the
    cluster changes; `discovered` says which hosts that names now (ValueError saying why where it failed or took
    longer than timeout_s)."""

    def drop_host(self, spec, fault, run_dir, info: dict) -> bool: ...

    def discovered(self, spec, timeout_s: float) -> list[str]: ...


@dataclass(frozen=True)
class FaultRun:
    """What the parent reaches to deliver a fault: the run's spec and folder, its tag (its processes' mark), its elastic
    mode with what that mode's launch said (`info`), and how to start a joining worker."""

    spec: Any
    run_dir: Any
    tag: str
    elastic: ElasticMode | None = None
    info: dict | None = None
    start_joiner: Callable[[], dict] | None = None


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One fault scenario. Its delivery, checks and words are its class's (below); its traits are what the rest of
    the suite and the elastic modes (ElasticMode.supports, .problem) read of it."""

    word: str  # the user's word, and its name
    what: str  # the fault in a few words (the fault words' table, a message that lists the scenarios)
    help: str  # its part of its flag's help
    measure: str  # the scorecard's name of it (bench.tasks.fault.results)
    flag: str = FAULT_FLAG  # the flag that asks for it: --fault WORD, or a flag of its own taking the HOST
    stored: str = ""  # the record's fault.scenario: its word unless given (term and hang are stored as "kill")
    signal: str | None = None  # the signal sent to the rank, which the record keeps (SIGNALS); None: none is
    across_hosts: bool = False  # one of the run's hosts is lost, cut off or dropped (needs --hosts or --hostfile)
    cuts_link: bool = False  # the host's link is cut first (bench.cluster.netcut), and healed when the run ends
    joins: bool = False  # one more worker joins (a scale-up), rather than one lost
    waits_for_cluster: bool = False  # every rank stops at the step until it comes, which the cluster may take long for
    swept: bool = False  # bench sweep --faults takes it
    swept_by_default: bool = False  # a sweep makes it unless --faults says otherwise
    hook: type | None = None  # the protocol of the elastic mode's own work that delivers it (ElasticMode.supports)

    @property
    def scenario(self) -> str:
        return self.stored or self.word

    @property
    def dest(self) -> str:
        """The argparse destination of its own flag."""
        return self.flag.lstrip("-").replace("-", "_")

    def check(self, *, world_size: int, rank: int, device: str, cluster: dict | None, gpus_here: int | None) -> None:
        """A one-line error (UsageError) for what it cannot do in this run; on one machine, after the elastic mode's
        own problem (bench.tasks.fault.spec.build_spec)."""

    def check_hosts(self, placed: list[str], host: str | None) -> None:
        """Across hosts, from the names alone: a one-line error when `host` is no host it can act on, of `placed` (the
        run's hosts with processes on them, in order)."""

    def deliverer(self, run: FaultRun) -> Callable[[dict], Fired | None]:
        """What delivers it in this run, called with what the victim said when it reached the step (pid, rank, step)
        until it answers what it did (None: not yet)."""
        return lambda reached: self.deliver(run, reached)

    def deliver(self, run: FaultRun, reached: dict) -> Fired | None:
        raise NotImplementedError(type(self).__name__)

    def in_words(self, rank: int | None = None, host: str | None = None) -> str:
        """The fault, of a spec or as fired, in a few words."""
        raise NotImplementedError(type(self).__name__)

    def case(self, spec) -> str:
        """The fault of a case (bench.tasks.fault.FaultTask.case), with its world."""
        raise NotImplementedError(type(self).__name__)

    def fired_in_words(self, fired: Fired) -> str:
        """What the parent did, as `bench fault` prints it."""
        raise NotImplementedError(type(self).__name__)


def _workers(spec) -> str:
    return "GPU workers" if spec.device == "cuda" else "workers"


@dataclass(frozen=True, kw_only=True)
class Signalled(Scenario):
    """A signal to one rank (--kill-rank) from outside: it crashes, stops politely, or hangs."""

    stored: str = "kill"

    def check(self, *, world_size, rank, device, cluster, gpus_here):
        if not 0 <= rank < world_size:
            raise UsageError(f"--kill-rank {rank}: the run has ranks 0..{world_size - 1}")

    def deliver(self, run, reached):
        fired_at = time.time()
        try:
            os.kill(reached["pid"], SIGNALS[cast(str, self.signal)])
            delivered = True
        except ProcessLookupError:
            delivered = False
        return {
            "scenario": self.scenario,
            "time": fired_at,
            "signal": self.signal,
            "pid": reached["pid"],
            "rank": reached["rank"],
            "step": reached["step"],
            "delivered": delivered,
        }

    def in_words(self, rank=None, host=None):
        return f"SIG{self.signal} to rank {rank}"

    def case(self, spec):
        return f"SIG{self.signal} to 1 of {spec.world_size} {_workers(spec)}"

    def fired_in_words(self, fired):
        return f"SIG{fired['signal']} to rank {fired['rank']} (pid {fired['pid']}) at step {fired['step']}"


@dataclass(frozen=True, kw_only=True)
class Joining(Scenario):
    """One more worker joins: the elastic mode's second launcher agent, or a new host in its discovery."""

    joins: bool = True

    def check(self, *, world_size, rank, device, cluster, gpus_here):
        if device != "cuda" or cluster is not None or planning():  # a plan's GPUs are as given
            return
        gpus = cuda_device_count() if gpus_here is None else gpus_here
        if world_size + 1 > gpus:
            raise UsageError(
                f"{self.flag} {self.word} on --gpus {world_size}: the joining worker needs a GPU of its own and this "
                f"machine has {gpus}; give --gpus {gpus - 1} or fewer"
                if gpus > 1
                else f"{self.flag} {self.word} needs 2 GPUs (one joins) and this machine has {gpus}; use --nproc for "
                "CPU workers"
            )

    def deliver(self, run, reached):
        fired_at = time.time()
        joiner = cast(Callable[[], dict], run.start_joiner)()
        return {"scenario": self.scenario, "time": fired_at, "step": reached["step"], **joiner}

    def in_words(self, rank=None, host=None):
        return "a worker joins"

    def case(self, spec):
        return f"a worker joins {spec.world_size} running" + (" on GPUs" if spec.device == "cuda" else "")

    def fired_in_words(self, fired):
        return f"a worker joins at step {fired['step']}"


def end_processes(tag: str, host: str) -> dict:
    """SIGKILL every process of the run `tag` on `host` at once, over ssh: when, how many, whether any was."""
    answer = json_answer(run_on(host, [sys.executable, "-m", "bench.harness.supervisor", "kill", tag]))
    if "killed" not in answer:
        return {"time": time.time(), "delivered": False, "why_not": answer["error"]}
    return {"time": answer["time"], "killed": len(answer["killed"]), "delivered": bool(answer["killed"])}


@dataclass(frozen=True, kw_only=True)
class HostFault(Scenario):
    """One of the run's hosts, not the first (it holds the rendezvous: torchrun's c10d store, horovodrun itself), is
    lost, cut off or dropped; rank 0 says when the step is reached and goes on."""

    across_hosts: bool = True
    happens: str  # what becomes of the host, in the case's words: lost, cut off, dropped by the cluster
    said: str  # the fault in a few words, with {host}

    def check_hosts(self, placed, host):
        if len(placed) < 2:
            raise UsageError(
                f"{self.flag} needs processes on 2 hosts or more (the survivors go on without one); give more "
                "hosts or a larger --nproc"
            )
        if host not in placed:
            raise UsageError(f"{self.flag} {host}: the run's processes are on {', '.join(placed)}; name one of them")
        if host == placed[0]:
            raise UsageError(
                f"{self.flag} {host}: the first host holds the run's rendezvous (torchrun's c10d store, "
                f"horovodrun itself), without which no survivor can go on; choose another host"
            )

    def in_words(self, rank=None, host=None):
        return self.said.format(host=host)

    def case(self, spec):
        return f"1 of {len(spec.hosts)} hosts {self.happens} ({spec.world_size} workers)"


@dataclass(frozen=True, kw_only=True)
class HostCut(HostFault):
    """The host cut off from the others (nft, bench.cluster.netcut) and, for a node loss (`ends_processes`), every
    process of the run there SIGKILLed after the cut, so that nothing they send as they end reaches the others."""

    cuts_link: bool = True
    ends_processes: bool = False

    def deliver(self, run, reached):
        host = run.spec.fault.host
        done = netcut.cut([h["name"] for h in run.spec.hosts], host, sys.executable)
        out = {"time": done["time"], "cut_took_s": done["took_s"], "delivered": not done["errors"]}
        if done["errors"]:
            out["why_not"] = "; ".join(f"{h}: {why}" for h, why in done["errors"].items())
        if self.ends_processes:
            ended = end_processes(run.tag, host)
            if "killed" in ended:
                out.update(time=ended["time"], killed=ended["killed"])
                out["delivered"] = out["delivered"] and ended["delivered"]
            else:
                out.update(delivered=False, why_not=ended["why_not"])
        return {"scenario": self.scenario, "host": host, "rank": reached["rank"], "step": reached["step"], **out}

    def fired_in_words(self, fired):
        killed = f", {fired['killed']} process(es) killed there" if fired.get("killed") is not None else ""
        return (
            f"{self.in_words(host=fired['host'])} at step {fired['step']} (the cut took "
            f"{secs(fired.get('cut_took_s'))}{killed})"
        )


@dataclass(frozen=True, kw_only=True)
class HostDropped(HostFault):
    """The cluster drops the host (as an MPIJob's operator removes a worker pod): it leaves the launcher's host
    discovery and the run's processes there end, through the elastic mode's own work (DropsHosts)."""

    hook: type | None = DropsHosts
    waits_for_cluster: bool = True

    def deliverer(self, run):
        return Dropping(self, run)

    def fired_in_words(self, fired):
        how = (
            f"by bench, {fired['killed']} process(es) killed there"
            if fired.get("dropped_by") == "bench" and fired.get("killed") is not None
            else f"by the cluster, seen {secs(fired.get('waited_s'))} after the step"
            if fired.get("dropped_by") == "cluster"
            else f"by {fired.get('dropped_by')}"
        )
        return f"{self.in_words(host=fired['host'])} at step {fired['step']} ({how})"


class Dropping:
    """A host dropped, in one run: where bench answers for the launcher's host discovery, the host taken out of it and
    every process of the run there ended at once (as a cluster deletes a node's pods): the fault's time is the kill's.
    Where the cluster's script answers, bench changes nothing: it runs that script (at most every DISCOVERY_EVERY_S,
    each run bounded) until the host has left its answer, the fault's time; still named after --recovery-timeout, the
    fault is not delivered."""

    def __init__(self, scenario: HostDropped, run: FaultRun):
        self.scenario, self.run = scenario, run
        self.mode = cast(DropsHosts, run.elastic)
        self.waiting_since: float | None = None  # since when the cluster's script is watched
        self.next_check = 0.0
        self.discovery_error: str | None = None

    def __call__(self, reached: dict) -> Fired | None:
        run, f = self.run, self.run.spec.fault
        base = {"scenario": self.scenario.scenario, "host": f.host, "rank": reached["rank"], "step": reached["step"]}
        if self.waiting_since is None:
            dropped_at = time.time()
            if self.mode.drop_host(run.spec, f, run.run_dir, run.info or {}):
                return {**base, "dropped_by": "bench", "dropped_at": dropped_at, **end_processes(run.tag, f.host)}
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
            timeout_s = min(DISCOVERY_TIMEOUT_S, max(0.1, f.recovery_timeout - waited))
            named = f.host in self.mode.discovered(run.spec, timeout_s)
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


# ---------------------------------------------------------------- the registry
KILL = Signalled(
    word="kill",
    signal="KILL",
    what="a worker killed (SIGKILL: a crash from outside)",
    help="SIGKILL: a crash",
    measure="recovery from a killed worker",
    swept=True,
    swept_by_default=True,
)
TERM = Signalled(
    word="term",
    signal="TERM",
    what="a worker asked to stop (SIGTERM)",
    help="SIGTERM: a polite stop",
    measure="recovery from a terminated worker",
)
HANG = Signalled(
    word="hang",
    signal="STOP",
    what="a hung worker: alive, holding its sockets, answering nothing (SIGSTOP from outside; with --inject the rank "
    "blocks)",
    help="SIGSTOP: a hung worker",
    measure="recovery from a hung worker",
    swept=True,
    swept_by_default=True,
)
JOIN = Joining(
    word="join",
    what="one more worker joining (scale-up)",
    help="scale-up instead, one more worker joins at --at-step (a second launcher agent, or a new host)",
    measure="a joining worker",
    swept=True,
)
KILL_HOST = HostCut(
    word="kill-host",
    flag="--kill-host",
    what="a node loss",
    help="across hosts (--hosts): lose this host at --at-step, as a machine that loses power: its link is cut, then "
    "every process of the run there is SIGKILLed at once",
    measure="recovery from a lost host",
    happens="lost",
    said="host {host} lost (cut off, then every process there SIGKILLed)",
    ends_processes=True,
)
PARTITION_HOST = HostCut(
    word="partition-host",
    flag="--partition-host",
    what="its link cut",
    help="across hosts (--hosts): cut this host's link to the others at --at-step (its processes live on, cut off); "
    "bench itself keeps its path to the host",
    measure="recovery from a cut-off host",
    happens="cut off",
    said="host {host} cut off the network",
)
DROP_HOST = HostDropped(
    word="drop-host",
    flag="--drop-host",
    what="the cluster drops it",
    help="across hosts (--hosts; Horovod's elastic mode): the cluster drops this host at --at-step, as an MPIJob's "
    "operator removes a worker pod: it leaves the launcher's host discovery and every process of the run there ends "
    "(bench does both with its own discovery script; with --hvd-discovery-script the cluster must, within "
    "--recovery-timeout)",
    measure="recovery from a host the cluster dropped",
    happens="dropped by the cluster",
    said="host {host} dropped from the discovery script",
)

SCENARIOS: dict[str, Scenario] = {s.word: s for s in (KILL, TERM, HANG, JOIN, KILL_HOST, PARTITION_HOST, DROP_HOST)}
ON_ONE_MACHINE = tuple(s for s in SCENARIOS.values() if s.flag == FAULT_FLAG)  # --fault WORD
ACROSS_HOSTS = tuple(s for s in SCENARIOS.values() if s.across_hosts)  # each its own flag, taking HOST
SWEPT = tuple(s.word for s in SCENARIOS.values() if s.swept)
SWEPT_BY_DEFAULT = tuple(s.word for s in SCENARIOS.values() if s.swept_by_default)


def stored_as(scenario: str, signal_name: str | None = None) -> Scenario | None:
    """The entry a record's fault (its stored scenario and signal) is of; None for a scenario no entry stores."""
    for s in SCENARIOS.values():
        if s.scenario == scenario and s.signal in (None, signal_name):
            return s
    return None


def scenario_of(fault) -> Scenario:
    """The entry of a spec's fault (bench.tasks.fault.settings.FaultSettings)."""
    found = stored_as(fault.scenario, fault.signal)
    if found is None:
        raise ValueError(f"no fault scenario is stored as {fault.scenario!r} with signal {fault.signal!r}")
    return found


def made_by(elastic: ElasticMode) -> list[str]:
    """The stored scenarios an elastic mode makes, once each, in the registry's order."""
    return list(dict.fromkeys(s.scenario for s in SCENARIOS.values() if elastic.supports(s)))
