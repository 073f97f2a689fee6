"""The manifests `bench k8s` writes for the Kubeflow operators (PyTorchJob, MPIJob, TrainJob), and their checks:
against the operators' published CRD schemas (a folder the caller names) and against the admission rules their
webhooks apply. What the operators then give each pod is rendered in bench.cluster.kubeflow.

The CRD schemas are OpenAPI v3 with Kubernetes' own extensions; they are read into JSON Schema here: an object with
`properties` refuses any other key (as the API server prunes and, with `kubectl apply --validate=strict`, refuses
them), `x-kubernetes-int-or-string` takes an integer or a string, `x-kubernetes-preserve-unknown-fields` takes any
object. The CEL rules (`x-kubernetes-validations`) need an API server and are not checked here.

Imports jsonschema and PyYAML lazily, only when a manifest is checked or written."""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import __version__
from bench.cluster import kubeflow as kf
from bench.cluster.kubeflow_pod import JOB_PODS_ENV
from bench.core.inputs import shown

KINDS = ("pytorchjob", "mpijob", "trainjob")
# the CRD file of each kind, by the name the operators publish it under
CRD_FILES = {
    "pytorchjob": "kubeflow.org_pytorchjobs.v1.yaml",
    "mpijob": "kubeflow.org_mpijobs.v2beta1.yaml",
    "trainjob": "trainer.kubeflow.org_trainjobs.v2.3.0.yaml",
}
API_VERSIONS = {"pytorchjob": kf.PYTORCHJOB_API, "mpijob": kf.MPIJOB_API, "trainjob": kf.TRAINJOB_API}
KIND_NAMES = {"pytorchjob": "PyTorchJob", "mpijob": "MPIJob", "trainjob": "TrainJob"}

# a Service is named after each replica (`<job>-worker-<i>`), so the job's name is held to a DNS-1035 label, with room
# for the longest suffix the suite's replica counts give
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_MAX = 63
RESULTS_MOUNT = "/results"
# NCCL's shared-memory transport between the ranks of one pod lives in /dev/shm, which a container gets as 64 MiB by
# default: too little for 8 ranks' buffers, so a pod that runs GPU ranks gets a memory-backed one
SHM_MOUNT = "/dev/shm"
SHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
# the TrainJob's patch of its runtime's pod template (spec.runtimePatches), keyed by who writes it
TRAINJOB_PATCH_MANAGER = "bench"
TRAINJOB_REPLICATED_JOB = (
    "node"  # the torch-distributed runtime's replicated job, whose container is kf.TRAINJOB_CONTAINER
)
# the image image/Containerfile builds (the suite, CUDA torch, Horovod with NCCL), as the help and docs name it
RECIPE_IMAGE = f"registry.example.com/bench:{__version__}-cuda13"
RECIPE_BUILD = f"podman build -f image/Containerfile -t {RECIPE_IMAGE} ."
# `bench k8s`'s defaults: a two-pod job of one rank each, the smallest that spans pods
MANIFEST_DEFAULTS = dict(kind="pytorchjob", name="bench", namespace="default", nodes=2, nproc_per_node=1)


@dataclass(frozen=True)
class JobRequest:
    """What a user asks `bench k8s` for: one job of `nodes` pods, each running `nproc_per_node` ranks."""

    kind: str
    name: str
    image: str
    nodes: int
    nproc_per_node: int
    namespace: str = "default"
    cpus_per_pod: str | None = None
    memory_per_pod: str | None = None
    gpus_per_pod: int | None = None
    results_claim: str | None = None  # a ReadWriteMany PersistentVolumeClaim mounted at /results
    elastic: kf.Elastic | None = None
    port: int = kf.PYTORCH_DEFAULT_PORT
    bench_args: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    # an MPIJob's launcher runs `bench fault --drop-host` over the operator's discover_hosts.sh instead of `bench run`:
    # Horovod elastic, with the last worker dropped by the cluster mid-run
    drop_worker: bool = False


def dropped_worker(req: JobRequest) -> str:
    """The worker a --drop-worker job's fault drops: the last, as the hostfile names it."""
    return kf.mpijob_host(req.name, req.namespace, req.nodes - 1)


def name_problem(name: str, longest_suffix: str = "") -> str | None:
    """Why the API server would refuse `name` as a job's name (None if it would not)."""
    if not DNS_1035.fullmatch(name):
        return (
            "a job's name must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter "
            "and ending with a letter or digit"
        )
    if len(name + longest_suffix) > LABEL_MAX:
        return (
            f"at most {LABEL_MAX - len(longest_suffix)} characters here: the operator names a Service "
            f"'{name}{longest_suffix}', which must be {LABEL_MAX} or fewer"
        )
    return None


def namespace_problem(namespace: str) -> str | None:
    if len(namespace) > LABEL_MAX or not DNS_1123_LABEL.fullmatch(namespace):
        return "a namespace is a DNS-1123 label: at most 63 lower-case letters, digits and '-'"
    return None


# An image as the container runtimes parse its name (the distribution project's grammar, which they share): an
# optional registry host (a DNS name, an IPv4 address or a bracketed IPv6 one, with an optional port), then path
# components of lower-case letters and digits joined by '.', '_', '__' or dashes, then an optional tag and digest.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE = re.compile(
    rf"(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"  # the name
    r"(?::[\w][\w.-]{0,127})?"  # the tag
    r"(?:@(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}))?",  # the digest
    re.ASCII,  # \w is [A-Za-z0-9_] in the grammar
)
IMAGE_NAME_MAX = 255  # the name's length, before its tag and digest, that the runtimes take
IMAGE_MAX = IMAGE_NAME_MAX + len(":") + 128 + len("@sha512:") + 128  # with the longest tag and digest


def image_problem(image: str) -> str | None:
    """Why `image` is not an image a pod could pull (None if it is one)."""
    example = "such as registry.example.com/bench:1.0 or bench@sha256:<64 hex digits>"
    if len(image) > IMAGE_MAX:
        return f"{len(image):,} characters long, more than an image with its tag and digest can be ({IMAGE_MAX})"
    if not IMAGE.fullmatch(image):
        return (
            f"not an image: [HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST], its NAME lower-case letters, digits "
            f"and '.', '_', '-' between them, {example}"
        )
    name = image.partition("@")[0]
    if ":" in name.rpartition("/")[2]:
        name = name.rpartition(":")[0]
    if len(name) > IMAGE_NAME_MAX:
        return f"its name is {len(name)} characters long, more than the {IMAGE_NAME_MAX} an image's name may be"
    return None


def results_store(req: JobRequest) -> str:
    return f"{RESULTS_MOUNT}/{req.name}.sqlite"


def pod_command(req: JobRequest, *, launcher: bool = False) -> list[str]:
    """What a pod runs: the suite itself, with the arguments given after `--`, its store on the results volume, and
    its record printed as a marked line too, for `kubectl logs POD | bench import -`. A --drop-worker MPIJob's
    launcher runs `bench fault` under Horovod elastic, over the operator's discover_hosts.sh, dropping the last
    worker."""
    verb = "fault" if req.drop_worker else "run"
    args = ["python", "-m", "bench", verb, *req.bench_args, "--record-lines"]
    if req.results_claim:
        args += ["--store", results_store(req)]
    if launcher:
        args += ["--hostfile", kf.MPI_HOSTFILE]
    if launcher and req.drop_worker:
        args += ["--hvd-discovery-script", kf.MPI_DISCOVER_HOSTS, "--drop-host", dropped_worker(req)]
    return args


def _resources(req: JobRequest) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if req.cpus_per_pod:
        limits["cpu"] = req.cpus_per_pod
    if req.memory_per_pod:
        limits["memory"] = req.memory_per_pod
    if req.gpus_per_pod:
        limits["nvidia.com/gpu"] = req.gpus_per_pod
    return {"limits": limits, "requests": dict(limits)} if limits else {}


def _volumes(req: JobRequest, gpu_ranks: bool) -> tuple[list[dict], list[dict]]:
    """A pod's volumes and its container's mounts: the results claim at /results, and where the pod runs GPU ranks
    (`gpu_ranks`) a memory-backed /dev/shm."""
    volumes, mounts = [], []
    if req.results_claim:
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": req.results_claim}})
        mounts.append({"name": "results", "mountPath": RESULTS_MOUNT})
    if gpu_ranks and req.gpus_per_pod:
        volumes.append(copy.deepcopy(SHM_VOLUME))
        mounts.append({"name": SHM_VOLUME["name"], "mountPath": SHM_MOUNT})
    return volumes, mounts


def _env(req: JobRequest) -> list[dict[str, str]]:
    """The container's own variables, beside the operator's: under an elastic policy, how many pods the job starts
    (the operator gives only PET_NNODES=MIN:MAX), so that the run's world is the pods there are
    (bench.cluster.kubeflow_pod.pod_place)."""
    if req.kind == "pytorchjob" and req.elastic is not None:
        return [{"name": JOB_PODS_ENV, "value": str(req.nodes)}]
    return []


def _container(
    req: JobRequest, name: str, command: list[str], ports: list[dict] | None = None, *, gpu_ranks: bool = True
) -> dict[str, Any]:
    _, mounts = _volumes(req, gpu_ranks)
    container: dict[str, Any] = {"name": name, "image": req.image, "command": command}
    env = _env(req)
    if env:
        container["env"] = env
    resources = _resources(req)
    if resources and gpu_ranks:  # a pod that runs no ranks (an MPIJob's launcher) holds no GPU
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    if ports:
        container["ports"] = ports
    return container


def _pod_template(req: JobRequest, containers: list[dict], *, gpu_ranks: bool = True) -> dict[str, Any]:
    volumes, _ = _volumes(req, gpu_ranks)
    spec: dict[str, Any] = {"containers": containers}
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"labels": {"app.kubernetes.io/part-of": "bench", **req.labels}}, "spec": spec}


def _metadata(req: JobRequest) -> dict[str, Any]:
    return {"name": req.name, "namespace": req.namespace, "labels": {"app.kubernetes.io/part-of": "bench"}}


def pytorchjob(req: JobRequest) -> dict[str, Any]:
    """A PyTorchJob: one Master (node rank 0) and nodes - 1 Workers, or only Workers under an elasticPolicy (the
    rendezvous is then at worker 0, the operator's default, and the ranks come from it)."""
    port = [{"name": kf.PYTORCH_PORT_NAME, "containerPort": req.port}]
    container = _container(req, kf.PYTORCH_CONTAINER, pod_command(req), port)
    replica = {"restartPolicy": "OnFailure", "template": _pod_template(req, [container])}
    spec: dict[str, Any] = {"nprocPerNode": str(req.nproc_per_node), "runPolicy": {"cleanPodPolicy": "None"}}
    if req.elastic is None:
        spec["pytorchReplicaSpecs"] = {"Master": {**replica, "replicas": 1}}
        if req.nodes > 1:
            spec["pytorchReplicaSpecs"]["Worker"] = {**copy.deepcopy(replica), "replicas": req.nodes - 1}
    else:
        e = req.elastic
        policy: dict[str, Any] = {"minReplicas": e.min_replicas, "maxReplicas": e.max_replicas}
        policy["rdzvBackend"] = e.rdzv_backend
        if e.max_restarts is not None:
            policy["maxRestarts"] = e.max_restarts
        spec["elasticPolicy"] = policy
        spec["pytorchReplicaSpecs"] = {"Worker": {**replica, "replicas": req.nodes}}
    return {"apiVersion": kf.PYTORCHJOB_API, "kind": "PyTorchJob", "metadata": _metadata(req), "spec": spec}


def mpijob(req: JobRequest) -> dict[str, Any]:
    """An MPIJob for Horovod: a launcher that runs the suite (horovodrun or mpirun over the hostfile the operator
    mounts) and `nodes` workers that run sshd, as the mpi-operator's own Horovod examples do; the workers run the
    ranks, so they hold the GPUs and /dev/shm, and the launcher neither."""
    launcher = _container(req, "launcher", pod_command(req, launcher=True), gpu_ranks=False)
    worker = _container(req, "worker", ["/usr/sbin/sshd", "-De"])
    return {
        "apiVersion": kf.MPIJOB_API,
        "kind": "MPIJob",
        "metadata": _metadata(req),
        "spec": {
            "slotsPerWorker": req.nproc_per_node,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": kf.MPI_SSH_DIR,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": _pod_template(req, [launcher], gpu_ranks=False),
                },
                "Worker": {
                    "replicas": req.nodes,
                    "restartPolicy": "OnFailure",
                    "template": _pod_template(req, [worker]),
                },
            },
        },
    }


def trainjob(req: JobRequest) -> dict[str, Any]:
    """A TrainJob on the torch-distributed ClusterTrainingRuntime (Trainer v2): no elastic policy there. Its trainer
    has no volumes of its own: the results claim and /dev/shm are a patch of the runtime's pod template
    (spec.runtimePatches), on its replicated job `node` and that job's container."""
    trainer: dict[str, Any] = {
        "image": req.image,
        "command": pod_command(req),
        "numNodes": req.nodes,
        "numProcPerNode": req.nproc_per_node,
    }
    resources = _resources(req)
    if resources:
        trainer["resourcesPerNode"] = resources
    spec: dict[str, Any] = {
        "runtimeRef": {
            "name": kf.TRAINJOB_RUNTIME,
            "kind": "ClusterTrainingRuntime",
            "apiGroup": "trainer.kubeflow.org",
        },
        "trainer": trainer,
    }
    volumes, mounts = _volumes(req, gpu_ranks=True)
    if volumes:
        pod = {"volumes": volumes, "containers": [{"name": kf.TRAINJOB_CONTAINER, "volumeMounts": mounts}]}
        job = {"name": TRAINJOB_REPLICATED_JOB, "template": {"spec": {"template": {"spec": pod}}}}
        spec["runtimePatches"] = [
            {
                "manager": TRAINJOB_PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
            }
        ]
    return {"apiVersion": kf.TRAINJOB_API, "kind": "TrainJob", "metadata": _metadata(req), "spec": spec}


BUILDERS = {"pytorchjob": pytorchjob, "mpijob": mpijob, "trainjob": trainjob}


def request_problem(req: JobRequest) -> str | None:
    """Why `req` cannot become a job the operator would run, in one line (None if it can)."""
    if req.kind not in KINDS:
        return f"kind {req.kind!r}: one of {', '.join(KINDS)}"
    suffix = {"pytorchjob": f"-worker-{req.nodes}", "mpijob": f"-worker-{req.nodes}", "trainjob": "-node-0-0"}
    problem = name_problem(req.name, suffix[req.kind])
    if problem:
        return f"--name {req.name!r}: {problem}"
    problem = namespace_problem(req.namespace)
    if problem:
        return f"--namespace {req.namespace!r}: {problem}"
    problem = image_problem(req.image)
    if problem:
        return f"--image {shown(req.image)}: {problem}"
    if req.elastic is not None:
        if req.kind != "pytorchjob":
            return "--min-nodes/--max-nodes: an elastic policy is a PyTorchJob's (MPIJob elastic: --kind mpijob)"
        e = req.elastic
        if not 1 <= e.min_replicas <= req.nodes <= e.max_replicas:
            return (
                f"--nodes {req.nodes} with --min-nodes {e.min_replicas} and --max-nodes {e.max_replicas}: "
                "the job starts with --nodes pods, so min <= nodes <= max, min at least 1"
            )
    if req.results_claim is not None and not DNS_1123_LABEL.fullmatch(req.results_claim):
        return f"--results-claim {req.results_claim!r}: a PersistentVolumeClaim's name, a DNS-1123 label"
    if req.drop_worker and req.kind != "mpijob":
        return (
            "--drop-worker: a worker dropped from the operator's discover_hosts.sh is an MPIJob's; give --kind mpijob"
        )
    if req.drop_worker and req.nodes < 2:
        return (
            f"--drop-worker needs --nodes 2 or more (not {req.nodes}): the others train on without the dropped worker"
        )
    return None


def build(req: JobRequest) -> dict[str, Any]:
    problem = request_problem(req)
    if problem:
        raise ValueError(problem)
    return BUILDERS[req.kind](req)


# ---------------------------------------------------------------- the checks: schema and admission rules
def _json_schema(node: Any) -> Any:
    """A CRD's OpenAPI v3 schema as JSON Schema, with Kubernetes' extensions made explicit."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: _json_schema(v)
        for k, v in node.items()
        if not k.startswith("x-kubernetes-") and k not in ("description", "format")
    }
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out = {**out, "anyOf": [{"type": "integer"}, {"type": "string"}]}
        out.pop("pattern", None)  # the pattern (a quantity's) applies to the string form only
        if "pattern" in node:
            out["anyOf"] = [{"type": "integer"}, {"type": "string", "pattern": node["pattern"]}]
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=8)  # a CRD file is large: read once per process
def crd_schema(crd_dir: Path, kind: str) -> dict[str, Any]:
    """The JSON Schema of `kind`'s served version in the CRD file of `crd_dir`."""
    import yaml  # only where a manifest is checked: the CLI's start does not pay for it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it
    crd = yaml.load((crd_dir / CRD_FILES[kind]).read_text(), Loader=loader)
    version = API_VERSIONS[kind].split("/")[1]
    for v in crd["spec"]["versions"]:
        if v["name"] == version and v.get("served", True):
            return _json_schema(v["schema"]["openAPIV3Schema"])
    raise ValueError(f"{CRD_FILES[kind]}: no served version {version}")


def schema_errors(manifest: dict[str, Any], crd_dir: Path) -> list[str]:
    """Where `manifest` breaks its kind's CRD schema: one line per error, with its path."""
    import jsonschema  # as above

    kind = next(k for k, name in KIND_NAMES.items() if name == manifest.get("kind"))
    validator = jsonschema.Draft7Validator(crd_schema(crd_dir, kind))
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    ]


def admission_errors(manifest: dict[str, Any]) -> list[str]:
    """What the operators' validating webhooks refuse, beyond the schema."""
    errors = []
    name = (manifest.get("metadata") or {}).get("name", "")
    if not DNS_1035.fullmatch(name) or len(name) > LABEL_MAX:
        errors.append(f"metadata.name {name!r}: not a DNS-1035 label")
    spec = manifest.get("spec") or {}
    kind = manifest.get("kind")
    if kind == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs") or {}
        for rtype, r in replicas.items():
            if rtype not in ("Master", "Worker"):
                errors.append(f"pytorchReplicaSpecs.{rtype}: only Master and Worker")
            containers = ((r.get("template") or {}).get("spec") or {}).get("containers") or []
            if not any(c.get("name") == kf.PYTORCH_CONTAINER for c in containers):
                errors.append(f"pytorchReplicaSpecs.{rtype}: no container named {kf.PYTORCH_CONTAINER!r}")
            if any(not c.get("image") for c in containers):
                errors.append(f"pytorchReplicaSpecs.{rtype}: a container without an image")
        if "Master" in replicas and replicas["Master"].get("replicas", 1) != 1:
            errors.append("pytorchReplicaSpecs.Master.replicas: must be 1")
        if "elasticPolicy" in spec:
            policy = spec["elasticPolicy"]
            if "Worker" not in replicas:
                errors.append("elasticPolicy: needs Worker replicas")
            if policy.get("minReplicas", 1) > policy.get("maxReplicas", policy.get("minReplicas", 1)):
                errors.append("elasticPolicy: minReplicas above maxReplicas")
            if "nProcPerNode" in policy and "nprocPerNode" in spec:
                errors.append("elasticPolicy.nProcPerNode and nprocPerNode: give one")
    elif kind == "MPIJob":
        replicas = spec.get("mpiReplicaSpecs") or {}
        if (replicas.get("Launcher") or {}).get("replicas", 1) != 1:
            errors.append("mpiReplicaSpecs.Launcher.replicas: must be 1")
        for rtype in ("Launcher", "Worker"):
            if rtype not in replicas:
                errors.append(f"mpiReplicaSpecs.{rtype}: missing")
        if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
            errors.append("mpiImplementation: OpenMPI, Intel or MPICH")
        if "cleanPodPolicy" not in (spec.get("runPolicy") or {}):
            errors.append("runPolicy.cleanPodPolicy: must be set")
    elif kind == "TrainJob":
        trainer = spec.get("trainer") or {}
        if trainer.get("numNodes", 1) < 1:
            errors.append("trainer.numNodes: at least 1")
        if (spec.get("runtimeRef") or {}).get("kind", "ClusterTrainingRuntime") not in (
            "ClusterTrainingRuntime",
            "TrainingRuntime",
        ):
            errors.append("runtimeRef.kind: ClusterTrainingRuntime or TrainingRuntime")
    return errors


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    import yaml  # as above

    class Plain(yaml.SafeDumper):  # replicas that share a template are written out in full: no &anchors
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return "".join("---\n" + yaml.dump(m, Dumper=Plain, sort_keys=False, default_flow_style=False) for m in manifests)
