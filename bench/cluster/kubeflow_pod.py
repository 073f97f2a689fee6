"""`bench run` inside a pod of a PyTorchJob or a TrainJob: the operator's variables read as the place of this pod in
one run spread over the job's pods (bench.cluster.kubeflow renders what each operator gives), and the hand-off by
which the pods that do not record the run find it.

Every pod runs the same `bench run`. The pod that leads (node rank 0: a PyTorchJob's master or a TrainJob's node 0;
under an elastic policy, which has no master, the pod the rendezvous endpoint names) runs the harness as for any run:
its launcher is one torchrun agent on this pod, wrapped by `python -m bench.cluster.kubeflow_pod lead`, which writes
the hand-off file (the run's id and its ranks' command) beside the store on the shared volume, and once the agent has
ended waits a bounded time for every rank's exit file (the other pods' ranks end at about the same moment, the last
collective being common) so that the record sees them. Each other pod waits for the hand-off and then becomes one
torchrun agent of the same run (`exec`, so that the pod ends with its agent, as the operator expects).

The agents' torchrun arguments are the operator's values, passed explicitly: a static rendezvous at the master with
the operator's node rank, or a c10d rendezvous at the elastic policy's endpoint with nnodes min:max. The rendezvous
id is the job's name, the one value every pod of it knows. The run's world is the job's pods x the operator's processes
per pod: under an elastic policy, whose PET_NNODES says only MIN:MAX, the pods the job starts (JOB_PODS_ENV, which
`bench k8s` sets in the container).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cluster import kubeflow as kf
from bench.core.errors import UsageError
from bench.core.rundir import RunDir, write_json_atomic

SCHEDULER = "kubeflow"  # the scheduler's name in a record, before the job's kind: "kubeflow PyTorchJob"
# how long the leading pod waits, once its own agent has ended, for the other pods' ranks to write their exit files
EXIT_FILES_GRACE_S = 30.0
POLL_S = 0.2
# the pods a job of an elastic policy starts, which `bench k8s` sets in their container (the operator's PET_NNODES says
# only MIN:MAX): the run's world is these pods' processes, not the most the policy allows
JOB_PODS_ENV = "BENCH_JOB_PODS"
MASTER = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-master-0$")
ELASTIC_WORKER0 = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-worker-0$")
TRAINJOB_NODE0 = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-node-0-0\.(?P=job)$")


def in_pod(env=None) -> bool:
    """Whether the operator's torchrun variables are set: a pod of a PyTorchJob or a TrainJob."""
    env = os.environ if env is None else env
    return bool(env.get("PET_NNODES") and env.get("PET_NPROC_PER_NODE"))


def of_kubeflow(scheduler: dict[str, Any] | None) -> bool:
    """Whether a spec's scheduler is a Kubeflow job (its name is `kubeflow <Kind>`): runs whose scope says how they
    were tested (kubeflow.SCOPE)."""
    return bool(scheduler) and str(scheduler.get("name", "")).split(" ")[0] == SCHEDULER


def of_pods(scheduler: dict[str, Any] | None) -> bool:
    """Whether a spec's scheduler is the pods of a PyTorchJob or a TrainJob, each one torchrun agent reached through
    the job's rendezvous, with no ssh between them. An MPIJob's run is its launcher's over ssh, as any run across
    hosts (mpijob_launcher)."""
    return of_kubeflow(scheduler) and scheduler is not None and scheduler["name"] != MPIJOB_SCHEDULER


MPIJOB_SCHEDULER = f"{SCHEDULER} MPIJob"
# a worker as the MPIJob's hostfile names it: the pod under the job's headless Service (kubeflow.mpijob_host)
MPIJOB_HOST = re.compile(
    r"^(?P<pod>(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-worker-\d+)\.(?P=job)\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc$"
)


def mpijob_launcher(host_names: list[str], env=None) -> dict[str, str] | None:
    """The scheduler of a run that an MPIJob's launcher makes (`bench run --hostfile /etc/mpi/hostfile` there, as
    `bench k8s --kind mpijob` writes it): where the operator's K_MPI_JOB_ROLE says "launcher" and every host is a
    worker of one job as its hostfile names them. The run itself is any run across hosts (ssh, the Secret's key);
    the record names the job, so that the page says how such runs were tested. None anywhere else."""
    env = os.environ if env is None else env
    if env.get("K_MPI_JOB_ROLE") != kf.OPENMPI_LAUNCHER_ENV["K_MPI_JOB_ROLE"] or not host_names:
        return None
    found = [MPIJOB_HOST.match(name) for name in host_names]
    jobs = {m["job"] for m in found if m}
    if not all(found) or len(jobs) != 1:
        return None
    return {"name": MPIJOB_SCHEDULER, "job_id": jobs.pop(), "nodelist": ",".join(m["pod"] for m in found if m)}


@dataclass(frozen=True)
class PodPlace:
    """This pod's place in the job, from the operator's variables."""

    kind: str  # PyTorchJob or TrainJob, as the record names it
    job: str
    nnodes: str  # "N", or "MIN:MAX" under an elastic policy
    nproc_per_node: int
    hosts: tuple[str, ...]  # every pod's host name, in node order (the most pods under an elastic policy)
    leads: bool
    node_rank: int | None = None  # a static rendezvous's: the operator's
    master: tuple[str, int] | None = None  # a static rendezvous at (address, port)
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    max_restarts: int = 0
    rdzv_conf: str | None = None
    found: bool = False  # found by its variables, not asked for with --scheduler kubeflow

    @property
    def scheduler(self) -> dict[str, str]:
        return {"name": f"{SCHEDULER} {self.kind}", "job_id": self.job, "nodelist": ",".join(self.hosts)}

    def agent_args(self) -> list[str]:
        """torchrun's arguments for this pod's agent: the operator's values, explicitly."""
        args = ["--nnodes", self.nnodes, "--nproc-per-node", str(self.nproc_per_node)]
        if self.master is not None:
            args += ["--node-rank", str(self.node_rank), "--master-addr", self.master[0]]
            args += ["--master-port", str(self.master[1])]
        else:
            args += ["--rdzv-backend", str(self.rdzv_backend), "--rdzv-endpoint", str(self.rdzv_endpoint)]
            args += ["--rdzv-id", self.job]
            if self.rdzv_conf:
                args += ["--rdzv-conf", self.rdzv_conf]
        return [*args, "--max-restarts", str(self.max_restarts)]


def _number(env, name: str, least: int) -> int:
    value = env.get(name, "")
    if not value.isdigit() or int(value) < least:
        raise UsageError(
            f"--scheduler kubeflow: {name}={value!r} is not a number as the operators give it (at least {least}); "
            "run bench in a pod of the job `bench k8s` writes"
        )
    return int(value)


def pod_place(env=None, hostname: str | None = None) -> PodPlace:
    """This pod's place from the variables the training operator (PyTorchJob) or the Trainer (TrainJob) set; a
    one-line UsageError where they are not the operators' (bench.cluster.kubeflow)."""
    env = os.environ if env is None else env
    hostname = hostname or socket.gethostname()
    if not in_pod(env):
        raise UsageError(
            "--scheduler kubeflow: no PET_NNODES and PET_NPROC_PER_NODE here; run it in a pod of the "
            "PyTorchJob or TrainJob that `bench k8s` writes"
        )
    nnodes, nproc = env["PET_NNODES"], _number(env, "PET_NPROC_PER_NODE", 1)
    endpoint = env.get("PET_RDZV_ENDPOINT")
    if endpoint:  # a PyTorchJob's elastic policy: workers only, c10d at worker 0
        host, _, port = endpoint.rpartition(":")
        worker0, (low, _, high) = ELASTIC_WORKER0.match(host), nnodes.partition(":")
        if worker0 is None or not port.isdigit() or not (low.isdigit() and high.isdigit()):
            raise UsageError(
                f"--scheduler kubeflow: PET_RDZV_ENDPOINT={endpoint} with PET_NNODES={nnodes} is not what the "
                "training operator gives an elastic policy (<job>-worker-0:PORT, MIN:MAX)"
            )
        job = worker0.group("job")
        restarts = env.get("PET_MAX_RESTARTS", "0")
        pods = int(high)  # a manifest not of `bench k8s`: the most pods the policy allows
        if JOB_PODS_ENV in env:
            pods = _number(env, JOB_PODS_ENV, 1)
            if not int(low) <= pods <= int(high):
                raise UsageError(
                    f"--scheduler kubeflow: {JOB_PODS_ENV}={pods} with PET_NNODES={nnodes}: the job's pods must be "
                    "within the elastic policy's MIN:MAX"
                )
        return PodPlace(
            kind="PyTorchJob",
            job=job,
            nnodes=nnodes,
            nproc_per_node=nproc,
            hosts=tuple(kf.pytorchjob_service(job, "worker", i) for i in range(pods)),
            leads=hostname.split(".")[0] == host,
            rdzv_backend=env.get("PET_RDZV_BACKEND", kf.RDZV_BACKEND_DEFAULT),
            rdzv_endpoint=endpoint,
            max_restarts=int(restarts) if restarts.isdigit() else 0,
            rdzv_conf=env.get("PET_RDZV_CONF") or None,
        )
    address, port = env.get("PET_MASTER_ADDR", ""), env.get("PET_MASTER_PORT", "")
    if not nnodes.isdigit() or not port.isdigit():
        raise UsageError(
            f"--scheduler kubeflow: PET_NNODES={nnodes!r}, PET_MASTER_PORT={port!r}: a static rendezvous needs a "
            "number of pods and the master's port, as the operators give them"
        )
    nodes, rank = int(nnodes), _number(env, "PET_NODE_RANK", 0)
    if (master := MASTER.match(address)) is not None:
        job = master.group("job")
        kind = "PyTorchJob"
        hosts = [kf.pytorchjob_service(job, "master", 0)] + [
            kf.pytorchjob_service(job, "worker", i) for i in range(nodes - 1)
        ]
    elif (node0 := TRAINJOB_NODE0.match(address)) is not None:
        job = node0.group("job")
        kind = "TrainJob"
        hosts = [kf.trainjob_host(job, i).split(".")[0] for i in range(nodes)]
    else:
        raise UsageError(
            f"--scheduler kubeflow: PET_MASTER_ADDR={address!r} names neither a PyTorchJob's master (<job>-master-0) "
            "nor a TrainJob's first node (<job>-node-0-0.<job>)"
        )
    if rank >= nodes:
        raise UsageError(f"--scheduler kubeflow: PET_NODE_RANK={rank} with PET_NNODES={nodes}: no such pod")
    return PodPlace(
        kind=kind,
        job=job,
        nnodes=nnodes,
        nproc_per_node=nproc,
        hosts=tuple(hosts),
        leads=rank == 0,
        node_rank=rank,
        master=(address, int(port)),
    )


# ---------------------------------------------------------------- the hand-off between the pods
def handoff_file(runs_folder: str | os.PathLike[str], job: str) -> Path:
    """Where the leading pod says which run the others join: beside the run directories, on the shared volume."""
    return Path(runs_folder) / f"kubeflow-{job}.json"


def wait_for_handoff(path: Path, timeout: float) -> dict[str, Any]:
    """The leading pod's hand-off, once it is there; a UsageError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # not written yet (written atomically, so never half)
            if time.monotonic() > deadline:
                raise UsageError(
                    f"bench: no hand-off from the job's leading pod at {path} after {timeout:g} s; the pods must share "
                    "the store's volume (bench k8s --results-claim)"
                ) from None
            time.sleep(POLL_S)


def lead_command(place: PodPlace, runs_folder: Path, run_id: str, rank_command: list[str], agent: list[str]):
    """The leading pod's launcher: its agent (`agent`, the whole torchrun command) under `lead`."""
    world = len(place.hosts) * place.nproc_per_node
    handoff = {"job": place.job, "run_id": run_id, "rank_command": rank_command}
    return [
        sys.executable,
        "-m",
        "bench.cluster.kubeflow_pod",
        "lead",
        str(handoff_file(runs_folder, place.job)),
        json.dumps(handoff),
        str(world),
        "--",
        *agent,
    ]


def lead(handoff_path: str, handoff: str, world: int, agent: list[str]) -> int:
    """Write the hand-off, run this pod's agent, then wait (bounded) for every rank's exit file; the hand-off is
    removed at the end, so that a later job of the same name never reads this one's."""
    path = Path(handoff_path)
    write_json_atomic(path, json.loads(handoff))
    run_dir = RunDir(_run_dir_of(json.loads(handoff)["rank_command"]))
    try:
        returncode = subprocess.call(agent)
        deadline = time.monotonic() + EXIT_FILES_GRACE_S
        while len({rank for rank, _ in run_dir.read_all("exit")}) < world and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return returncode
    finally:
        path.unlink(missing_ok=True)


def _run_dir_of(rank_command: list[str]) -> str:
    """The run directory in the ranks' command (`python -m bench.harness.guard RUN_DIR BACKEND`)."""
    return rank_command[rank_command.index("bench.harness.guard") + 1]


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[0] == "lead" and argv[4] == "--":
        return lead(argv[1], argv[2], int(argv[3]), argv[5:])
    print("usage: python -m bench.cluster.kubeflow_pod lead HANDOFF_FILE HANDOFF WORLD -- AGENT...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
