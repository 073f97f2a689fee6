"""A benchmark sweep run end to end: planned (bench.workflows.plan), then every run made through the harness's one
loop (bench.harness.runner.run_specs), under a new sweep id. The store keeps the sweep's plan and state from its
start (bench.results.sweeps): running, then complete once every planned launch has run, or interrupted when it
stops before (a signal, a launch refused after waiting for cores, an error); `resume_sweep` runs the planned
launches an interrupted sweep did not, under its id, and marks it complete."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable

from bench.core.console import note
from bench.core.environment import git_state
from bench.core.errors import BenchError, Interrupted, UsageError
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY
from bench.harness.runner import new_run_id, run_specs
from bench.harness.supervisor import signals_held
from bench.results.sweeps import (
    COMPLETE,
    INTERRUPTED,
    RUNNING,
    missing_launches,
    owner_alive,
    plan_of,
    plan_text,
    ran,
    sequential_of,
    sweep_status,
    this_process,
)
from bench.tasks.fault.results import RUNS_TO_DECIDE, follow_ups
from bench.workflows.plan import (
    SWEEP_FAULTS,
    available_backends,
    fault_backends,
    fault_limits,
    faults_missing,
    plan_sweep,
)
from bench.workflows.sequential import resolve

# Called with what has just ended ("round 1 of 3 (15 of 44 launches)") at the end of each round of launches,
# the page's chance to show what the sweep has found so far (bench.cli.sweep.LookPages); None: nothing to show.
OnLook = Callable[[str], None] | None


def benchmark_sweep_plan(
    sweep_id: str | None,
    *,
    backends: list[str] | str | None,
    workloads: list[str],
    device: str,
    world_sizes: list[int],
    options: dict,
    comm: dict | None,
    with_plain_loop: bool = True,
    repeats: int = 1,
    extra_cases: dict[str, list[str]] | None = None,
    faults: list[str] | None = None,
    fault_repeats: int = SWEEP_FAULTS["repeats"],
    fault_timeouts: dict[str, float | None] | None = None,
) -> tuple[list, str]:
    """A sweep's launches (bench.workflows.plan.plan_sweep) and its description, nothing stored (what `bench sweep
    --dry-run` shows). backends None: every compared backend that can run here; "primary": the primary pair's; saying
    which cannot. extra_cases: companion backends added to those, each with the only workloads it trains (where it
    can run here). faults: the fault kinds of its elasticity part (None: none), each launched fault_repeats times; said
    when it can make none; fault_timeouts: their comm_timeout and recovery_timeout, where not SWEEP_FAULTS'."""
    if backends is None or backends == "primary":
        backends = available_backends(
            device, lambda name, why: note(f"bench: skipping {name}: {why}"), PRIMARY if backends == "primary" else None
        )
    if extra_cases:
        backends = [
            *backends,
            *available_backends(
                device,
                lambda name, why: note(f"bench: skipping {name}: {why}"),
                [b for b in extra_cases if b not in backends],
            ),
        ]
    plan = plan_sweep(
        backends,
        workloads,
        device,
        world_sizes,
        options=options,
        comm=comm,
        sweep_id=sweep_id,
        with_plain_loop=with_plain_loop,
        repeats=repeats,
        workloads_of=extra_cases,
        faults=faults,
        fault_repeats=fault_repeats,
        fault_timeouts=fault_timeouts,
    )
    missing = faults_missing(backends, world_sizes, options.get("cluster")) if faults else None
    if missing:  # after planning: bad input is its one line alone
        note(f"bench: no fault runs: {missing}")
    rounds = (
        f", {repeats} launches of every case in interleaved rounds"
        if repeats > 1
        else ", one launch of every case (a comparison needs two or more a side: --repeats)"
    )
    if faults and not missing:
        timeouts = fault_limits(fault_timeouts)
        rounds += (
            f"; faults {', '.join(faults)} under {', '.join(fault_backends(backends))} ({workloads[0]}, "
            f"{min(n for n in world_sizes if n > 1)} workers, {fault_repeats} launch"
            f"{'es' if fault_repeats > 1 else ''} each"
            # the rounds settle_faults adds: from two a side on, up to RUNS_TO_DECIDE where not yet decided
            + (
                f", then one more a side at a time until decided, up to {RUNS_TO_DECIDE}"
                if 1 < fault_repeats < RUNS_TO_DECIDE and set(PRIMARY) <= set(fault_backends(backends))
                else ""
            )
            + f"; a stopped peer noticed after {timeouts['comm_timeout']:g} s, "
            f"hung with no step {timeouts['recovery_timeout']:g} s after the fault)"
        )
    description = (
        f"{', '.join(backends)} x {', '.join(workloads)} x world sizes {', '.join(map(str, world_sizes))}{rounds}"
    )
    return plan, description


def run_benchmark_sweep(
    store,
    title: str,
    *,
    backends: list[str] | str | None,
    workloads: list[str],
    device: str,
    world_sizes: list[int],
    options: dict,
    comm: dict | None,
    with_plain_loop: bool = True,
    repeats: int = 1,
    extra_cases: dict[str, list[str]] | None = None,
    faults: list[str] | None = None,
    fault_repeats: int = SWEEP_FAULTS["repeats"],
    fault_timeouts: dict[str, float | None] | None = None,
    sequential: dict | None = None,
    on_look: OnLook = None,
    before_launches: Callable[[], None] | None = None,
) -> tuple[str, list]:
    """Plan a sweep (benchmark_sweep_plan) under a new sweep id and run it: (sweep id, records). sequential: the
    resolution (a fraction) and timeout_s of a sweep that adds rounds until it is sure (bench.workflows.sequential),
    None for the planned launches only. on_look: called at the end of each round of launches (OnLook).
    before_launches: called once the plan and the store are checked, before the first launch."""
    sweep_id = new_run_id()
    plan, description = benchmark_sweep_plan(
        sweep_id,
        backends=backends,
        workloads=workloads,
        device=device,
        world_sizes=world_sizes,
        options=options,
        comm=comm,
        with_plain_loop=with_plain_loop,
        repeats=repeats,
        extra_cases=extra_cases,
        faults=faults,
        fault_repeats=fault_repeats,
        fault_timeouts=fault_timeouts,
    )
    note(f"{title}: {description}")
    store.check_writable()  # before the sweep's row makes the store: a store that cannot take its runs says so first
    if before_launches is not None:
        before_launches()
    now = time.time()
    store.begin_sweep(
        {
            "sweep_id": sweep_id,
            "created_at": now,
            "updated_at": now,
            "state": RUNNING,
            "title": title,
            "description": description,
            "planned": len(plan),
            "owner": json.dumps(this_process()),
            "why": None,
            "plan": plan_text(plan, git_state(), sequential),
        }
    )
    records = run_marked(store, sweep_id, plan, f"{title} {sweep_id}", len(plan), 0, on_look)
    records += follow_up(store, sweep_id, plan, records, f"{title} {sweep_id}", sequential, on_look)
    say_measured(title, records)
    return sweep_id, records


def follow_up(
    store, sweep_id: str, plan: list, records: list, title: str, sequential: dict | None, on_look: OnLook = None
) -> list:
    """What a sweep adds once its planned launches have run: the fault cases' launches until decided (settle_faults),
    then, for a sequential sweep, its rounds until it is sure (bench.workflows.sequential.resolve). Returns the
    records made."""
    more = settle_faults(store, sweep_id, plan, records, title, sequential, on_look)
    if sequential:
        stored = plan_of(store.sweeps(sweep_id)[0])[0]  # with the fault cases' launches, if any were added
        runner = functools.partial(run_marked, on_look=on_look)
        more += resolve(store, sweep_id, stored, records + more, title, sequential, runner)
    return more


def settle_faults(
    store, sweep_id: str, plan: list, records: list, title: str, sequential: dict | None = None, on_look: OnLook = None
) -> list:
    """Once a sweep has run all its planned launches: rounds of one more launch a side of each fault case its runs
    leave undecided (bench.tasks.fault.results.follow_ups, by the rule the page's answer reads), until every case is
    decided or has RUNS_TO_DECIDE runs a side; each round added to the sweep's stored plan before it runs, so that
    `--resume` knows it. The planned two a side stay: a case decided by them costs nothing more. Returns the records
    made."""
    made: list = []
    while True:
        done = records + made
        if len(ran(done)) < len(plan) or any(r.status == RunStatus.INTERRUPTED for r in done):
            return made
        more = follow_ups(done, plan)
        if not more:
            return made
        cases = len({(spec.task, spec.fault) for spec in more})
        note(
            f"{title}: {cases} fault case(s) not yet decided: one more launch a side, up to {RUNS_TO_DECIDE} a side "
            "or until decided"
        )
        store.update_sweep(
            sweep_id,
            state=RUNNING,
            planned=len(plan) + len(more),
            plan=plan_text(plan + more, git_state(), sequential),
            updated_at=time.time(),
        )
        made += run_marked(store, sweep_id, more, f"{title} (to decide)", len(plan) + len(more), len(plan), on_look)
        plan = plan + more


def say_measured(title: str, records: list) -> None:
    """The runs not ok whose status is what they measured, said in one line."""
    results = [r for r in records if not r.ok and r.task.measured(r)]
    if results:  # a backend that did not come through a fault: what the run measured, not a failure of the sweep
        note(
            f"{title}: {len(results)} run(s) not ok as a result, not a failure (the exit status leaves them out): "
            + "; ".join(f"{r.spec.backend} {r.task.case(r.spec)}: {r.status}" for r in results)
        )


def round_ends(specs: list) -> dict[int, str]:
    """Where a round of `specs` ends (the launches of one repeat index, bench.workflows.plan.plan_sweep's rounds): the
    number of launches run by then -> the round in words ("round 1 of 3")."""
    repeats = [spec.repeat or 0 for spec in specs]
    ends = [i for i in range(1, len(specs) + 1) if i == len(specs) or repeats[i] != repeats[i - 1]]
    return {end: f"round {k} of {len(ends)}" for k, end in enumerate(ends, 1)}


def run_marked(
    store, sweep_id: str, specs: list, title: str, planned: int, ran_before: int, on_look: OnLook = None
) -> list:
    """run_specs, then the sweep marked complete when every one of `specs` ran (none interrupted), else interrupted;
    also when something ends it before (a signal, an error), which then goes on up. `planned`: its planned launches,
    `ran_before` of them ran before these (said when it is interrupted). on_look: called after each round of `specs`
    that ran to its end. Returns the records made."""
    made: list = []  # the records so far, should something end run_specs before it returns them
    ends = round_ends(specs)

    def on_record(record) -> None:
        made.append(record)
        if on_look is not None and len(made) in ends and record.status != RunStatus.INTERRUPTED:
            on_look(f"{ends[len(made)]} ({ran_before + len(made)} of {planned} launches)")

    try:
        records = run_specs(specs, store, title, on_record=on_record)
    except BaseException as exc:
        interrupted(store, sweep_id, stopped_by(exc), ran_before + len(ran(made)), planned)
        raise
    cut = [r for r in records if r.status == RunStatus.INTERRUPTED]
    if len(records) == len(specs) and not cut:
        mark(store, sweep_id, COMPLETE, None)
    else:
        why = (
            f"{cut[-1].error.message if cut[-1].error else 'interrupted'}, during a launch"
            if cut
            else "stopped after a launch (the job's time limit)"
        )
        interrupted(store, sweep_id, why, ran_before + len(ran(records)), planned)
    return records


def interrupted(store, sweep_id: str, why: str, done: int, planned: int) -> None:
    mark(store, sweep_id, INTERRUPTED, why)
    note(
        f"bench: sweep {sweep_id} interrupted ({why}) after {done} of its {planned} planned launches; `bench sweep "
        f"--resume {sweep_id} --store {store.path}` runs the other {planned - done}"
    )


def stopped_by(exc: BaseException) -> str:
    """Why a sweep stopped, in a few words, from what ended it."""
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return "Ctrl-C or SIGTERM"
    if isinstance(exc, BenchError):  # its first clause: a refusal goes on to say what to do
        return " ".join(str(exc).split()).split("; ")[0]
    return f"an error: {type(exc).__name__}"


def mark(store, sweep_id: str, state: str, why: str | None) -> None:
    """Set a sweep's state, a second signal held off meanwhile; a store that cannot take it is said, not raised (its
    row then says running, and once this process is gone it reads as interrupted)."""
    with signals_held():
        try:
            store.update_sweep(sweep_id, state=state, why=why, updated_at=time.time())
        except BenchError as exc:
            note(f"bench: sweep {sweep_id} could not be marked {state} in {store.path}: {exc}")


# ---------------------------------------------------------------- resuming an interrupted sweep
def sweep_to_resume(store, sweep_id: str | None) -> dict:
    """The row of the sweep to resume: `sweep_id`'s, else the latest interrupted one of the store; a one-line
    UsageError where there is none, or where it is complete or still running. Reads only."""
    rows = store.sweeps(sweep_id)
    if sweep_id is not None:
        if not rows:
            known = {r.spec.sweep_id for r in store.sweep_records(sweep_id)}
            raise UsageError(
                f"sweep {sweep_id} was made by a bench that kept no plan of it, so it cannot be resumed"
                if known
                else f"no sweep {sweep_id} in {store.path}; --resume without an id takes its latest interrupted sweep"
            )
        row = rows[0]
    else:
        if not rows:
            raise UsageError(f"no sweep to resume in {store.path}: it holds no sweep's plan")
        states = {row["sweep_id"]: sweep_status(row, []).state for row in rows}
        cut = [row for row in rows if states[row["sweep_id"]] == INTERRUPTED]
        if not cut:
            latest = rows[-1]
            raise UsageError(
                f"no interrupted sweep to resume in {store.path}: its latest, {latest['sweep_id']}, is "
                f"{states[latest['sweep_id']]}"
            )
        row = cut[-1]
    refuse_unless_interrupted(row, row["sweep_id"], store)
    return row


def refuse_unless_interrupted(row: dict | None, sweep_id: str, store) -> None:
    """A one-line UsageError unless the sweep's row says interrupted (or running, by a process that is gone)."""
    if row is None:
        raise UsageError(f"sweep {sweep_id} is no longer in {store.path}")
    state = sweep_status(row, []).state
    if state == COMPLETE:
        raise UsageError(f"sweep {row['sweep_id']} is complete: nothing to resume; `bench sweep` starts a new one")
    if state == RUNNING:
        owner = json.loads(row["owner"] or "{}")
        alive = "still runs it" if owner_alive(owner) else "runs it on another host (it cannot be checked from here)"
        raise UsageError(
            f"sweep {row['sweep_id']} is running: bench process {owner.get('pid')} on {owner.get('host')} "
            f"{alive}; resume it once that process has ended"
        )


def resume_sweep(store, sweep_id: str | None, on_look: OnLook = None) -> tuple[str, list]:
    """Run the planned launches of an interrupted sweep (`sweep_id`, else the store's latest interrupted one) that did
    not run, under its id, then mark it complete (interrupted again, if it stops before). Returns (its id, the records
    of its launches that ran: those stored before and those made now)."""
    row = sweep_to_resume(store, sweep_id)
    sweep_id, title = row["sweep_id"], row["title"]
    specs, code = plan_of(row)
    if code and code != git_state():
        raise UsageError(
            f"sweep {sweep_id} was planned with the code at commit {code.get('commit')}"
            f"{' with changes' if code.get('dirty') else ''}, and this checkout differs: launches made "
            "now would not be pooled with its earlier ones (the page pools launches of the same code "
            "only); resume it from that code, or start a new sweep"
        )
    before = store.sweep_records(sweep_id)
    left = missing_launches(specs, before)
    store.check_writable()
    # taken in one transaction: of two resumes at once, the second finds it running
    store.update_sweep(
        sweep_id,
        lambda now: refuse_unless_interrupted(now, sweep_id, store),
        state=RUNNING,
        why=None,
        owner=json.dumps(this_process()),
        updated_at=time.time(),
    )
    done = len(specs) - len(left)
    note(
        f"{title}: resuming sweep {sweep_id} ({row['description']}): {done} of its {len(specs)} planned launches ran; "
        + (f"running the {len(left)} left" if left else "none is left to run")
    )
    if not left:
        mark(store, sweep_id, COMPLETE, None)
        sequential = sequential_of(row)
        if not sequential:
            return sweep_id, ran(before)
        runner = functools.partial(run_marked, on_look=on_look)
        made = resolve(store, sweep_id, specs, ran(before), f"{title} {sweep_id}", sequential, runner)
        return sweep_id, ran(before) + made
    made = run_marked(store, sweep_id, left, f"{title} {sweep_id} (resumed)", len(specs), done, on_look)
    made += follow_up(store, sweep_id, specs, ran(before) + made, f"{title} {sweep_id}", sequential_of(row), on_look)
    say_measured(title, made)
    return sweep_id, ran(before) + made
