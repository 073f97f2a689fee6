"""fault: training through an injected fault (or a joining worker) under a backend's elastic mode
(`bench fault`; docs/method.md, "Fault recovery").

A fault run trains for a fixed number of steps under the backend's elastic mode (the backend's
ElasticMode: its launcher in elastic mode, and the worker's loop that restarts, restores and commits).
Each worker process appends one journal line per event (start, resumed, step, commit, detected,
reset) with its wall-clock time. The victim announces that it reached the fault step and waits; the
parent (FaultDriver, polled by the supervisor) then signals it from outside, or for a scale-up starts
the joining worker. Across hosts, rank 0 announces the step and the parent cuts one host off the network
(bench.cluster.netcut) and, for a node loss, SIGKILLs every process of the run there at once; rank 0 then goes on. Every figure is computed afterwards from the journals and what the launcher
itself reported (ElasticMode.observations):
- detection: signal (or cut, or node loss) -> the first sign that the system noticed (the launcher's own report, or a
  survivor's collective failing);
- recovery: signal -> the first training step completed after the run resumed;
- steps redone: the step the victim had reached - the step the run resumed from;
- world size before and after, restarts or resets, rank map before and after.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from dataclasses import dataclass, field

from bench.cluster import netcut
from bench.cluster.hosts import json_answer, run_on
from bench.cluster.netcut import check, heal
from bench.core.codec import Record, decode
from bench.core.errors import UsageError
from bench.core.hostlist import Host, placement
from bench.core.records import RankRow, RunError, v1_rank_row
from bench.core.registry import elastic_backends, get_backend
from bench.core.rundir import tail, write_json_atomic
from bench.harness.supervisor import launch
from bench.rank.entry import Joined
from bench.rank.model import build_model, save_params, workload_of
from bench.tasks.base import Conclusion, Launch, Task
from bench.tasks.train import build_spec as build_training_spec

SCENARIOS = ("kill", "join", "kill-host", "partition-host")
HOST_SCENARIOS = ("kill-host", "partition-host")  # across hosts: a node lost, or cut off the network
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}
# `bench fault`'s defaults; --at-step and --checkpoint-every default to multiples of the workload's window
FAULT_DEFAULTS = dict(kill_rank=1, signal="KILL", max_restarts=3, comm_timeout=10.0, recovery_timeout=90.0)
AT_STEP_WINDOWS = 4.5  # the fault comes between two checkpoints
CHECKPOINT_WINDOWS = 2
VICTIM_WAIT_S = 30.0  # how long the victim waits for its signal before going on without it
HANG_CHECK_EVERY_S = 0.5
TIMELINE_BINS = 80
MIN_BIN_S = 0.05


@dataclass
class FaultMetrics(Record):
    """What a fault run measured (docs/method.md, "Fault recovery"). Times in seconds from the fault."""
    scenario: str  # SCENARIOS
    signal: str | None
    at_step: int
    total_steps: int
    checkpoint_every: int
    max_restarts: int
    steps_completed: int
    timeline: dict  # samples/s over time: t0, bin_s, t, samples_per_s
    fault: dict | None  # what the parent did and when (None: never injected)
    agent_events: list[dict] = field(default_factory=list)  # the launcher's own events, if it reports any
    resume_checks: list[dict] = field(default_factory=list)
    commits: int = 0
    rendezvous: list[dict] = field(default_factory=list)
    world_before: int | None = None
    ended_after_fault_s: float | None = None
    rank_map_before: list[RankRow] | None = None
    step_at_fault: int | None = None
    detection_s: float | None = None
    detected_by: str | None = None
    resets: int | None = None
    restarts: int | None = None
    recovery_s: float | None = None
    resumed_from_step: int | None = None
    world_after: int | None = None
    rank_map_after: list[RankRow] | None = None
    steps_redone: int | None = None
    join_contributes_s: float | None = None
    hang_observed_s: float | None = None


def build_spec(*, backend: str, workload: str, world_size: int, scenario: str, rank: int, at_step: int | None,
               signal_name: str, max_restarts: int, checkpoint_every: int | None, total_steps: int | None,
               comm_timeout: float, recovery_timeout: float, host: str | None = None, cluster: dict | None = None,
               **options):
    """A RunSpec of task "fault", or a one-line error for what cannot run. Across hosts (`cluster`, as
    bench.cli.common.cluster_of gives it) the scenarios are HOST_SCENARIOS, on `host`."""
    plugin = get_backend(backend)
    try:
        workload, wl, _ = workload_of(workload)
        unknown_workload = None
    except UsageError as exc:
        wl, unknown_workload = None, exc  # refused below, after what the fault itself gets wrong
    if wl is not None:  # defaults in units of the workload's window (about a second of steps)
        window = wl.size("cpu").window_steps
        at_step = int(AT_STEP_WINDOWS * window) if at_step is None else at_step
        checkpoint_every = CHECKPOINT_WINDOWS * window if checkpoint_every is None else checkpoint_every
    if plugin.elastic is None:
        raise UsageError(f"backend {backend} has no elastic mode; bench fault takes "
                         f"{', '.join(elastic_backends())}")
    if scenario not in plugin.elastic.scenarios:
        raise UsageError(f"backend {backend} supports the scenarios {', '.join(plugin.elastic.scenarios)}, "
                         f"not {scenario}")
    if signal_name not in SIGNALS:
        raise UsageError(f"--signal {signal_name!r}: choose one of {', '.join(SIGNALS)}")
    if unknown_workload is not None:
        raise unknown_workload
    if at_step < 1:
        raise UsageError("--at-step must be 1 or more: the fault comes after a completed step")
    if checkpoint_every < 1:
        raise UsageError("--checkpoint-every must be 1 or more")
    if max_restarts < 0:
        raise UsageError("--max-restarts must be 0 or more")
    if not (0 < comm_timeout < float("inf") and 0 < recovery_timeout < float("inf")):
        raise UsageError("--comm-timeout and --recovery-timeout must be positive numbers of seconds")
    total = total_steps if total_steps is not None else at_step + 3 * checkpoint_every
    if total <= at_step:
        raise UsageError(f"--steps {total} must exceed --at-step {at_step}: the run must train after the fault")
    check_scenario_hosts(scenario, cluster["hosts"] if cluster else None, host, world_size)
    if cluster is not None:
        import sys


        placed = [h.name for h, _ in placement([Host(**h) for h in cluster["hosts"]], world_size)]
        problem = check(placed, host, sys.executable)
        if problem:
            raise UsageError(f"{'--kill-host' if scenario == 'kill-host' else '--partition-host'} {host}: {problem}")
    problem = plugin.elastic.problem(scenario, world_size, options.get("backend_options") or {})
    if problem:
        raise UsageError(problem)
    if scenario == "kill" and not 0 <= rank < world_size:
        raise UsageError(f"--kill-rank {rank}: the run has ranks 0..{world_size - 1}")
    if options.get("data", "synthetic") != "synthetic":
        raise UsageError("bench fault trains on synthetic data (each step's batch is found again after a "
                         "restart); drop --data")
    if options.get("cpu_bind") in (None, "auto"):
        # Elastic launches put workers of one machine under several agents (a joiner's, Horovod's localhost and
        # 127.0.0.1), whose local ranks overlap: pinned by local rank, two workers would share a core.
        options["cpu_bind"] = "none"
    spec = build_training_spec(backend=backend, workload=workload, world_size=world_size, device="cpu",
                               cluster=cluster, **options)
    fault = {"scenario": scenario, "rank": rank if scenario == "kill" else 0, "host": host, "at_step": at_step,
             "signal": signal_name if scenario == "kill" else None, "max_restarts": max_restarts,
             "checkpoint_every": checkpoint_every, "total_steps": total, "comm_timeout": comm_timeout,
             "recovery_timeout": recovery_timeout}
    return dataclasses.replace(spec, task="fault", fault=fault, warmup_steps=0, windows=0)


def check_scenario_hosts(scenario: str, hosts: list[dict] | None, host: str | None, world_size: int) -> None:
    """Across hosts the faults are HOST_SCENARIOS, and only there; the host to lose or cut off is one of the run's
    hosts with processes on it, not the first (it holds the run's rendezvous: torchrun's c10d store, horovodrun
    itself). From the names alone, before any host is asked (bench.cluster.netcut.check asks them)."""
    if (scenario in HOST_SCENARIOS) != (hosts is not None):
        raise UsageError("--kill-host and --partition-host need --hosts or --hostfile: they lose or cut off one of "
                         "the run's hosts" if hosts is None else
                         "across hosts, the faults are --kill-host HOST (a node loss) and --partition-host HOST "
                         "(its link cut); --kill-rank and --join run on this machine")
    if hosts is None:
        return
    flag = "--kill-host" if scenario == "kill-host" else "--partition-host"
    placed = [h.name for h, _ in placement([Host(**h) for h in hosts], world_size)]
    if len(placed) < 2:
        raise UsageError(f"{flag} needs processes on 2 hosts or more (the survivors go on without one); give more "
                         "hosts or a larger --nproc")
    if host not in placed:
        raise UsageError(f"{flag} {host}: the run's processes are on {', '.join(placed)}; name one of them")
    if host == placed[0]:
        raise UsageError(f"{flag} {host}: the first host holds the run's rendezvous (torchrun's c10d store, "
                         f"horovodrun itself), without which no survivor can go on; choose another host")



# ---------------------------------------------------------------- worker side
class Journal:
    """One worker process's event log: one JSON line per event, flushed as written (the parent reads it
    while the run goes on, and after any ending)."""

    def __init__(self, path):
        self.fh = open(path, "a", buffering=1)

    def write(self, kind: str, **fields) -> None:
        self.fh.write(json.dumps({"kind": kind, "t": time.time(), **fields}) + "\n")


def wait_for_fault(run_dir, journal: Journal, step: int, rank: int) -> None:
    """The victim at its fault step: say so, then wait for the parent's signal (it normally never returns
    from here: it is killed, terminated or stopped)."""
    write_json_atomic(run_dir.fault_reached, {"pid": os.getpid(), "step": step, "rank": rank, "time": time.time()})
    deadline = time.monotonic() + VICTIM_WAIT_S
    while time.monotonic() < deadline:
        fired = run_dir.read_json(run_dir.fault_fired)
        if fired and fired.get("scenario") != "kill":  # a join, or a host lost or cut: this process goes on
            return
        time.sleep(0.002)
    journal.write("fault_not_delivered", step=step)


def fault_due(run_dir, spec, rank_at_start: int, rank: int, step: int) -> bool:
    """Whether this process must stop at this step for the fault: the chosen rank (the rank it started
    with, and still has), once per run: a replacement that reaches the step again goes on."""
    f = spec.fault
    return (step == f["at_step"] and rank_at_start == f["rank"] == rank
            and not run_dir.fault_fired.exists() and not run_dir.fault_reached.exists())


class FaultContext:
    """What a backend's elastic loop needs from the harness in a fault run: the training step for a
    given step number and rank, the journal, the fault point, and the checksum that proves a resumed
    process holds the committed parameters. The backend owns only restart, restore and commit."""

    def __init__(self, spec, run_dir, journal, info, model, optimizer, device):
        from workloads import get_workload

        self.spec, self.run_dir, self.journal = spec, run_dir, journal
        self.model, self.optimizer, self.device = model, optimizer, device
        self.rank_at_start, self.host = info.rank, info.host
        self.total_steps = spec.fault["total_steps"]
        self.checkpoint_every = spec.fault["checkpoint_every"]
        self.loss_fn = get_workload(spec.workload).make_loss()
        self._batches: dict[int, object] = {}
        self.resumed_at = 0
        self.waiting_since: float | None = None

    def keep_going(self, step: int, size: int) -> bool:
        """Train to total_steps. A scale-up run also goes on until the joined worker has trained
        checkpoint_every steps with the others (or, if it never comes, for --recovery-timeout)."""
        if step < self.total_steps:
            return True
        if self.spec.fault["scenario"] != "join":
            return False
        if size > self.spec.world_size:
            return step < self.resumed_at + self.checkpoint_every
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        return time.monotonic() - self.waiting_since < self.spec.fault["recovery_timeout"]

    def batch(self, step: int, rank: int):
        """The batch of step `step` for rank `rank`: the same after any restart or rank change."""
        from workloads import get_workload
        from workloads.data import SyntheticBatches

        if rank not in self._batches:
            spec = self.spec
            self._batches[rank] = SyntheticBatches(
                batch=spec.batch_size, channels=get_workload(spec.workload).channels, image=spec.image_size,
                classes=spec.num_classes, seed=spec.seed, rank=rank, device=self.device)
        return self._batches[rank].at(step)

    def train_step(self, model, optimizer, step: int, rank: int):
        """Step number `step` (0-based) on this rank, with the fault point before it."""
        if fault_due(self.run_dir, self.spec, self.rank_at_start, rank, step):
            wait_for_fault(self.run_dir, self.journal, step, rank)
        x, y = self.batch(step, rank)
        optimizer.zero_grad()
        loss = self.loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    def checksum(self) -> float:
        import torch

        with torch.no_grad():
            return float(sum(p.detach().double().sum() for p in self.model.parameters()))

    def resumed(self, step: int, rank: int, size: int, local_rank: int, restart_count: int,
                group_rank: int | None = None) -> None:
        self.resumed_at = step
        self.journal.write("resumed", step=step, rank=rank, size=size, local_rank=local_rank, group_rank=group_rank,
                           restart_count=restart_count, pid=os.getpid(), host=self.host, checksum=self.checksum())
        if self.spec.save_params and step > 0:
            save_params(self.model, self.run_dir.resumed_params_file(step, os.getpid()))

    def stepped(self, step: int, rank: int, size: int) -> None:
        self.journal.write("step", step=step, rank=rank, size=size)

    def committed(self, step: int, rank: int) -> None:
        self.journal.write("commit", step=step, rank=rank, checksum=self.checksum())

    def detected(self, rank: int, what: str) -> None:
        """This process noticed a fault (a collective failed, hosts changed)."""
        self.journal.write("detected", rank=rank, what=what)

    def reset(self, rank: int, size: int) -> None:
        """The backend reset this process's group after a membership change."""
        self.journal.write("reset", rank=rank, size=size)


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
            if f["scenario"] == "kill":
                self.fired_at = time.time()
                try:
                    os.kill(reached["pid"], SIGNALS[f["signal"]])
                    delivered = True
                except ProcessLookupError:
                    delivered = False
                fired = {"scenario": "kill", "time": self.fired_at, "signal": f["signal"], "pid": reached["pid"],
                         "rank": reached["rank"], "step": reached["step"], "delivered": delivered}
            elif f["scenario"] in HOST_SCENARIOS:
                fired = {"scenario": f["scenario"], "host": f["host"], "rank": reached["rank"], "step": reached["step"],
                         **self.lose_host(f["host"], f["scenario"] == "kill-host")}
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
        if self.recovered or time.time() - self.fired_at <= self.spec.fault["recovery_timeout"]:
            return None
        self.recovered = recovered(self.run_dir.journal_lines(), self.fired_at) is not None
        return None if self.recovered else "hung"


def recovered(lines: list[dict], fired_at: float) -> dict | None:
    """The first step completed after the run resumed following the fault (None before it has)."""
    resumed = [e for e in lines if e["kind"] == "resumed" and e["t"] > fired_at]
    if not resumed:
        return None
    since = resumed[0]["t"]
    return next((e for e in lines if e["kind"] == "step" and e["t"] > since), None)


def _processes(lines: list[dict]) -> dict[tuple, dict]:
    """Per worker process (file rank, attempt): pid, host, rank and size when it started training, and
    each later (rank, size) it took (Horovod reassigns ranks inside a process)."""
    procs: dict[tuple, dict] = {}
    for e in lines:
        key = (e["file_rank"], e["attempt"])
        if e["kind"] == "resumed":
            p = procs.setdefault(key, {"pid": e.get("pid"), "host": e.get("host"), "file_rank": key[0],
                                       "attempt": key[1], "first_t": e["t"], "ranks": []})
            p["ranks"].append({"t": e["t"], "rank": e["rank"], "size": e["size"], "local_rank": e.get("local_rank"),
                               "group_rank": e.get("group_rank"), "restart_count": e.get("restart_count")})
    return procs


def _rank_map(procs: dict, before: float | None, after: float | None) -> list[dict]:
    """The rank map at a moment: each process's latest (rank, size) taken at or before it."""
    rows = []
    for p in procs.values():
        taken = [r for r in p["ranks"] if (before is None or r["t"] <= before) and (after is None or r["t"] >= after)]
        if not taken:
            continue
        r = taken[-1] if before is not None else taken[0]
        rows.append({"rank": r["rank"], "world_size": r["size"], "pid": p["pid"], "host": p["host"],
                     "local_rank": r["local_rank"], "group_rank": r["group_rank"], "restart_count": r["restart_count"],
                     "attempt": p["attempt"]})
    return sorted(rows, key=lambda r: r["rank"])


def timeline(lines: list[dict], batch: int) -> dict:
    """Samples per second over time, from the steps rank 0 (of the moment) completed, in TIMELINE_BINS
    equal bins (at least MIN_BIN_S wide) from its first step to its last."""
    steps = [e for e in lines if e["kind"] == "step" and e["rank"] == 0]
    if not steps:
        return {"t": [], "samples_per_s": [], "bin_s": None}
    t0 = steps[0]["t"]
    width = max(MIN_BIN_S, (steps[-1]["t"] - t0) / TIMELINE_BINS)
    bins: dict[int, float] = {}
    for e in steps:
        i = int((e["t"] - t0) / width)
        bins[i] = bins.get(i, 0.0) + batch * e["size"]
    last = max(bins)
    return {"t0": t0, "bin_s": width, "t": [i * width for i in range(last + 1)],
            "samples_per_s": [bins.get(i, 0.0) / width for i in range(last + 1)]}


def fault_metrics(spec, run_dir, outcome, observed: dict) -> dict:
    """Everything a fault run measured, from the journals, the parent's fault file and what the launcher
    itself reported (ElasticMode.observations)."""
    lines = run_dir.journal_lines()
    fired = run_dir.read_json(run_dir.fault_fired)
    f = spec.fault
    procs = _processes(lines)
    steps = [e for e in lines if e["kind"] == "step"]
    out = {"scenario": f["scenario"], "signal": f["signal"], "at_step": f["at_step"], "total_steps": f["total_steps"],
           "checkpoint_every": f["checkpoint_every"], "max_restarts": f["max_restarts"],
           "steps_completed": max((e["step"] for e in steps), default=0),
           "timeline": timeline(lines, spec.batch_size), "fault": fired, "agent_events": observed["events"]}
    commits = [e for e in lines if e["kind"] == "commit"]
    resumes = [e for e in lines if e["kind"] == "resumed" and e["step"] > 0]
    committed = {e["step"]: e["checksum"] for e in commits}
    out["resume_checks"] = [{"step": e["step"], "pid": e.get("pid"), "restored_checksum": e["checksum"],
                             "committed_checksum": committed.get(e["step"]),
                             "equal": committed.get(e["step"]) is not None
                             and abs(committed[e["step"]] - e["checksum"]) <= 1e-9 * max(1.0, abs(e["checksum"]))}
                            for e in resumes]
    out["commits"] = len(commits)
    out["rendezvous"] = observed["rendezvous"]
    if fired is None:
        out["world_before"] = max((e["size"] for e in steps), default=None)
        return out
    t = fired["time"]
    out["ended_after_fault_s"] = outcome.ended_at - t
    before_steps = [e for e in steps if e["t"] <= t]
    out["world_before"] = before_steps[-1]["size"] if before_steps else None
    out["rank_map_before"] = _rank_map(procs, before=t, after=None)
    out["step_at_fault"] = max((e["step"] for e in before_steps), default=0)
    detect = _detection(lines, observed["detections"], t)
    out["detection_s"] = detect[0] - t if detect else None
    out["detected_by"] = detect[1] if detect else None
    first = recovered(lines, t)
    resumed_after = [e for e in lines if e["kind"] == "resumed" and e["t"] > t]
    resets_per_process: dict[tuple, int] = {}
    for e in lines:
        if e["kind"] == "reset" and e["t"] > t:
            key = (e["file_rank"], e["attempt"])
            resets_per_process[key] = resets_per_process.get(key, 0) + 1
    out["resets"] = max(resets_per_process.values(), default=0)  # every survivor sees each reset
    out["restarts"] = max((r["restart_count"] or 0 for p in procs.values() for r in p["ranks"]), default=0)
    if first is not None:
        out["recovery_s"] = first["t"] - t
        out["resumed_from_step"] = resumed_after[0]["step"]
        out["world_after"] = first["size"]
        out["rank_map_after"] = _rank_map(procs, before=None, after=resumed_after[0]["t"] - 1e-6)
        # work lost: the furthest step completed before the run resumed, minus the step it resumed from
        reached = max((e["step"] for e in steps if e["t"] < resumed_after[0]["t"]), default=0)
        out["steps_redone"] = reached - out["resumed_from_step"]
        if f["scenario"] == "join":  # until a process started after the join began completes a step
            new_keys = {(p["file_rank"], p["attempt"]) for p in procs.values() if p["first_t"] > t}
            first_new = next((e for e in steps if (e["file_rank"], e["attempt"]) in new_keys and e["t"] > t), None)
            out["join_contributes_s"] = first_new["t"] - t if first_new else None
    else:
        out["recovery_s"] = None
        out["world_after"] = None
        seen = [e["t"] for e in lines if e["kind"] == "detected" and e["t"] > t]
        out["hang_observed_s"] = (min(seen) - t) if seen else (outcome.ended_at - t)
    return out


def _detection(lines: list[dict], launcher_saw: list[tuple[float, str]], t: float) -> tuple[float, str] | None:
    """The first sign after the fault that the system noticed it: the launcher's own report, a worker's
    failing collective, or a reset."""
    candidates = [(when, what) for when, what in launcher_saw if when >= t]
    for e in lines:
        if e["kind"] == "detected" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: {e.get('what', 'collective failed')}"))
        if e["kind"] == "reset" and e["t"] >= t:
            candidates.append((e["t"], f"rank {e.get('rank')}: reset"))
    return min(candidates) if candidates else None


def fault_status(spec, metrics: FaultMetrics, outcome) -> tuple[str, str | None]:
    """ok: trained to the last step after the fault; failed: the launcher gave up (restarts exhausted, too
    few workers); timeout: the deadline, or no step within --recovery-timeout of the fault (a hang)."""
    f = spec.fault
    if outcome.ending == "interrupted":
        return "interrupted", outcome.interruption()
    if outcome.ending == "hung":
        return "timeout", (f"hung: no training step within {f['recovery_timeout']:g} s of the fault"
                           + (f"; the fault was noticed after {metrics.detection_s:.2f} s ({metrics.detected_by})"
                              if metrics.detection_s is not None else "; nothing noticed it"))
    if outcome.ending == "timeout":
        return "timeout", outcome.deadline(spec.timeout)
    if metrics.fault is None:
        return "failed", (f"the launcher exited {outcome.returncode} before the fault was injected "
                          f"(no rank reached step {f['at_step']})")
    if metrics.fault.get("delivered") is False:
        return "failed", "the fault could not be delivered" + (f" ({metrics.fault['why_not']})"
                                                               if metrics.fault.get("why_not") else "")
    if outcome.returncode != 0:
        return "failed", (f"the launcher exited {outcome.returncode} after the fault: it gave up "
                          f"(restarts or resets allowed: {f['max_restarts']}, used {metrics.restarts or metrics.resets})")
    if metrics.recovery_s is None:
        return "failed", "no training step completed after the fault, yet the launcher exited 0"
    if f["scenario"] == "join" and not (metrics.world_after or 0) > (metrics.world_before or 0):
        return "failed", (f"the joining worker never trained with the others (world size stayed "
                          f"{metrics.world_before} for {f['recovery_timeout']:g} s)")
    if metrics.steps_completed < f["total_steps"]:
        return "failed", f"the launcher exited 0 but training stopped at step {metrics.steps_completed} of {f['total_steps']}"
    if any(not c["equal"] for c in metrics.resume_checks):
        return "failed", "a process resumed from parameters that differ from the committed ones"
    return "ok", None


def fault_in_words(fault: dict) -> str:
    """The fault of a spec (or as fired), in a few words."""
    if fault["scenario"] == "kill":
        return f"SIG{fault['signal']} to rank {fault['rank']}"
    if fault["scenario"] == "join":
        return "a worker joins"
    if fault["scenario"] == "kill-host":
        return f"host {fault['host']} lost (cut off, then every process there SIGKILLed)"
    return f"host {fault['host']} cut off the network"


def _secs(value) -> str:
    return "-" if value is None else f"{value:.2f} s"


class FaultTask(Task):
    name = "fault"
    label = "fault injection"
    metrics_type = FaultMetrics
    columns = ("recovery_s", "detection_s")

    # ------------------------------------------------------------ parent side
    def describe(self, spec) -> str:
        f = spec.fault
        what = fault_in_words(f)
        where = f" on {len(spec.hosts)} hosts" if spec.hosts else ""
        return (f"{spec.backend} {spec.workload}, {spec.world_size} workers{where}, {what} at step {f['at_step']} "
                f"of {f['total_steps']}, checkpoint/commit every {f['checkpoint_every']}, up to "
                f"{f['max_restarts']} restarts")

    def launch(self, spec, backend, rank_command, run_id, run_dir, env, show_progress):
        elastic = backend.elastic
        command, extra, info = elastic.launch(spec, rank_command, run_id, run_dir)
        joiner_env = {**env, **extra}

        def start_joiner():
            joiner = elastic.join(spec, rank_command, run_id, run_dir, info)
            if joiner is None:
                return {"joiner": "discovery"}
            return {"joiner_pid": launch(joiner, joiner_env, run_dir.joiner_log).pid, "joiner_command": joiner}

        # the victim waits at its fault step for this poll to signal it
        return Launch(command=command, env=extra, watcher=FaultDriver(spec, run_dir, start_joiner, run_id),
                      poll_interval=0.005, info=info)

    def conclude(self, spec, run_dir, outcome, before):
        """Its status says whether training came through the fault, not whether every process exited
        cleanly (the victim never does). A host cut off is healed first: conclude runs however the run ended
        (by bench, by its lifeline, or by the next command on the store), and healing is stateless."""
        unhealed = {}
        if spec.fault["scenario"] in HOST_SCENARIOS:
            import sys


            unhealed = heal([h["name"] for h in spec.hosts], sys.executable)

        observed = get_backend(spec.backend).elastic.observations(run_dir)
        metrics = decode(FaultMetrics, fault_metrics(spec, run_dir, outcome, observed), "fault metrics")
        status, message = fault_status(spec, metrics, outcome)
        error = None if status == "ok" else RunError(
            message=message, tail=tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown))
        rank_map = [dataclasses.replace(r, phase=phase) for phase, rows in
                    (("before", metrics.rank_map_before), ("after", metrics.rank_map_after)) for r in rows or []]
        events = [{"time": time.time(), "kind": "cut_not_healed", "hosts": unhealed}] if unhealed else []
        if metrics.fault:
            events.append({"time": metrics.fault["time"], "kind": f"fault_{metrics.scenario}",
                           **{k: v for k, v in metrics.fault.items() if k != "time"}})
        return Conclusion(status=status, error=error, metrics=metrics, rank_map=rank_map, events=events)

    # ------------------------------------------------------------ child side
    def run_rank(self, spec, run_dir, file_rank, attempt, t_process_start):
        """The backend's elastic loop over FaultContext's steps."""
        import torch


        journal = Journal(run_dir.journal_file(file_rank, attempt))
        journal.write("start", pid=os.getpid())
        joined = Joined(spec, run_dir, file_rank, attempt, t_process_start)
        model, optimizer = build_model(spec, torch.device("cpu"))
        ctx = FaultContext(spec, run_dir, journal, joined.info, model, optimizer, torch.device("cpu"))
        final_step = get_backend(spec.backend).elastic.train(joined.group, ctx)
        journal.write("finished", step=final_step)
        if spec.save_params:
            save_params(model, run_dir.params_file(file_rank, attempt))
        return joined.result({"steps": final_step, "param_checksum": ctx.checksum()})

    def upgrade(self, from_version, record):
        if from_version == 1 and record.get("metrics") is not None:  # metrics.fault, flattened
            metrics = dict(record["metrics"]["fault"])
            for key in ("rank_map_before", "rank_map_after"):
                if metrics.get(key) is not None:
                    metrics[key] = [v1_rank_row(r) for r in metrics[key]]
            record["metrics"] = metrics
        return record

    # ------------------------------------------------------------ views
    def case(self, spec) -> str:
        f = spec.fault
        if f["scenario"] == "kill":
            what = f"SIG{f['signal']} to 1 of {spec.world_size} workers"
        elif f["scenario"] == "join":
            what = f"a worker joins {spec.world_size} running"
        else:
            what = (f"1 of {len(spec.hosts)} hosts " + ("lost" if f["scenario"] == "kill-host" else "cut off") +
                    f" ({spec.world_size} workers)")
        return f"{spec.workload}: {what}, checkpoint/commit every {f['checkpoint_every']} steps"

    def kind(self, spec) -> str:
        return spec.fault["scenario"]

    def ok_figure(self, record) -> str:
        f = record.metrics
        return f"recovered in {_secs(f.recovery_s)}, world {f.world_before} -> {f.world_after}"

    def list_figure(self, record) -> str:
        f = record.metrics
        return "-" if f is None or f.recovery_s is None else f"recovered in {_secs(f.recovery_s)}"

    def summary_lines(self, record) -> list[str]:
        lines = [f"status: {record.status}"]
        if record.error:
            lines.append(f"error: {record.error.message}")
        f = record.metrics
        fired = f.fault if f else None
        if not fired:
            return lines
        if fired["scenario"] == "kill":
            lines.append(f"fault: SIG{fired['signal']} to rank {fired['rank']} (pid {fired['pid']}) at step {fired['step']}")
        elif fired["scenario"] == "join":
            lines.append(f"fault: a worker joins at step {fired['step']}")
        else:
            killed = f", {fired['killed']} process(es) killed there" if fired.get("killed") is not None else ""
            lines.append(f"fault: {fault_in_words(fired)} at step {fired['step']} (the cut took "
                         f"{_secs(fired.get('cut_took_s'))}{killed})")
        lines.append(f"detection: {_secs(f.detection_s)}" + (f" ({f.detected_by})" if f.detected_by else ""))
        lines.append(f"recovery (signal to first step after it): {_secs(f.recovery_s)}")
        if f.join_contributes_s is not None:
            lines.append(f"new worker's first step: {_secs(f.join_contributes_s)} after the join began")
        if f.hang_observed_s is not None and f.recovery_s is None:
            lines.append(f"hang observed {_secs(f.hang_observed_s)} after the fault; no step since")
        lines.append(f"resumed from step {'-' if f.resumed_from_step is None else f.resumed_from_step}; steps redone "
                     f"{'-' if f.steps_redone is None else f.steps_redone}; trained {f.steps_completed} of {f.total_steps}")
        lines.append(f"world size {f.world_before} -> {f.world_after}; restarts {f.restarts or 0}, "
                     f"resets {f.resets or 0}; the run ended {_secs(f.ended_after_fault_s)} after the fault")
        for r in f.rendezvous:
            lines.append(f"  agent {r['agent_pid']} attempt {r['attempt']}: {r['state'].lower().replace('_', ' ')} "
                         f"{r['duration_ms']:.0f} ms")
        for phase, rows in (("before", f.rank_map_before), ("after", f.rank_map_after)):
            if rows:
                lines.append(f"ranks {phase}: " + ", ".join(f"{r.rank}=pid {r.pid}@{r.host}" for r in rows))
        if f.resume_checks:
            ok = all(c["equal"] for c in f.resume_checks)
            lines.append(f"resumed state {'equals' if ok else 'DIFFERS FROM'} the committed one "
                         f"({len(f.resume_checks)} process(es) checked)")
        return lines

    def frame_columns(self, record) -> dict:
        m = record.metrics
        return {} if m is None else {"recovery_s": m.recovery_s, "detection_s": m.detection_s}


TASK = FaultTask()
