"""A benchmark sweep run end to end: planned (bench.workflows.plan), then every run made through the harness's one
loop (bench.harness.runner.run_specs), under a new sweep id."""

from __future__ import annotations

from bench.core.console import note
from bench.core.registry import PRIMARY
from bench.harness.runner import new_run_id, run_specs
from bench.workflows.plan import SWEEP_FAULTS, available_backends, fault_backends, faults_missing, plan_sweep


def run_benchmark_sweep(store, title: str, *, backends: list[str] | str | None, workloads: list[str], device: str,
              world_sizes: list[int], options: dict, comm: dict | None, with_plain_loop: bool = True,
              repeats: int = 1, references: dict[str, list[str]] | None = None,
              faults: list[str] | None = None, fault_repeats: int = SWEEP_FAULTS["repeats"]) -> tuple[str, list]:
    """Plan a sweep (bench.workflows.plan.plan_sweep) under a new sweep id and run it: (sweep id, records).
    backends None: every compared backend that can run here; "primary": the primary pair's; saying which
    cannot. references: reference backends added to those, each with the only workloads it trains (where it
    can run here). faults: the fault kinds of its elasticity part (None: none), each launched fault_repeats times; said
    when it can make none."""
    if backends is None or backends == "primary":
        backends = available_backends(device, lambda name, why: note(f"bench: skipping {name}: {why}"),
                                      PRIMARY if backends == "primary" else None)
    if references:
        backends = [*backends, *available_backends(device, lambda name, why: note(f"bench: skipping {name}: {why}"),
                                                   [b for b in references if b not in backends])]
    sweep_id = new_run_id()
    plan = plan_sweep(backends, workloads, device, world_sizes, options=options, comm=comm, sweep_id=sweep_id,
                      with_plain_loop=with_plain_loop, repeats=repeats, workloads_of=references, faults=faults,
                      fault_repeats=fault_repeats)
    missing = faults_missing(backends, world_sizes, options.get("cluster")) if faults else None
    if missing:  # after planning: bad input is its one line alone
        note(f"bench: no fault runs: {missing}")
    rounds = f", {repeats} launches of every case in interleaved rounds" if repeats > 1 else \
        ", one launch of every case (a comparison needs two or more a side: --repeats)"
    if faults and not missing:
        rounds += (f"; faults {', '.join(faults)} under {', '.join(fault_backends(backends))} ({workloads[0]}, "
                   f"{min(n for n in world_sizes if n > 1)} workers, {fault_repeats} launch"
                   f"{'es' if fault_repeats > 1 else ''} each)")
    note(f"{title}: {', '.join(backends)} x {', '.join(workloads)} x world sizes "
         f"{', '.join(map(str, world_sizes))}{rounds}")
    records = run_specs(plan, store, f"{title} {sweep_id}")
    results = [r for r in records if not r.ok and r.task.measured(r)]
    if results:  # a backend that did not come through a fault: what the run measured, not a failure of the sweep
        note(f"{title}: {len(results)} run(s) not ok as a result, not a failure (the exit status leaves them out): "
             + "; ".join(f"{r.spec.backend} {r.task.case(r.spec)}: {r.status}" for r in results))
    return sweep_id, records
