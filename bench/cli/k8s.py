"""`bench k8s`: the manifest of one Kubeflow job (PyTorchJob, MPIJob or TrainJob) that runs the suite in its pods,
written for `kubectl apply -f` (bench/cluster/k8s.py builds and checks it).

Nothing is written unless the manifest passes the operator's admission rules and, where the operators' CRD files are
found (--crd-dir), their schema; bad input is one line and exit 2, before anything is written."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from pathlib import Path

from bench.cli import options
from bench.cli.common import examples
from bench.cluster import k8s
from bench.cluster import kubeflow as kf
from bench.cluster.k8s import MANIFEST_DEFAULTS as d
from bench.core.console import note
from bench.core.environment import PROJECT_ROOT
from bench.core.errors import EXIT_OK, UsageError
from bench.core.inputs import shown
from bench.core.registry import kubeflow_backend

# where a checkout beside the project keeps the operators' CRD files (the project does not ship them)
DEFAULT_CRD_DIR = PROJECT_ROOT.parent / "shared" / "k8s" / "crds"
# arguments the manifest sets for the pods' bench command
SET_HERE = ("--backend", "--store", "--hosts", "--hostfile", "--scheduler", "--record-lines")
# and, in a --drop-worker job, the fault and where Horovod discovers its hosts
SET_HERE_FAULT = ("--hvd-discovery-script", "--drop-host", "--kill-host", "--partition-host", "--fault", "--kill-rank")
# image names that say they carry CUDA: PyTorch's own (`-cuda12.4-`), NVIDIA's registry, a `gpu` tag
NAME_MAX_BYTES = 255  # a file name's limit on Linux file systems
CUDA_IMAGE_WORDS = ("cuda", "gpu", "nvcr.io/nvidia/")


def job_name(text: str) -> str:
    problem = k8s.name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}")
    return text


def namespace(text: str) -> str:
    problem = k8s.namespace_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}")
    return text


def image(text: str) -> str:
    problem = k8s.image_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}")
    return text


def quantity(text: str) -> str:
    """A Kubernetes quantity as the CRD's pattern takes it: 2, 500m, 8Gi."""
    if (
        not re.fullmatch(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", text)
        or float(re.sub(r"[^0-9.]", "", text)) <= 0
    ):
        raise argparse.ArgumentTypeError(f"{shown(text)}: a Kubernetes quantity above 0, such as 4, 500m or 16Gi")
    return text


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "k8s",
        help="write a Kubeflow job (PyTorchJob, MPIJob, TrainJob) that runs the suite, for kubectl apply",
        description="Each pod runs bench itself with the arguments after --; its records go to the store on the "
        "ReadWriteMany volume named by --results-claim, and come out in the log of the pod that records as marked "
        "lines, for kubectl logs POD | bench import -. The manifest is checked against the operator's admission "
        "rules and, with the operators' CRD files, their schema, before it is written. The image the examples name "
        f"is the repository's recipe (image/Containerfile: CUDA torch, the suite, Horovod with NCCL, sshd, Open MPI), "
        f"built and pushed with: {k8s.RECIPE_BUILD} && podman push {k8s.RECIPE_IMAGE}. Contract-tested, not "
        "cluster-tested: see docs/clusters.md.",
        epilog=examples(
            f"bench k8s --image {k8s.RECIPE_IMAGE} --nodes 2 --results-claim bench-results "
            "-o job.yaml -- --workload mnist_mlp",
            f"bench k8s --kind mpijob --image {k8s.RECIPE_IMAGE} --nodes 4 --nproc-per-node 2 "
            "--results-claim bench-results",
            f"bench k8s --kind mpijob --drop-worker --image {k8s.RECIPE_IMAGE} --nodes 2 "
            "--results-claim bench-results -- --workload mnist_mlp --recovery-timeout 300",
            f"bench k8s --image {k8s.RECIPE_IMAGE} --nodes 2 --min-nodes 1 --max-nodes 3 --results-claim bench-results",
            f"bench k8s --kind trainjob --image {k8s.RECIPE_IMAGE} --nodes 2 --gpus-per-node 8 "
            "--results-claim bench-results",
        ),
        parents=[
            options.parent(
                None,
                ["--output"],
                helps={"--output": "write the manifest there, in a folder that exists (default: stdout)"},
                refuses={"--output": ["/nonexistent/folder/job.yaml"]},
            )
        ],
    )
    options.add(
        p,
        "--kind",
        choices=k8s.KINDS,
        default=d["kind"],
        help="the job: pytorchjob (torchrun), mpijob (horovodrun or mpirun), trainjob (torchrun on Trainer v2) "
        "(%(default)s)",
        invalid=["tfjob"],
    )
    options.add(
        p,
        "--image",
        type=image,
        help="the container image with bench and its frameworks installed (required): the one image/Containerfile "
        f"builds, with {k8s.RECIPE_BUILD}",
        invalid=[
            "",
            "bench image:1.0",  # a space
            "Bench:1.0",  # an upper-case letter in the name (only a registry host may have one)
            "registry.example.com/bench:",  # an empty tag
            "bench:-1.0",  # a tag starts with a letter, digit or '_'
            "bench:" + "1" * 129,  # a tag of 129 characters
            "bench@sha256:abc",  # a digest too short
            "bench--/x",  # a separator at a component's end
            "bench:1.0\x1b[2J",  # a terminal escape
            "a/" * 130 + "b",  # a name longer than 255 characters
        ],
    )
    options.add(
        p, "--name", type=job_name, default=d["name"], help="the job's name (%(default)s)", invalid=["My_Job", "1a"]
    )
    options.add(
        p,
        "--namespace",
        type=namespace,
        default=d["namespace"],
        help="the namespace (%(default)s)",
        invalid=["a b", "A"],
    )
    options.declare(p, "--nodes", help="pods (%(default)s)", default=d["nodes"])
    options.declare(
        p, "--nproc-per-node", help=f"ranks per pod ({d['nproc_per_node']}; with --gpus-per-node, one per GPU)"
    )
    options.add(
        p,
        "--min-nodes",
        type=options.positive_int,
        help="a PyTorchJob's elasticPolicy: the fewest pods it trains with (no elastic policy by default)",
        invalid=["0", "x"],
    )
    options.add(
        p,
        "--max-nodes",
        type=options.positive_int,
        help="a PyTorchJob's elasticPolicy: the most pods (--nodes by default, with --min-nodes)",
        invalid=["0", "x"],
    )
    options.add(p, "--cpus-per-pod", type=quantity, help="CPU limit per pod (none by default)", invalid=["0", "x"])
    options.add(
        p, "--memory-per-pod", type=quantity, help="memory limit per pod (none by default)", invalid=["0", "lots"]
    )
    options.declare(
        p,
        "--gpus-per-node",
        help="nvidia.com/gpu per pod, for a CUDA image, each run by a rank of its own (none by default)",
    )
    options.add(
        p,
        "--image-has-cuda",
        action="store_true",
        help="the image carries CUDA though its name does not say so (cuda, gpu, nvcr.io/nvidia/) (off)",
    )
    options.add(
        p,
        "--drop-worker",
        action="store_true",
        help="an MPIJob whose launcher runs bench fault rather than bench run: Horovod elastic over the operator's "
        "/etc/mpi/discover_hosts.sh (--hvd-discovery-script), the last worker dropped at --at-step (--drop-host): "
        "its pod deleted while the launcher waits, within --recovery-timeout; needs --kind mpijob and --nodes 2 or "
        "more (off)",
    )
    options.add(
        p,
        "--results-claim",
        help="a ReadWriteMany PersistentVolumeClaim mounted at /results, where the pods store their records "
        "(none by default: the store stays in the pod; its record comes out in the pod's log, for bench import -)",
        invalid=["Bad_Claim"],
    )
    options.add(
        p,
        "--crd-dir",
        type=Path,
        help="a folder of the operators' CRD files to check the manifest's schema against "
        "(default: ../shared/k8s/crds beside the project, where it exists)",
        invalid=["/nonexistent/crds"],
    )
    options.add(
        p,
        "bench_args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="arguments of the bench run in the pods, such as --workload mnist_mlp",
        valid_because="they are checked here by the parser of bench run",
    )
    p.set_defaults(func=cmd)


def _pod_args(args) -> list[str]:
    rest = list(args.bench_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    verb = "fault" if args.drop_worker else "run"
    for taken in SET_HERE + (SET_HERE_FAULT if args.drop_worker else ()):
        if any(a == taken or a.startswith(taken + "=") for a in rest):
            raise UsageError(
                f"{taken} after --: the manifest sets it (the backend from --kind, the world size from --nodes and "
                "--nproc-per-node, the store from --results-claim, the hosts from the operator, the record lines "
                "for kubectl logs" + (", the fault from --drop-worker)" if args.drop_worker else ")")
            )
    if "--json" in rest:
        raise UsageError(
            f"--json after --: the pods print their record as a marked line (bench {verb} --record-lines), which "
            "kubectl logs POD | bench import - reads; leave --json out"
        )
    world = args.nodes * args.nproc_per_node
    for i, a in enumerate(rest):  # a world size given after -- must be the one the job starts with
        value = (
            a.partition("=")[2]
            if a.startswith("--nproc=")
            else rest[i + 1]
            if a == "--nproc" and i + 1 < len(rest)
            else None
        )
        if value is not None and value != str(world):
            raise UsageError(
                f"--nproc {shown(value)} after --: the job holds {args.nodes} pods x {args.nproc_per_node} ranks = "
                f"{world}; set the world size with --nodes and --nproc-per-node"
            )
    rest = [
        a
        for i, a in enumerate(rest)
        if not (a.startswith("--nproc=") or a == "--nproc" or (i and rest[i - 1] == "--nproc"))
    ]
    if any(a == "--gpus" or a.startswith("--gpus=") for a in rest):
        raise UsageError("--gpus after --: the manifest sets it from --gpus-per-node, one process per GPU")
    # a GPU pod's ranks take one GPU each (--gpus: per pod, or per host of the MPIJob's hostfile); on CPUs the pods of
    # a PyTorchJob or TrainJob take their world from the operator's variables (under an elastic policy, the pods
    # there are, not a size fixed here), and an MPIJob's launcher gives horovodrun the world of its hostfile
    if args.gpus_per_node:
        size = ["--gpus", str(args.nproc_per_node)]
    else:
        size = ["--nproc", str(world)] if args.kind == "mpijob" else []
    pod = ["--backend", str(kubeflow_backend(args.kind)), *size, *rest]
    try:  # the pods' arguments refused now, not when the job starts
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            args.root_parser.parse_args([verb, *pod])
    except SystemExit as exc:
        if exc.code:
            last = (err.getvalue().strip().splitlines() or ["bad arguments"])[-1]
            raise UsageError(f"the arguments after --: {last}") from None
        raise UsageError(f"the arguments after -- ask for bench {verb}'s help, which is not a job") from None
    return pod


def _elastic(args) -> kf.Elastic | None:
    if args.min_nodes is None and args.max_nodes is None:
        return None
    return kf.Elastic(min_replicas=args.min_nodes or args.nodes, max_replicas=args.max_nodes or args.nodes)


def _crd_dir(given: Path | None) -> Path | None:
    if given is not None:
        if not all((given / f).is_file() for f in k8s.CRD_FILES.values()):
            raise UsageError(
                f"--crd-dir {shown(str(given))}: it must hold the operators' CRD files "
                f"({', '.join(k8s.CRD_FILES.values())})"
            )
        return given
    return DEFAULT_CRD_DIR if (DEFAULT_CRD_DIR / k8s.CRD_FILES["pytorchjob"]).is_file() else None


def cmd(args) -> int:
    if args.results_claim is not None and not k8s.DNS_1123_LABEL.fullmatch(args.results_claim):
        raise UsageError(
            f"--results-claim {shown(args.results_claim)}: a PersistentVolumeClaim's name, a DNS-1123 label"
        )
    if args.output is not None:
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
            raise UsageError(f"--output {shown(args.output)}: its folder does not exist; make it first")
        if os.path.isdir(args.output):
            raise UsageError(f"--output {shown(args.output)}: a folder; name the file to write")
        if len(os.path.basename(args.output).encode()) > NAME_MAX_BYTES:
            raise UsageError(f"--output {shown(args.output)}: a file name of at most {NAME_MAX_BYTES} bytes")
    crd_dir = _crd_dir(args.crd_dir)
    if not args.image:
        raise UsageError("--image: name the container image with bench installed (bench k8s writes no image)")
    if args.gpus_per_node and not args.image_has_cuda and not any(w in args.image.lower() for w in CUDA_IMAGE_WORDS):
        raise UsageError(
            f"--gpus-per-node {args.gpus_per_node} with --image {shown(args.image)}, whose name says no CUDA build: "
            "give a CUDA image, or --image-has-cuda if it is one"
        )
    if args.nproc_per_node is None:  # one rank per GPU, where the pods hold GPUs
        args.nproc_per_node = args.gpus_per_node or d["nproc_per_node"]
    if args.gpus_per_node and args.nproc_per_node > args.gpus_per_node:
        raise UsageError(
            f"--nproc-per-node {args.nproc_per_node} with --gpus-per-node {args.gpus_per_node}: a pod holds one rank "
            "per GPU; give at most as many ranks as GPUs"
        )
    if args.gpus_per_node and args.nproc_per_node < args.gpus_per_node:
        note(
            f"bench k8s: note: --nproc-per-node {args.nproc_per_node} with --gpus-per-node {args.gpus_per_node}: "
            f"{args.gpus_per_node - args.nproc_per_node} GPU(s) of each pod idle (leave --nproc-per-node out for one "
            "rank per GPU)"
        )
    req = k8s.JobRequest(
        kind=args.kind,
        name=args.name,
        image=args.image,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        namespace=args.namespace,
        cpus_per_pod=args.cpus_per_pod,
        memory_per_pod=args.memory_per_pod,
        gpus_per_pod=args.gpus_per_node,
        results_claim=args.results_claim,
        elastic=_elastic(args),
        bench_args=tuple(_pod_args(args)),
        drop_worker=args.drop_worker,
    )
    problem = k8s.request_problem(req)
    if problem:
        raise UsageError(problem)
    pods = max(req.nodes, req.elastic.max_replicas if req.elastic else 0)
    if req.kind == "mpijob" and not args.results_claim:
        raise UsageError(
            "an MPIJob's ranks run in its worker pods and write the run directory its launcher reads and records: "
            "give --results-claim, a ReadWriteMany claim every pod mounts"
        )
    if pods > 1 and not args.results_claim:
        raise UsageError(
            f"the {pods} pods of a {k8s.KIND_NAMES[req.kind]} join one run through the store's volume (the leading pod "
            "hands the run to the others there): give --results-claim, a ReadWriteMany claim every pod mounts"
        )
    manifest = k8s.build(req)
    errors = k8s.admission_errors(manifest)
    if crd_dir is not None:
        errors += k8s.schema_errors(manifest, crd_dir)
    if errors:  # the builder's own fault, not the user's: said in full
        raise UsageError(f"the {k8s.KIND_NAMES[req.kind]} bench built would be refused: {'; '.join(errors)}")
    if crd_dir is None:
        note("bench k8s: note: no CRD files found (--crd-dir): the manifest is checked against admission rules only")
    if not args.results_claim:
        note(
            "bench k8s: note: no --results-claim: the store stays in the pod and ends with it; its record comes out "
            "in its log (kubectl logs POD | bench import -)"
        )
    text = k8s.to_yaml([manifest])
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        raise UsageError(f"--output {shown(args.output)}: cannot write it ({exc.strerror})") from None
    note(f"bench k8s: wrote {args.output}; apply it with: kubectl apply -f {args.output}")
    return EXIT_OK
