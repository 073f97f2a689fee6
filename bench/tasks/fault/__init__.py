"""fault: training through an injected fault (or a joining worker) under a backend's elastic mode
(`bench fault`; docs/method.md, "Fault recovery").

A fault run trains for a fixed number of steps under the backend's elastic mode (the backend's
ElasticMode: its launcher in elastic mode, and the worker's loop that restarts, restores and commits).
Each worker process appends one journal line per event (start, resumed, step, commit, detected,
reset) with its wall-clock time. The victim announces that it reached the fault step and waits; the
parent (FaultDriver, polled by the supervisor) then signals it from outside, or for a scale-up starts
the joining worker. Across hosts, rank 0 announces the step and the parent cuts one host off the network
(bench.cluster.netcut) and, for a node loss, SIGKILLs every process of the run there at once; for a host the
cluster drops, it takes the host out of the launcher's host discovery and SIGKILLs the run's processes there, or,
where the discovery is the cluster's own, waits for the cluster to drop it; rank 0 then goes on. Every figure is
computed afterwards from the journals and what the launcher itself reported (ElasticMode.observations):
- detection: signal (or cut, or node loss) -> the first sign that the system noticed (the launcher's own report, or a
  survivor's collective failing);
- recovery: signal -> the first training step completed after the run resumed;
- steps redone: the step the victim had reached - the step the run resumed from;
- world size before and after, restarts or resets, rank map before and after.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from bench.backends.shared.nccl import ASYNC_ERROR_HANDLING
from bench.cluster.netcut import heal
from bench.core.codec import Figure, Record, decode
from bench.core.records import RankRow, RunError, RunStatus, v1_rank_row
from bench.core.registry import get_backend
from bench.core.rundir import tail
from bench.harness.supervisor import launch
from bench.tasks.base import Conclusion, Launch, Task
from bench.tasks.fault.analysis import fault_metrics, fault_status
from bench.tasks.fault.driver import FaultDriver
from bench.tasks.fault.scenarios import scenario_of, secs, stored_as
from bench.tasks.fault.settings import FaultSettings


@dataclass
class FaultMetrics(Record):
    """What a fault run measured (docs/method.md, "Fault recovery"). Times in seconds from the fault."""

    scenario: str  # a scenario's stored name (bench.tasks.fault.scenarios)
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
    ended_after_fault_s: Figure | None = None
    rank_map_before: list[RankRow] | None = None
    step_at_fault: int | None = None
    detection_s: Figure | None = None
    detected_by: str | None = None
    resets: int | None = None
    restarts: int | None = None
    recovery_s: Figure | None = None
    resumed_from_step: int | None = None
    world_after: int | None = None
    rank_map_after: list[RankRow] | None = None
    steps_redone: int | None = None
    join_contributes_s: Figure | None = None
    hang_observed_s: Figure | None = None
    diverged: dict | None = None  # the first non-finite parameter checksum: step, rank, value (analysis.diverged)
    # on GPUs, what was in force for NCCL: timeout_s, async_error_handling, env (nccl_in_force); None on CPUs
    nccl: dict | None = None


def nccl_in_force(spec) -> dict | None:
    """What a fault run on GPUs has in force for NCCL: the process group's timeout (the collective timeout, the
    fault's --comm-timeout), torch's async error handling where the backend sets it, and every variable its elastic
    mode sets (ElasticMode.nccl_env); None on CPUs, where gloo carries the collectives."""
    if spec.device != "cuda":
        return None
    env = get_backend(spec.backend).elastic.nccl_env(spec, spec.fault)
    return {"timeout_s": spec.collective_timeout, "async_error_handling": env.get(ASYNC_ERROR_HANDLING), "env": env}


def nccl_in_words(nccl: dict | None) -> str | None:
    """What a GPU fault run had in force for NCCL, in a few words (None on CPUs)."""
    if nccl is None:
        return None
    return ", ".join([f"NCCL timeout {nccl['timeout_s']:g} s", *(f"{k}={v}" for k, v in sorted(nccl["env"].items()))])


class FaultTask(Task):
    name = "fault"
    label = "fault injection"
    metrics_type = FaultMetrics
    settings_type = FaultSettings
    columns = ("recovery_s", "detection_s")

    # ------------------------------------------------------------ parent side
    def describe(self, spec) -> str:
        f = spec.fault
        what = scenario_of(f).in_words(f.rank, f.host)
        where = f" on {len(spec.hosts)} hosts" if spec.hosts else ""
        on_gpus = nccl_in_words(nccl_in_force(spec))
        return (
            f"{spec.backend} {spec.workload}, {spec.world_size} {'GPU workers' if on_gpus else 'workers'}{where}, "
            f"{what} at step {f.at_step} of {f.total_steps}, checkpoint/commit every {f.checkpoint_every}, up to "
            f"{f.max_restarts} restarts" + (f"; {on_gpus}" if on_gpus else "")
        )

    def launch(self, spec, backend, rank_command, run_id, run_dir, env, show_progress):
        elastic = backend.elastic
        command, extra, info = elastic.launch(spec, spec.fault, rank_command, run_id, run_dir)
        extra = {**extra, **elastic.nccl_env(spec, spec.fault)}
        joiner_env = {**env, **extra}

        def start_joiner():
            joiner = elastic.join(spec, spec.fault, rank_command, run_id, run_dir, info)
            if joiner is None:
                return {"joiner": "discovery"}
            return {"joiner_pid": launch(joiner, joiner_env, run_dir.joiner_log).pid, "joiner_command": joiner}

        # the victim waits at its fault step for this poll to signal it
        return Launch(
            command=command,
            env=extra,
            watcher=FaultDriver(spec, run_dir, start_joiner, run_id, elastic=elastic, info=info),
            poll_interval=0.005,
            info=info,
        )

    def conclude(self, spec, run_dir, outcome, before):
        """Its status says whether training came through the fault, not whether every process exited
        cleanly (the victim never does). A host cut off is healed first: conclude runs however the run ended
        (by bench, by its lifeline, or by the next command on the store), and healing is stateless."""
        unhealed = {}
        if scenario_of(spec.fault).cuts_link:
            import sys

            unhealed = heal([h["name"] for h in spec.hosts], sys.executable)

        observed = get_backend(spec.backend).elastic.observations(run_dir)
        metrics = decode(
            FaultMetrics,
            {**fault_metrics(spec, run_dir, outcome, observed), "nccl": nccl_in_force(spec)},
            "fault metrics",
        )
        status, message = fault_status(spec, metrics, outcome)
        where = (
            {"rank": metrics.diverged["rank"], "step": metrics.diverged["step"]} if status == RunStatus.DIVERGED else {}
        )
        error = (
            None
            if status == RunStatus.OK
            else RunError(
                message=message, tail=tail(run_dir.launcher_log, upto=outcome.log_bytes_before_teardown), **where
            )
        )
        rank_map = [
            dataclasses.replace(r, phase=phase)
            for phase, rows in (("before", metrics.rank_map_before), ("after", metrics.rank_map_after))
            for r in rows or []
        ]
        events = [{"time": time.time(), "kind": "cut_not_healed", "hosts": unhealed}] if unhealed else []
        if metrics.fault:
            events.append(
                {
                    "time": metrics.fault["time"],
                    "kind": f"fault_{metrics.scenario}",
                    **{k: v for k, v in metrics.fault.items() if k != "time"},
                }
            )
        return Conclusion(status=status, error=error, metrics=metrics, rank_map=rank_map, events=events)

    def upgrade(self, from_version, record):
        if from_version == 1 and record.get("metrics") is not None:  # metrics.fault, flattened
            metrics = dict(record["metrics"]["fault"])
            for key in ("rank_map_before", "rank_map_after"):
                if metrics.get(key) is not None:
                    metrics[key] = [v1_rank_row(r) for r in metrics[key]]
            record["metrics"] = metrics
        if from_version == 9 and record.get("metrics") is not None:  # v10: what was in force for NCCL
            record["metrics"] = {**record["metrics"], "nccl": None}  # before v10 no fault run ran on GPUs
        return record

    # ------------------------------------------------------------ views
    def case(self, spec) -> str:
        f = spec.fault
        return f"{spec.workload}: {scenario_of(f).case(spec)}, checkpoint/commit every {f.checkpoint_every} steps"

    def kind(self, spec) -> str:
        return spec.fault.kind

    def measured(self, record) -> bool:
        """A fault delivered is measured whether training came through it or not (a hang, the launcher giving up);
        not one never injected or delivered, an interrupted run, parameters gone non-finite or resumed from other
        than the committed ones."""
        f = record.metrics
        if record.ok:
            return True
        return (
            record.status in (RunStatus.TIMEOUT, RunStatus.FAILED)
            and f is not None
            and bool(f.fault)
            and f.fault.get("delivered") is not False
            and not f.diverged
            and all(c["equal"] for c in f.resume_checks)
        )

    def ok_figure(self, record) -> str:
        f = record.metrics
        return f"recovered in {secs(f.recovery_s)}, world {f.world_before} -> {f.world_after}"

    def list_figure(self, record) -> str:
        f = record.metrics
        return "-" if f is None or f.recovery_s is None else f"recovered in {secs(f.recovery_s)}"

    def summary_lines(self, record) -> list[str]:
        lines = [f"status: {record.status}"]
        if record.error:
            lines.append(f"error: {record.error.message}")
        f = record.metrics
        fired = f.fault if f else None
        if not fired:
            return lines
        scenario = stored_as(fired["scenario"], fired.get("signal"))
        if scenario is not None:
            lines.append(f"fault: {scenario.fired_in_words(fired)}")
        if f.nccl is not None:
            lines.append(f"collectives: {nccl_in_words(f.nccl)}")
        lines.append(f"detection: {secs(f.detection_s)}" + (f" ({f.detected_by})" if f.detected_by else ""))
        lines.append(f"recovery (signal to first step after it): {secs(f.recovery_s)}")
        if f.join_contributes_s is not None:
            lines.append(f"new worker's first step: {secs(f.join_contributes_s)} after the join began")
        if f.hang_observed_s is not None and f.recovery_s is None:
            lines.append(f"hang observed {secs(f.hang_observed_s)} after the fault; no step since")
        lines.append(
            f"resumed from step {'-' if f.resumed_from_step is None else f.resumed_from_step}; steps redone "
            f"{'-' if f.steps_redone is None else f.steps_redone}; trained {f.steps_completed} of {f.total_steps}"
        )
        lines.append(
            f"world size {f.world_before} -> {f.world_after}; restarts {f.restarts or 0}, "
            f"resets {f.resets or 0}; the run ended {secs(f.ended_after_fault_s)} after the fault"
        )
        for r in f.rendezvous:
            lines.append(
                f"  agent {r['agent_pid']} attempt {r['attempt']}: {r['state'].lower().replace('_', ' ')} "
                f"{r['duration_ms']:.0f} ms"
            )
        for phase, rows in (("before", f.rank_map_before), ("after", f.rank_map_after)):
            if rows:
                lines.append(f"ranks {phase}: " + ", ".join(f"{r.rank}=pid {r.pid}@{r.host}" for r in rows))
        if f.resume_checks:
            ok = all(c["equal"] for c in f.resume_checks)
            lines.append(
                f"resumed state {'equals' if ok else 'DIFFERS FROM'} the committed one "
                f"({len(f.resume_checks)} process(es) checked)"
            )
        return lines

    def frame_columns(self, record) -> dict:
        m = record.metrics
        return {} if m is None else {"recovery_s": m.recovery_s, "detection_s": m.detection_s}


TASK = FaultTask()
