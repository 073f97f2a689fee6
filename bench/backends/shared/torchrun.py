"""The torchrun launcher, shared by the backends whose processes torchrun starts (elastic, ps): its command on one
host and across hosts (its agent: bench.backends.shared.torchrun_agent), how a rank it started reads who it is, and
what torchrun's elastic agent reports about a run (its events file, bench.backends.shared.torchrun_events). No
framework imported: the parent's side.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from bench.backends.base import Launcher, rank_row
from bench.cluster import kubeflow_pod
from bench.cluster.fanout import fanout_command
from bench.cluster.hosts import free_port_on
from bench.cluster.slurm import of_allocation, srun_command
from bench.core.hostlist import Host
from bench.core.registry import get_backend


def free_port() -> int:
    """A TCP port free now: a scale-up's second agent must know the rendezvous endpoint in advance."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# torchrun's agent as bench starts it: torch's own entry point, by this interpreter (the workers see the same
# environment), leaving at once when it is done (bench.backends.shared.torchrun_agent)
AGENT = [sys.executable, "-m", "bench.backends.shared.torchrun_agent"]

# Without a log folder torchrun's agent makes one of its own in $TMPDIR (torchelastic_*, a folder per rank and
# attempt) and never removes it: a folder left behind by every run. bench keeps each rank's output and error itself
# (bench.harness.guard), so the agent is told to write none.
NO_AGENT_LOGS = ["--log-dir", os.devnull]


def torchrun_args(
    nnodes: str, nproc: int, endpoint: str, run_id: str, max_restarts: int, is_host: bool | None = None
) -> list[str]:
    """torchrun's arguments for c10d rendezvous at `endpoint`, with no log folder (NO_AGENT_LOGS): every agent bench
    starts takes them but a Kubeflow pod's (pod_agent, which adds NO_AGENT_LOGS itself). With a node range the agent
    otherwise waits 30 s for more nodes before it starts, so the last call is shortened to 1 s. `is_host` (across
    hosts): whether this agent hosts the rendezvous store. Without it torch guesses by matching the endpoint against
    this machine's hostname and the addresses that name resolves to, so an endpoint named by an alias or a secondary
    NIC's address is hosted by no agent and the rendezvous times out; told, torch neither guesses nor falls back."""
    args = [
        *NO_AGENT_LOGS,
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        run_id,
        "--max-restarts",
        str(max_restarts),
    ]
    # one --rdzv-conf (torchrun keeps only the last one given), its settings comma-separated
    conf = ["last_call_timeout=1"] if ":" in nnodes else []
    if is_host is not None:
        conf.append(f"is_host={int(is_host)}")
    if conf:
        args += ["--rdzv-conf", ",".join(conf)]
    return args


class TorchrunLauncher(Launcher):
    """torchrun on this node with c10d rendezvous on a free port, one process per spec process.

    The agent is torchrun's own (AGENT: torch.distributed.run's main), run by this interpreter so the workers see the
    same environment. Port 0 lets the agent's c10d store pick a free port, which the
    workers then share (TORCHELASTIC_USE_AGENT_STORE): two runs at once never collide.
    """

    spans_hosts = True

    def command(self, spec, rank_command, run_id):
        if kubeflow_pod.of_pods(spec.scheduler):  # the leading pod of a Kubeflow job: its own agent, one of the job's
            place = kubeflow_pod.pod_place()
            runs_folder = Path(rank_command[rank_command.index("bench.harness.guard") + 1]).parent
            return kubeflow_pod.lead_command(place, runs_folder, run_id, rank_command, pod_agent(place, rank_command))
        if spec.hosts:
            return agents_on_hosts(spec, rank_command, run_id)[0]
        return [*AGENT, *torchrun_args("1", spec.processes, "127.0.0.1:0", run_id, 0), "--no-python", *rank_command]

    def rank_identity(self, env):
        return int(env.get("RANK", 0)), int(env.get("TORCHELASTIC_RESTART_COUNT", 0))

    def plan_notes(self, spec):
        return [
            "torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the c10d "
            "rendezvous at --rdzv-endpoint",
            *super().plan_notes(spec),
        ]

    def pod_agent(self, place, rank_command):
        return pod_agent(place, rank_command)


def pod_agent(place, rank_command: list[str]) -> list[str]:
    """One pod's torchrun agent of a run spread over a Kubeflow job's pods (bench.cluster.kubeflow_pod.PodPlace)."""
    return [*AGENT, *NO_AGENT_LOGS, *place.agent_args(), "--no-python", *rank_command]


def join_torchrun_group(backend: str, spec, **kwargs) -> None:
    """Join torch.distributed's group of the processes torchrun started: waiting up to the spec's join_timeout for
    the others to join, then with the collective timeout (RunSpec.collective_timeout) for every operation after."""
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group(backend, timeout=timedelta(seconds=spec.join_timeout), **kwargs)
    if spec.join_timeout != spec.collective_timeout:
        dist.set_timeout(timedelta(seconds=spec.collective_timeout))


def torchrun_rank_row(rank: int, world_size: int, **fields):
    """The rank map row of a process torchrun started, from the variables it sets."""
    env = os.environ
    return rank_row(
        rank=rank,
        world_size=world_size,
        local_rank=int(fields.pop("local_rank", env.get("LOCAL_RANK", rank))),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", world_size)),
        group_rank=int(env.get("GROUP_RANK", 0)),
        restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", 0)),
        **fields,
    )


def agent_command(
    events_file,
    nnodes: str,
    nproc: int,
    endpoint: str,
    run_id: str,
    max_restarts: int,
    rank_command: list[str],
    local_addr: str | None = None,
    is_host: bool | None = None,
) -> list[str]:
    """torchrun with its agent's events kept in `events_file` (bench.backends.shared.torchrun_events); `local_addr`:
    the address it advertises, and `is_host`, whether it hosts the rendezvous store (torchrun_args), across hosts."""
    return [
        sys.executable,
        "-m",
        "bench.backends.shared.torchrun_events",
        str(events_file),
        "--",
        *torchrun_args(nnodes, nproc, endpoint, run_id, max_restarts, is_host),
        *(["--local-addr", local_addr] if local_addr else []),
        "--no-python",
        *rank_command,
    ]


def agents_on_hosts(spec, rank_command, run_id, *, events_file=None, max_restarts: int = 0) -> tuple[list[str], str]:
    """(launcher command, rendezvous endpoint): one agent per host, started over ssh (through srun inside a Slurm
    allocation), each for the processes the backend's host_plan puts there (with the environment it gives them),
    meeting at a c10d rendezvous on the first host (a port free there now), whose agent alone is told to host its
    store (is_host, torchrun_args): the first host may be named by any name or address that reaches it. Each
    advertises the address it was given by. With `events_file` (a fault run), agents that keep their events, with the
    node range 1:hosts so that the survivors go on when a host is lost, under a launcher that outlives a lost host's
    agent (bench.cluster.fanout --node-range)."""
    placed = get_backend(spec.backend).host_plan([Host(**h) for h in spec.hosts], spec.world_size, spec.backend_options)
    first = placed[0][0].name
    endpoint = f"{first}:{free_port_on(first, sys.executable)}"
    steps = []
    for i, (host, n, env) in enumerate(placed):
        if events_file is None:
            agent = [
                *AGENT,
                *torchrun_args(str(len(placed)), n, endpoint, run_id, max_restarts, is_host=i == 0),
                "--local-addr",
                host.name,
                "--no-python",
                *rank_command,
            ]
        else:
            agent = agent_command(
                events_file,
                f"1:{len(placed)}",
                n,
                endpoint,
                run_id,
                max_restarts,
                rank_command,
                local_addr=host.name,
                is_host=i == 0,
            )
        steps.append((host.name, [*(["env", *(f"{k}={v}" for k, v in env.items())] if env else []), *agent]))
    if of_allocation(spec.scheduler):  # in a Slurm allocation: one srun task per node, as Slurm users start torchrun
        return srun_command(steps), endpoint
    return fanout_command(steps, node_range=events_file is not None), endpoint


def agent_observations(run_dir) -> dict:
    """The agent's events, its rendezvous rounds with their durations, and the moments it noticed a
    fault: the worker group failing, or a node waiting to join."""
    events = run_dir.json_lines(run_dir.agent_events)
    rendezvous = [
        {
            "attempt": ev["metadata"].get("agent_restarts"),
            "state": ev["metadata"].get("state"),
            "duration_ms": ev["metadata"].get("duration_ms"),
            "t": ev.get("t"),
            "agent_pid": ev.get("agent_pid"),
        }
        for ev in events
        if ev.get("kind") == "agent"
        and (ev.get("metadata") or {}).get("state") in ("RENDEZVOUS", "ASSIGN_WORKER_RANKS")
    ]
    detections = []
    for ev in events:
        if ev.get("kind") == "metric" and ev.get("name") == "workers.default.failed":
            detections.append((ev["t"], "elastic agent saw the worker group fail"))
        if ev.get("kind") == "log" and "new nodes" in ev.get("message", ""):
            detections.append((ev["t"], "elastic agent saw a node waiting to join"))
    return {"events": events, "rendezvous": rendezvous, "detections": detections}
