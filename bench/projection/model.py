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
- The backend's per-step overhead is what its 2-worker runs on one host measured beyond this replay (the reducer's
  bookkeeping, Horovod's work at that size), taken as constant in N. What grows with N is its own part of the step:
  - coordination: Horovod negotiates every cycle before the cycle's collectives start (NEGOTIATION below), so its
    collectives start later and the step's tail grows with the ranks; DDP's buckets have no central negotiation;
  - stragglers: a synchronous step waits for the slowest of N workers, each drawing its step from the measured
    spread (STRAGGLERS below);
  - on the links, each collective's time by stage: on a node's own links (NVLink, PCIe) and on the network, of which
    what the NIC's share of its PCIe link and the fabric's oversubscription add (bench.projection.clusters).

Intervals (the delta method): each measured input moves the step by (replay at mean + se - replay at mean - se) / 2;
those moves, taken as independent, add in quadrature to the step's standard error, whose degrees of freedom are
Welch-Satterthwaite's over the inputs' (launches - 1 each), and the 95% interval is Student's t on it. The same on the
log scale gives the efficiency's. (Drawing inputs from t distributions of 2 degrees of freedom, as 3 launches give,
makes the tails of a simulated interval move by 20% between seeds; this is exact for a replay that is linear in its
inputs near their means and costs 13 replays a point.)"""

from __future__ import annotations

import functools
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
    "fastest algorithm the era's library has (on GPUs, NCCL's tree from 2.4); with N: Horovod's negotiation, the "
    "slowest of N workers, the fabric's oversubscription and the NIC's share of its PCIe link; not modelled: the "
    "input pipeline and what a node's workers share besides its links (CPU cores, host memory)"
)

SETTLE = 3  # replays of the stretched backward pass
INPUT_NAMES = ("compute", "overhead_one", "overhead", "slowdown", "alpha", "beta", "jitter")

# NEGOTIATION. Horovod's background loop negotiates every cycle: each rank says which tensors it has ready, the
# coordinator (rank 0) combines them and tells every rank what to reduce, and only then do the cycle's collectives
# start (Horovod's docs/timeline.md: "Negotiation - a phase when all workers send to rank 0 signal that they're
# ready"; with the response cache of later versions, a bitwise allreduce of the ready bits, horovod/horovod#2202).
# Either is small messages up a binomial tree and back down (MPI's gather and broadcast, or recursive doubling):
# NEGOTIATION_LEGS x ceil(log2 N) messages one after another, each at the latency of the links the ranks span.
NEGOTIATION_LEGS = 2
# Where every rank shares one machine's cores (the test hosts), a round also waits for each rank's background thread
# to get a core: scripts/negotiation_cost.py measured, on this 2-core machine under a load average of 7 to 12,
# 4.1 ms a call at 2 ranks and 15.4 ms at 4 beyond Horovod's own at 1 rank and gloo's at the same ranks; least
# squares through the origin on the ranks beyond the first: 5.0 ms a rank. Taken beyond the fit's world (its
# overhead holds the rest), and only where the cores are shared: the figure is that machine's scheduling.
SHARED_CORES_NEGOTIATION_S = 5.0e-3

# STRAGGLERS. Each worker's step is drawn from a lognormal of mean 1 (times the compute) with the spread `jitter` of
# ln(step); a synchronous step waits for the slowest of N: E[max] = integral of exp(sigma z - sigma^2/2) N phi(z)
# Phi(z)^(N-1) dz, which grows as sigma sqrt(2 ln N). Measured on CPU from the plain loop's windows
# (bench.projection.fit: the spread of ln(window time) within a launch; docs/studies/spread.md found what varies
# between windows slower than a step, so a window's spread is a step's). On GPUs no run here measures it: GPU_JITTER.


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
    jitter: Value = Value(0.0)  # the spread of ln(a worker's step) (STRAGGLERS)

    @property
    def rules(self):
        """What schedules and prices this case's collectives: `rule`, else the backend plug-in."""
        return self.rule if self.rule is not None else get_backend(self.backend)

    def runs(self) -> dict[str, tuple[str, ...]]:
        """Each input's runs, for the page and the JSON."""
        return {name: getattr(self, name).runs for name in INPUT_NAMES} | {"shape": (self.shape.run,)}


@dataclass(frozen=True)
class Parts:
    """One replayed step, in seconds: compute + slowdown + exposed + overhead + coordination + stragglers; and the
    step's collectives by stage (hidden and exposed together, so not parts of that sum): in_node on a node's own
    links, network between nodes, and of the network's, what the NIC's share of its PCIe link and the fabric's
    oversubscription add."""

    compute: float  # forward + backward + optimizer, without the slowdown
    slowdown: float  # compute added by overlapping communication
    hidden: float  # communication during the backward pass
    exposed: float  # communication after it, without what the negotiation adds
    overhead: float
    collectives: int
    coordination: float = 0.0  # what the backend's negotiation adds to the step (NEGOTIATION)
    stragglers: float = 0.0  # the slowest of N workers' step beyond the mean (STRAGGLERS)
    in_node: float = 0.0
    network: float = 0.0
    nic_pcie: float = 0.0
    oversubscription: float = 0.0

    @property
    def step(self) -> float:
        """The parts' sum; never below half the compute: a fitted overhead may be negative (the replay over-counts at
        2 workers), and past that floor it is noise of short runs, not a faster step."""
        total = self.compute + self.slowdown + self.exposed + self.overhead + self.coordination + self.stragglers
        return max(total, 0.5 * self.compute)


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
    """A function nbytes -> (seconds, of which the backend's own processing, the wire's seconds by stage: (in_node,
    network, nic_pcie, oversubscription)) for one collective at `workers` on `cluster`, and the algorithm it takes."""
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
    across_nodes = nodes > 1 and cluster.network is not None
    # the network's rate as a node's traffic gets it: its NIC's, then at most its share of the PCIe link it shares
    # with the GPUs, then 1/R of that across a fabric oversubscribed R:1
    nic = cluster.network.bandwidth if cluster.network is not None else math.inf
    # of it NCCL's collectives get the cluster's socket share (NCCL's TCP transport before 2.4.8): the suite's
    # backends use NCCL on GPUs; a published system's rule says whether NCCL carries its bytes between nodes
    if inputs.rule is None or getattr(inputs.rule, "by_nccl", False):
        nic *= cluster.nccl_socket_share
    pcie = cluster.nic_share * cluster.pcie_link.bandwidth if cluster.pcie_link is not None else math.inf
    shared = min(nic, pcie)
    fabric = shared / cluster.oversubscription if across_nodes else shared

    def stages(e, link) -> tuple[float, float, float, float]:
        """An exchange's seconds by stage (in_node, network, nic_pcie, oversubscription), which add to its time:
        each step pays its link's latency (a step within a node the node's link's); its bytes between nodes go at
        the slower of the node's link and the network as a node gets it (a ring's bytes cross both at once), its
        bytes in a phase of the node's own at the node's link."""
        if not across_nodes or link is not cluster.network:
            return e.steps * link.latency_s + e.link_bytes / link.bandwidth, 0.0, 0.0, 0.0
        wire = e.link_bytes
        network = (e.steps - e.local_steps) * link.latency_s + wire / nic
        nic_pcie = wire / shared - wire / nic
        oversub = wire / fabric - wire / shared
        in_node = 0.0
        if local is not None:
            in_node = e.local_steps * local.latency_s + e.local_bytes / local.bandwidth
            in_node += max(0.0, wire / local.bandwidth - wire / fabric)  # the node's link the slower of the two
        return in_node, network, nic_pcie, oversub

    def cost(nbytes: float) -> tuple[float, float, tuple[float, ...]]:
        """(seconds, of which the processing that competes with compute, the wire's stages): on CPUs the backend's
        own processing; on GPUs the whole collective, whose kernels run on the GPU the backward pass runs on."""
        wire = nbytes * schedule.wire_scale
        processing = (alpha * alpha_coef + beta * beta_coef * wire) if own else 0.0
        if across_nodes:
            link, hosts = cluster.network, nodes
        elif cluster.node_link is not None and workers > 1:
            link, hosts = cluster.node_link, workers  # within a node: each worker its own link
        else:
            return processing, processing, (0.0, 0.0, 0.0, 0.0)
        offered = [
            e
            for e in backend.exchanges(wire, workers, hosts, cluster.device, inputs.options)
            if e.name != "tree" or (cluster.tree and nodes > 1)  # NCCL's tree spans nodes; before 2.4 it had none
        ]
        timed = [(sum(stages(e, link)), e) for e in offered]
        wire_s, best = min(timed, key=lambda te: te[0])  # as NCCL's tuner takes the fastest it predicts
        chosen["name"] = best.name
        by_stage = stages(best, link)
        if cluster.link_measured and link is cluster.network:  # the fit at the link holds the processing already
            return max(wire_s, processing), min(wire_s, processing), by_stage
        took = processing + wire_s
        return took, took if on_gpus else processing, by_stage

    return cost, chosen


# ---------------------------------------------------------------- the replay
def replay(
    schedule, grads, backward: float, cost, negotiate: float = 0.0, stages: list[float] | None = None
) -> tuple[float, float, float, int]:
    """(when the last collective ends, the communication time inside [0, backward], the processing time inside it,
    collectives) for gradients (ready time, bytes) in ready order under the backend's schedule, where cost(bytes)
    gives (seconds, of which processing[, the wire's seconds by stage]); time 0 is the start of the backward pass.
    A schedule of cycles negotiates for `negotiate` seconds each cycle before its collectives start (NEGOTIATION),
    and a cycle lasts at least that long. `stages`, when given, has each collective's seconds by stage added to it."""
    busy, working, end, count = 0.0, 0.0, 0.0, 0

    def run(ready_at: float, nbytes: float):
        nonlocal busy, working, end, count
        start = max(ready_at, end)
        took, processing, *by_stage = cost(nbytes)
        end = start + took
        inside = max(0.0, min(end, backward) - min(start, backward))
        busy += inside
        working += processing * (inside / took if took > 0 else 0.0)  # spread evenly over the collective
        count += 1
        if stages is not None and by_stage:
            for k, seconds in enumerate(by_stage[0]):
                stages[k] += seconds

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
        cycle = max(schedule.cycle_s, negotiate, 1e-6)  # a round's negotiation outlasting the cycle sets its pace
        wake, i = cycle / 2, 0  # the loop's phase against the step: half a cycle on average
        while i < len(grads):
            if grads[i][0] > wake:  # nothing ready: sleep whole cycles until something is
                wake += math.ceil((grads[i][0] - wake) / cycle) * cycle
            size = 0.0
            while i < len(grads) and grads[i][0] <= wake:
                if size and size + grads[i][1] > schedule.cap_bytes:
                    run(wake + negotiate, size)
                    size = 0.0
                size += grads[i][1]
                i += 1
            run(wake + negotiate, size)
            wake = max(wake + cycle, end)
    else:
        raise ValueError(f"unknown schedule {schedule.kind!r}")
    return end, busy, working, count


def negotiation_s(inputs: Inputs, cluster: Cluster, workers: int) -> float:
    """One cycle's negotiation at `workers` (NEGOTIATION): the tree's messages at the latency of the links the ranks
    span (the network's across nodes, a node's own link within one; none on one host, whose cost the fitted
    overhead holds), and on shared cores each rank beyond the fit's. 0 for a schedule without cycles."""
    if workers <= 1 or inputs.rules.comm_schedule(inputs.options).kind != "cycles":
        return 0.0
    if cluster.nodes_for(workers) > 1 and cluster.network is not None:
        latency = cluster.network.latency_s
    elif cluster.node_link is not None:
        latency = cluster.node_link.latency_s
    else:
        latency = 0.0
    tree = NEGOTIATION_LEGS * math.ceil(math.log2(workers)) * latency
    shared = SHARED_CORES_NEGOTIATION_S * max(0, workers - inputs.fit_world) if cluster.shared_cores else 0.0
    return tree + shared


@functools.lru_cache(maxsize=4096)
def slowest_of(workers: int, sigma: float) -> float:
    """E[the largest of `workers` draws] of a lognormal step of mean 1 and spread `sigma` of its log (STRAGGLERS)."""
    if workers <= 1 or sigma <= 0:
        return 1.0
    from scipy import special  # here: scipy's import is a fifth of a second of every bench command's start

    z = np.linspace(-9.0, 9.0, 7201)
    density = workers * special.ndtr(z) ** (workers - 1) * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return float(np.trapezoid(np.exp(sigma * z - 0.5 * sigma * sigma) * density, z))


def _replayed(schedule, shape, backward, slowdown, cost, negotiate, stages=None):
    """The replay with the backward pass stretched by the processing it overlaps, settled: (stretched backward,
    end, busy, count)."""
    stretched = backward
    for _ in range(SETTLE):
        grads = [(at * stretched, nbytes) for at, nbytes in shape.grads]
        end, busy, working, count = replay(schedule, grads, stretched, cost, negotiate)
        stretched = backward + slowdown * working
    grads = [(at * stretched, nbytes) for at, nbytes in shape.grads]
    end, busy, working, count = replay(schedule, grads, stretched, cost, negotiate, stages)
    return stretched, end, busy, count


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
    slowdown = max(v["slowdown"], 0.0)
    stages = [0.0, 0.0, 0.0, 0.0]
    negotiate = negotiation_s(inputs, cluster, workers)
    stretched, end, busy, count = _replayed(schedule, shape, backward, slowdown, cost, negotiate, stages)
    exposed = max(0.0, end - stretched)
    coordination = 0.0
    if negotiate > 0:  # what the negotiation adds: the step's communication beyond the same replay without it
        plain, plain_end, _, _ = _replayed(schedule, shape, backward, slowdown, cost, 0.0)
        without = (plain - backward) + max(0.0, plain_end - plain)
        coordination = min(exposed, max(0.0, (stretched - backward) + exposed - without))
    computed = forward + backward + optimizer
    stragglers = (computed + stretched - backward) * (slowest_of(workers, max(v["jitter"], 0.0)) - 1.0)
    in_node, network, nic_pcie, oversub = stages
    parts = Parts(
        computed,
        stretched - backward,
        busy,
        exposed - coordination,
        v["overhead"],
        count,
        coordination=coordination,
        stragglers=stragglers,
        in_node=in_node,
        network=network,
        nic_pcie=nic_pcie,
        oversubscription=oversub,
    )
    return parts, chosen["name"]


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
        "the backend's own work per step beyond its collectives and its negotiation (DDP's reducer, Horovod's "
        "queue): 0 to 1 ms",
    ),
    Assumption(
        "slowdown",
        0.0,
        0.3,
        "compute lost per second of communication overlapping the backward pass (NCCL's kernels take SMs and "
        "memory bandwidth from it): 0 to 0.3 s",
    ),
)
# The spread of ln(a GPU worker's step) (STRAGGLERS), which no run here measures: fitted on the published fit set's
# table for it (bench/projection/published/cases.json, "fits": "jitter": DLPerf's PyTorch DDP on 4 nodes of 8 V100,
# whose efficiency falls from 97.3% at 16 GPUs to 92.9% at 32, beyond what the model's communication explains), the
# least squares of the predicted efficiencies against the published, with its standard error from the fit's residuals (3
# figures, 2 degrees of freedom); bench.projection.published.fit_jitter makes it and tests/test_published.py checks
# these figures against it. A quiet single H200 varied by 0.1% between its windows (docs/studies/gpu-h200.md, Horovod's
# ResNet18): one GPU's floor, below what a cluster's workers draw.
GPU_JITTER = Value(
    0.01861, 0.007196, 2, ("fitted on the published table dlperf-ddp (bench.projection.published.fit_jitter)",)
)


def assume(inputs: Inputs, assumptions=GPU_ASSUMPTIONS, jitter: Value = GPU_JITTER) -> Inputs:
    """The inputs with `assumptions` in place of their measured values (each Value the range's middle) and the
    spread of a worker's step that no run measured (`jitter`)."""
    return replace(
        inputs,
        assumed=tuple(assumptions),
        **{a.name: Value(a.middle) for a in assumptions},
        jitter=jitter,
        notes=inputs.notes
        + tuple(f"assumed: {a.why}" for a in assumptions)
        + (
            f"stragglers: each worker's step spread by {jitter.mean:.2%} (of its log; se {jitter.se:.2%}), "
            "fitted on the published fit set (docs/studies/published.md)",
        ),
    )


def with_compute(inputs: Inputs, step_s: float, device: str, note: str) -> Inputs:
    """The inputs with a given single-worker step time. On the device the inputs were measured on, the backend's
    measured overheads, processing and step spread stay; on another device (a GPU's step for CPU-measured inputs)
    they are unknown there: its one-worker overhead is in the given step, the collectives cost what the cluster's
    links and the backend's schedule make them cost, the per-step overhead and the slowdown are stated as ranges
    (GPU_ASSUMPTIONS) that widen the interval, and the step's spread is GPU_JITTER."""
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


def fastest(points_by_backend: dict[str, list[Point]]) -> list[tuple[int, str | None]]:
    """At each worker count past 1 where two or more backends are projected: the one named faster, only where its
    step's 95% interval lies wholly below every other's (None where they overlap: the projection cannot tell)."""
    out: list[tuple[int, str | None]] = []
    counts = sorted({p.workers for pts in points_by_backend.values() for p in pts if p.workers > 1})
    for n in counts:
        at = {b: p for b, pts in points_by_backend.items() for p in pts if p.workers == n}
        if len(at) < 2:
            continue
        leader = min(at, key=lambda b: at[b].step)
        clear = all(at[leader].step_high < p.step_low for b, p in at.items() if b != leader)
        out.append((n, leader if clear else None))
    return out


def crossover(points_by_backend: dict[str, list[Point]]) -> list[tuple[int, str | None, str | None]]:
    """Where the backend named faster changes along the worker counts: (workers, before, after), None for where the
    intervals overlap and none is named (fastest)."""
    changes: list[tuple[int, str | None, str | None]] = []
    ranked = fastest(points_by_backend)
    for (_, before), (n, after) in zip(ranked, ranked[1:]):
        if after != before:
            changes.append((n, before, after))
    return changes


def fastest_words(points_by_backend: dict[str, list[Point]]) -> str:
    """The fastest backend along the worker counts in words: each run of counts with the backend named faster there,
    or that their intervals overlap."""
    ranked = fastest(points_by_backend)
    if not ranked:
        return ""
    runs: list[tuple[int, int, str | None]] = []
    for n, leader in ranked:
        if runs and runs[-1][2] == leader:
            runs[-1] = (runs[-1][0], n, leader)
        else:
            runs.append((n, n, leader))
    said = []
    for first, last, leader in runs:
        span = f"{first}" if first == last else f"{first} to {last}"
        said.append(
            f"{leader} at {span} workers" if leader else f"none at {span} workers (the step's 95% intervals overlap)"
        )
    return "; ".join(said)
