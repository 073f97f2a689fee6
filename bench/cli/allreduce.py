"""`bench allreduce`: a communication sweep over message sizes per backend, printed as nccl-tests prints it."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import (
    chosen_backends,
    cluster_of,
    comm_options,
    examples,
    open_store,
    print_json,
    spec_options,
    status_exit,
    world_of,
)
from bench.harness.plan import print_plans
from bench.harness.runner import run_specs
from bench.rank.collectives import format_table
from bench.workflows.plan import comm_specs


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "allreduce",
        help="communication sweep over message sizes, as nccl-tests prints it",
        epilog=examples(
            "bench allreduce --nproc 2                       # every backend, 4 B to 64 MiB",
            "bench allreduce --backend elastic,horovod --nproc 2 --min-bytes 8K --max-bytes 1G",
            "bench allreduce --backend horovod --ops allreduce,allgather --dtype float16 --json",
        ),
        parents=[
            options.what_runs("allreduce", flags=("--backend",)),
            options.placement([*options.group("world size"), *options.group("placement"), "--timeout"]),
            options.hosts(),
            options.comm(),
            options.backend_options(),
            options.sharing(),
            options.plan(),
            options.store(),
            options.json_output(),
        ],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    cluster = cluster_of(args)
    device, world = world_of(args, cluster)
    # with all, those that can run here, saying which cannot (TensorFlow's without the tf extra)
    backends = chosen_backends(
        args.backend, options.every_backend("allreduce"), device=device, verb="allreduce", cluster=cluster, world=world
    )
    specs = comm_specs(
        backends, device, [world], comm=comm_options(args), options={**spec_options(args, backends), "cluster": cluster}
    )
    if args.dry_run:
        return print_plans(specs)
    records = run_specs(
        specs,
        open_store(args.store, runs=True),
        "bench allreduce",
        show_progress=True,
        on_record=None if args.json else print_table,
    )
    if args.json:
        print_json([r.to_dict() for r in records] if len(records) > 1 else records[0].to_dict())
    return status_exit([r.status for r in records])


def print_table(record) -> None:
    """One backend's sweep on stdout: the nccl-tests table and the alpha-beta fit, or why it failed."""
    spec, m = record.spec, record.metrics
    print(f"# backend {spec.backend}, {spec.world_size} ranks ({spec.device}), status {record.status}")
    if record.ok:
        print(format_table(m.rows, m.ceiling))
        if m.fit:
            print(
                f"# alpha-beta fit ({m.model}): a = {m.fit['alpha_s'] * 1e6:.1f} us, "
                f"1/b = {m.fit['bandwidth_gbps']:.2f} GB/s, weighted R^2 = {m.fit['r2_weighted']:.3f}"
            )
    else:
        print(f"# error: {record.error.message}")
    print(flush=True)
