"""ps's process group: the roles' exchange, the workers' client (push gradients, pull parameters) and the servers'
side of the protocol (ParameterServer), over torch.distributed's point-to-point messages on gloo
(docs/backends.md; the design is bench.backends.ps's docstring). Imported by a run's processes only: torch at the
top."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from bench.backends.base import ProcessGroup
from bench.backends.ps import SERVERS_HERE
from bench.backends.shared.torchrun import join_torchrun_group, torchrun_rank_row
from bench.rank.hooks import Server


def chunk_bounds(count: int, servers: int) -> list[tuple[int, int]]:
    """Contiguous element ranges of a flat buffer, one per server, as even as possible."""
    base, extra = divmod(count, servers)
    bounds, start = [], 0
    for s in range(servers):
        end = start + base + (1 if s < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def balance_by_bytes(sizes: list[int], servers: int) -> list[list[int]]:
    """Parameter indices per server: largest first, each to the server holding the fewest bytes."""
    shards: list[list[int]] = [[] for _ in range(servers)]
    load = [0] * servers
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        target = min(range(servers), key=lambda s: (load[s], s))
        shards[target].append(index)
        load[target] += sizes[index]
    return [sorted(shard) for shard in shards]


class PSClient:
    """The worker's optimizer: step() pushes gradients and pulls parameters; the servers update."""

    def __init__(self, params, shards, server_ranks, device):
        self.params, self.shards, self.server_ranks = params, shards, server_ranks
        self.grad_bufs = [torch.zeros(sum(params[i].numel() for i in shard)) for shard in shards]
        self.param_bufs = [torch.zeros_like(b) for b in self.grad_bufs]
        self.device = device
        self.pull()  # start from the servers' parameters

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def _exchange(self, push: bool):
        requests = []
        for shard, server, gbuf, pbuf in zip(self.shards, self.server_ranks, self.grad_bufs, self.param_bufs):
            if push:
                offset = 0
                for i in shard:
                    g = self.params[i].grad
                    n = self.params[i].numel()
                    if g is None:  # a parameter this step did not use
                        gbuf[offset : offset + n].zero_()
                    else:
                        gbuf[offset : offset + n].copy_(g.reshape(-1))
                    offset += n
                requests.append(dist.isend(gbuf, dst=server))
            requests.append(dist.irecv(pbuf, src=server))
        for req in requests:
            req.wait()
        for shard, pbuf in zip(self.shards, self.param_bufs):
            offset = 0
            for i in shard:
                p = self.params[i]
                p.data.copy_(pbuf[offset : offset + p.numel()].view_as(p), non_blocking=False)
                offset += p.numel()

    def pull(self):
        self._exchange(push=False)

    def step(self):
        self._exchange(push=True)


def shards_of(model, servers: int) -> list[list[int]]:
    """Parameter indices per server, the same on every process (balance_by_bytes)."""
    return balance_by_bytes([p.numel() * p.element_size() for p in model.parameters()], servers)


def send_all(tensor, workers) -> None:
    for req in [dist.isend(tensor, dst=w) for w in workers]:
        req.wait()


class PSGroup(ProcessGroup):
    """Both roles: workers push and pull; servers own the parameters. On each host the last local ranks serve."""

    def init(self, spec):
        join_torchrun_group("gloo", spec)
        rank, n, servers = dist.get_rank(), spec.world_size, spec.backend_options["ps_servers"]
        local_rank, local_size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
        here = int(os.environ.get(SERVERS_HERE, servers))
        roles: list = [None] * dist.get_world_size()
        dist.all_gather_object(roles, "server" if local_rank >= local_size - here else "worker")
        self.worker_ranks = [r for r, role in enumerate(roles) if role == "worker"]
        self.server_ranks = [r for r, role in enumerate(roles) if role == "server"]
        if (len(self.worker_ranks), len(self.server_ranks)) != (n, servers):
            raise RuntimeError(
                f"the hosts started {len(self.worker_ranks)} workers and {len(self.server_ranks)} "
                f"servers, not {n} and {servers}"
            )
        self.worker_group = dist.new_group(self.worker_ranks)  # every rank must take part in creating it
        role = roles[rank]
        if role == "worker" and spec.device == "cuda":
            torch.cuda.set_device(local_rank)
        ranks = self.worker_ranks if role == "worker" else self.server_ranks
        return torchrun_rank_row(rank, n, role=role, role_rank=ranks.index(rank))

    # ------------------------------------------------------------ worker side
    def wrap(self, model, optimizer, spec):
        # The harness's optimizer is not used: the servers hold the optimizer state and apply updates.
        device = next(model.parameters()).device
        return model, PSClient(
            list(model.parameters()), shards_of(model, len(self.server_ranks)), self.server_ranks, device
        )

    def barrier(self):
        dist.barrier(group=self.worker_group)

    def shutdown(self):
        if dist.is_initialized():
            dist.destroy_process_group()

    def run_op(self, op, inp, out):
        """Push S bytes (split across the servers) and pull the sum back into the same buffer."""
        if op != "allreduce":
            return super().run_op(op, inp, out)
        # gloo moves host memory: a GPU worker stages through it, as it does for training
        buf = inp.cpu() if inp.is_cuda else inp
        bounds = chunk_bounds(buf.numel(), len(self.server_ranks))
        for req in [
            dist.isend(buf[lo:hi], dst=server) for (lo, hi), server in zip(bounds, self.server_ranks) if hi > lo
        ]:
            req.wait()
        for req in [
            dist.irecv(buf[lo:hi], src=server) for (lo, hi), server in zip(bounds, self.server_ranks) if hi > lo
        ]:
            req.wait()
        if buf is not inp:
            inp.copy_(buf)
        return inp

    # ------------------------------------------------------------ server side
    def server(self, spec, info) -> ParameterServer:
        return ParameterServer(self, spec, info)


class ParameterServer(Server):
    """A server's side of the protocol, for the tasks' loops of the server role (bench/tasks/train/rank.py,
    bench/tasks/comm/rank.py): the shard of the parameters it owns, the pushes it receives (sync: every worker's,
    summed in a fixed order; async: the next worker's), the answers it sends (async: held back from a worker more
    than --ps-staleness pushes ahead of the slowest), and the sums of a communication sweep."""

    def __init__(self, group: PSGroup, spec, info):
        self.workers, self.index = group.worker_ranks, info.role_rank
        self.servers = len(group.server_ranks)
        self.mode, self.staleness = spec.backend_options["ps_mode"], spec.backend_options["ps_staleness"]
        self.steps = spec.total_steps
        self.shards = None
        self.pushes = 0
        self._pushed = {w: 0 for w in self.workers}  # async: pushes received, by worker
        self._waiting: list[int] = []  # async: workers whose answer the staleness bound holds back
        self._last = -1  # async: the worker whose push receive() took last

    @property
    def updates_per_step(self) -> int:
        """Updates a server applies in one of the workers' steps: one averaged update (sync), or one per push."""
        return 1 if self.mode == "sync" else len(self.workers)

    def shard(self, model):
        """A flat copy of the parameters this server owns (the same sharding every worker computes)."""
        self.shards = shards_of(model, self.servers)
        params = list(model.parameters())
        owned = torch.cat([params[i].detach().reshape(-1) for i in self.shards[self.index]]).clone()
        self._incoming, self._total = torch.zeros_like(owned), torch.zeros_like(owned)
        self.numel, self.nbytes = owned.numel(), owned.numel() * owned.element_size()
        return owned

    def start(self, weights) -> None:
        """The workers' first pull."""
        send_all(weights, self.workers)

    def receive(self):
        """The gradient pushed for the next update, summed over the pushes it averages (divide by len(workers))."""
        if self.mode == "sync":
            self._total.zero_()
            for worker in self.workers:  # a fixed order: the same sum, bit for bit, on every run
                dist.recv(self._incoming, src=worker)
                self._total += self._incoming
            self.pushes += len(self.workers)
            return self._total
        self._last = dist.recv(self._incoming)  # from whichever worker pushes next
        self.pushes += 1
        return self._incoming

    def answer(self, weights) -> None:
        """The updated shard to the workers whose push it answers."""
        if self.mode == "sync":
            send_all(weights, self.workers)
            return
        self._pushed[self._last] += 1
        self._waiting.append(self._last)
        slowest = min((c for c in self._pushed.values() if c < self.steps), default=self.steps)
        bound = self.staleness
        ready = [
            w
            for w in self._waiting
            if bound is None or self._pushed[w] - slowest <= bound or self._pushed[w] >= self.steps
        ]
        self._waiting = [w for w in self._waiting if w not in ready]
        send_all(weights, ready)

    def answer_held_back(self, weights) -> None:
        """The answers still held back when every push has been applied."""
        send_all(weights, self._waiting)
        self._waiting = []

    def counters(self) -> dict:
        n = len(self.workers)
        return {
            "server": self.index,
            "mode": self.mode,
            "workers": n,
            "parameters": self.numel,
            "shard_bytes": self.nbytes,
            "pushes": self.pushes,
            "bytes_in": self.pushes * self.nbytes,
            "bytes_out": (self.pushes + n) * self.nbytes,
        }

    def sum_rounds(self, count: int, rounds: int, dtype: str) -> int:
        """A communication sweep's allreduce of `count` elements, `rounds` times: sum this server's chunk of the
        workers' pushes and send the sum back. Returns the pushes received."""
        lo, hi = chunk_bounds(count, self.servers)[self.index]
        if hi == lo:
            return 0
        dtype = getattr(torch, dtype)
        total, incoming = torch.zeros(hi - lo, dtype=dtype), torch.zeros(hi - lo, dtype=dtype)
        for _ in range(rounds):
            total.zero_()
            for worker in self.workers:
                dist.recv(incoming, src=worker)
                total += incoming
            send_all(total, self.workers)
        return rounds * len(self.workers)


GROUP = PSGroup
