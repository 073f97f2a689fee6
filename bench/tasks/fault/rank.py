"""What one worker process of a fault run does (bench.rank.entry runs it): it trains the run's steps under the
backend's elastic state (ProcessGroup.elastic_state, an ElasticState: resume, commit), the victim stopping at the
fault step, and appends one journal line per event. Its framework side (model and optimizer, the step of a given
step number and rank, the checksum) is the backend's (ProcessGroup.elastic_training): no framework is imported here.
Loaded only inside a run's processes."""

from __future__ import annotations

import os
import time

from bench.core.codec import dumps
from bench.core.rundir import write_json_atomic
from bench.rank.kit import GroupMember
from bench.tasks.fault.scenarios import scenario_of
from workloads import get_workload

VICTIM_WAIT_S = 30.0  # how long the victim waits for its signal before going on without it


# ---------------------------------------------------------------- worker side
class Journal:
    """One worker process's event log: one JSON line per event (strict JSON: a checksum that is no finite number is
    its word), flushed as written (the parent reads it while the run goes on, and after any ending)."""

    def __init__(self, path):
        self.fh = open(path, "a", buffering=1)

    def write(self, kind: str, **fields) -> None:
        self.fh.write(dumps({"kind": kind, "t": time.time(), **fields}) + "\n")


def victim_wait_s(fault) -> float:
    """How long the victim waits for the parent: where the cluster delivers the fault (a host it drops), as long as
    the parent waits for the cluster (--recovery-timeout) and then some, so that the parent's verdict comes first."""
    return fault.recovery_timeout + VICTIM_WAIT_S if scenario_of(fault).waits_for_cluster else VICTIM_WAIT_S


def wait_for_fault(
    run_dir, journal: Journal, step: int, rank: int, wait_s: float = VICTIM_WAIT_S, signalled: bool = True
) -> None:
    """The victim at its fault step: say so (the first to get there, where every rank waits), then wait for the
    parent's signal (it normally never returns from here: it is killed, terminated or stopped). A fault that is no
    signal to it (`signalled` False: a join, a host lost, cut or dropped) lets it go on once delivered."""
    if not run_dir.fault_reached.exists():
        write_json_atomic(run_dir.fault_reached, {"pid": os.getpid(), "step": step, "rank": rank, "time": time.time()})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        fired = run_dir.read_json(run_dir.fault_fired)
        if fired and not signalled:
            return
        time.sleep(0.002)
    journal.write("fault_not_delivered", step=step)


def fault_due(run_dir, spec, rank_at_start: int, rank: int, step: int) -> bool:
    """Whether this process must stop at this step for the fault: the chosen rank (the rank it started
    with, and still has), once per run: a replacement that reaches the step again goes on. For a host the cluster
    drops, every rank stops there until the drop: the launcher may have put rank 0 on that host (Horovod orders the
    hosts it first discovers as a set), and no survivor may train past the step before the cluster has dropped it."""
    f = spec.fault
    if step != f.at_step or run_dir.fault_fired.exists():
        return False
    if scenario_of(f).waits_for_cluster:
        return True
    return rank_at_start == f.rank == rank and not run_dir.fault_reached.exists()


class FaultContext:
    """A fault run's training as one worker sees it: the training step for a given step number and rank, the
    journal, the fault point, and the checksum that proves a resumed process holds the committed parameters.
    The backend's elastic state owns only restart, restore and commit; `training`, the framework side
    (bench.rank.training.TorchElasticTraining's methods), owns the model, the step and the checksum."""

    def __init__(self, spec, run_dir, journal, info, training):
        self.spec, self.run_dir, self.journal, self.training = spec, run_dir, journal, training
        self.rank_at_start, self.host = info.rank, info.host
        self.rank = info.rank  # the rank it holds now (Horovod reassigns ranks inside a process)
        self.total_steps = spec.fault.total_steps
        self.checkpoint_every = spec.fault.checkpoint_every
        self.resumed_at = 0
        self.waiting_since: float | None = None

    def keep_going(self, step: int, size: int) -> bool:
        """Train to total_steps. A scale-up run also goes on until the joined worker has trained
        checkpoint_every steps with the others (or, if it never comes, for --recovery-timeout)."""
        if step < self.total_steps:
            return True
        if not self.spec.fault.joining:
            return False
        if size > self.spec.world_size:
            return step < self.resumed_at + self.checkpoint_every
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        return time.monotonic() - self.waiting_since < self.spec.fault.recovery_timeout

    def train_step(self, model, optimizer, step: int, rank: int):
        """Step number `step` (0-based) on this rank, on the batch of (step, rank), with the fault point before it."""
        if fault_due(self.run_dir, self.spec, self.rank_at_start, rank, step):
            signalled = scenario_of(self.spec.fault).signal is not None
            wait_for_fault(self.run_dir, self.journal, step, rank, victim_wait_s(self.spec.fault), signalled)
        return self.training.step(model, optimizer, step, rank)

    def checksum(self) -> float:
        return self.training.checksum()

    def resumed(
        self, step: int, rank: int, size: int, local_rank: int, restart_count: int, group_rank: int | None = None
    ) -> None:
        self.resumed_at, self.rank = step, rank
        self.journal.write(
            "resumed",
            step=step,
            rank=rank,
            size=size,
            local_rank=local_rank,
            group_rank=group_rank,
            restart_count=restart_count,
            pid=os.getpid(),
            host=self.host,
            checksum=self.checksum(),
        )
        if self.spec.save_params and step > 0:
            self.training.save_params(self.run_dir.resumed_params_file(step, os.getpid()))

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


def train_through_faults(state, ctx: FaultContext) -> int:
    """Train ctx.total_steps steps (or, for a scale-up, until the joined worker has trained with the others) under
    the backend's elastic state: resume from what it committed, report a step that met a fault, commit every
    ctx.checkpoint_every steps. The backend may run this again after a fault (ElasticState.run). Returns the last
    step trained."""

    def train(state) -> int:
        at = state.resume()
        step, rank, size = at.step, at.rank, at.size
        ctx.resumed(step, rank, size, at.local_rank, at.restart_count, at.group_rank)
        while ctx.keep_going(step, size):
            try:
                ctx.train_step(state.model, state.optimizer, step, rank)
            except state.failures as exc:
                ctx.detected(rank, f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}")  # one line
                raise
            step += 1
            ctx.stepped(step, rank, size)
            if step % ctx.checkpoint_every == 0:
                done = step
                state.commit(
                    done, committed=lambda: ctx.committed(done, rank), detected=lambda what: ctx.detected(rank, what)
                )
        return step

    return state.run(train)


def run_rank(spec, run_dir, file_rank, attempt, t_process_start):
    journal = Journal(run_dir.journal_file(file_rank, attempt))
    journal.write("start", pid=os.getpid())
    member = GroupMember(spec, run_dir, file_rank, attempt, t_process_start)
    training = member.group.elastic_training(spec, get_workload(spec.workload))  # the framework's side
    ctx = FaultContext(spec, run_dir, journal, member.info, training)
    state = member.group.elastic_state(training.model, training.optimizer, run_dir, spec, ctx.reset)
    final_step = train_through_faults(state, ctx)
    checksum = ctx.checksum()
    journal.write("finished", step=final_step, rank=ctx.rank, checksum=checksum)
    if spec.save_params:
        training.save_params(run_dir.params_file(file_rank, attempt))
    return member.result({"steps": final_step, "param_checksum": checksum})
