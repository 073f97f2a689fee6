"""`bench allreduce`: a communication sweep over message sizes per backend, printed as nccl-tests prints it."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import (cluster_of, comm_options, comma_list, examples, open_store, print_json, spec_options,
                              status_exit, world_of)
from bench.core.console import note
from bench.core.registry import compared_for
from bench.harness.runner import run_specs
from bench.rank.collectives import format_table
from bench.workflows.plan import available_backends, comm_specs

ALL = "all"


def add_parser(verbs) -> None:
    p = verbs.add_parser("allreduce", help="communication sweep over message sizes, as nccl-tests prints it",
                         epilog=examples(
                             "bench allreduce --nproc 2                       # every backend, 4 B to 64 MiB",
                             "bench allreduce --backend elastic,horovod --nproc 2 --min-bytes 8K --max-bytes 1G",
                             "bench allreduce --backend horovod --ops allreduce,allgather --dtype float16 --json"),
                         parents=[options.placement([*options.PLACEMENT, "--timeout"]), options.hosts(), options.comm(),
                                  options.backend_options(), options.sharing(), options.store(), options.json_output()])
    options.add(p, "--backend", default=ALL, help=f"a backend, a comma-separated list, or {ALL} "
                                                   f"({', '.join(compared_for('comm'))}) (default %(default)s: a sweep of "
                                                   "message sizes takes seconds a backend, and its table is read "
                                                   "across backends)",
                invalid=["tensorflow", "elastic,nope"])
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    cluster = cluster_of(args)
    device, world = world_of(args, cluster)
    if args.backend == ALL:  # those that can run here, saying which cannot (TensorFlow's without the tf extra)
        backends = available_backends(device, lambda name, why: note(f"bench allreduce: skipping {name}: {why}"),
                                      compared_for("comm"))
    else:
        backends = comma_list(args.backend)
    specs = comm_specs(backends, device, [world], comm=comm_options(args),
                       options={**spec_options(args, backends), "cluster": cluster})
    records = run_specs(specs, open_store(args.store, runs=True), "bench allreduce", show_progress=True,
                        on_record=None if args.json else print_table)
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
            print(f"# alpha-beta fit ({m.model}): a = {m.fit['alpha_s'] * 1e6:.1f} us, "
                  f"1/b = {m.fit['bandwidth_gbps']:.2f} GB/s, weighted R^2 = {m.fit['r2_weighted']:.3f}")
    else:
        print(f"# error: {record.error.message}")
    print(flush=True)
