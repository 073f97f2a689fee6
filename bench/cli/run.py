"""`bench run`: one run of one backend and workload."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import cluster_of, examples, run_one, spec_options, world_of
from bench.tasks.train import build_spec


def add_parser(verbs) -> None:
    p = verbs.add_parser("run", help="one run of one backend and workload",
                         epilog=examples(
                             "bench run --backend elastic --workload mnist_mlp --nproc 2   # 2 CPU processes, gloo",
                             "bench run --backend horovod --workload resnet18 --nproc 2 --json",
                             "bench run --backend elastic --gpus 8                         # one process per GPU",
                             "bench run --backend ps --nproc 2 --ps-servers 2 --ps-mode async",
                             "bench run --backend horovod --hvd-launcher mpi --nproc 2"),
                         parents=[options.parent("what runs", ("--backend", "--workload")), *options.training(),
                                  options.parent("output", ("--save-model",))])
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    cluster = cluster_of(args)
    device, world = world_of(args, cluster)
    spec = build_spec(backend=args.backend, workload=args.workload, world_size=world, device=device,
                      cluster=cluster, **spec_options(args, [args.backend]))
    return run_one(spec, args.store, args.json, "run")
