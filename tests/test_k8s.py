"""`bench k8s` and the operators' rules it is built on, without a cluster: the environment and files each Kubeflow
operator gives a pod (bench.cluster.kubeflow) against the operators' own values, every manifest against the real
CRD schemas (read from ../shared/k8s/crds, skipped where that folder is absent) and the operators' admission rules,
and bad input refused in one line with nothing written."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bench.cli import common
from bench.cluster import k8s, kubeflow_pod
from bench.cluster import kubeflow as kf
from bench.cluster.hosts import remote_shell, ssh_command
from bench.core.codec import RECORD_LINE_MARK, read_record_line
from bench.core.errors import UsageError
from bench.core.hostlist import read_hostfile
from bench.core.registry import get_backend
from bench.core.rundir import RunDir
from bench.core.store import Store
from bench.tasks.train import build_spec
from bench.testbed import hosts as testhosts
from conftest import FAST, ROOT, assert_one_line_error, bench, bench_in_process, held_test_hosts
from needs import needs

CRD_DIR = ROOT.parent / "shared" / "k8s" / "crds"
needs_crds = pytest.mark.skipif(
    not (CRD_DIR / k8s.CRD_FILES["pytorchjob"]).is_file(),
    reason=f"the operators' CRD files are not at {CRD_DIR} (they are not part of the project)",
)
IMAGE = "registry.example.com/bench:1.0"


def request(kind: str, **kw) -> k8s.JobRequest:
    return k8s.JobRequest(**{"kind": kind, "name": "bench", "image": IMAGE, "nodes": 2, "nproc_per_node": 2, **kw})


EVERY_JOB = {
    "pytorchjob": request("pytorchjob", cpus_per_pod="4", results_claim="results"),
    "pytorchjob-elastic": request("pytorchjob", elastic=kf.Elastic(1, 3, max_restarts=2), results_claim="results"),
    "mpijob": request("mpijob", gpus_per_pod=2, memory_per_pod="16Gi"),
    "mpijob-drop-worker": request(
        "mpijob", drop_worker=True, results_claim="results", bench_args=("--backend", "horovod", "--nproc", "4")
    ),
    "trainjob": request("trainjob", gpus_per_pod=8, nproc_per_node=8, cpus_per_pod="500m"),
    "trainjob-results": request("trainjob", results_claim="results"),
    "pytorchjob-gpus-elastic": request(
        "pytorchjob", gpus_per_pod=8, nproc_per_node=8, elastic=kf.Elastic(2, 3), results_claim="results"
    ),
}


# ---------------------------------------------------------------- the operators' rules, against their values
def test_pytorchjob_env_is_the_training_operators():
    master = kf.pytorchjob_env("job", "Master", 0, masters=1, workers=2, nproc_per_node=4)
    assert master["MASTER_ADDR"] == master["PET_MASTER_ADDR"] == "job-master-0"
    assert master["MASTER_PORT"] == master["PET_MASTER_PORT"] == "23456"
    assert (master["RANK"], master["PET_NODE_RANK"], master["WORLD_SIZE"]) == ("0", "0", "12")
    assert (master["PET_NPROC_PER_NODE"], master["PET_NNODES"]) == ("4", "3")
    worker = kf.pytorchjob_env("job", "Worker", 1, masters=1, workers=2, nproc_per_node=4, port=29400)
    assert (worker["RANK"], worker["PET_NODE_RANK"], worker["PET_MASTER_PORT"]) == ("2", "2", "29400")
    assert "PET_RDZV_ENDPOINT" not in worker
    assert kf.pytorchjob_service("job", "Worker", 1) == "job-worker-1"


def test_pytorchjob_elastic_env():
    elastic = kf.Elastic(1, 4, max_restarts=3, rdzv_conf=(("join_timeout", "600"),), standalone=True)
    env = kf.pytorchjob_env("job", "Worker", 0, masters=0, workers=2, nproc_per_node=1, elastic=elastic)
    assert env["PET_RDZV_ENDPOINT"] == "job-worker-0:23456"  # the operator's default: worker 0
    assert (env["PET_RDZV_BACKEND"], env["PET_NNODES"], env["PET_MAX_RESTARTS"]) == ("c10d", "1:4", "3")
    assert env["PET_RDZV_CONF"] == "join_timeout=600"
    assert env["PET_STANDALONE"] == ""
    assert "MASTER_ADDR" not in env  # no Master replica: no master variables
    other = kf.pytorchjob_env(
        "job",
        "Worker",
        0,
        masters=0,
        workers=2,
        nproc_per_node=1,
        elastic=kf.Elastic(2, 2, rdzv_host="rdzv", rdzv_port=1),
    )
    assert other["PET_RDZV_ENDPOINT"] == "rdzv:1"
    assert "PET_MAX_RESTARTS" not in other and "PET_STANDALONE" not in other


def test_trainjob_env_is_the_trainers():
    env = kf.trainjob_env("tj", 1, nodes=3, nproc_per_node=8)
    assert env == {
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "8",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "tj-node-0-0.tj",
        "PET_MASTER_PORT": "29500",
    }


def test_mpijob_files_are_the_mpi_operators():
    """Against the values of the mpi-operator's own tests (v0.8.2, pkg/controller/mpi_job_controller_test.go)."""
    assert kf.mpijob_hostfile("hj", "ml", 2, 4) == "hj-worker-0.hj.ml.svc slots=4\nhj-worker-1.hj.ml.svc slots=4\n"
    script = kf.mpijob_discover_hosts("test-job", "default", [1, 0])
    assert (
        script
        == "#!/bin/sh\necho test-job-worker-0.test-job.default.svc\necho test-job-worker-1.test-job.default.svc\n"
    )
    assert kf.mpijob_discover_hosts("test-job", "default", []) == "#!/bin/sh\n"
    # in the order of the pods' names, as strings
    assert kf.mpijob_discover_hosts("j", "n", [2, 10, 0]).split("\n")[1:4] == [
        "echo j-worker-0.j.n.svc",
        "echo j-worker-10.j.n.svc",
        "echo j-worker-2.j.n.svc",
    ]
    assert kf.mpijob_launcher_env(1) == {
        "K_MPI_JOB_ROLE": "launcher",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": "1",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }
    assert kf.mpijob_worker_env() == {"K_MPI_JOB_ROLE": "worker"}
    assert kf.mpijob_ssh_files("PRIVATE", "PUBLIC") == {
        "id_rsa": "PRIVATE",
        "id_rsa.pub": "PUBLIC",
        "authorized_keys": "PUBLIC",
    }


# ---------------------------------------------------------------- manifests: schema and admission
@needs_crds
@pytest.mark.parametrize("case", sorted(EVERY_JOB))
def test_every_manifest_passes_the_crd_schema_and_admission(case):
    manifest = k8s.build(EVERY_JOB[case])
    assert k8s.schema_errors(manifest, CRD_DIR) == []
    assert k8s.admission_errors(manifest) == []
    assert yaml.safe_load(k8s.to_yaml([manifest])) == manifest  # written as built, no anchors to resolve


@needs_crds
def test_schema_refuses_unknown_fields_and_wrong_types():
    manifest = k8s.build(EVERY_JOB["trainjob"])
    bad = copy.deepcopy(manifest)
    bad["spec"]["trainer"]["numNode"] = 2  # a misspelt field: pruned by the API server, refused here
    bad["spec"]["trainer"]["numNodes"] = "2"
    errors = k8s.schema_errors(bad, CRD_DIR)
    assert any("'numNode' was unexpected" in e for e in errors)
    assert any(e.startswith("spec.trainer.numNodes") for e in errors)
    job = k8s.build(EVERY_JOB["pytorchjob"])
    job["spec"]["nprocPerNode"] = 2  # a string in the CRD, not an int-or-string
    assert any(e.startswith("spec.nprocPerNode") for e in k8s.schema_errors(job, CRD_DIR))


@needs_crds
def test_int_or_string_takes_either_and_keeps_its_pattern():
    job = k8s.build(EVERY_JOB["pytorchjob"])
    limits = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"] = 4
    assert k8s.schema_errors(job, CRD_DIR) == []
    limits["cpu"] = "four cores"
    assert any("limits.cpu" in e for e in k8s.schema_errors(job, CRD_DIR))


def test_admission_rules():
    job = k8s.build(EVERY_JOB["pytorchjob"])
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    errors = k8s.admission_errors(job)
    assert "pytorchReplicaSpecs.Master.replicas: must be 1" in errors
    assert "pytorchReplicaSpecs.Worker: no container named 'pytorch'" in errors
    elastic = k8s.build(EVERY_JOB["pytorchjob-elastic"])
    elastic["spec"]["pytorchReplicaSpecs"] = {"Master": elastic["spec"]["pytorchReplicaSpecs"]["Worker"]}
    assert "elasticPolicy: needs Worker replicas" in k8s.admission_errors(elastic)
    mpi = k8s.build(EVERY_JOB["mpijob"])
    mpi["metadata"]["name"] = "Bench_1"
    assert any(e.startswith("metadata.name") for e in k8s.admission_errors(mpi))


def test_manifest_shapes():
    job = k8s.build(EVERY_JOB["pytorchjob"])
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    command = replicas["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[-3:] == ["--record-lines", "--store", "/results/bench.sqlite"]  # the record in the log too
    elastic = k8s.build(EVERY_JOB["pytorchjob-elastic"])
    assert list(elastic["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert elastic["spec"]["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "maxRestarts": 2,
    }
    mpi = k8s.build(EVERY_JOB["mpijob"])["spec"]
    launcher = mpi["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "resources" not in launcher and launcher["command"][-2:] == ["--hostfile", "/etc/mpi/hostfile"]
    worker = mpi["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["/usr/sbin/sshd", "-De"] and worker["resources"]["limits"]["nvidia.com/gpu"] == 2
    train = k8s.build(EVERY_JOB["trainjob"])["spec"]
    assert train["runtimeRef"]["name"] == "torch-distributed" and train["trainer"]["numProcPerNode"] == 8
    # --drop-worker: the launcher runs bench fault over the operator's discover_hosts.sh, dropping the last worker;
    # the workers still run sshd alone
    dropping = k8s.build(EVERY_JOB["mpijob-drop-worker"])["spec"]["mpiReplicaSpecs"]
    [launcher] = dropping["Launcher"]["template"]["spec"]["containers"]
    assert launcher["command"] == [
        "python", "-m", "bench", "fault", "--backend", "horovod", "--nproc", "4", "--record-lines",
        "--store", "/results/bench.sqlite", "--hostfile", "/etc/mpi/hostfile",
        "--hvd-discovery-script", "/etc/mpi/discover_hosts.sh", "--drop-host", "bench-worker-1.bench.default.svc",
    ]  # fmt: skip
    assert dropping["Worker"]["template"]["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]


# ---------------------------------------------------------------- the verb
def test_verb_writes_a_manifest_that_parses(tmp_path):
    out = tmp_path / "job.yaml"
    proc = bench_in_process(
        "k8s", "--image", IMAGE, "--nodes", "3", "--min-nodes", "2", "--max-nodes", "4", "--results-claim", "res",
        "-o", out, "--", "--workload", "mnist_mlp",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (manifest,) = yaml.safe_load_all(out.read_text())
    assert manifest["kind"] == "PyTorchJob" and manifest["spec"]["elasticPolicy"]["maxReplicas"] == 4
    [container] = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    # no world size fixed in the command: the pods take it from the operator's variables and the pods the job starts
    assert container["command"][:8] == [
        "python",
        "-m",
        "bench",
        "run",
        "--backend",
        "elastic",
        "--workload",
        "mnist_mlp",
    ]
    assert container["env"] == [{"name": kubeflow_pod.JOB_PODS_ENV, "value": "3"}]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--nodes", "2", "--", "--nproc", "5"], "the job holds 2 pods x 1 ranks = 2"),
        (["--gpus-per-node", "2"], "whose name says no CUDA build"),
        (["--gpus-per-node", "2", "--nproc-per-node", "4", "--image-has-cuda"], "one rank per GPU"),
        (["--name", "Bench_Job"], "DNS-1035"),
        (["--name", "a" * 60], "the operator names a Service"),
        (["--nodes", "5", "--min-nodes", "1", "--max-nodes", "3"], "min <= nodes <= max"),
        (["--kind", "mpijob", "--min-nodes", "1"], "an elastic policy is a PyTorchJob's"),
        (["--", "--backend", "horovod"], "--backend after --: the manifest sets it"),
        (["--", "--record-lines"], "--record-lines after --: the manifest sets it"),
        (["--", "--json"], "--json after --: the pods print their record as a marked line"),
        (["--gpus-per-node", "1", "--image-has-cuda", "--", "--gpus", "1"], "--gpus after --: the manifest sets it"),
        (["--", "--workload", "nosuch"], "the arguments after --"),
        (["--crd-dir", "/nonexistent/crds"], "must hold the operators' CRD files"),
        (["--drop-worker"], "--drop-worker: a worker dropped from the operator's discover_hosts.sh is an MPIJob's"),
        (["--kind", "mpijob", "--drop-worker", "--nodes", "1"], "--drop-worker needs --nodes 2 or more"),
        (["--kind", "mpijob", "--drop-worker", "--", "--drop-host", "h"], "--drop-host after --: the manifest sets"),
        (["--kind", "mpijob", "--drop-worker", "--", "--at-step", "0"], "the arguments after --"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, fragment):
    out = tmp_path / "job.yaml"
    proc = bench_in_process("k8s", "--image", IMAGE, "-o", out, *args)
    assert_one_line_error(proc, fragment)
    assert not out.exists()


def test_image_is_required(tmp_path):
    assert_one_line_error(bench_in_process("k8s", "--nodes", "2"), "--image")


def test_gpu_image_is_taken():
    proc = bench_in_process(
        "k8s",
        "--kind",
        "trainjob",
        "--image",
        "nvcr.io/nvidia/pytorch:25.01-py3",
        "--gpus-per-node",
        "8",
        "--results-claim",
        "res",
    )
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 8


# ---------------------------------------------------------------- torchrun reads the operators' environment
def test_torchrun_refuses_the_operators_empty_pet_standalone(tmp_path):
    """The training operator sets PET_STANDALONE to an empty string; torchrun reads it as an integer and stops before
    it parses anything, so bench's manifests never ask for standalone mode."""
    env = kf.pytorchjob_env(
        "j", "Worker", 0, masters=0, workers=1, nproc_per_node=1, elastic=kf.Elastic(1, 1, standalone=True)
    )
    assert env["PET_STANDALONE"] == ""
    argv = [sys.executable, "-m", "torch.distributed.run", "--no-python", "true"]
    proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "invalid literal for int() with base 10: ''" in proc.stderr


# ---------------------------------------------------------------- contract run: each pod a process on a test host
# one training step of a tiny network under the group torchrun forms from the operator's variables; each rank writes
# what it saw (rank, world size, its host name, its parameters after the step)
POD_STEP = """
import json, os, socket, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
x = torch.randn(8, 4) + dist.get_rank()
loss = net(x).pow(2).mean()
loss.backward()
for p in net.parameters():
    dist.all_reduce(p.grad)
    p.grad /= dist.get_world_size()
with torch.no_grad():
    for p in net.parameters():
        p -= 0.1 * p.grad
params = [float(v) for v in torch.cat([p.flatten() for p in net.parameters()])]
row = dict(rank=dist.get_rank(), world=dist.get_world_size(), host=socket.gethostname(),
           node_rank=os.environ.get("GROUP_RANK"), params=params)
open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w").write(json.dumps(row))
dist.destroy_process_group()
"""


POD_NAMES = "# the job's pods\n"  # the line after which a case writes its pods' names


def pods_of(kind: str, job: str = "bench") -> list[tuple[str, list[str], dict[str, str]]]:
    """(pod host name, the names it is reached by, the operator's environment) of a two-pod job of `kind`."""
    if kind == "pytorchjob":
        return [
            (name, [name], kf.pytorchjob_env(job, rtype, i, masters=1, workers=1, nproc_per_node=1))
            for name, rtype, i in ((f"{job}-master-0", "Master", 0), (f"{job}-worker-0", "Worker", 0))
        ]
    if kind == "pytorchjob-elastic":
        elastic = kf.Elastic(1, 2, rdzv_conf=(("join_timeout", "60"),))
        return [
            (
                f"{job}-worker-{i}",
                [f"{job}-worker-{i}"],
                kf.pytorchjob_env(job, "Worker", i, masters=0, workers=2, nproc_per_node=1, elastic=elastic),
            )
            for i in range(2)
        ]
    return [
        (
            f"{job}-node-0-{i}",
            [kf.trainjob_host(job, i), f"{job}-node-0-{i}"],
            kf.trainjob_env(job, i, nodes=2, nproc_per_node=1),
        )
        for i in range(2)
    ]


@pytest.fixture(scope="module")
def pod_hosts():
    """Three test hosts whose hosts files also name the pods, as the job's headless Services do (one user of the test
    hosts at a time: the lock test_testhosts.py takes)."""
    with held_test_hosts(
        3
    ) as hosts:  # two for a two-pod job, one more for an MPIJob's launcher pod where it needs its own
        yield hosts


def name_the_pods(pod_hosts, pods) -> None:
    """Each test host's hosts file names the pods, one pod a host: the cluster's DNS for this job."""
    names = "".join(f"{host.address} {' '.join(aliases)}\n" for host, (_, aliases, _) in zip(pod_hosts, pods))
    for host in pod_hosts:  # the namespace's hosts file, bound over /etc/hosts there
        hosts_file = testhosts.NETNS_ETC / host.name / "hosts"
        base = hosts_file.read_text().split(POD_NAMES)[0]
        with open(hosts_file, "w") as f:  # rewritten in place: the bind mount holds this file, not its name
            f.write(f"{base}{POD_NAMES}{names}")


def as_pod(
    host, pod: str, argv: list[str], env: dict[str, str], cwd: str | None = None, mounts: dict[str, Path] | None = None
) -> subprocess.Popen:
    """argv on a test host as the pod `pod` runs it: over ssh with the operator's environment, under the pod's own
    host name (a UTS namespace of its own, as Kubernetes gives each pod), with `mounts` (path in the pod: what is
    there) bound in a mount namespace of its own, which the machine's own files never see."""
    inner = remote_shell(argv, env, cwd)
    binds = "".join(
        f"mount --bind {shlex.quote(str(src))} {shlex.quote(dst)} && " for dst, src in (mounts or {}).items()
    )
    namespaces = ["--uts", "--mount"] if mounts else ["--uts"]
    return subprocess.Popen(
        ssh_command(host.address, ["unshare", *namespaces, "sh", "-c", f"hostname {pod} && {binds}{inner}"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@needs("hosts")
@pytest.mark.parametrize("kind", ["pytorchjob", "pytorchjob-elastic", "trainjob"])
def test_contract_run_one_step_with_the_operators_environment(pod_hosts, kind, tmp_path):
    pods = pods_of(kind)
    name_the_pods(pod_hosts, pods)
    script = tmp_path / "step.py"
    script.write_text(POD_STEP)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--log-dir",  # not the agent's default, a torchelastic_* folder it leaves in the test hosts' shared /tmp
        os.devnull,
        "--no-python",
        sys.executable,
        str(script),
        str(tmp_path),
    ]
    procs = [as_pod(host, pod, torchrun, env) for host, (pod, _, env) in zip(pod_hosts, pods)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    rows = sorted((json.loads(f.read_text()) for f in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [r["rank"] for r in rows] == [0, 1] and {r["world"] for r in rows} == {2}, outputs
    assert sorted(r["host"] for r in rows) == sorted(pod for pod, _, _ in pods)  # one host name per pod
    assert rows[0]["params"] == rows[1]["params"]  # the step was one step of one group: the same parameters
    if kind != "pytorchjob-elastic":  # a static rendezvous keeps the operator's node ranks; c10d assigns its own
        assert {r["host"]: r["node_rank"] for r in rows} == {pod: env["PET_NODE_RANK"] for pod, _, env in pods}


@pytest.mark.slow
@needs("hosts")
@pytest.mark.parametrize("kind", ["pytorchjob", "pytorchjob-elastic", "trainjob"])
def test_contract_run_bench_run_in_each_pod_is_one_run_and_one_record(pod_hosts, kind, tmp_path):
    """Each pod of a two-pod job runs `bench run` itself, as `bench k8s` writes it, with the operator's environment:
    the pod of node rank 0 (a PyTorchJob's master, a TrainJob's first node; under the elastic policy 1:2 worker 0,
    where the rendezvous is) leads and records, the other joins; one run, one record, which the leading pod's log
    holds as a marked line."""
    pods = pods_of(kind)
    name_the_pods(pod_hosts, pods)
    store = tmp_path / "results" / "bench.sqlite"
    argv = [sys.executable, "-m", "bench", "run", "--workload", "mnist_mlp", *FAST, "--store", str(store)]
    procs = [
        as_pod(host, pod, [*argv, "--record-lines"], {**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
        for host, (pod, _, env) in zip(pod_hosts, pods)
    ]
    outputs = [p.communicate(timeout=150) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "leads the run and records it" in outputs[0][1] and "joins the run" in outputs[1][1], outputs
    [line] = [x for x in outputs[0][0].splitlines() if x.startswith(RECORD_LINE_MARK)]
    assert outputs[1][0] == ""  # the joining pod's log holds no record
    record = read_record_line(line)
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["scheduler"] == {
        "name": "kubeflow TrainJob" if kind == "trainjob" else "kubeflow PyTorchJob",
        "job_id": "bench",
        "nodelist": ",".join(pod for pod, _, _ in pods),
    }
    assert record["spec"]["world_size"] == 2 and record["spec"]["machines"] is None
    rows = sorted(record["rank_map"], key=lambda r: r["rank"])
    assert [r["rank"] for r in rows] == [0, 1] and {r["world_size"] for r in rows} == {2}
    # one host name per pod; a static rendezvous keeps the operator's node ranks, c10d gives its own
    assert sorted(r["host"] for r in rows) == sorted(pod for pod, _, _ in pods)
    if kind != "pytorchjob-elastic":
        assert {r["host"]: r["group_rank"] for r in rows} == {pod: int(env["PET_NODE_RANK"]) for pod, _, env in pods}
    assert len(record["metrics"]["window_times_s"]) == 2 and len(record["metrics"]["per_rank"]) == 2
    stored = Store(store).records()
    assert [r.to_dict() for r in stored] == [record]  # the joining pod stored nothing of its own
    assert not kubeflow_pod.handoff_file(store.parent / "runs", "bench").exists()


@pytest.mark.slow
@needs("hosts")
@pytest.mark.parametrize(
    "case, args",
    [
        ("pytorchjob-elastic-below-max", ["--nodes", "2", "--min-nodes", "2", "--max-nodes", "3"]),
        ("trainjob-results", ["--kind", "trainjob", "--nodes", "2"]),
    ],
    ids=["pytorchjob-elastic-below-max", "trainjob-results"],
)
def test_contract_run_the_manifests_pod_command_in_its_pods(pod_hosts, case, args, tmp_path):
    """The manifest `bench k8s` writes, its pods' command run as written on the test hosts, one pod a host, with the
    operator's environment and the container's own: an elastic PyTorchJob that starts 2 pods of at most 3
    (PET_NNODES=2:3) trains on the 2 there are; a TrainJob mounts the results claim at /results in its nodes, where
    the leading pod's command stores the record (the claim played by a folder, its mount path mapped onto it)."""
    claim = tmp_path / "claim"
    claim.mkdir()
    proc = bench_in_process(
        "k8s", "--image", k8s.RECIPE_IMAGE, *args, "--results-claim", "res", "--", "--workload", "mnist_mlp", *FAST
    )
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load(proc.stdout)
    pods = operator_pods(manifest)
    assert len(pods) == 2
    for _, _, env, pod in pods:  # the claim at /results in every pod: the command's store is on it
        assert pod["mounts"][k8s.RESULTS_MOUNT] == {"name": "results", "persistentVolumeClaim": {"claimName": "res"}}
        assert f"{k8s.RESULTS_MOUNT}/bench.sqlite" in pod["command"]
        if case.startswith("pytorchjob-elastic"):
            assert env["PET_NNODES"] == "2:3" and "WORLD_SIZE" not in env
    name_the_pods(pod_hosts, [(name, aliases, env) for name, aliases, env, _ in pods])
    procs = [
        as_pod(
            host,
            name,
            placed_command(pod["command"], {k8s.RESULTS_MOUNT: claim}),
            {**env, "PYTHONPATH": str(ROOT)},
            cwd=str(ROOT),
        )
        for host, (name, _, env, pod) in zip(pod_hosts, pods)
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    [line] = [x for x in outputs[0][0].splitlines() if x.startswith(RECORD_LINE_MARK)]
    record = read_record_line(line)
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["world_size"] == 2
    assert sorted(r["host"] for r in record["rank_map"]) == [name for name, _, _, _ in pods]
    assert record["spec"]["scheduler"]["nodelist"] == ",".join(name for name, _, _, _ in pods)
    # the record is on the claim, where the command's --store names it under /results
    assert [r.to_dict() for r in Store(claim / "bench.sqlite").records()] == [record]


# each round of the group (a start, or a restart after a pod is lost) writes one line: its rank, world size, host
# name, restart count and process ids; it trains until the test's stop file exists, a few steps once alone
POD_ROUNDS = """
import json, os, socket, sys, time
import torch, torch.distributed as dist
out = sys.argv[1]
dist.init_process_group("gloo")
row = dict(rank=dist.get_rank(), world=dist.get_world_size(), host=socket.gethostname(),
           restart=int(os.environ["TORCHELASTIC_RESTART_COUNT"]), pid=os.getpid(), agent=os.getppid())
with open(os.path.join(out, "rounds.jsonl"), "a") as f:
    f.write(json.dumps(row) + "\\n")
t = torch.ones(1)
steps = 0
while steps < 5 or (dist.get_world_size() > 1 and time.monotonic() < float(sys.argv[2])):
    dist.all_reduce(t)
    steps += 1
    time.sleep(0.02)
dist.destroy_process_group()
"""


@pytest.mark.slow
@needs("hosts")
def test_contract_run_elastic_pod_lost_the_other_goes_on(pod_hosts, tmp_path):
    """Under the elastic policy 1:2, the second pod's agent and rank killed: the first pod's agent restarts its
    rank, which re-rendezvouses alone (world size 1) and finishes."""
    job = "bench"
    elastic = kf.Elastic(1, 2, max_restarts=2, rdzv_conf=(("last_call_timeout", "1"), ("join_timeout", "60")))
    pods = [
        (
            f"{job}-worker-{i}",
            kf.pytorchjob_env(job, "Worker", i, masters=0, workers=2, nproc_per_node=1, elastic=elastic),
        )
        for i in range(2)
    ]
    names = "".join(f"{host.address} {pod}\n" for host, (pod, _) in zip(pod_hosts, pods))
    for host in pod_hosts:
        hosts_file = testhosts.NETNS_ETC / host.name / "hosts"
        base = hosts_file.read_text().split(POD_NAMES)[0]
        with open(hosts_file, "w") as f:
            f.write(f"{base}{POD_NAMES}{names}")
    script = tmp_path / "rounds.py"
    script.write_text(POD_ROUNDS)
    deadline = time.monotonic() + 60  # the pair trains until the kill; this bounds it if the kill misses
    procs = []
    for host, (pod, env) in zip(pod_hosts, pods):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--log-dir", os.devnull, "--no-python"]
        torchrun += [sys.executable, str(script)]
        inner = remote_shell([*torchrun, str(tmp_path), str(deadline)], env)
        argv = ["unshare", "--uts", "sh", "-c", f"hostname {pod} && {inner}"]
        procs.append(
            subprocess.Popen(
                ssh_command(host.address, argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    journal = tmp_path / "rounds.jsonl"

    def rounds():
        return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []

    while len(rounds()) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.2)
    first = rounds()
    assert len(first) == 2 and {r["world"] for r in first} == {2}, first
    lost = next(r for r in first if r["host"] == pods[1][0])
    subprocess.run(
        ssh_command(pod_hosts[1].address, ["kill", "-9", str(lost["agent"]), str(lost["pid"])]), check=True, timeout=30
    )
    survivor_output = procs[0].communicate(timeout=120)[0]
    procs[1].communicate(timeout=30)
    assert procs[0].returncode == 0, survivor_output
    later = rounds()[2:]
    assert later, survivor_output
    assert {(r["host"], r["world"], r["rank"]) for r in later} == {(pods[0][0], 1, 0)}
    assert all(r["restart"] >= 1 for r in later)


# ---------------------------------------------------------------- contract run: an MPIJob's launcher and workers
# the image's ssh settings (image/ssh_config, image/sshd_config), as the mpi-operator's base image sets them
# (build/base/Dockerfile, v0.8.2): the operator mounts the keys only, so host keys are not checked (no known_hosts to
# write in a Secret) and sshd listens on 2222
IMAGE_SSH_CONFIG = (ROOT / "image" / "ssh_config").read_text()
IMAGE_SSH_PORT = int(re.search(r"^Port (\d+)$", (ROOT / "image" / "sshd_config").read_text(), re.M)[1])


def image_sshd_config(pid_file: Path) -> str:
    """The worker image's sshd configuration as image/sshd_config has it (its port, the pod's key as its host key, no
    mode checks of the Secret's files, root by key only), with a pid file of this test's."""
    return (ROOT / "image" / "sshd_config").read_text() + f"PidFile {pid_file}\n"


def write_files(folder: Path, files: dict[str, str], mode: int) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(mode)
    return folder


@contextlib.contextmanager
def mpijob_played(pod_hosts, tmp_path: Path, spec: dict, job: str, namespace: str, workers: int):
    """An MPIJob's worker pods and the launcher pod's files, as the operator makes them, on the test hosts: each
    worker pod runs its container's command (`sshd -De`) on its own test host, every pod has the operator's ssh
    Secret (an ECDSA P-521 key, as the operator makes) and the image's ssh settings, the launcher the ConfigMap's
    hostfile and discover_hosts.sh (every worker running). Yields what a launcher pod is started with; the workers'
    sshd are ended afterwards, as the operator ends a job's Running pods."""
    [worker] = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["command"] == ["/usr/sbin/sshd", "-De"] and spec["sshAuthMountPath"] == kf.MPI_SSH_DIR
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-C", "", "-f", str(tmp_path / "key")],
        check=True,
        timeout=30,
    )
    secret = kf.mpijob_ssh_files((tmp_path / "key").read_text(), (tmp_path / "key.pub").read_text())
    ssh_dir = write_files(tmp_path / "ssh-auth", secret, kf.MPI_SSH_MODE)
    config = kf.mpijob_config_files(job, namespace, workers, spec["slotsPerWorker"], running=list(range(workers)))
    config_dir = write_files(tmp_path / "mpi-job-config", config, kf.MPI_HOSTFILE_MODE)
    (config_dir / "discover_hosts.sh").chmod(kf.MPI_DISCOVER_HOSTS_MODE)
    (tmp_path / "ssh_config").write_text(IMAGE_SSH_CONFIG)
    image = {kf.MPI_SSH_DIR: ssh_dir, "/etc/ssh/ssh_config": tmp_path / "ssh_config"}
    results = tmp_path / "results"  # the claim, mounted at /results in every pod
    results.mkdir()

    # the launcher's mounts at /etc/mpi and /results are not bound (neither exists on this machine to bind over):
    # its command and environment name these folders instead, each path as rendered but for that prefix
    def placed(text: str) -> str:
        return text.replace(kf.MPI_CONFIG_DIR, str(config_dir)).replace(k8s.RESULTS_MOUNT, str(results))

    pods = [
        (kf.mpijob_worker(job, i), [kf.mpijob_host(job, namespace, i), kf.mpijob_worker(job, i)], {})
        for i in range(workers)
    ]
    name_the_pods(pod_hosts, pods)  # the job's headless Service
    sshds = []
    try:
        for i, (host, (pod, _, _)) in enumerate(zip(pod_hosts, pods)):
            (tmp_path / f"sshd-{i}").write_text(image_sshd_config(tmp_path / f"sshd-{i}.pid"))
            argv = [*worker["command"], "-f", str(tmp_path / f"sshd-{i}")]
            sshds.append(as_pod(host, pod, argv, kf.mpijob_worker_env(), mounts=image))
        for host in pod_hosts[:workers]:  # the launcher starts once the workers' sshd answers (the operator waits too)
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection((host.address, IMAGE_SSH_PORT), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, [p.poll() for p in sshds]
                    time.sleep(0.1)
        env = {k: placed(v) for k, v in kf.mpijob_launcher_env(spec["slotsPerWorker"]).items()}
        yield {"config_dir": config_dir, "results": results, "image": image, "placed": placed, "env": env}
    finally:
        for i in range(len(sshds)):  # the workers' sshd, as the operator ends a job's Running pods
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((tmp_path / f"sshd-{i}.pid").read_text()), signal.SIGTERM)
        for p in sshds:
            p.communicate(timeout=30)


def launcher_pod(host, job: str, container: dict, played: dict, env: dict | None = None) -> subprocess.Popen:
    """The launcher pod's container command, with exactly the operator's launcher environment (and `env`), on
    `host`."""
    placed = played["placed"]
    env = {**played["env"], **(env or {}), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable if a == "python" else placed(a) for a in container["command"]]
    assert argv[argv.index("--hostfile") + 1] == env["OMPI_MCA_orte_default_hostfile"]
    return as_pod(host, f"{job}-launcher", argv, env, str(ROOT), played["image"])


def imported_record(tmp_path: Path, log: str) -> dict:
    """The one record a launcher's log holds (as kubectl logs gives it), through `bench import -`."""
    imported = tmp_path / "imported.sqlite"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "import", "-", "--store", str(imported)],
        input=log,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    [record] = [r.to_dict() for r in Store(imported).records()]
    return record


@pytest.mark.slow
@needs("hosts")
@pytest.mark.parametrize("hvd_launcher", ["gloo", pytest.param("mpirun", marks=needs("mpi"))])
def test_contract_run_mpijob_launcher_runs_bench_over_the_operators_files(pod_hosts, tmp_path, hvd_launcher):
    """The MPIJob `bench k8s` writes, played by its pods: each worker pod runs its container's command (`sshd -De`)
    on its own test host, the launcher pod runs its container's command (`bench run --hostfile /etc/mpi/hostfile`)
    with exactly the operator's launcher environment; every pod has the operator's ssh Secret at /root/.ssh and the
    image's ssh configuration, the launcher the ConfigMap's hostfile and discover_hosts.sh. One run over the two
    workers, recorded by the launcher: under horovodrun (the default) and under Open MPI's mpirun
    (`-- --hvd-launcher mpirun`), whose daemons reach the workers over the same key."""
    job, namespace, workers = "bench", "default", 2
    written = tmp_path / "job.yaml"
    launcher_args = [] if hvd_launcher == "gloo" else ["--hvd-launcher", hvd_launcher]
    proc = bench_in_process(
        "k8s", "--kind", "mpijob", "--image", IMAGE, "--nodes", workers, "--results-claim", "res", "-o", written,
        "--", "--workload", "mnist_mlp", *launcher_args, *FAST,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(written.read_text())["spec"]
    [launcher] = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    with mpijob_played(pod_hosts, tmp_path, spec, job, namespace, workers) as played:
        run = launcher_pod(pod_hosts[0], job, launcher, played)
        out, err = run.communicate(timeout=150)
    assert run.returncode == 0, (out, err)
    # the launcher's log, as kubectl logs gives it, holds the record as a marked line: bench import - takes it
    record = imported_record(tmp_path, err + out)
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["backend"] == "horovod" and record["spec"]["world_size"] == workers
    assert record["spec"]["backend_options"]["launcher"] == hvd_launcher
    assert [h["name"] for h in record["spec"]["hosts"]] == [kf.mpijob_host(job, namespace, i) for i in range(workers)]
    rows = sorted(record["rank_map"], key=lambda r: r["rank"])
    assert [r["rank"] for r in rows] == [0, 1] and {r["world_size"] for r in rows} == {workers}
    # one host name per worker pod, none the launcher's: the ranks ran in the workers, started over the Secret's key
    assert [r["host"] for r in rows] == [kf.mpijob_worker(job, i) for i in range(workers)]
    assert len(record["metrics"]["window_times_s"]) == 2 and len(record["metrics"]["per_rank"]) == workers
    assert [r.to_dict() for r in Store(played["results"] / f"{job}.sqlite").records()] == [record]
    # the record names the job, so that the page's scope line says how such runs were tested
    nodelist = ",".join(kf.mpijob_worker(job, i) for i in range(workers))
    assert record["spec"]["scheduler"] == {"name": "kubeflow MPIJob", "job_id": job, "nodelist": nodelist}


def fault_reached_run(results: Path, until: float, launcher: subprocess.Popen) -> Path | None:
    """The run folder (under the results folder's runs/) whose rank 0 has reached the fault step (None: the launcher
    ended first, or `until` passed)."""
    while time.monotonic() < until and launcher.poll() is None:
        found = [p.parent for p in (results / "runs").glob(f"*/{RunDir.fault_reached.name}")]
        if found:
            return found[0]
        time.sleep(0.1)
    return None


@pytest.mark.slow
@needs("hosts")
def test_contract_run_mpijob_elastic_worker_dropped_from_discover_hosts(pod_hosts, tmp_path):
    """`bench k8s --kind mpijob --drop-worker`, played by its pods (as above, the launcher on a test host of its
    own): the launcher runs `bench fault` under Horovod elastic over the ConfigMap's discover_hosts.sh, which names
    both workers. At the fault step the test plays the operator as a worker pod is deleted: every process of the
    run in worker 1's pod ends, then its sshd, and discover_hosts.sh is rewritten without it. Horovod goes on with
    worker 0 alone; the launcher's record says so."""
    job, namespace, workers = "bench", "default", 2
    written = tmp_path / "job.yaml"
    fault_args = ["--threads", "1", "--checkpoint-every", "10", "--at-step", "25", "--steps", "60"]
    proc = bench_in_process(
        "k8s", "--kind", "mpijob", "--drop-worker", "--image", IMAGE, "--nodes", workers, "--results-claim", "res",
        "-o", written, "--", "--workload", "mnist_mlp", *fault_args, "--comm-timeout", "5", "--recovery-timeout", "60",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(written.read_text())["spec"]
    [launcher] = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    dropped = kf.mpijob_host(job, namespace, workers - 1)
    assert launcher["command"][:4] == ["python", "-m", "bench", "fault"]
    assert launcher["command"][-4:] == ["--hvd-discovery-script", kf.MPI_DISCOVER_HOSTS, "--drop-host", dropped]
    with mpijob_played(pod_hosts, tmp_path, spec, job, namespace, workers) as played:
        # horovodrun runs in the launcher pod, where the operator's script is: a pod of its own, as in a cluster.
        # Horovod orders the hosts it first discovers as a set: with this hash seed it puts rank 0 on the worker
        # that is dropped, the case where the survivor must wait for the drop rather than train on past the step
        seeded = {"PYTHONHASHSEED": "0"}
        run = launcher_pod(pod_hosts[workers], job, launcher, played, seeded)
        try:
            run_dir = fault_reached_run(played["results"], time.monotonic() + 150, run)
            assert run_dir is not None, run.communicate(timeout=30)
            # the worker pod deleted: every process of the run there ends at once, and its sshd
            ended = subprocess.run(
                ssh_command(
                    pod_hosts[1].address,
                    [sys.executable, "-m", "bench.harness.supervisor", "kill", run_dir.name],
                    {"PYTHONPATH": str(ROOT)},
                    str(ROOT),
                ),
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert json.loads(ended.stdout.splitlines()[-1])["killed"], ended
            os.kill(int((tmp_path / "sshd-1.pid").read_text()), signal.SIGTERM)
            # then the operator sees the pod gone and rewrites the ConfigMap's script (the kubelet swaps it whole)
            script = played["config_dir"] / "discover_hosts.sh"
            fresh = script.with_name("discover_hosts.sh.new")
            fresh.write_text(kf.mpijob_discover_hosts(job, namespace, [0]))
            fresh.chmod(kf.MPI_DISCOVER_HOSTS_MODE)
            os.replace(fresh, script)
            out, err = run.communicate(timeout=150)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, (out, err)
    assert "waiting up to 60 s for the cluster to drop" in err
    record = imported_record(tmp_path, err + out)
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["task"] == "fault" and record["spec"]["backend"] == "horovod"
    assert record["spec"]["backend_options"]["hvd_discovery_script"] == str(played["config_dir"] / "discover_hosts.sh")
    f = record["metrics"]
    assert f["scenario"] == "drop-host" and f["fault"]["host"] == dropped and f["fault"]["delivered"]
    assert f["fault"]["dropped_by"] == "cluster" and "killed" not in f["fault"]  # bench killed nothing
    assert (f["world_before"], f["world_after"]) == (workers, 1)
    assert f["recovery_s"] is not None and 0 < f["recovery_s"] < 60 and f["steps_completed"] == 60
    assert f["resume_checks"] and all(c["equal"] for c in f["resume_checks"])
    before = {r["rank"]: r["host"] for r in record["rank_map"] if r["phase"] == "before"}
    after = {r["rank"]: r["host"] for r in record["rank_map"] if r["phase"] == "after"}
    assert before == {0: kf.mpijob_worker(job, 1), 1: kf.mpijob_worker(job, 0)} and after == {
        0: kf.mpijob_worker(job, 0)
    }
    nodelist = ",".join(kf.mpijob_worker(job, i) for i in range(workers))
    assert record["spec"]["scheduler"] == {"name": "kubeflow MPIJob", "job_id": job, "nodelist": nodelist}


# ---------------------------------------------------------------- the MPIJob's files, read by their readers
def test_mpijob_hostfile_is_what_the_launchers_run_reads(tmp_path):
    """The launcher pod runs `bench run --hostfile /etc/mpi/hostfile`: bench's own reader takes the operator's file."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(kf.mpijob_hostfile("hj", "ml", 3, 2))
    hosts = read_hostfile(str(hostfile))
    assert [(h.name, h.slots) for h in hosts] == [(f"hj-worker-{i}.hj.ml.svc", 2) for i in range(3)]


def test_discover_hosts_script_is_what_horovodrun_elastic_reads(tmp_path):
    """discover_hosts.sh run by a shell and read by Horovod's own discovery (horovodrun --host-discovery-script):
    the running workers, each with the slots horovodrun is given (the script names none); a worker dropped from the
    script is gone from what Horovod sees."""
    discovery = pytest.importorskip("horovod.runner.elastic.discovery", reason="Horovod is not installed")
    script = tmp_path / "discover_hosts.sh"
    script.write_text(kf.mpijob_discover_hosts("hj", "ml", [0, 1]))
    script.chmod(kf.MPI_DISCOVER_HOSTS_MODE)
    found = discovery.HostDiscoveryScript(str(script), slots=2).find_available_hosts_and_slots()
    assert found == {"hj-worker-0.hj.ml.svc": 2, "hj-worker-1.hj.ml.svc": 2}
    script.write_text(kf.mpijob_discover_hosts("hj", "ml", [0]))
    assert discovery.HostDiscoveryScript(str(script), slots=2).find_available_hosts_and_slots() == {
        "hj-worker-0.hj.ml.svc": 2
    }


# ---------------------------------------------------------------- bench run in the pods (bench.cluster.kubeflow_pod)
def test_each_pod_reads_its_place_from_the_operators_environment():
    static = kf.pytorchjob_env("bench", "Worker", 0, masters=1, workers=1, nproc_per_node=2)
    place = kubeflow_pod.pod_place(static, "bench-worker-0")
    assert (place.kind, place.job, place.hosts, place.node_rank, place.leads) == (
        "PyTorchJob",
        "bench",
        ("bench-master-0", "bench-worker-0"),
        1,
        False,
    )
    assert place.agent_args() == [
        *("--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "1"),
        *("--master-addr", "bench-master-0", "--master-port", "23456", "--max-restarts", "0"),
    ]
    assert place.scheduler == {
        "name": "kubeflow PyTorchJob",
        "job_id": "bench",
        "nodelist": "bench-master-0,bench-worker-0",
    }
    master = kf.pytorchjob_env("bench", "Master", 0, masters=1, workers=1, nproc_per_node=2)
    assert kubeflow_pod.pod_place(master, "bench-master-0").leads
    # an elastic policy has no master: the pod the rendezvous endpoint names leads, the id is the job's name
    elastic = kf.Elastic(1, 3, max_restarts=2, rdzv_conf=(("join_timeout", "60"),))
    for i, leads in ((0, True), (1, False)):
        env = kf.pytorchjob_env("bench", "Worker", i, masters=0, workers=2, nproc_per_node=1, elastic=elastic)
        place = kubeflow_pod.pod_place(env, f"bench-worker-{i}")
        assert place.leads is leads and place.hosts == ("bench-worker-0", "bench-worker-1", "bench-worker-2")
        assert place.agent_args() == [
            *("--nnodes", "1:3", "--nproc-per-node", "1", "--rdzv-backend", "c10d"),
            *("--rdzv-endpoint", "bench-worker-0:23456", "--rdzv-id", "bench", "--rdzv-conf", "join_timeout=60"),
            *("--max-restarts", "2"),
        ]
    train = kubeflow_pod.pod_place(kf.trainjob_env("tj", 1, nodes=2, nproc_per_node=1), "tj-node-0-1")
    assert (train.kind, train.hosts, train.leads, train.master) == (
        "TrainJob",
        ("tj-node-0-0", "tj-node-0-1"),
        False,
        ("tj-node-0-0.tj", 29500),
    )


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({}, "no PET_NNODES"),
        ({"PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto"}, "PET_NPROC_PER_NODE='auto'"),
        (
            {
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "1",
                "PET_MASTER_ADDR": "elsewhere",
                "PET_MASTER_PORT": "1",
                "PET_NODE_RANK": "0",
            },
            "names neither",
        ),
        (
            {"PET_NNODES": "1:2", "PET_NPROC_PER_NODE": "1", "PET_RDZV_ENDPOINT": "somewhere:1"},
            "not what the training operator gives",
        ),
        (
            {**kf.trainjob_env("tj", 0, nodes=2, nproc_per_node=1), "PET_NODE_RANK": "2"},
            "PET_NODE_RANK=2 with PET_NNODES=2",
        ),
        (
            {
                **kf.pytorchjob_env("j", "Worker", 0, masters=0, workers=2, nproc_per_node=1, elastic=kf.Elastic(2, 3)),
                kubeflow_pod.JOB_PODS_ENV: "4",
            },
            "BENCH_JOB_PODS=4 with PET_NNODES=2:3",
        ),
    ],
)
def test_pod_place_refuses_what_no_operator_gives(env, fragment):
    with pytest.raises(UsageError, match=re.escape(fragment)):
        kubeflow_pod.pod_place(env, "pod")


def test_scheduler_kubeflow_is_refused_outside_a_pod_and_by_other_verbs(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("PET_")]:
        monkeypatch.delenv(name)
    store = tmp_path / "s.sqlite"
    assert_one_line_error(bench_in_process("run", "--scheduler", "kubeflow", "--store", store), "no PET_NNODES")
    monkeypatch.setattr(os, "environ", {**os.environ, **kf.trainjob_env("tj", 0, nodes=2, nproc_per_node=1)})
    assert_one_line_error(
        bench_in_process("sweep", "--scheduler", "kubeflow", "--store", store), "only bench run joins"
    )
    assert_one_line_error(
        bench_in_process("run", "--backend", "horovod", "--store", store), "does not run in the pods of a TrainJob"
    )
    assert not store.exists()


def test_leading_pod_plans_one_agent_of_the_job(monkeypatch, tmp_path):
    env = kf.pytorchjob_env("bench", "Master", 0, masters=1, workers=1, nproc_per_node=1)
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    monkeypatch.setattr(socket, "gethostname", lambda: "bench-master-0")
    args = argparse.Namespace(scheduler=None, iface=None, link=None, links=None, nproc=None, gpus=None)
    cluster = common.cluster_of(args, pods=True)
    spec = build_spec(backend="elastic", workload="mnist_mlp", world_size=2, device="cpu", cluster=cluster)
    assert spec.scheduler == {
        "name": "kubeflow PyTorchJob",
        "job_id": "bench",
        "nodelist": "bench-master-0,bench-worker-0",
    }
    assert [h["name"] for h in spec.hosts] == ["bench-master-0", "bench-worker-0"]
    assert spec.machines is None  # pods are not known to be separate machines
    ranks = [sys.executable, "-m", "bench.harness.guard", str(tmp_path / "runs" / "R1"), "elastic"]
    command = get_backend("elastic").launcher.command(spec, ranks, "R1")
    split = command.index("--")
    assert command[:5] == [
        sys.executable,
        "-m",
        "bench.cluster.kubeflow_pod",
        "lead",
        str(tmp_path / "runs" / "kubeflow-bench.json"),
    ]
    assert json.loads(command[5]) == {"job": "bench", "run_id": "R1", "rank_command": ranks} and command[6] == "2"
    assert command[split + 1 :] == [
        *(sys.executable, "-m", "bench.backends.shared.torchrun_agent", "--log-dir", os.devnull),
        *("--nnodes", "2", "--nproc-per-node", "1"),
        *("--node-rank", "0", "--master-addr", "bench-master-0", "--master-port", "23456", "--max-restarts", "0"),
        "--no-python",
        *ranks,
    ]


GPU_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def pod_command_of(manifest: dict) -> list[str]:
    """The bench command of the job's pod that records: a PyTorchJob's master, a TrainJob's nodes, an MPIJob's
    launcher."""
    spec = manifest["spec"]
    if manifest["kind"] == "TrainJob":
        return spec["trainer"]["command"]
    replica = (
        spec["mpiReplicaSpecs"]["Launcher"] if manifest["kind"] == "MPIJob" else spec["pytorchReplicaSpecs"]["Master"]
    )
    return replica["template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("kind, backend", [("pytorchjob", "elastic"), ("trainjob", "elastic"), ("mpijob", "horovod")])
def test_gpu_pods_run_one_process_per_gpu_they_are_given(kind, backend):
    proc = bench_in_process(
        "k8s", "--kind", kind, "--image", GPU_IMAGE, "--nodes", "2", "--gpus-per-node", "8", "--nproc-per-node", "4",
        "--results-claim", "res",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    command = pod_command_of(yaml.safe_load(proc.stdout))
    # --gpus: one process per GPU on each pod (each host of the MPIJob's hostfile), not CPU processes beside them
    assert command[4:8] == ["--backend", backend, "--gpus", "4"] and "--nproc" not in command


# ---------------------------------------------------------------- a manifest's pods, as the operator makes them
def mounts_of(pod_spec: dict, container: dict) -> dict[str, dict]:
    """What a container has at each of its mount paths: the pod's volume of that name."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def trainjob_pod(manifest: dict) -> tuple[dict, dict]:
    """A TrainJob's node pod as its patch of the runtime (spec.runtimePatches) makes it: (pod spec, the trainer
    container's part of it); ({}, {}) where it patches nothing."""
    for patch in manifest["spec"].get("runtimePatches", []):
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job["name"] == k8s.TRAINJOB_REPLICATED_JOB:
                pod = job["template"]["spec"]["template"]["spec"]
                [container] = [c for c in pod["containers"] if c["name"] == kf.TRAINJOB_CONTAINER]
                return pod, container
    return {}, {}


def gpu_rank_pods(manifest: dict) -> list[tuple[dict, dict]]:
    """(pod spec, container) of every pod of the manifest that runs ranks: a PyTorchJob's replicas, a TrainJob's
    nodes, an MPIJob's workers."""
    spec = manifest["spec"]
    if manifest["kind"] == "TrainJob":
        return [trainjob_pod(manifest)]
    replicas = spec["mpiReplicaSpecs"] if manifest["kind"] == "MPIJob" else spec["pytorchReplicaSpecs"]
    return [
        (r["template"]["spec"], r["template"]["spec"]["containers"][0])
        for rtype, r in replicas.items()
        if rtype != "Launcher"
    ]


def operator_pods(manifest: dict, running: int | None = None) -> list[tuple[str, list[str], dict[str, str], dict]]:
    """The pods the operator makes of a PyTorchJob or TrainJob as written: (pod host name, the names it is reached
    by, its container's environment: the operator's variables and the container's own, {command, mounts: {path:
    volume}}); the first `running` of them (all by default)."""
    job, spec = manifest["metadata"]["name"], manifest["spec"]
    pods = []
    if manifest["kind"] == "TrainJob":
        trainer, (pod_spec, container) = spec["trainer"], trainjob_pod(manifest)
        nodes, nproc = trainer["numNodes"], trainer["numProcPerNode"]
        for i in range(nodes):
            env = kf.trainjob_env(job, i, nodes=nodes, nproc_per_node=nproc)
            place = {"command": trainer["command"], "mounts": mounts_of(pod_spec, container)}
            pods.append((f"{job}-node-0-{i}", [kf.trainjob_host(job, i), f"{job}-node-0-{i}"], env, place))
        return pods[:running]
    replicas, policy = spec["pytorchReplicaSpecs"], spec.get("elasticPolicy")
    elastic = None
    if policy:
        elastic = kf.Elastic(
            policy["minReplicas"], policy["maxReplicas"], policy.get("maxRestarts"), policy["rdzvBackend"]
        )
    counts = {rtype: replicas[rtype]["replicas"] if rtype in replicas else 0 for rtype in ("Master", "Worker")}
    for rtype in ("Master", "Worker"):
        for i in range(counts[rtype]):
            pod_spec = replicas[rtype]["template"]["spec"]
            [container] = pod_spec["containers"]
            env = kf.pytorchjob_env(
                job,
                rtype,
                i,
                masters=counts["Master"],
                workers=counts["Worker"],
                nproc_per_node=int(spec["nprocPerNode"]),
                port=container["ports"][0]["containerPort"],
                elastic=elastic,
            )
            env.update({e["name"]: e["value"] for e in container.get("env", [])})
            place = {"command": container["command"], "mounts": mounts_of(pod_spec, container)}
            name = kf.pytorchjob_service(job, rtype, i)
            pods.append((name, [name], env, place))
    return pods[:running]


def placed_command(command: list[str], folders: dict[str, Path]) -> list[str]:
    """A pod's command run here: `python` this interpreter, each path under a mount path (key) under the folder that
    plays the volume there (value)."""
    out = []
    for arg in command:
        for mount, folder in folders.items():
            if arg == mount or arg.startswith(mount + "/"):
                arg = str(folder) + arg[len(mount) :]
        out.append(sys.executable if arg == "python" else arg)
    return out


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob", "mpijob"])
def test_eight_gpus_per_pod_are_eight_processes_per_pod_with_a_memory_backed_dev_shm(kind, tmp_path):
    """--gpus-per-node 8 alone: each pod runs 8 ranks (the operator told 8 processes per pod, the pod command 8 GPU
    workers), every pod that runs them has a memory-backed /dev/shm for NCCL's shared memory between them, and the
    pod command, run with the operator's environment and --dry-run (no GPU here: a plan, not a run), plans 8
    processes on each of the 2 pods."""
    proc = bench_in_process(
        "k8s", "--kind", kind, "--image", k8s.RECIPE_IMAGE, "--nodes", "2", "--gpus-per-node", "8",
        "--results-claim", "res",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "idle" not in proc.stderr
    manifest = yaml.safe_load(proc.stdout)
    spec = manifest["spec"]
    per_pod = {
        "pytorchjob": lambda: spec["nprocPerNode"],
        "trainjob": lambda: spec["trainer"]["numProcPerNode"],
        "mpijob": lambda: spec["slotsPerWorker"],
    }[kind]()
    assert per_pod in ("8", 8)
    for pod_spec, container in gpu_rank_pods(manifest):
        mounts = mounts_of(pod_spec, container)
        assert mounts["/dev/shm"] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
        assert mounts["/results"]["persistentVolumeClaim"] == {"claimName": "res"}
    results = tmp_path / "results"
    if kind == "mpijob":
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]
        assert "/dev/shm" not in mounts_of(launcher["spec"], launcher["spec"]["containers"][0])  # it runs no rank
        config = tmp_path / "mpi"
        config.mkdir()
        (config / "hostfile").write_text(kf.mpijob_hostfile("bench", "default", 2, spec["slotsPerWorker"]))
        command = placed_command(
            launcher["spec"]["containers"][0]["command"], {kf.MPI_CONFIG_DIR: config, k8s.RESULTS_MOUNT: results}
        )
        env = kf.mpijob_launcher_env(spec["slotsPerWorker"])
    else:
        _, _, env, pod = operator_pods(manifest)[0]
        command = placed_command(pod["command"], {k8s.RESULTS_MOUNT: results})
    plan = bench(*command[3:], "--dry-run", env=env)
    assert plan.returncode == 0, plan.stderr
    assert "world size 16 on cuda (GPU processes), 2 host(s)" in plan.stdout, plan.stdout
    hosts = (
        [kf.mpijob_host("bench", "default", i) for i in range(2)]
        if kind == "mpijob"
        else [pod for pod, _, _, _ in operator_pods(manifest)]
    )
    assert f"{hosts[0]} x8, {hosts[1]} x8" in plan.stdout, plan.stdout
    if kind != "mpijob":  # the pod's own torchrun agent: 8 processes
        assert "--nproc-per-node 8 " in plan.stdout, plan.stdout
    assert not results.exists()  # a plan: nothing made


def test_fewer_ranks_than_gpus_says_the_gpus_left_idle():
    proc = bench_in_process(
        "k8s", "--image", k8s.RECIPE_IMAGE, "--nodes", "2", "--gpus-per-node", "8", "--nproc-per-node", "4",
        "--results-claim", "res",
    )  # fmt: skip
    assert proc.returncode == 0 and "4 GPU(s) of each pod idle" in proc.stderr, proc.stderr
    assert yaml.safe_load(proc.stdout)["spec"]["nprocPerNode"] == "4"


def test_elastic_pods_below_max_plan_the_pods_there_are():
    """An elastic PyTorchJob that starts 2 pods of at most 3 (PET_NNODES=2:3): each pod's command, with the
    operator's environment, plans a run of the 2 pods there are through the policy's rendezvous (2:3), not one of 3
    and not a refusal of its own world size."""
    proc = bench_in_process(
        "k8s", "--image", k8s.RECIPE_IMAGE, "--nodes", "2", "--min-nodes", "2", "--max-nodes", "3",
        "--results-claim", "res", "--", "--workload", "mnist_mlp",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pods = operator_pods(yaml.safe_load(proc.stdout))
    assert [pod for pod, _, _, _ in pods] == ["bench-worker-0", "bench-worker-1"]
    for _, _, env, pod in pods:
        assert env["PET_NNODES"] == "2:3"
        plan = bench(
            *placed_command(pod["command"], {k8s.RESULTS_MOUNT: Path("/nonexistent")})[3:], "--dry-run", env=env
        )
        assert plan.returncode == 0, plan.stderr
        assert "world size 2 on cpu (CPU processes), 2 host(s): bench-worker-0 x1, bench-worker-1 x1" in plan.stdout
        assert "--nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint bench-worker-0:23456" in plan.stdout


def test_the_helps_examples_write_manifests(monkeypatch, tmp_path):
    """Every example of `bench k8s --help` as written (its image the recipe's) writes a manifest that passes the
    admission rules (and the CRD schema, where the CRD files are)."""
    from bench.cli import build_parser

    monkeypatch.chdir(tmp_path)  # an example's -o job.yaml is written here
    text = build_parser()._subparsers._group_actions[0].choices["k8s"].format_help()
    examples = [line.strip() for line in text.split("\nexamples:\n", 1)[1].splitlines() if line.strip()]
    assert len(examples) == 5 and all(f"--image {k8s.RECIPE_IMAGE} " in e for e in examples)
    for example in examples:
        proc = bench_in_process(*shlex.split(example)[1:])
        assert proc.returncode == 0, (example, proc.stderr)


def test_a_gpu_pod_plans_its_agent_on_cuda(monkeypatch, tmp_path):
    env = kf.pytorchjob_env("bench", "Master", 0, masters=1, workers=1, nproc_per_node=4)
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    monkeypatch.setattr(socket, "gethostname", lambda: "bench-master-0")
    monkeypatch.setattr(common, "usable_cpus", lambda: 32)  # a GPU node's pod, not this 2-core machine
    args = argparse.Namespace(scheduler=None, iface=None, link=None, links=None, nproc=None, gpus=4)
    cluster = common.cluster_of(args, pods=True)
    assert common.world_of(args, cluster) == ("cuda", 8)
    spec = build_spec(backend="elastic", workload="mnist_mlp", world_size=8, device="cuda", cluster=cluster)
    ranks = [sys.executable, "-m", "bench.harness.guard", str(tmp_path / "runs" / "R1"), "elastic"]
    command = get_backend("elastic").launcher.command(spec, ranks, "R1")
    agent = command[command.index("--") + 1 :]
    assert agent[agent.index("--nproc-per-node") + 1] == "4" and spec.device == "cuda"
    with pytest.raises(UsageError, match=re.escape("--gpus 2: each pod of this job runs 4 process(es)")):
        common.cluster_of(argparse.Namespace(**{**vars(args), "gpus": 2}), pods=True)
    with pytest.raises(UsageError, match="give either --nproc"):
        common.cluster_of(argparse.Namespace(**{**vars(args), "nproc": 8}), pods=True)


def test_other_pod_joins_the_run_the_handoff_names(monkeypatch, tmp_path):
    env = kf.pytorchjob_env("bench", "Worker", 0, masters=1, workers=1, nproc_per_node=1)
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    monkeypatch.setattr(socket, "gethostname", lambda: "bench-worker-0")
    ranks = [sys.executable, "-m", "bench.harness.guard", str(tmp_path / "runs" / "R1"), "elastic"]
    handoff = kubeflow_pod.handoff_file(tmp_path / "runs", "bench")
    handoff.parent.mkdir()
    handoff.write_text(json.dumps({"job": "bench", "run_id": "R1", "rank_command": ranks}))
    started = []

    def agent_started(path, argv, agent_env):  # where the pod's process becomes its agent: the command it would run
        started.append((path, argv, agent_env))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvpe", agent_started)
    store = tmp_path / "bench.sqlite"
    proc = bench_in_process("run", "--workload", "mnist_mlp", "--store", store)
    assert proc.returncode == 0 and "joins the run the leading pod records" in proc.stderr, proc.stderr
    [(path, argv, agent_env)] = started
    assert path == sys.executable and argv == [
        *(sys.executable, "-m", "bench.backends.shared.torchrun_agent", "--log-dir", os.devnull),
        *("--nnodes", "2", "--nproc-per-node", "1"),
        *("--node-rank", "1", "--master-addr", "bench-master-0", "--master-port", "23456", "--max-restarts", "0"),
        "--no-python",
        *ranks,
    ]
    # its ranks get the harness's environment, under a run tag of this pod's own
    assert agent_env["BENCH_RUN_TAG"] == "R1-bench-worker-0" and agent_env["OMP_NUM_THREADS"].isdigit()
    assert not store.exists()  # the leading pod stores the run


def test_lead_hands_off_waits_for_every_ranks_exit_and_removes_the_handoff(tmp_path):
    run_dir = RunDir(tmp_path / "runs" / "R1").create()
    for rank in (0, 1):  # the other pod's rank has ended too
        run_dir.write(rank, 0, "exit", {"exit_code": 0})
    handoff = tmp_path / "runs" / "kubeflow-bench.json"
    plan = {"job": "bench", "run_id": "R1", "rank_command": ["python", "-m", "bench.harness.guard", str(run_dir.path)]}
    seen = tmp_path / "seen.json"
    agent = ["sh", "-c", f"cat {handoff} > {seen}; exit 3"]  # the agent's ending is the leading pod's
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cluster.kubeflow_pod", "lead", str(handoff), json.dumps(plan), "2", "--", *agent],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 3, proc.stderr
    assert json.loads(seen.read_text()) == plan  # there while the agent ran
    assert not handoff.exists()  # a later job of the same name never reads it
    with pytest.raises(UsageError, match="no hand-off from the job's leading pod"):
        kubeflow_pod.wait_for_handoff(handoff, 0.3)


def test_scope_line_says_how_pod_runs_were_tested():
    from bench.report.page import scope_line
    from bench.results.frame import records_to_frame
    from factories import train_record

    pods = {"name": "kubeflow PyTorchJob", "job_id": "bench", "nodelist": "bench-master-0,bench-worker-0"}
    hosts = [{"name": "bench-master-0", "slots": 1}, {"name": "bench-worker-0", "slots": 1}]
    in_pods = train_record("k1", spec_fields={"hosts": hosts, "scheduler": pods})
    line = scope_line(records_to_frame([in_pods, train_record("plain")]))
    assert "in the pods of a PyTorchJob (contract-tested, not cluster-tested)" in line
    assert "contract-tested" not in scope_line(records_to_frame([train_record("plain")]))
    # an MPIJob's run, its launcher's over ssh, says it too
    workers = [kf.mpijob_host("bench", "default", i) for i in range(2)]
    launcher = kubeflow_pod.mpijob_launcher(workers, kf.mpijob_launcher_env(1))
    hosts = [{"name": name, "slots": 1} for name in workers]
    mpi = train_record("m1", backend="horovod", spec_fields={"hosts": hosts, "scheduler": launcher})
    line = scope_line(records_to_frame([in_pods, mpi]))
    assert "in the pods of a MPIJob and a PyTorchJob (contract-tested, not cluster-tested)" in line, line


def test_an_mpijob_launcher_names_its_job_and_is_a_run_over_ssh():
    """`bench run --hostfile /etc/mpi/hostfile` in an MPIJob's launcher: the operator's K_MPI_JOB_ROLE and the
    hostfile's worker names make the record name the job; nothing else does (a hostfile of other names, another
    role, two jobs' workers). Its run is the launcher's over ssh, not one of agents in pods (of_pods)."""
    workers = [kf.mpijob_host("hj", "ml", i) for i in range(3)]
    launcher_env = kf.mpijob_launcher_env(2)
    found = kubeflow_pod.mpijob_launcher(workers, launcher_env)
    assert found == {"name": "kubeflow MPIJob", "job_id": "hj", "nodelist": "hj-worker-0,hj-worker-1,hj-worker-2"}
    assert kubeflow_pod.of_kubeflow(found) and not kubeflow_pod.of_pods(found)
    assert kubeflow_pod.mpijob_launcher(workers, kf.mpijob_worker_env()) is None
    assert kubeflow_pod.mpijob_launcher(workers, {}) is None
    assert kubeflow_pod.mpijob_launcher(["node1", "node2"], launcher_env) is None
    assert kubeflow_pod.mpijob_launcher([workers[0], kf.mpijob_host("other", "ml", 1)], launcher_env) is None
    assert kubeflow_pod.mpijob_launcher([], launcher_env) is None
    pods = kubeflow_pod.pod_place(
        kf.pytorchjob_env("bench", "Master", 0, masters=1, workers=1, nproc_per_node=1), "bench-master-0"
    )
    assert kubeflow_pod.of_pods(pods.scheduler) and kubeflow_pod.of_kubeflow(pods.scheduler)


def test_an_mpijob_launchers_plan_names_the_job_and_runs_over_ssh(tmp_path, monkeypatch):
    """The launcher's `bench run --dry-run`: the job named, horovodrun started over ssh on the first worker as for
    any run across hosts (not Slurm's srun, not a pod's own agent)."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(kf.mpijob_hostfile("hj", "ml", 2, 1))
    for name, value in kf.mpijob_launcher_env(1).items():
        monkeypatch.setenv(name, value)
    proc = bench_in_process(
        "run", "--backend", "horovod", "--hostfile", hostfile, "--dry-run", "--store", tmp_path / "s.sqlite"
    )
    assert proc.returncode == 0, proc.stderr
    assert "from the launcher pod of MPIJob hj" in proc.stdout, proc.stdout
    assert "python -m bench.cluster.fanout" in proc.stdout and "srun" not in proc.stdout


def test_manifests_of_several_pods_need_the_shared_volume_they_meet_through():
    proc = bench_in_process("k8s", "--image", IMAGE, "--nodes", "2", "--results-claim", "res")
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["kind"] == "PyTorchJob"
    assert "--nodes 1" not in proc.stderr and "does not yet join" not in proc.stderr
    for args in (["--nodes", "2"], ["--nodes", "1", "--min-nodes", "1", "--max-nodes", "2"]):
        assert_one_line_error(bench_in_process("k8s", "--image", IMAGE, *args), "give --results-claim")
    alone = bench_in_process("k8s", "--image", IMAGE, "--nodes", "1")  # one pod meets no other
    assert alone.returncode == 0 and "its record comes out in its log" in alone.stderr
    # an MPIJob's launcher records what its workers' ranks write: even one worker pod needs the shared volume
    assert_one_line_error(
        bench_in_process("k8s", "--kind", "mpijob", "--image", IMAGE, "--nodes", "1"), "ranks run in its worker pods"
    )
    mpi = bench_in_process("k8s", "--kind", "mpijob", "--image", IMAGE, "--nodes", "2", "--results-claim", "res")
    assert mpi.returncode == 0, mpi.stderr
