"""`bench selfcheck`: the suite against bare torchrun and horovodrun loops (bench.workflows.selfcheck), the check to run
on a new machine before trusting the suite there."""

from __future__ import annotations

import argparse

from bench.cli import options
from bench.cli.common import chosen_backends, examples, spec_options
from bench.core.errors import UsageError
from bench.core.spec import MAX_TIMEOUT_WORDS, resolve_device
from bench.workflows.bare_loops import BARE_LOOPS
from bench.workflows.selfcheck import (
    DEFAULT_MAX_MINUTES,
    DEFAULT_PAIRS,
    GOALS,
    choose_backends,
    plan,
    selfcheck,
    validate,
)
from workloads import WORKLOADS

DEFAULT_PAIRS_TIMEOUT = DEFAULT_MAX_MINUTES * 60  # --pairs-timeout, in seconds as every time limit


def add_parser(verbs) -> None:
    loops = ", ".join(BARE_LOOPS)
    t, b = GOALS["throughput"], GOALS["busbw"]
    own = argparse.ArgumentParser(add_help=False)
    g = own.add_argument_group("the check")
    options.add(
        g,
        "--pairs",
        type=options.positive_int,
        default=DEFAULT_PAIRS,
        help="pairs of launches (suite and bare loop) per figure, at least (default %(default)s, at least 2)",
        invalid=["0", "1", "x"],
    )
    options.add(
        g,
        "--pairs-timeout",
        type=options.wait_seconds,
        default=DEFAULT_PAIRS_TIMEOUT,
        metavar="SECONDS",
        help=f"after --pairs, pairs are added until each interval is within ±{100 * t.resolution:g}%% "
        f"(throughput) or ±{100 * b.resolution:g}%% (busbw), or until this many seconds per backend "
        f"have passed (default %(default)g, {DEFAULT_MAX_MINUTES:g} minutes; 0: --pairs pairs only; at "
        f"most {MAX_TIMEOUT_WORDS})",
        invalid=["-1", "nan", "inf", "x", *options.TOO_LONG],
    )
    options.declare(g, "--no-comm", help="check training throughput only, not allreduce busbw at 16 MiB")
    p = verbs.add_parser(
        "selfcheck",
        help="the suite against bare torchrun/horovodrun loops: ratio and interval per figure",
        description=f"Runs each backend's suite run and its bare loop ({loops}) in alternating pairs of launches "
        "and prints the ratio suite/bare of throughput and of allreduce busbw at 16 MiB, with its 95% "
        f"interval across launches. PASS: the interval includes 1.0 and its low end is at least "
        f"{t.floor:g} (throughput) or {b.floor:g} (busbw). ps and single have no external bare loop to "
        "compare with and are not accepted. The suite's runs go to a temporary store unless --store is "
        "given.",
        epilog=examples(
            "bench selfcheck --workload resnet18 --nproc 2     # every bare loop that can run here",
            "bench selfcheck --backend elastic --pairs 4 --pairs-timeout 0",
            "bench selfcheck --backend horovod --no-comm --store results/selfcheck.sqlite",
        ),
        parents=[
            options.what_runs(
                "selfcheck",
                workload_help="comma-separated workloads, or all, as every verb takes them; bench selfcheck "
                "checks one at a time, a built-in one (default %(default)s, the quick one)",
                refuses={"--backend": ["ps", "single"], "--workload": ["all", "mnist_mlp,resnet18"]},
            ),
            own,
            options.placement(("--nproc", "--gpus", "--threads", "--cpu-bind", "--oversubscribe")),
            options.parent(
                "measurement", ("--batch-size", "--warmup-steps", "--steps-per-window", "--windows", "--timeout")
            ),
            options.parent("allreduce", ("--warmup-iters", "--iters")),
            # a check's runs are not results: its default store is not the results store
            options.sharing(),
            options.store("keep the suite's runs in this results store (default: a temporary one, removed after)"),
            options.json_output(),
        ],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    max_minutes = args.pairs_timeout / 60  # the check counts its time in minutes
    validate(args.pairs, max_minutes)
    workloads = options.chosen(args.workload, WORKLOADS)
    if len(workloads) > 1:
        raise UsageError(
            f"--workload {args.workload}: bench selfcheck checks one workload at a time (its table and "
            "verdict are of one); run it once for each"
        )
    device, world = resolve_device(args.nproc, args.gpus)
    given = args.backend
    if options.is_all(given):  # every compared backend with a bare loop, those that can run here (each other said)
        given = ",".join(chosen_backends(given, options.every_backend("selfcheck"), device=device, verb="selfcheck"))
    backends = choose_backends(given, device)
    given = spec_options(args, backends)
    if given.get("cpu_bind") == "numa":
        raise UsageError(
            "--cpu-bind numa: the bare loops bench selfcheck holds runs against cannot bind by NUMA node; "
            "give --cpu-bind none or cores"
        )
    if device == "cuda" and given.get("cpu_bind") in (None, "auto"):
        given["cpu_bind"] = "none"  # as the bare loops on GPUs run: both sides of a pair placed alike
    plans = plan(
        backends,
        workloads[0],
        device,
        world,
        options=given,
        allreduce=not args.no_comm,
        comm={"warmup_iters": args.warmup_iters, "iters": args.iters},
    )
    return selfcheck(plans, pairs=args.pairs, max_minutes=max_minutes, store_path=args.store, as_json=args.json)
