"""`bench run`: one run of one backend and workload (of each, in turn, where several are given)."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import (
    add_record_lines,
    check_record_lines,
    chosen_backends,
    cluster_of,
    examples,
    open_store,
    run_each,
    spec_options,
    world_of,
)
from bench.core.console import note
from bench.core.errors import UsageError
from bench.core.registry import get_backend
from bench.harness.plan import print_plans
from bench.harness.runner import join_pods_run
from bench.tasks.train import build_spec
from workloads import WORKLOADS


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "run",
        help="one run of one backend and workload (of each in turn, where several are given)",
        epilog=examples(
            "bench run --backend elastic --workload mnist_mlp --nproc 2   # 2 CPU processes, gloo",
            "bench run --backend horovod --workload resnet18 --nproc 2 --json",
            "bench run --backend elastic --gpus 8                         # one process per GPU",
            "bench run --backend ps --nproc 2 --ps-servers 2 --ps-mode async",
            "bench run --backend horovod --hvd-launcher mpi --nproc 2",
            "bench run --backend elastic,horovod --nproc 2                # one run of each, in turn",
            "bench run --backend elastic --hosts a:8,b:8 --gpus 8 --dry-run  # the plan of 16 GPU processes",
        ),
        parents=[
            options.what_runs("run"),
            *options.training(),
            options.parent("output", ("--save-model",)),
            options.plan(),
        ],
    )
    add_record_lines(p, "bench k8s sets it in every pod")
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    check_record_lines(args)
    cluster = cluster_of(args, pods=True)
    device, world = world_of(args, cluster)
    backends = chosen_backends(
        args.backend, options.every_backend("run"), device=device, verb="run", cluster=cluster, world=world
    )
    workloads = options.chosen(args.workload, WORKLOADS)
    if args.save_model and len(backends) * len(workloads) > 1:
        raise UsageError(
            f"--save-model keeps one run's model, and this makes {len(backends) * len(workloads)} runs; "
            "give one --backend and one --workload with it"
        )
    given = spec_options(args, backends)
    # every spec is built (and checked) before the first run starts
    specs = [
        build_spec(backend=backend, workload=workload, world_size=world, device=device, cluster=cluster, **given)
        for workload in workloads
        for backend in backends
    ]
    if args.dry_run:
        return print_plans(specs)
    if cluster is not None and cluster.get("pod") is not None:
        place = cluster["pod"]
        for backend in backends:
            if place.kind.lower() not in get_backend(backend).kubeflow_kinds:
                raise UsageError(
                    f"--backend {backend} does not run in the pods of a {place.kind}; give --backend elastic"
                )
        if len(specs) > 1:
            raise UsageError(f"the pods of a {place.kind} make one run together; give one --backend and one --workload")
        note(cluster["said"])
        if not place.leads:  # the leading pod records the run; this one becomes one agent of it
            return join_pods_run(specs[0], place, open_store(args.store))
    return run_each(specs, args.store, args.json, "run", record_lines=args.record_lines)
