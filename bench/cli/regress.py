"""`bench regress` and `bench baseline`: the regression gate's fixed CPU/gloo matrix against the committed
baseline, and the refresh of that baseline (bench.workflows.regress)."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.core.errors import UsageError
from bench.results.baselines import BASELINE_DIR, BASELINE_FILE
from bench.results.hot_paths import HOT_PATHS_FILE
from bench.workflows import regress as gate_workflow  # its repeat counts read when the parser is built
from bench.workflows.regress import REGRESS_STORE, baseline, check_baseline_dir, regress, save_hot_paths


def add_parser(verbs) -> None:
    def gate_options(repeats: int, repeats_help: str | None = None):
        helps = {
            "--store": f"the gate's store (SQLite file); default {REGRESS_STORE}, whatever $BENCH_STORE says: "
            "the gate's runs are kept apart from the results `bench report` reads"
        }
        if repeats_help:
            helps["--repeats"] = repeats_help
        p = options.parent(
            None, ["--timeout", "--repeats", "--store", *options.group("sharing")], repeats=repeats, helps=helps
        )
        options.add(
            p,
            "--dir",
            default=BASELINE_DIR,
            type=options.nonempty_path,
            help="baseline folder (default %(default)s)",
            invalid=[__file__, "", options.LONG_PATH],
        )  # a file, not a folder
        p.add_argument("--no-hot-paths", action="store_true", help="skip the harness's own benchmarks")
        return p

    p = verbs.add_parser(
        "regress",
        help="run the fixed CPU/gloo regression matrix and compare it with the committed baseline",
        description="Runs the fixed CPU/gloo matrix (the default sweep of a 2-core machine) into "
        "the gate's store and compares it with the committed baseline, metric by "
        "metric; exit 1 on a significant regression. `nox -s regress` runs it.",
        epilog=examples(
            "bench regress                        # the gate, as CI runs it",
            "bench regress --inject-delay 20%     # every compared backend slowed: must fail",
            "bench regress --no-hot-paths --json",
        ),
        parents=[
            gate_options(gate_workflow.REGRESS_REPEATS),
            options.parent(
                None,
                ["--inject-delay", "--json"],
                helps={
                    "--inject-delay": (
                        "the gate's own check: every compared backend's workers sleep DELAY in every "
                        "timed step, a share of the warm-up median step time (20%%) or a duration "
                        "(5ms), under 10000%% or 100 s, and the gate must fail (default: no delay)"
                    )
                },
            ),
        ],
    )
    p.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="fail on the first comparison; by default the runs behind a failing metric are run once "
        "more and the gate fails only if the failure repeats",
    )
    p.set_defaults(func=cmd_regress)

    p = verbs.add_parser(
        "baseline",
        help="refresh the regression baseline from a run of the fixed matrix",
        epilog=examples(
            f"bench baseline                       # run the matrix, write {BASELINE_DIR}/{BASELINE_FILE}",
            "bench baseline --from-store results/bench.sqlite --sweep SWEEP_ID",
            "bench baseline --hot-paths-only",
        ),
        parents=[
            gate_options(
                gate_workflow.BASELINE_REPEATS,
                (
                    "run every case this many times, in rounds (default %(default)s, more than `bench "
                    f"regress` takes, {gate_workflow.REGRESS_REPEATS}, since every later run of the gate is "
                    "judged against the baseline)"
                ),
            ),
            options.parent(None, ["--sweep"]),
        ],
    )
    options.add(
        p,
        "--from-store",
        metavar="PATH",
        type=options.nonempty_path,
        help="take an existing sweep (--sweep, default the latest) from this store instead of running the matrix",
        invalid=["", "/", "/nonexistent/bench.sqlite", options.LONG_PATH],
    )
    p.add_argument("--hot-paths-only", action="store_true", help=f"refresh only {HOT_PATHS_FILE}")
    p.set_defaults(func=cmd_baseline)


def gate_store(args):
    """The store the gate's runs go to: --store, else its own (REGRESS_STORE)."""
    return args.store or str(REGRESS_STORE)


def cmd_regress(args) -> int:
    return regress(
        open_store(gate_store(args), runs=True),
        args.dir,
        repeats=args.repeats,
        inject_delay=args.inject_delay,
        timeout=args.timeout,
        confirm=args.confirm,
        hot_paths=not args.no_hot_paths,
        as_json=args.json,
    )


def cmd_baseline(args) -> int:
    if args.sweep and not args.from_store:
        raise UsageError(
            f"--sweep {args.sweep} picks a sweep of --from-store; give --from-store PATH too "
            "(without it the matrix is run)"
        )
    check_baseline_dir(args.dir)  # before minutes of runs
    if args.hot_paths_only:
        return save_hot_paths(args.dir)
    return baseline(
        open_store(gate_store(args), runs=not args.from_store),
        args.dir,
        repeats=args.repeats,
        timeout=args.timeout,
        from_store=open_store(args.from_store) if args.from_store else None,
        sweep_id=args.sweep,
        hot_paths=not args.no_hot_paths,
    )
