"""`bench run`: one run of one backend and workload."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import cluster_of, run_one, spec_options, world_of
from bench.tasks.train import build_spec


def add_parser(verbs) -> None:
    p = verbs.add_parser("run", help="one run of one backend and workload",
                         parents=[options.parent("what runs", ("--backend", "--workload")), *options.training(),
                                  options.parent("output", ("--save-model",))])
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    cluster = cluster_of(args)
    device, world = world_of(args, cluster)
    spec = build_spec(backend=args.backend, workload=args.workload, world_size=world, device=device,
                      cluster=cluster, **spec_options(args, [args.backend]))
    return run_one(spec, args.store, args.json, "run")
