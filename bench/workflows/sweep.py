"""A benchmark sweep run end to end: planned (bench.workflows.plan), then every run made through the harness's one
loop (bench.harness.runner.run_specs), under a new sweep id."""

from __future__ import annotations

from bench.core.console import note
from bench.core.registry import PRIMARY
from bench.harness.runner import new_run_id, run_specs
from bench.workflows.plan import available_backends, plan_sweep


def run_benchmark_sweep(store, title: str, *, backends: list[str] | str | None, workloads: list[str], device: str,
              world_sizes: list[int], options: dict, comm: dict | None, with_plain_loop: bool = True,
              repeats: int = 1, references: dict[str, list[str]] | None = None) -> tuple[str, list]:
    """Plan a sweep (bench.workflows.plan.plan_sweep) under a new sweep id and run it: (sweep id, records).
    backends None: every compared backend that can run here; "primary": the primary pair's; saying which
    cannot. references: reference backends added to those, each with the only workloads it trains (where it
    can run here)."""
    if backends is None or backends == "primary":
        backends = available_backends(device, lambda name, why: note(f"bench: skipping {name}: {why}"),
                                      PRIMARY if backends == "primary" else None)
    if references:
        backends = [*backends, *available_backends(device, lambda name, why: note(f"bench: skipping {name}: {why}"),
                                                   [b for b in references if b not in backends])]
    sweep_id = new_run_id()
    plan = plan_sweep(backends, workloads, device, world_sizes, options=options, comm=comm, sweep_id=sweep_id,
                      with_plain_loop=with_plain_loop, repeats=repeats, workloads_of=references)
    rounds = f", {repeats} launches of every case in interleaved rounds" if repeats > 1 else \
        ", one launch of every case (a comparison needs two or more a side: --repeats)"
    note(f"{title}: {', '.join(backends)} x {', '.join(workloads)} x world sizes "
         f"{', '.join(map(str, world_sizes))}{rounds}")
    return sweep_id, run_specs(plan, store, f"{title} {sweep_id}")
