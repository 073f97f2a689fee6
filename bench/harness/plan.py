"""`--dry-run`: each launch's plan, made by the code that launches (the runner's rank command and environment, the
task's launch, the backend's launcher and its host steps), under bench.core.dryrun.plan_only, so that no host is
contacted and nothing is started. The run directory the launch code writes into (Horovod elastic's host discovery
script) is a temporary folder, removed before the plan is shown, where it is named RUN_DIR; the run id is RUN_ID."""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass, field

from bench.cluster.fanout import fanout_steps
from bench.cluster.hosts import host_plan_notes
from bench.cluster.kubeflow_pod import MPIJOB_SCHEDULER
from bench.cluster.slurm import of_allocation, srun_steps
from bench.core.dryrun import NOT_CHECKED, PLANNED_IFACE, PLANNED_PORT, plan_only
from bench.core.hostlist import Host, placement
from bench.core.registry import get_backend, get_task
from bench.core.rundir import RunDir
from bench.core.spec import RunSpec, cpu_count
from bench.harness.runner import launch_environment, rank_command_of

RUN_ID = "RUN_ID"
RUN_DIR = "RUN_DIR"
# inherited variables a plan shows, when set, beside those bench sets: what chooses the GPUs and the transports
SHOWN_IF_SET = ("CUDA_VISIBLE_DEVICES", "NCCL_", "GLOO_", "HOROVOD_", "MASTER_ADDR", "MASTER_PORT", "OMPI_MCA_")


@dataclass
class LaunchPlan:
    spec: RunSpec
    command: list[str]  # what the supervisor would start here
    env: dict[str, str]  # what the ranks get beyond the inherited environment (and the inherited SHOWN_IF_SET)
    steps: list[tuple[str | None, list[str]]]  # (host, argv) per host the command starts something on
    notes: list[str] = field(default_factory=list)


def plan_launch(spec: RunSpec) -> LaunchPlan:
    """The launch of `spec` as execute would make it, with nothing contacted, started or kept."""
    backend, task = get_backend(spec.backend), get_task(spec.task)
    with plan_only(), tempfile.TemporaryDirectory(prefix="bench-plan-") as folder:
        run_dir = RunDir(folder)
        env = launch_environment(spec, RUN_ID)
        launch = task.launch(spec, backend, rank_command_of(spec, run_dir), RUN_ID, run_dir, env, False)
        env.update(launch.env)

        def named(text: str) -> str:
            return text.replace(folder, RUN_DIR)

        command = [named(a) for a in launch.command]
    shown = {
        k: named(v)
        for k, v in env.items()
        if os.environ.get(k) != v or (k.startswith(SHOWN_IF_SET) and k in os.environ)
    }
    steps: list[tuple[str | None, list[str]]] = [*(fanout_steps(command) or srun_steps(command) or [(None, command)])]
    return LaunchPlan(spec, command, dict(sorted(shown.items())), steps, backend.launcher.plan_notes(spec))


def plan_lines(plan: LaunchPlan) -> list[str]:
    """The plan as the terminal shows it: the command started here, the command on each host, the environment, notes."""
    spec = plan.spec
    scheduler = spec.scheduler or {}
    launcher_of_mpijob = scheduler.get("name") == MPIJOB_SCHEDULER
    where = (
        f"{len(spec.hosts)} host(s): " + ", ".join(f"{h['name']} x{h['slots']}" for h in spec.hosts)
        if spec.hosts
        else "this machine"
    )
    lines = [
        f"{spec.backend} {get_task(spec.task).case(spec)}: world size {spec.world_size} on {spec.device} "
        f"({'GPU' if spec.device == 'cuda' else 'CPU'} processes), {where}"
        + (f", inside Slurm job {scheduler.get('job_id')}" if of_allocation(spec.scheduler) else "")
        + (f", from the launcher pod of MPIJob {scheduler.get('job_id')}" if launcher_of_mpijob else "")
    ]
    if fanout_steps(plan.command):
        lines.append("  started here: python -m bench.cluster.fanout, which runs each host's command over ssh:")
    elif srun_steps(plan.command):
        lines.append(f"  started here: {shlex.join(plan.command[:-1])} PLAN, one task per node running its command:")
    in_allocation = of_allocation(spec.scheduler)
    here = "this machine" + (" (the batch script's node, the allocation's first)" if in_allocation else "")
    for host, argv in plan.steps:
        lines.append(f"  on {host or here}: {shlex.join(argv)}")
    lines += [f"  env {k}={v}" for k, v in plan.env.items()]
    lines += [f"  note: {n}" for n in plan.notes]
    if spec.iface == PLANNED_IFACE:
        lines.append(
            f"  note: {PLANNED_IFACE} is the interface the hosts route to each other through, found by the host check "
            "(--iface names it)"
        )
    if spec.hosts:
        lines += [f"  note: {n}" for n in host_plan_notes(os.environ, spec.device)]
    if any(PLANNED_PORT in a for a in plan.command):
        lines.append(f"  note: {PLANNED_PORT} is a port free on the first host, found when the run starts")
    if of_allocation(spec.scheduler):
        lines.append(
            f"  note: the nodes of {scheduler.get('nodelist')} as bench reads the list, without scontrol (a run asks "
            "`scontrol show hostnames`)"
        )
    if spec.device == "cuda" and not spec.hosts and get_backend(spec.backend).places_on_this_host(spec.backend_options):
        lines.append(f"  this machine's GPUs: {NOT_CHECKED} (a run refuses more than torch.cuda.device_count())")
    if spec.hosts:
        lines.append(
            f"  hosts, their cores and GPUs: {NOT_CHECKED} (a run checks every host over ssh first, and gives each "
            "process its host's cores shared among its processes unless --threads says)"
        )
    return lines + binding_lines(spec)


def processes_by_host(spec: RunSpec) -> list[tuple[str, int, int]]:
    """(host, workers, other processes) where the launch starts them: this machine, or each host the backend's
    host_plan places processes on, whose workers fill the slots in order (bench.core.hostlist.placement) and whose
    other processes (a parameter server's servers) are the host's last local ranks."""
    others = sum(spec.roles.values()) - spec.world_size if spec.roles else 0
    if not spec.hosts:
        return [("this machine", spec.world_size, others)]
    hosts = [Host(**h) for h in spec.hosts]
    workers = dict((host.name, n) for host, n in placement(hosts, spec.world_size))
    planned = get_backend(spec.backend).host_plan(hosts, spec.world_size, spec.backend_options)
    return [(host.name, workers.get(host.name, 0), n - workers.get(host.name, 0)) for host, n, _ in planned]


def ranks_text(first: int, count: int) -> str:
    return f"local rank {first}" if count == 1 else f"local ranks {first}-{first + count - 1}"


def binding_lines(spec: RunSpec) -> list[str]:
    """Where each rank's threads may run, as bench.rank.numa.bind_cpus binds them (--cpu-bind as resolved): a line
    for the rule, then a line per host with each local rank's cores: this machine's by number (the cores this process
    may use, which its ranks inherit), a host's by position among the cores its ranks may use, or, bound by NUMA node,
    the rule its host applies when its ranks start."""
    threads = spec.threads
    rule = {
        "cores": f"every thread of a worker pinned to {threads} core(s) of its own, by local rank",
        "numa": "every thread of a GPU worker pinned to its share of its GPU's NUMA node's cores (GPU = local rank): "
        "the node's cores, as its host's sysfs lists them when the rank starts, split evenly among the workers whose "
        "GPUs are on that node, in local-rank order; a worker whose GPU's node is not known is left unbound and says "
        "so in its log",
        "none": "not bound: each process may run on every core its host lets it use",
    }.get(spec.cpu_bind, spec.cpu_bind)
    lines = [f"  CPU binding (--cpu-bind {spec.cpu_bind}, {threads} thread(s) a process): {rule}"]
    other_roles = ", ".join(role for role in spec.roles if role != "worker") if spec.roles else ""
    for host, workers, others in processes_by_host(spec):
        if spec.cpu_bind == "cores" and host == "this machine":
            allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(cpu_count()))
            ranks = [
                f"local rank {r}: core(s) "
                + ",".join(str(allowed[(r * threads + i) % len(allowed)]) for i in range(threads))
                for r in range(workers)
            ]
        elif spec.cpu_bind == "cores":
            ranks = [
                f"local rank {r}: its host's usable core(s) #{r * threads}"
                + (f"-#{(r + 1) * threads - 1}" if threads > 1 else "")
                for r in range(workers)
            ]
            ranks[-1:] = [f"{ranks[-1]} (in the order the host lists them, wrapping round past the last)"][: len(ranks)]
        elif spec.cpu_bind == "numa":
            ranks = [f"local rank {r}: GPU {r}'s NUMA node's share" for r in range(workers)]
        else:
            ranks = [f"{ranks_text(0, workers)}: not bound"] if workers else []
        if others:
            ranks.append(f"{ranks_text(workers, others)} ({other_roles}): not bound")
        lines.append(f"  cores of {host}: " + "; ".join(ranks))
    return lines


def print_plans(specs: list[RunSpec]) -> int:
    """Each launch's plan on stdout, numbered; nothing contacted, started or made. Exit 0."""
    for i, spec in enumerate(specs, 1):
        lines = plan_lines(plan_launch(spec))
        print(f"launch {i}/{len(specs)}: {lines[0]}")
        print("\n".join(lines[1:]), flush=True)
    print(f"dry run: {len(specs)} launch(es) planned; nothing was started, no host contacted, no store made")
    return 0
