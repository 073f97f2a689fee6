"""The scaling model's inputs, read from stored runs on one host (bench.projection.model.Inputs), each kept with the
runs it came from. Runs across hosts are never read here: they are what the model is checked against
(bench.projection.validate).

For a case (workload, per-worker batch, threads, device) and a backend:
- compute: the plain loop's step at one worker (each launch's mean over its windows; launches are the unit), split
  as its profiled warm-up measured (the median shares over its launches); the spread of its windows within a launch
  is a worker's step spread (stragglers);
- overhead_one: the backend's own step at one worker beyond that compute;
- the backend's communication: the alpha-beta fit of its communication sweep on one host (each launch's fit);
- slowdown and overhead, from its runs at the most workers one host ran (2 on this machine): the backward pass they
  profiled against the plain loop's gives the compute the overlapping communication added, per second of the
  communication the replay puts inside the backward pass; what each launch measured beyond the replay is the
  per-step overhead."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np

from bench.core.errors import UsageError
from bench.core.registry import PLAIN_LOOP, get_backend
from bench.projection.clusters import Cluster, Link
from bench.projection.model import Inputs, Shape, Value, step_parts


@dataclass(frozen=True)
class Case:
    workload: str
    batch: int
    threads: int
    device: str


def gives(record, what: str) -> bool:
    """Whether `record`'s task gives the model this kind of input (bench.tasks.base.Task.model_input)."""
    return record.task.model_input == what


def one_host(records: list) -> list:
    """The ok runs made on one host: what the model may be fitted on."""
    return [r for r in records if r.ok and not r.spec.hosts and r.spec.scheduler in (None, "none")]


def _train(records, backend: str, case: Case, world: int | None = None) -> list:
    return [
        r
        for r in records
        if gives(r, "step")
        and r.spec.backend == backend
        and r.spec.workload == case.workload
        and r.spec.batch_size == case.batch
        and r.spec.threads == case.threads
        and r.spec.device == case.device
        and (world is None or r.spec.world_size == world)
        and r.metrics is not None
    ]


def _ids(records) -> tuple[str, ...]:
    return tuple(r.run_id for r in records)


def cases_in(records: list) -> list[Case]:
    """Every case the plain loop ran at one worker on one host, with a profile."""
    found = {
        Case(r.spec.workload, r.spec.batch_size, r.spec.threads, r.spec.device)
        for r in one_host(records)
        if gives(r, "step")
        and r.spec.backend == PLAIN_LOOP
        and r.spec.world_size == 1
        and r.metrics is not None
        and r.metrics.profile
    }
    return sorted(found, key=lambda c: (c.workload, c.device, c.batch, c.threads))


def measured_link(records: list, inputs: Inputs, rate: str, delay: str | None = None) -> tuple[Link, tuple] | None:
    """The link at `rate` as the backend's own allreduce across 2 hosts met it (its communication sweep there, one
    worker per host): the time of each message of LINK_FIT_BYTES or more, regressed on the bytes the exchange puts on
    a host's link (a straight line: its slope is 1 / bandwidth, its intercept the fixed cost of a collective there,
    spread over the exchange's latency steps), so bandwidth and latency_s are the link's as this backend's traffic
    finds it, its own processing, TCP's and the shaper's losses included (the model then takes a collective's time
    as the larger of that and the processing alone: bench.projection.model.collective_cost). Small messages are left
    out: at one world size their fixed cost cannot be split into per-step latency and per-call overhead, and in a
    fit with them that split decides the slope. None when no such sweep is stored. Training runs across hosts are
    never read."""
    sweeps = [
        r
        for r in records
        if r.ok
        and gives(r, "collective")
        and r.spec.backend == inputs.backend
        and r.spec.hosts
        and len(r.spec.hosts) == 2
        and r.spec.world_size == 2
        and r.spec.link
        and r.spec.link["rate"] == rate
        and r.spec.link.get("delay") == delay
        and r.metrics is not None
    ]
    if not sweeps:
        return None
    plugin = get_backend(inputs.backend)
    steps, wire, spent = [], [], []
    for r in sweeps:
        for row in r.metrics.rows:
            if row.op != "allreduce" or row.time_us <= 0:
                continue
            exchange = plugin.exchanges(float(row.size), 2, 2, "cpu", r.spec.backend_options)[0]
            if row.size < LINK_FIT_BYTES:
                continue
            steps.append(exchange.steps)
            wire.append(exchange.link_bytes)
            spent.append(row.time_us * 1e-6)
    if len(set(wire)) < 2:
        return None
    per_byte, fixed = np.polyfit(np.array(wire), np.array(spent), 1)
    if per_byte <= 0:
        return None
    return Link(float(1.0 / per_byte), max(0.0, float(fixed)) / max(steps)), _ids(sweeps)


LINK_FIT_BYTES = 2**20  # the smallest message a link fit takes (measured_link)


def this_host(device: str, workers: int) -> Cluster:
    return Cluster("one host", "the measured host", device, max(1, workers), 1, None)


def median_shape(records: list) -> Shape:
    shapes = [Shape.of_profile(r.metrics.profile, r.run_id) for r in records if r.metrics.profile]
    if not shapes:
        raise UsageError(
            "the plain loop's runs have no profile (they were stored by an older bench): run "
            "`bench sweep --world-sizes 1,2` again to measure the model's inputs"
        )
    last = shapes[-1]
    return Shape(
        statistics.median(s.forward for s in shapes),
        statistics.median(s.backward for s in shapes),
        statistics.median(s.optimizer for s in shapes),
        tuple(
            (statistics.median(s.grads[i][0] for s in shapes if len(s.grads) == len(last.grads)), b)
            for i, (_, b) in enumerate(last.grads)
        ),
        last.run,
    )


def step_spread(plain: list) -> Value:
    """The spread of ln(a worker's step) (bench.projection.model, STRAGGLERS): each launch's standard deviation of
    ln(window time) over its windows, over the launches that have 2 or more (docs/studies/spread.md: what varies
    between windows is slower than a step, so a window's spread is a step's)."""
    spreads = [
        float(np.std(np.log(r.metrics.window_times_s), ddof=1))
        for r in plain
        if len(r.metrics.window_times_s or ()) > 1 and min(r.metrics.window_times_s) > 0
    ]
    return Value.of(spreads, _ids(plain)) if spreads else Value(0.0)


def fit(records: list, backend: str, case: Case) -> Inputs:
    """The inputs of `backend` for `case`, from the one-host runs among `records`; a one-line error naming the runs
    to make when some are missing."""
    problem = get_backend(backend).projection_problem()
    if problem:
        raise UsageError(f"the scaling model does not project {backend}: {problem}")
    runs = one_host(records)
    plain = _train(runs, PLAIN_LOOP, case, 1)
    where = f"{case.workload} at batch {case.batch}, {case.threads} thread(s), {case.device}"
    if not plain:
        raise UsageError(
            f"no plain-loop run at 1 worker for {where} in the store: the model starts from it; run "
            f"`bench sweep --workload {case.workload} --world-sizes 1,2` (it runs the plain loop)"
        )
    compute = Value.of([r.metrics.step_time_s.mean for r in plain], _ids(plain))
    jitter = step_spread(plain)
    shape = median_shape(plain)
    get_backend(backend)  # an unknown backend is refused here, before anything is read
    own_one = _train(runs, backend, case, 1)
    multi = [r for r in _train(runs, backend, case) if r.spec.world_size > 1]
    if not multi:
        raise UsageError(
            f"no {backend} run at 2 or more workers on one host for {where}: run `bench sweep "
            f"--backend {backend} --workload {case.workload} --world-sizes 1,2`"
        )
    world = max(r.spec.world_size for r in multi)
    multi = [r for r in multi if r.spec.world_size == world]
    options = multi[-1].spec.backend_options
    comm = [
        r
        for r in runs
        if gives(r, "collective")
        and r.spec.backend == backend
        and r.spec.world_size == world
        and r.spec.device == case.device
        and r.metrics is not None
        and r.metrics.fit
    ]
    if not comm:
        raise UsageError(
            f"no {backend} communication sweep at {world} workers on one host ({case.device}) with an "
            f"alpha-beta fit: run `bench allreduce --backend {backend} --nproc {world}` (or a sweep "
            "without --no-comm)"
        )
    alpha = Value.of([r.metrics.fit["alpha_s"] for r in comm], _ids(comm))
    beta = Value.of([r.metrics.fit["beta_s_per_byte"] for r in comm], _ids(comm))
    notes = []
    if own_one:
        overhead_one = Value.of([r.metrics.step_time_s.mean for r in own_one], _ids(own_one)).minus(compute)
    else:
        overhead_one = Value(0.0)
        notes.append(f"no {backend} run at 1 worker: its one-worker overhead is taken as 0")
    inputs = Inputs(
        case.workload,
        backend,
        options,
        case.batch,
        case.threads,
        case.device,
        compute,
        shape,
        overhead_one,
        Value(0.0),
        Value(0.0),
        alpha,
        beta,
        world,
        tuple(notes),
        jitter=jitter,
    )
    host = this_host(case.device, world)

    # slowdown: the backward pass each multi-worker launch profiled, against the plain loop's, per second of the
    # communication the replay (at the means, without slowdown) puts inside it (on one host it is all processing)
    base = step_parts(inputs, host, world)[0]
    plain_backward = statistics.median(r.metrics.profile["gradients_s"] for r in plain if r.metrics.profile)
    profiled = [r for r in multi if r.metrics.profile]
    if base.hidden > 0 and profiled:
        slowdown = Value.of(
            [max(0.0, r.metrics.profile["gradients_s"] - plain_backward) / base.hidden for r in profiled],
            _ids(profiled) + _ids(plain),
        )
    else:
        slowdown = Value(0.0, runs=_ids(profiled))
    inputs = replace(inputs, slowdown=slowdown)
    replayed = step_parts(inputs, host, world)[0].step - inputs.overhead.mean
    overhead = Value.of([r.metrics.step_time_s.mean - replayed for r in multi], _ids(multi))
    return replace(inputs, overhead=overhead)


def fit_backends(records: list, backends, case: Case) -> tuple[dict[str, Inputs], dict[str, str]]:
    """The inputs of every backend that can be fitted for `case`, and why each other one cannot."""
    fitted, missing = {}, {}
    for backend in backends:
        try:
            fitted[backend] = fit(records, backend, case)
        except UsageError as exc:
            missing[backend] = str(exc)
    return fitted, missing
