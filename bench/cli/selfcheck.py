"""`bench selfcheck`: the suite against bare torchrun and horovodrun loops (bench.workflows.selfcheck), the check to run on a
new machine before trusting the suite there."""

from __future__ import annotations

import argparse

from bench.cli import options
from bench.cli.common import examples, spec_options
from bench.core.spec import resolve_device
from bench.workflows.reference import BARE_LOOPS
from bench.workflows.selfcheck import (DEFAULT_MAX_MINUTES, DEFAULT_PAIRS, GOALS, MAX_MINUTES, MAX_MINUTES_WORDS,
                                       choose_backends, plan, selfcheck, validate)


def add_parser(verbs) -> None:
    loops = ", ".join(BARE_LOOPS)
    t, b = GOALS["throughput"], GOALS["busbw"]
    own = argparse.ArgumentParser(add_help=False)
    g = own.add_argument_group("the check")
    options.add(g, "--backend", help=f"comma-separated, of {loops} (default: each of them that a sweep compares "
                "and can run here: the check is of the suite, so every backend it would measure is checked)",
                invalid=["ps", "single", "nope", "elastic,nope"])
    options.add(g, "--pairs", type=options.positive_int, default=DEFAULT_PAIRS,
                help="pairs of launches (suite and bare loop) per figure, at least (default %(default)s, at "
                     "least 2)", invalid=["0", "1", "x"])
    options.add(g, "--max-minutes", type=options.at_most(options.nonnegative_float, MAX_MINUTES, MAX_MINUTES_WORDS),
                default=DEFAULT_MAX_MINUTES,
                help=f"after --pairs, pairs are added until each interval is within ±{100 * t.resolution:g}%% "
                     f"(throughput) or ±{100 * b.resolution:g}%% (busbw), or until this many minutes per backend "
                     f"have passed (default %(default)s; 0: --pairs pairs only; at most {MAX_MINUTES_WORDS})",
                invalid=["-1", "nan", "inf", "x", "1e10", f"{MAX_MINUTES + 1:g}"])
    g.add_argument("--no-comm", action="store_true",
                   help="check training throughput only, not allreduce busbw at 16 MiB")
    p = verbs.add_parser(
        "selfcheck", help="the suite against bare torchrun/horovodrun loops: ratio and interval per figure",
        description=f"Runs each backend's suite run and its bare loop ({loops}) in alternating pairs of launches "
                    "and prints the ratio suite/bare of throughput and of allreduce busbw at 16 MiB, with its 95% "
                    f"interval across launches. PASS: the interval includes 1.0 and its low end is at least "
                    f"{t.floor:g} (throughput) or {b.floor:g} (busbw). ps and single have no external bare loop to "
                    "compare with and are not accepted. The suite's runs go to a temporary store unless --store is "
                    "given.",
        epilog=examples("bench selfcheck --workload resnet18 --nproc 2     # every bare loop that can run here",
                        "bench selfcheck --backend elastic --pairs 4 --max-minutes 0",
                        "bench selfcheck --backend horovod --no-comm --store results/selfcheck.sqlite"),
        parents=[own, options.parent("what runs", ("--workload",)),
                 options.placement(("--nproc", "--gpus", "--threads", "--cpu-bind", "--oversubscribe")),
                 options.parent("measurement", ("--batch-size", "--warmup-steps", "--steps-per-window", "--windows",
                                                "--timeout")),
                 options.parent("allreduce", ("--warmup-iters", "--iters")),
                 # a check's runs are not results: its default store is not the results store
                 options.sharing(),
                 options.store("keep the suite's runs in this results store (default: a temporary one, removed "
                               "after)"),
                 options.json_output()])
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    validate(args.pairs, args.max_minutes)
    device, world = resolve_device(args.nproc, args.gpus)
    backends = choose_backends(args.backend, device)
    plans = plan(backends, args.workload, device, world, options=spec_options(args, backends),
                 allreduce=not args.no_comm, comm={"warmup_iters": args.warmup_iters, "iters": args.iters})
    return selfcheck(plans, pairs=args.pairs, max_minutes=args.max_minutes, store_path=args.store, as_json=args.json)
