"""ps: a real parameter-server baseline.

K server processes own the parameters, sharded across them balanced by bytes; N workers compute
gradients, push each shard's gradient to its server and pull the updated shard back. Servers apply the
same optimizer as the other backends (SGD with the run's lr and momentum) to the parameters they own.

- sync (default): a server waits for all N pushes of a step, averages them, applies one update and
  sends the result to every worker: the same math as synchronous data parallelism.
- async: a server applies each push as it arrives (the gradient scaled by 1/N, so one round of N
  pushes moves as far as one synchronous step) and answers that worker at once; --ps-staleness S
  holds back the answer to a worker that is more than S pushes ahead of the slowest (stale-synchronous
  parallel), unbounded when not given.

Transport: torch.distributed point-to-point (send/recv) over gloo. Why not torch.distributed.rpc:
the same gloo transport the elastic backend's CPU collectives use, so a difference between the two
shows the communication pattern (each server link carries N x its shard per step, where a ring
carries 2(N-1)/N of the model per rank), not a different transport stack with its own serialisation
and thread pools. Processes are started by torchrun; on one host the last K local ranks are the servers
(global ranks N..N+K-1). Across hosts the servers are placed one per host by default, as colocated parameter
servers are deployed (--ps-servers K sets the count: round-robin over the hosts, in order); they take no slot
(slots are for workers), and each host's agent is told how many of its processes serve (SERVERS_HERE): its
last local ranks. After the group forms, the processes exchange their roles, so that every process knows the
global ranks of the workers and the servers, however torchrun numbered the hosts. A worker's index among the
workers (its role rank) chooses its data, as the global rank does for the other backends. The servers are their
own role in the rank map and count in neither throughput nor world size. On GPU the workers stage gradients and
parameters through host memory; servers always run on CPU.
"""

from __future__ import annotations

from bench.backends.base import Backend, BackendOption, CommSchedule, Exchange
from bench.backends.shared.ddp import distributed_problem
from bench.backends.shared.torchrun import TorchrunLauncher
from bench.core.hostlist import Host, placement

MODES = ("sync", "async")
SERVERS_HERE = "BENCH_PS_SERVERS_HERE"  # across hosts: how many of the host's processes are servers


class PSLauncher(TorchrunLauncher):
    """torchrun, as for elastic; its plan says that the servers' transport is gloo on GPUs too."""

    def plan_notes(self, spec):
        notes = super().plan_notes(spec)
        if spec.device == "cuda":  # not NCCL: the servers' transport is gloo, whatever the workers' device
            notes = [n for n in notes if "NCCL" not in n] + [
                "workers take cuda:LOCAL_RANK and stage gradients and parameters through host memory; the servers "
                "run on CPU and every exchange goes over gloo, not NCCL"
            ]
        return notes


class PSBackend(Backend):
    name = "ps"
    summary = "parameter server: K servers own sharded parameters; workers push gradients, pull parameters"
    # A push+pull of S bytes through the servers returns the sum over workers: the PS's allreduce.
    comm_ops = ("allreduce",)
    options = (
        BackendOption(
            "ps_servers", 1, "server processes (parameters sharded across them by bytes)", int, invalid=("0", "-1", "x")
        ),
        BackendOption(
            "ps_mode",
            "sync",
            "sync: one averaged update per step; async: each push applied as it arrives",
            str,
            MODES,
            invalid=("semi",),
        ),
        BackendOption(
            "ps_staleness",
            None,
            "async only: how many pushes a worker may run ahead of the slowest",
            int,
            invalid=("-1", "x"),
            default_words="unbounded",
        ),
    )
    launcher = PSLauncher()  # ranks 0..N-1 workers, N..N+K-1 servers
    group = "bench.backends.ps.group"

    def synchronous(self, options):
        return options["ps_mode"] == "sync"

    def unavailable_reason(self, device):
        return distributed_problem("cpu")  # servers and transport are gloo, whatever the workers' device

    def numerics_problem(self, precision, channels_last):
        if precision == "fp16":
            # fp16's gradient scaler skips the step of a worker whose gradients overflowed, and the workers' local
            # gradients overflow apart: a worker that skips does not push, and the servers wait for its push
            return (
                "--precision fp16 needs a gradient scaler whose skipped steps every worker agrees on, and each "
                "worker's gradients reach the servers unreduced; use --precision bf16 (no scaler) or fp32"
            )
        return None

    def check_options(self, options, device):
        if options["ps_servers"] < 1:
            return "--ps-servers must be at least 1"
        if options["ps_staleness"] is not None:
            if options["ps_mode"] != "async":
                return "--ps-staleness applies to --ps-mode async only"
            if options["ps_staleness"] < 0:
                return "--ps-staleness must be 0 or more"
        return None

    def roles(self, options, world_size):
        return {"worker": world_size, "server": options["ps_servers"]}

    def resolve_options(self, given, world_size=None, hosts=None):
        """Across hosts, one server per host with workers unless --ps-servers says otherwise."""
        resolved = super().resolve_options(given, world_size, hosts)
        if hosts and "ps_servers" not in given:
            resolved["ps_servers"] = len(placement([Host(**h) for h in hosts], world_size))
        return resolved

    def host_plan(self, hosts, world_size, options):
        """Workers fill the slots in order; the servers go round-robin over the hosts with workers, taking no slot."""
        workers = placement(hosts, world_size)
        servers = [0] * len(workers)
        for k in range(options["ps_servers"]):
            servers[k % len(workers)] += 1
        return [(host, n + s, {SERVERS_HERE: str(s)}) for (host, n), s in zip(workers, servers)]

    def cost_model(self, world_size, options):
        # every server link carries N x S/K bytes each way; a push and a pull per op
        return "parameter server", 2.0, world_size / options["ps_servers"]

    def comm_schedule(self, options):
        return CommSchedule("after_backward")  # the optimizer's step() pushes every gradient, then pulls

    def exchanges(self, nbytes, world_size, hosts, device, options):
        """A push of every gradient and a pull of every parameter through the servers: across hosts one per host (the
        default placement; the projection assumes it). A server receives the workers' pushes one worker after
        another (ParameterServer.receive: a fixed order, and gloo moves a message once its receive is posted), so the
        pushes cross the links in sequence: each worker sends the (K-1)/K of S its host's server does not own. Then
        every server answers every worker at once: a host's link carries its server's shard to the workers of the other
        hosts."""
        n = world_size
        if hosts <= 1 or n <= 1:
            return [Exchange("within a host", 2.0, 0.0)]
        servers, per_host = hosts, n / hosts
        remote_push = (servers - 1) / servers * nbytes  # what one worker sends to the servers of other hosts
        answers = (n - per_host) * nbytes / servers  # what one host's server sends to the workers of other hosts
        return [Exchange("push, then pull", n + 1.0, n * remote_push + answers)]


BACKEND = PSBackend()
