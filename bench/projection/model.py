"""One training step at N workers, replayed from measured parts (docs/method.md, "Projection").

    step(N) = forward + backward compute (slowed by the communication it overlaps) + exposed communication
              + optimizer + the backend's per-step overhead

- Compute is the plain loop's step at one worker, split in the proportions its profiled warm-up measured
  (bench.rank.profile); on test hosts that share a machine's cores it is slowed by workers x threads / cores.
- The gradients become ready during the backward pass at the times the profile measured (as shares of it), and the
  backend moves them by its own rule (bench.backends.base.CommSchedule): DDP's buckets, Horovod's cycles and fusion,
  the parameter server's push and pull after the backward pass.
- A collective of S bytes costs the backend's own processing, from the alpha-beta fit of its communication sweep on
  one host, plus the wire between hosts: the fastest of the backend's exchanges (bench.backends.base.Exchange),
  steps x the link's latency + the bytes on the busiest host's link / its bandwidth. Collectives run one at a time.
  The processing is beta x the bus bytes at N, and alpha x the latency steps of the fit's world size, as a fixed
  cost per collective: a sweep at one world size cannot tell a per-call cost from a per-step one, and taking all of
  it per step would multiply a call's overhead by 2(N-1) (2,046 at 1,024 workers); the steps' latency is the link's.
- Communication that overlaps the backward pass is not free on CPU: gloo's threads use the same cores. Each second of
  the backend's own processing (the fit's part of a collective, not the time it waits for the wire) inside the
  backward pass adds `slowdown` seconds of compute, measured at 2 workers on one host (bench.projection.fit); the
  replay is repeated with the stretched backward pass until it settles.
- The backend's per-step overhead is what its 2-worker runs on one host measured beyond this replay (Horovod's
  negotiation, the reducer's bookkeeping), taken as constant in N.

Intervals (the delta method): each measured input moves the step by (replay at mean + se - replay at mean - se) / 2;
those moves, taken as independent, add in quadrature to the step's standard error, whose degrees of freedom are
Welch-Satterthwaite's over the inputs' (launches - 1 each), and the 95% interval is Student's t on it. The same on the
log scale gives the efficiency's. (Drawing inputs from t distributions of 2 degrees of freedom, as 3 launches give,
makes the tails of a simulated interval move by 20% between seeds; this is exact for a replay that is linear in its
inputs near their means and costs 13 replays a point.)"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from bench.core.registry import get_backend
from bench.core.stats import CONFIDENCE, t_quantile
from bench.projection.clusters import Cluster

# what every projection assumes, said beside it (and what docs/studies/published.md found it misses)
SCOPE = (
    "data-parallel training at a fixed per-worker batch; step = compute + the communication the backward pass "
    "does not hide + the per-step overhead; collectives one at a time over the described links, each by the "
    "fastest algorithm the era's library has (on GPUs, NCCL's tree from 2.4); not modelled: the input pipeline "
    "and what a node's workers share besides its links (CPU cores, host memory, the NIC's PCIe)"
)

SETTLE = 3  # replays of the stretched backward pass
INPUT_NAMES = ("compute", "overhead_one", "overhead", "slowdown", "alpha", "beta")


@dataclass(frozen=True)
class Value:
    """A measured input: mean, standard error, degrees of freedom, and the runs it came from."""

    mean: float
    se: float = 0.0
    dof: int = 0
    runs: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: list[float], runs: tuple[str, ...] = ()) -> Value:
        n = len(values)
        mean = float(np.mean(values))
        se = float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
        return cls(mean, se, n - 1, runs)

    def minus(self, other: Value) -> Value:
        """The difference of two independent inputs."""
        dof = min(d for d in (self.dof, other.dof) if d) if (self.dof or other.dof) else 0
        return Value(self.mean - other.mean, math.hypot(self.se, other.se), dof, self.runs + other.runs)


@dataclass(frozen=True)
class Shape:
    """A step's parts as shares of its compute (forward, backward, optimizer add to 1), and its gradients as
    (share of the backward pass by which each is ready, bytes), in the order they become ready."""

    forward: float
    backward: float
    optimizer: float
    grads: tuple[tuple[float, float], ...]
    run: str = ""

    @property
    def nbytes(self) -> float:
        return float(sum(b for _, b in self.grads))

    @classmethod
    def of_profile(cls, profile: dict, run: str = "") -> Shape:
        total = profile["forward_s"] + profile["gradients_s"] + profile["optimizer_s"]
        backward = profile["gradients_s"]
        grads = tuple(
            (ready / backward if backward > 0 else 1.0, numel * size) for _, numel, size, ready in profile["grads"]
        )
        return cls(profile["forward_s"] / total, backward / total, profile["optimizer_s"] / total, grads, run)


@dataclass(frozen=True)
class Assumption:
    """An input no run measured for this cluster, stated as a range: the projection takes its middle, and its 95%
    interval widens to hold the replays at both ends (never a point where the input is not known)."""

    name: str  # one of INPUT_NAMES
    low: float
    high: float
    why: str

    @property
    def middle(self) -> float:
        return (self.low + self.high) / 2


@dataclass(frozen=True)
class Inputs:
    """Everything the model needs about one case (a workload at a per-worker batch under one backend), measured."""

    workload: str
    backend: str
    options: dict
    batch: int
    threads: int
    device: str
    compute: Value  # seconds per step of the plain loop at one worker
    shape: Shape
    overhead_one: Value  # the backend's step at one worker beyond compute
    overhead: Value  # per step at 2 or more workers, beyond the replay (measured at fit_world on one host)
    slowdown: Value  # compute seconds added per second of communication overlapping the backward pass
    alpha: Value  # the backend's own cost per latency step (s), from its communication sweep on one host
    beta: Value  # per byte of its bus traffic (s/byte)
    fit_world: int
    notes: tuple[str, ...] = ()  # what was assumed where a measurement was missing
    assumed: tuple[Assumption, ...] = ()  # inputs stated as ranges (their Value is the range's middle)
    # the rules (comm_schedule, exchanges, cost_model) of a system that is not one of the suite's backends, such as
    # a published benchmark's (bench.projection.published); None: the backend's own
    rule: object | None = None

    @property
    def rules(self):
        """What schedules and prices this case's collectives: `rule`, else the backend plug-in."""
        return self.rule if self.rule is not None else get_backend(self.backend)

    def runs(self) -> dict[str, tuple[str, ...]]:
        """Each input's runs, for the page and the JSON."""
        return {
            name: getattr(self, name).runs
            for name in ("compute", "overhead_one", "overhead", "slowdown", "alpha", "beta")
        } | {"shape": (self.shape.run,)}


@dataclass(frozen=True)
class Parts:
    """One replayed step, in seconds."""

    compute: float  # forward + backward + optimizer, without the slowdown
    slowdown: float  # compute added by overlapping communication
    hidden: float  # communication during the backward pass
    exposed: float  # communication after it
    overhead: float
    collectives: int

    @property
    def step(self) -> float:
        """The parts' sum; never below half the compute: a fitted overhead may be negative (the replay over-counts at
        2 workers), and past that floor it is noise of short runs, not a faster step."""
        return max(self.compute + self.slowdown + self.exposed + self.overhead, 0.5 * self.compute)


@dataclass(frozen=True)
class Point:
    """The projection at one worker count: the replay at the inputs' means, and the 95% interval of the draws."""

    workers: int
    nodes: int
    parts: Parts
    step_low: float
    step_high: float
    efficiency: float
    efficiency_low: float
    efficiency_high: float
    batch: int
    algorithm: str

    @property
    def step(self) -> float:
        return self.parts.step

    @property
    def throughput(self) -> float:
        return self.workers * self.batch / self.step


# ---------------------------------------------------------------- one collective
def collective_cost(inputs: Inputs, cluster: Cluster, workers: int, alpha: float, beta: float):
    """A function nbytes -> (seconds, of which the backend's own processing) for one collective at `workers` on
    `cluster`, and the algorithm it takes."""
    backend = inputs.rules
    schedule = backend.comm_schedule(inputs.options)
    _, _, beta_coef = backend.cost_model(workers, inputs.options)
    _, alpha_coef, _ = backend.cost_model(inputs.fit_world, inputs.options)
    nodes = cluster.nodes_for(workers)
    # the backend's own cost: measured on one host; a GPU cluster's collectives are the link's alone unless a GPU
    # communication sweep was fitted (the inputs' device says which)
    own = inputs.device == cluster.device
    chosen = {"name": "within a host"}

    # a node's own link: on GPU nodes each GPU's link to the others of its node (NVLink, PCIe)
    local = cluster.node_link if nodes > 1 and cluster.network is not None else None
    on_gpus = cluster.device == "cuda"

    def seconds(e, link) -> float:
        """An exchange's time: each step pays its link's latency (a step within a node the node's link's), and its
        bytes go at the slower of the node's link and the link between nodes (the ring's bytes cross both)."""
        if local is None:
            return e.steps * link.latency_s + e.link_bytes / link.bandwidth
        across = e.steps - e.local_steps
        return (
            across * link.latency_s
            + e.local_steps * local.latency_s
            + e.link_bytes / min(link.bandwidth, local.bandwidth)
            + e.local_bytes / local.bandwidth
        )

    def cost(nbytes: float) -> tuple[float, float]:
        """(seconds, of which the processing that competes with compute): on CPUs the backend's own processing; on
        GPUs the whole collective, whose kernels run on the GPU the backward pass runs on."""
        wire = nbytes * schedule.wire_scale
        processing = (alpha * alpha_coef + beta * beta_coef * wire) if own else 0.0
        if nodes > 1 and cluster.network is not None:
            link, hosts = cluster.network, nodes
        elif cluster.node_link is not None and workers > 1:
            link, hosts = cluster.node_link, workers  # within a node: each worker its own link
        else:
            return processing, processing
        offered = [
            e
            for e in backend.exchanges(wire, workers, hosts, cluster.device, inputs.options)
            if e.name != "tree" or (cluster.tree and nodes > 1)  # NCCL's tree spans nodes; before 2.4 it had none
        ]
        best = min(offered, key=lambda e: seconds(e, link))  # as NCCL's tuner takes the fastest it predicts
        chosen["name"] = best.name
        wire_s = seconds(best, link)
        if cluster.link_measured and link is cluster.network:  # the fit at the link holds the processing already
            return max(wire_s, processing), min(wire_s, processing)
        took = processing + wire_s
        return took, took if on_gpus else processing

    return cost, chosen


# ---------------------------------------------------------------- the replay
def replay(schedule, grads, backward: float, cost) -> tuple[float, float, float, int]:
    """(when the last collective ends, the communication time inside [0, backward], the processing time inside it,
    collectives) for gradients (ready time, bytes) in ready order under the backend's schedule, where cost(bytes)
    gives (seconds, of which processing); time 0 is the start of the backward pass."""
    busy, working, end, count = 0.0, 0.0, 0.0, 0

    def run(ready_at: float, nbytes: float):
        nonlocal busy, working, end, count
        start = max(ready_at, end)
        took, processing = cost(nbytes)
        end = start + took
        inside = max(0.0, min(end, backward) - min(start, backward))
        busy += inside
        working += processing * (inside / took if took > 0 else 0.0)  # spread evenly over the collective
        count += 1

    if schedule.kind == "none" or not grads:
        return 0.0, 0.0, 0.0, 0
    if schedule.kind == "after_backward":
        run(backward, sum(b for _, b in grads))
    elif schedule.kind == "buckets":
        cap, size, ready = schedule.first_cap_bytes or schedule.cap_bytes, 0.0, 0.0
        for at, nbytes in grads:
            if size and size + nbytes > cap:
                run(ready, size)
                cap, size = schedule.cap_bytes, 0.0
            size, ready = size + nbytes, max(ready, at)
        run(ready, size)
    elif schedule.kind == "cycles":
        cycle = max(schedule.cycle_s, 1e-6)
        wake, i = cycle / 2, 0  # the loop's phase against the step: half a cycle on average
        while i < len(grads):
            if grads[i][0] > wake:  # nothing ready: sleep whole cycles until something is
                wake += math.ceil((grads[i][0] - wake) / cycle) * cycle
            size = 0.0
            while i < len(grads) and grads[i][0] <= wake:
                if size and size + grads[i][1] > schedule.cap_bytes:
                    run(wake, size)
                    size = 0.0
                size += grads[i][1]
                i += 1
            run(wake, size)
            wake = max(wake + cycle, end)
    else:
        raise ValueError(f"unknown schedule {schedule.kind!r}")
    return end, busy, working, count


def step_parts(inputs: Inputs, cluster: Cluster, workers: int, draw: dict | None = None) -> tuple[Parts, str]:
    """The replayed step at `workers` on `cluster` with the inputs' means (or one draw of them)."""
    v = draw or {name: getattr(inputs, name).mean for name in INPUT_NAMES}
    shape = inputs.shape
    share = 1.0
    if cluster.shared_cores:  # test hosts on one machine: every worker's threads on the same cores
        share = max(1.0, workers * inputs.threads / cluster.shared_cores)
    compute = max(v["compute"], 1e-9) * share
    forward, backward, optimizer = compute * shape.forward, compute * shape.backward, compute * shape.optimizer
    if workers <= 1:
        return Parts(compute, 0.0, 0.0, 0.0, v["overhead_one"], 0), "none"
    schedule = inputs.rules.comm_schedule(inputs.options)
    cost, chosen = collective_cost(inputs, cluster, workers, max(v["alpha"], 0.0), max(v["beta"], 0.0))
    stretched = backward
    for _ in range(SETTLE):
        grads = [(at * stretched, nbytes) for at, nbytes in shape.grads]
        end, busy, working, count = replay(schedule, grads, stretched, cost)
        stretched = backward + max(v["slowdown"], 0.0) * working
    grads = [(at * stretched, nbytes) for at, nbytes in shape.grads]
    end, busy, working, count = replay(schedule, grads, stretched, cost)
    exposed = max(0.0, end - stretched)
    return Parts(forward + backward + optimizer, stretched - backward, busy, exposed, v["overhead"], count), chosen[
        "name"
    ]


def _half_width(moves: list[tuple[float, int]]) -> float:
    """t(95%) x the standard error that independent moves (move, degrees of freedom) add up to."""
    var = sum(m * m for m, _ in moves)
    if var == 0:
        return 0.0
    dof = var * var / sum(m**4 / d for m, d in moves if m)
    return t_quantile(CONFIDENCE, dof) * math.sqrt(var)


def project(inputs: Inputs, cluster: Cluster, counts: list[int] | None = None) -> list[Point]:
    """The projection at each worker count (1, 2, 4, ... up to the cluster's size by default)."""
    counts = counts or cluster.worker_counts()
    means = {name: getattr(inputs, name).mean for name in INPUT_NAMES}
    shifted = []  # (inputs a standard error up, a standard error down, degrees of freedom) per uncertain input
    for name in INPUT_NAMES:
        value = getattr(inputs, name)
        if value.se > 0 and value.dof >= 1:
            shifted.append(({**means, name: value.mean + value.se}, {**means, name: value.mean - value.se}, value.dof))

    def step(n: int, v: dict | None = None) -> float:
        return step_parts(inputs, cluster, n, v)[0].step

    one = step(1)
    ones = [(step(1, up), step(1, down)) for up, down, _ in shifted]
    # the assumed inputs all at one end of their ranges, then all at the other (Assumption)
    ends = [{**means, **{a.name: getattr(a, end) for a in inputs.assumed}} for end in ("low", "high")]
    ends = ends if inputs.assumed else []
    end_ones = [step(1, v) for v in ends]
    points = []
    for n in counts:
        parts, algorithm = step_parts(inputs, cluster, n)
        moved = [(step(n, up), step(n, down)) for up, down, _ in shifted]
        half = _half_width([((a - b) / 2, d) for (a, b), (_, _, d) in zip(moved, shifted)])
        log_half = _half_width(
            [
                ((math.log(o_up / a) - math.log(o_down / b)) / 2, d)
                for (a, b), (o_up, o_down), (_, _, d) in zip(moved, ones, shifted)
            ]
        )
        efficiency = one / parts.step
        steps = [parts.step - half, parts.step + half]
        efficiencies = [efficiency * math.exp(-log_half), efficiency * math.exp(log_half)]
        for v, first in zip(ends, end_ones):
            at_end = step(n, v)
            steps.append(at_end)
            efficiencies.append(first / at_end)
        points.append(
            Point(
                n,
                cluster.nodes_for(n),
                parts,
                min(steps),
                max(steps),
                efficiency,
                min(efficiencies),
                max(efficiencies),
                inputs.batch,
                algorithm,
            )
        )
    return points


# What no run measures on a GPU cluster, stated as ranges (Assumption): the projection takes their middle and its
# interval holds both ends. Neither range is fitted to a figure the model is judged on (docs/studies/published.md).
GPU_ASSUMPTIONS = (
    Assumption(
        "overhead",
        0.0,
        1e-3,
        "the backend's own work per step beyond its collectives (DDP's reducer, Horovod's negotiation): 0 to 1 ms",
    ),
    Assumption(
        "slowdown",
        0.0,
        0.3,
        "compute lost per second of communication overlapping the backward pass (NCCL's kernels take SMs and "
        "memory bandwidth from it): 0 to 0.3 s",
    ),
)


def assume(inputs: Inputs, assumptions=GPU_ASSUMPTIONS) -> Inputs:
    """The inputs with `assumptions` in place of their measured values: each Value is the range's middle."""
    return replace(
        inputs,
        assumed=tuple(assumptions),
        **{a.name: Value(a.middle) for a in assumptions},
        notes=inputs.notes + tuple(f"assumed: {a.why}" for a in assumptions),
    )


def with_compute(inputs: Inputs, step_s: float, device: str, note: str) -> Inputs:
    """The inputs with a given single-worker step time. On the device the inputs were measured on, the backend's
    measured overheads and processing stay; on another device (a GPU's step for CPU-measured inputs) they are
    unknown there: its one-worker overhead is in the given step, the collectives cost what the cluster's links and
    the backend's schedule make them cost, and the per-step overhead and the slowdown are stated as ranges
    (GPU_ASSUMPTIONS) that widen the interval."""
    if device == inputs.device:
        return replace(inputs, compute=Value(step_s), notes=inputs.notes + (note,))
    zero = Value(0.0)
    moved = replace(
        inputs,
        compute=Value(step_s),
        device=device,
        overhead_one=zero,
        alpha=zero,
        beta=zero,
        notes=inputs.notes + (note,),
    )
    return assume(moved)


def crossover(points_by_backend: dict[str, list[Point]]) -> list[tuple[int, str, str]]:
    """Where the fastest backend changes along the worker counts: (workers, before, after)."""
    changes, best = [], None
    counts = sorted({p.workers for pts in points_by_backend.values() for p in pts if p.workers > 1})
    for n in counts:
        at = {b: next((p for p in pts if p.workers == n), None) for b, pts in points_by_backend.items()}
        at = {b: p for b, p in at.items() if p is not None}
        if not at:
            continue
        leader = min(at, key=lambda b: at[b].step)
        if best is not None and leader != best:
            changes.append((n, best, leader))
        best = leader
    return changes
