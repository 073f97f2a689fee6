"""What the Kubeflow operators give each pod of a job: its environment, its files and the host names it is reached by,
rendered in Python from the operators' published rules, so that the manifests `bench k8s` writes (bench.cluster.k8s)
and a run that plays a job's pods on the test hosts can be checked without an API server.

The rules, as the operators' sources define them (the release each manifest targets):
- PyTorchJob (kubeflow.org/v1, kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go, elastic.go): one
  headless Service per replica, `<job>-<type>-<i>`; every container gets MASTER_ADDR/PET_MASTER_ADDR =
  `<job>-master-0`, MASTER_PORT/PET_MASTER_PORT, WORLD_SIZE (replicas x processes per node), RANK/PET_NODE_RANK
  (the master 0, worker i as i + 1), PET_NPROC_PER_NODE, and PET_NNODES (the replica count); under an elasticPolicy,
  PET_RDZV_BACKEND, PET_RDZV_ENDPOINT (`<job>-worker-0:<port>` unless a host is given), PET_NNODES=min:max and the
  optional PET_MAX_RESTARTS, PET_RDZV_CONF, PET_STANDALONE.
- MPIJob (kubeflow.org/v2beta1, kubeflow/mpi-operator v0.8.2 pkg/controller/mpi_job_controller.go): worker pods
  `<job>-worker-<i>` under one headless Service `<job>`; a ConfigMap at /etc/mpi (the launcher's only) with
  `hostfile` (`<pod>.<job>.<ns>.svc slots=N`) and `discover_hosts.sh` (`echo <pod>.<job>.<ns>.svc` for each running
  worker, by pod name, no slots: elastic Horovod's); an ssh key Secret (an ECDSA P-521 key) at /root/.ssh on every
  pod as `id_rsa`, `id_rsa.pub` and `authorized_keys`; the launcher's K_MPI_JOB_ROLE, OMPI_MCA_orte_*,
  OMPI_MCA_plm_rsh_args and NVIDIA_VISIBLE_DEVICES/NVIDIA_DRIVER_CAPABILITIES emptied, the workers' K_MPI_JOB_ROLE.
- TrainJob (trainer.kubeflow.org/v1alpha1, kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go): PET_NNODES,
  PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR = `<job>-node-0-0.<job>`, PET_MASTER_PORT = 29500; no elastic
  policy.

Imports nothing but the standard library: the parent and the tests read it."""

from __future__ import annotations

from dataclasses import dataclass

# what runs in a Kubeflow job's pods rest on: the operators' rules rendered here and tested on test hosts, with no
# run on a real cluster recorded yet (the page's scope line and docs/clusters.md say it; changed once one is)
SCOPE = "contract-tested, not cluster-tested"

PYTORCHJOB_API = "kubeflow.org/v1"
MPIJOB_API = "kubeflow.org/v2beta1"
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"

PYTORCH_CONTAINER = "pytorch"  # the training operator finds the port, and so the job's, on this container only
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_DEFAULT_PORT = 23456
RDZV_BACKEND_DEFAULT = "c10d"
TRAINJOB_MASTER_PORT = 29500
TRAINJOB_CONTAINER = "node"  # the torch-distributed runtime's trainer container
TRAINJOB_RUNTIME = "torch-distributed"

MPI_CONFIG_DIR = "/etc/mpi"
MPI_HOSTFILE = f"{MPI_CONFIG_DIR}/hostfile"
MPI_DISCOVER_HOSTS = f"{MPI_CONFIG_DIR}/discover_hosts.sh"
MPI_SSH_DIR = "/root/.ssh"
MPI_SSH_MODE = 0o600  # the Secret's files when sshAuthMountPath is /root/.ssh
MPI_HOSTFILE_MODE, MPI_DISCOVER_HOSTS_MODE = 0o444, 0o555
# what the mpi-operator gives the launcher for Open MPI (mpiImplementation: OpenMPI): its role, the hostfile, the
# workers' full names kept, ssh told to retry a worker whose sshd is not up yet; and the GPUs hidden from the
# launcher, which trains nothing (the variables set empty)
OPENMPI_LAUNCHER_ENV = {
    "K_MPI_JOB_ROLE": "launcher",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_default_hostfile": MPI_HOSTFILE,
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}
NVIDIA_HIDDEN = {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
# Open MPI 5 (PRRTE) reads none of the orte variables: with them alone it starts every rank on the launcher, so
# the launcher's bench command names the hostfile itself (bench.cluster.k8s.pod_command)


@dataclass(frozen=True)
class Elastic:
    """A PyTorchJob's elasticPolicy, as far as the suite writes it."""

    min_replicas: int
    max_replicas: int
    max_restarts: int | None = None
    rdzv_backend: str = RDZV_BACKEND_DEFAULT
    rdzv_host: str | None = None
    rdzv_port: int | None = None
    rdzv_conf: tuple[tuple[str, str], ...] = ()
    standalone: bool | None = None


def pytorchjob_service(job: str, replica_type: str, index: int) -> str:
    """The headless Service, and so the host name, of one replica."""
    return f"{job}-{replica_type.lower()}-{index}"


def pytorchjob_env(
    job: str,
    replica_type: str,
    index: int,
    *,
    masters: int,
    workers: int,
    nproc_per_node: int,
    port: int = PYTORCH_DEFAULT_PORT,
    elastic: Elastic | None = None,
) -> dict[str, str]:
    """The environment the training operator adds to each container of replica `index` of `replica_type`."""
    kind = replica_type.lower()
    if kind not in ("master", "worker"):
        raise ValueError(f"replica type {replica_type!r}: Master or Worker")
    env = {"PYTHONUNBUFFERED": "0"}  # the operator's value: any value at all unbuffers Python
    replicas = masters + workers
    if masters:
        rank = index + 1 if kind == "worker" else index
        master = pytorchjob_service(job, "master", 0)
        env.update(
            MASTER_PORT=str(port),
            PET_MASTER_PORT=str(port),
            MASTER_ADDR=master,
            PET_MASTER_ADDR=master,
            WORLD_SIZE=str(replicas * nproc_per_node),
            RANK=str(rank),
            PET_NODE_RANK=str(rank),
        )
    env["PET_NPROC_PER_NODE"] = str(nproc_per_node)
    if elastic is None:
        env["PET_NNODES"] = str(replicas)
        return env
    host = elastic.rdzv_host or pytorchjob_service(job, "worker", 0)
    env["PET_RDZV_BACKEND"] = elastic.rdzv_backend
    env["PET_RDZV_ENDPOINT"] = f"{host}:{elastic.rdzv_port or port}"
    env["PET_NNODES"] = f"{elastic.min_replicas}:{elastic.max_replicas}"
    if elastic.max_restarts is not None:
        env["PET_MAX_RESTARTS"] = str(elastic.max_restarts)
    if elastic.rdzv_conf:
        env["PET_RDZV_CONF"] = ",".join(f"{k}={v}" for k, v in elastic.rdzv_conf)
    if elastic.standalone:
        # the operator sets it to an empty string; torchrun reads PET_STANDALONE as the value of --standalone, a
        # flag that takes none, so "" is the form the operator gives and bench never sets it (standalone mode is
        # one node: not a job of several pods)
        env["PET_STANDALONE"] = ""
    return env


def trainjob_host(job: str, node: int) -> str:
    """The host name of node `node`: the JobSet's pod `<job>-node-0-<i>` under its headless Service `<job>`."""
    return f"{job}-node-0-{node}.{job}"


def trainjob_env(job: str, node: int, *, nodes: int, nproc_per_node: int) -> dict[str, str]:
    """The environment the Trainer's torch plugin gives node `node` of a TrainJob on the torch-distributed runtime."""
    return {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": str(nproc_per_node),
        "PET_NODE_RANK": str(node),
        "PET_MASTER_ADDR": trainjob_host(job, 0),
        "PET_MASTER_PORT": str(TRAINJOB_MASTER_PORT),
    }


def mpijob_worker(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def mpijob_host(job: str, namespace: str, index: int) -> str:
    """A worker's name as the hostfile gives it: the pod under the job's headless Service."""
    return f"{mpijob_worker(job, index)}.{job}.{namespace}.svc"


def mpijob_hostfile(job: str, namespace: str, workers: int, slots: int) -> str:
    """/etc/mpi/hostfile for Open MPI: one line per worker."""
    return "".join(f"{mpijob_host(job, namespace, i)} slots={slots}\n" for i in range(workers))


def mpijob_discover_hosts(job: str, namespace: str, running: list[int]) -> str:
    """/etc/mpi/discover_hosts.sh: the workers running now, in the order of their pod names (as strings: worker-10
    before worker-2), one `echo` each with no slots (horovodrun's --slots gives them); the operator rewrites it as
    pods come and go."""
    pods = sorted(running, key=lambda i: mpijob_worker(job, i))
    return "#!/bin/sh\n" + "".join(f"echo {mpijob_host(job, namespace, i)}\n" for i in pods)


def mpijob_launcher_env(slots: int) -> dict[str, str]:
    return {**OPENMPI_LAUNCHER_ENV, "OMPI_MCA_orte_set_default_slots": str(slots), **NVIDIA_HIDDEN}


def mpijob_worker_env() -> dict[str, str]:
    return {"K_MPI_JOB_ROLE": "worker"}


def mpijob_ssh_files(private_key: str, public_key: str) -> dict[str, str]:
    """The ssh Secret as every pod sees it at /root/.ssh (mode 0600): the private key as `id_rsa` whatever its type,
    the public key as `id_rsa.pub` and as `authorized_keys`, so that every pod reaches every other."""
    return {"id_rsa": private_key, "id_rsa.pub": public_key, "authorized_keys": public_key}


def mpijob_config_files(job: str, namespace: str, workers: int, slots: int, running: list[int]) -> dict[str, str]:
    """The ConfigMap as the launcher sees it at /etc/mpi."""
    return {
        "hostfile": mpijob_hostfile(job, namespace, workers, slots),
        "discover_hosts.sh": mpijob_discover_hosts(job, namespace, running),
    }
