"""`bench converge`: time to accuracy on a real data set, per backend (and world size), every run stored."""

from __future__ import annotations

import argparse

from bench.cli import options
from bench.cli.common import (
    chosen_backends,
    examples,
    open_store,
    print_json,
    report_page,
    spec_options,
    status_exit,
    world_of,
)
from bench.core.console import note
from bench.core.spec import DEFAULTS, default_threads
from bench.harness.runner import run_specs
from bench.tasks.converge import CONVERGE_DEFAULTS, LR_SCALINGS, build_spec
from workloads import WORKLOADS


def add_parser(verbs) -> None:
    d = CONVERGE_DEFAULTS
    own = argparse.ArgumentParser(add_help=False)
    t = own.add_argument_group("time to accuracy")
    options.add(
        t,
        "--target",
        type=options.positive_float,
        help=f"held-out accuracy to reach, 0 to 1 (default {d['target']})",
        invalid=["0", "x", "1.5"],
    )
    options.add(
        t,
        "--epochs",
        type=options.positive_int,
        help=f"passes over the training part; every backend runs them all (default {d['epochs']})",
        invalid=["0", "x"],
    )
    options.add(
        t,
        "--eval-every",
        type=options.positive_int,
        metavar="STEPS",
        help=f"evaluate held-out accuracy every STEPS optimizer steps (default: {d['evals_per_epoch']} times an epoch)",
        invalid=["0", "x"],
    )
    options.add(
        t,
        "--lr-scaling",
        choices=LR_SCALINGS,
        help=f"none: --lr at every world size; linear: --lr x world size (default {d['lr_scaling']})",
        invalid=["sqrt"],
    )
    options.add(
        t,
        "--warmup-epochs",
        type=options.finite_float,
        help=f"with linear scaling, epochs over which the lr rises from --lr to its scaled value "
        f"(default {d['warmup_epochs']:g})",
        invalid=["-1", "x", "99"],
    )
    options.add(
        t,
        "--holdout",
        type=options.positive_float,
        help=f"share of the data held out for evaluation, where the data set has no test set of its own "
        f"(default {d['holdout']:g})",
        invalid=["0", "1", "x"],
    )
    measured = options.parent("measurement", ("--batch-size", "--seed", "--lr", "--timeout", "--check-timeout"))
    p = verbs.add_parser(
        "converge",
        help="time to a held-out accuracy per backend, on a real data set",
        description="Time to a held-out accuracy per backend (and world size), on a real data set: "
        "--data digits by default (scikit-learn's, always here), mnist or imagefolder "
        "with --data-dir. Every run is stored; -o writes the page.",
        epilog=examples(
            "bench converge --nproc 2 -o reports/converge.html   # digits, every backend, to 90%",
            "bench converge --backend elastic,horovod --world-sizes 1,2 --lr-scaling linear",
            "bench converge --data mnist --data-dir ~/mnist --target 0.97 --epochs 3",
        ),
        parents=[
            options.what_runs("converge"),
            options.parent(
                "what runs",
                ["--world-sizes"],
                helps={
                    "--world-sizes": (
                        "comma-separated world sizes, to see how the lr rule changes time to accuracy "
                        "(default: --nproc or --gpus alone: each world size is a whole training)"
                    )
                },
            ),
            own,
            options.placement(),
            measured,
            options.data(
                data=d["data"],
                helps={
                    "--data": (
                        f"default {d['data']} here, real data, since accuracy on random labels means "
                        f"nothing ({DEFAULTS['data']} for the verbs that time steps); digits is "
                        "scikit-learn's, mnist and imagefolder need --data-dir"
                    )
                },
            ),
            options.numerics(),
            options.backend_options(),
            options.sharing(),
            options.store(),
            options.json_output(),
            options.report_output(),
        ],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    if args.output:
        report_page().output_path(args.output)  # before the runs, not after them
    device, world = world_of(args, None)
    backends = chosen_backends(args.backend, options.every_backend("converge"), device=device, verb="converge")
    train = spec_options(args, backends)
    sizes = args.world_sizes or [world]
    # one thread count for every world size, so sizes differ only in their number of workers (as in a sweep)
    train.setdefault("threads", default_threads(device, max(sizes)))
    plan = dict(
        target=args.target,
        epochs=args.epochs,
        eval_every=args.eval_every,
        lr_scaling=args.lr_scaling,
        warmup_epochs=args.warmup_epochs,
        holdout=args.holdout,
    )
    # every spec is built (and checked) before the first run starts
    workloads = options.chosen(args.workload, WORKLOADS)
    specs = [
        build_spec(backend=backend, workload=workload, world_size=n, device=device, **plan, **train)
        for workload in workloads
        for n in sizes
        for backend in backends
    ]
    records = run_specs(specs, open_store(args.store, runs=True), "bench converge", show_progress=not args.json)
    if args.json:
        print_json([r.to_dict() for r in records] if len(records) > 1 else records[0].to_dict())
    else:
        for r in records:
            case = f"{r.spec.workload} " if len(workloads) > 1 else ""
            print(f"{r.spec.backend:8} {case}world {r.spec.world_size}: {r.task.one_line(r)}")
    if args.output:
        latest, stamped = report_page().write_report_with_copy(open_store(args.store), args.output)
        note(f"report written to {latest} (and {stamped})")
    return status_exit([r.status for r in records])
