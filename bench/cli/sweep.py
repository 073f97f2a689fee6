"""`bench sweep`: backends x workloads x world sizes (and a communication sweep, and faults), every run stored."""

from __future__ import annotations

import argparse
import time

from bench.cli import options
from bench.cli.common import (
    chosen_backends,
    cluster_of,
    comm_options,
    comma_list,
    examples,
    open_store,
    print_json,
    report_page,
    said_in_flags_of,
    spec_options,
    status_exit,
    world_of,
)
from bench.cli.fault import add_time_limits
from bench.core.console import note
from bench.core.errors import BenchError, Interrupted, UsageError
from bench.core.registry import PLAIN_LOOP, PRIMARY
from bench.core.spec import MAX_TIMEOUT_WORDS
from bench.core.stats import MIN_LAUNCHES, runs_to_decide
from bench.harness.plan import print_plans
from bench.rank.collectives import COMM_DEFAULTS
from bench.tasks.fault.spec import FAULT_DEFAULTS
from bench.workflows.plan import (
    SWEEP_DEFAULTS,
    SWEEP_FAULTS,
    check_fault_kinds,
    check_pair_can_run,
    fault_limits,
    sweep_world_sizes,
)
from bench.workflows.sweep import benchmark_sweep_plan, resume_sweep, run_benchmark_sweep
from workloads import WORKLOADS

PAGE_EVERY_S = 60.0  # after its first, the page is rewritten at a round's end once this long has passed since the last
SEQUENTIAL_TIMEOUT_S = 300.0  # --resolution-timeout: five minutes of added launches, about 17 rounds of ResNet18

# what --resume takes besides the sweep: where its runs go, what it prints, and how they share the machine
RESUME_TAKES = ("store", "output", "json", "allow_shared", "cores_timeout")


def add_parser(verbs) -> None:
    pair = " and ".join(PRIMARY)
    own = argparse.ArgumentParser(add_help=False)
    g = own.add_argument_group("what runs")
    g.add_argument(
        "--no-plain-loop",
        action="store_true",
        help="skip the plain single-process run that scaling is also measured against",
    )
    options.declare(
        g, "--no-comm", help="skip the short communication sweep run for each backend and world size above 1"
    )
    g.add_argument(
        "--weighed-only",
        action="store_true",
        help="launch only what the page's answer weighs: training at every world size above 1 and the fault runs; "
        "no one-worker run, plain loop or communication sweep (their rows, scaling efficiency and bus bandwidth, are "
        "shown beside the answer and never weighed in it)",
    )
    g.add_argument(
        "--no-faults",
        action="store_true",
        help="skip the short elasticity comparison: each fault under every backend with an elastic mode",
    )
    taken = options.FAULTS_TAKEN["bench sweep --faults"]
    options.add(
        g,
        "--faults",
        type=options.sweep_faults,
        metavar=",".join(taken),
        help=f"the faults of that comparison, comma-separated, from {', '.join(taken)} (the fault words of "
        "every verb: a worker killed, hung, or one joining; docs/usage.md, 'Faults') (default "
        f"{','.join(SWEEP_FAULTS['kinds'])})",
        invalid=["crash", "kill,hng", ",", "term"],
    )
    options.add(
        g,
        "--fault-repeats",
        type=options.repeat_count,
        metavar="N",
        help=f"launches of each fault case (default {SWEEP_FAULTS['repeats']}); a case they leave undecided gets one "
        f"more launch a side at a time until it is decided or has {runs_to_decide()} a side, the fewest that can "
        "decide a gap seen in every run",
        invalid=["0", "x", *options.TOO_MANY_REPEATS],
    )
    # the fault runs' time limits, bench fault's flags: a sweep's are short (SWEEP_FAULTS), which a group that restarts
    # slower than a 2-core machine's (GPU nodes across hosts) must lengthen, or its recovery is called a hang
    add_time_limits(
        g,
        None,
        {
            "comm_timeout": f"default {SWEEP_FAULTS['comm_timeout']:g} s in a sweep: its fault runs are short; bench "
            f"fault's is {FAULT_DEFAULTS['comm_timeout']:g} s",
            "recovery_timeout": f"default {SWEEP_FAULTS['recovery_timeout']:g} s in a sweep: a backend that never "
            "recovers costs it in full, and torchrun's restart of the whole group fits with room on a 2-core machine; "
            "give more where a restart takes longer, as on GPU nodes across hosts; bench fault's is "
            f"{FAULT_DEFAULTS['recovery_timeout']:g} s",
        },
    )
    options.add(
        g,
        "--links",
        metavar="L1,L2,...",
        help="across hosts: the whole matrix at each link, RATE[:DELAY] or unlimited (1gbit,10gbit,unlimited); "
        "the report plots each backend against the link and says where the verdict changes "
        "(default: the links as they are)",
        invalid=["", ",", "fast,1gbit", "1gbit"],
    )  # 1gbit alone: only across hosts
    u = own.add_argument_group("until it is sure")
    options.add(
        u,
        "--resolution",
        type=options.percent,
        metavar="PCT",
        help=f"after the planned launches, add rounds (a launch of each side) to {pair}'s training comparisons "
        "above one worker, widest first, until each is a difference or within ±PCT, looking after every round "
        "under a group-sequential design that the page's intervals then follow "
        "(docs/method.md, 'Sequential sweeps') (default: the planned launches only)",
        invalid=["0", "100", "-5", "x", "nan"],
    )
    options.add(
        u,
        "--resolution-timeout",
        type=options.timeout_seconds,
        metavar="SECONDS",
        help="with --resolution: stop adding rounds once this many seconds of added launches have passed (default "
        f"{SEQUENTIAL_TIMEOUT_S:g} seconds; at most {MAX_TIMEOUT_WORDS})",
        invalid=options.BAD_TIMEOUTS,
    )
    r = own.add_argument_group("an interrupted sweep")
    options.add(
        r,
        "--resume",
        nargs="?",
        const=True,
        type=options.id_name,
        metavar="SWEEP_ID",
        help="finish the latest interrupted sweep of --store (or SWEEP_ID): run the launches of its stored "
        "plan that did not run, under its sweep id, then mark it complete; takes only --store, -o, "
        "--json, --allow-shared and --cores-timeout, since the plan fixes everything else "
        "(default: a new sweep)",
        invalid=["", "../x", "a/b"],
    )
    p = verbs.add_parser(
        "sweep",
        help="backends x workloads x world sizes, every run stored",
        description="Every backend x workload x world size, plus the plain single-process loop and "
        "a short communication sweep, each case launched --repeats times in "
        "interleaved rounds; every run is stored, and -o writes the report.",
        epilog=examples(
            "bench sweep --max-nproc 4              # elastic and horovod, world sizes 1, 2, 4",
            "bench sweep --backend all --max-nproc 2   # with the parameter server and Ray Train",
            "bench sweep --workload mnist_mlp --world-sizes 2 --no-comm -o reports/sweep.html",
            "bench sweep --backend elastic --max-gpus 8 --repeats 5",
            "bench sweep --resume                   # finish the latest interrupted sweep",
        ),
        parents=[
            options.what_runs(
                "sweep",
                workload_help=f"comma-separated workloads, or all (default: all, "
                f"{', '.join(WORKLOADS)}: a sweep measures every case); your own "
                "as PKG.MODULE:NAME or path/to/file.py:NAME",
                workload_default=None,
            ),
            options.parent(
                "what runs",
                ["--world-sizes"],
                helps={
                    "--world-sizes": (
                        "comma-separated world sizes (default: 1, 2, 4 ... up to --max-nproc or "
                        "--max-gpus, the scaling a sweep measures)"
                    )
                },
            ),
            own,
            options.parent(None, ["--repeats"], repeats=SWEEP_DEFAULTS["repeats"]),
            *options.training(SWEEP_DEFAULTS, largest=True),
            options.comm(
                max_bytes=SWEEP_DEFAULTS["max_bytes"],
                helps={
                    "--max-bytes": (
                        f"largest message (default {SWEEP_DEFAULTS['max_bytes']} in a sweep, whose "
                        "communication part is one short run of many, up to the sizes where bandwidth, "
                        f"not latency, decides; {COMM_DEFAULTS['max_bytes']} for `bench allreduce`)"
                    )
                },
            ),
            options.parent(
                "output",
                ["--output"],
                helps={
                    "--output": (
                        "write the HTML report of the store there after the sweep's first round of launches, "
                        f"again at the end of a round once {PAGE_EVERY_S:g} s or more have passed, when it is "
                        "interrupted, and at its end, with a timestamped copy beside it then (default: no report; "
                        "`bench report` writes one any time)"
                    )
                },
            ),
            options.plan(),
        ],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    if args.resume is not None:
        return resume(args)
    fault_flags = {
        "--faults": args.faults,
        "--fault-repeats": args.fault_repeats,
        "--comm-timeout": args.comm_timeout,
        "--recovery-timeout": args.recovery_timeout,
    }
    given = [flag for flag, value in fault_flags.items() if value is not None]
    if args.no_faults and given:
        raise UsageError(f"--no-faults makes no fault run; drop {' and '.join(given)}, or --no-faults")
    faults = (
        None
        if args.no_faults
        else check_fault_kinds(SWEEP_FAULTS["kinds"] if args.faults is None else comma_list(args.faults))
    )
    store = None if args.dry_run else open_store(args.store, runs=True)  # a plan makes no store
    if args.output and not args.dry_run:
        report_page().output_path(args.output)  # before the sweep, not after it
    cluster = cluster_of(args)
    device, limit = world_of(args, cluster)
    backends: list[str] | str = comma_list(args.backend)
    if options.is_all(args.backend) or backends == list(PRIMARY):  # the question's pair is among them
        check_pair_can_run(device)  # before anything runs: one side alone would answer nothing
    if options.is_all(args.backend):  # those that can run here (across hosts: whose launcher spans them), others said
        backends = chosen_backends(
            args.backend, options.every_backend("sweep"), device=device, verb="sweep", cluster=cluster, world=limit
        )
    elif backends == list(PRIMARY):
        backends = "primary"  # the pair, as the sweep's plan names it
    world_sizes = args.world_sizes or sweep_world_sizes(limit)
    if args.weighed_only:
        world_sizes = weighed_world_sizes(args, world_sizes)
    with_plain_loop = not (args.no_plain_loop or args.weighed_only)
    running = [*(PRIMARY if backends == "primary" else backends), *([PLAIN_LOOP] if with_plain_loop else [])]
    # a sweep's launches are short; its replicates are launches (bench.workflows.plan.SWEEP_DEFAULTS)
    spec = (
        {k: SWEEP_DEFAULTS[k] for k in ("windows", "warmup_steps")} | spec_options(args, running) | {"cluster": cluster}
    )
    sweep = dict(
        backends=backends,
        workloads=options.chosen(args.workload, WORKLOADS),
        device=device,
        world_sizes=world_sizes,
        options=spec,
        comm=None if args.no_comm or args.weighed_only else comm_options(args),
        with_plain_loop=with_plain_loop,
        repeats=args.repeats,
        faults=faults,
        fault_repeats=args.fault_repeats or SWEEP_FAULTS["repeats"],
        fault_timeouts=fault_timeouts(args),
    )
    sequential = sequential_settings(args, running, sweep["world_sizes"])
    with said_in_flags_of(args):  # the plan's refusals of a world size name the sweep's flags
        if args.dry_run:
            specs, description = benchmark_sweep_plan(None, **sweep)
            note(f"bench sweep: {description}")
            if sequential:  # what the rounds will be depends on what the planned launches measure
                note(
                    f"bench sweep: then rounds of the comparisons not yet within ±{args.resolution:g}%, for at most "
                    f"{sequential['timeout_s']:g} s of added launches: which, and how many, the launches decide"
                )
            return print_plans(specs)
        with LookPages(store, args.output) as pages:
            _, records = run_benchmark_sweep(store, "bench sweep", **sweep, sequential=sequential, on_look=pages)
    return finish(args, store, records)


class LookPages:
    """The page of a sweep run with -o, written as the sweep goes: after its first round of launches (its first answer,
    one launch a side), then at the end of a round once PAGE_EVERY_S or more have passed since it was last written
    (a render takes seconds, a round of the added launches about as long), and when the sweep is interrupted, so
    that Ctrl-C at any moment leaves the latest page; `finish` writes the last one and its dated copy. Between two
    launches, never beside one: a page rendered while a launch runs would take its cores."""

    def __init__(self, store, output):
        self.store, self.output, self.written = store, output, None

    def __call__(self, what: str) -> None:
        if self.output is None or (self.written is not None and time.monotonic() - self.written < PAGE_EVERY_S):
            return
        self.write(f"after {what}; rewritten as the sweep goes on")

    def write(self, why: str) -> None:
        # any failure is said, not raised: the sweep's launches, and its interruption, matter more than a page `bench
        # report` can write later; the page at its end (finish) is written unguarded, so a defect still shows there
        try:
            path = report_page().write_report(self.store, self.output)
        except Exception as exc:
            said = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
            note(f"bench sweep: the page could not be written ({said}); the sweep goes on")
        else:
            note(f"bench sweep: page written to {path} ({why})")
        self.written = time.monotonic()

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if (
            kind is not None
            and self.output is not None
            and issubclass(kind, (KeyboardInterrupt, Interrupted, BenchError))
        ):
            self.write("the sweep was interrupted: `bench sweep --resume` finishes it")
        return False


def weighed_world_sizes(args, world_sizes: list[int]) -> list[int]:
    """The world sizes a --weighed-only sweep trains at: those above 1 (the answer weighs no one-worker row), or a
    one-line UsageError where there is none, or where --world-sizes names 1 itself."""
    if args.world_sizes and 1 in args.world_sizes:
        raise UsageError(
            "--weighed-only launches no one-worker run (the answer does not weigh it); drop 1 from --world-sizes"
        )
    above = [n for n in world_sizes if n > 1]
    if not above:
        raise UsageError(
            "--weighed-only weighs training at 2 or more workers and this sweep has no such world size: give "
            "--world-sizes 2 (with --oversubscribe on a one-core machine), or drop --weighed-only"
        )
    return above


def fault_timeouts(args) -> dict[str, float]:
    """The fault runs' comm_timeout and recovery_timeout: those given, else the sweep's (fault_limits)."""
    return fault_limits({"comm_timeout": args.comm_timeout, "recovery_timeout": args.recovery_timeout})


def sequential_settings(args, running: list[str] | None, world_sizes: list[int]) -> dict | None:
    """--resolution and --resolution-timeout as a sequential sweep's settings (None without them), or a one-line
    UsageError where the sweep would have nothing to add launches to."""
    if args.resolution is None:
        if args.resolution_timeout is not None:
            raise UsageError("--resolution-timeout bounds the rounds --resolution adds; give --resolution PCT too")
        return None
    pair = " and ".join(PRIMARY)
    if running is not None and not set(PRIMARY) <= set(running):
        raise UsageError(f"--resolution adds launches to {pair}'s comparisons; give --backend {','.join(PRIMARY)}")
    if not any(n > 1 for n in world_sizes):
        raise UsageError(
            f"--resolution adds launches to {pair}'s comparisons above one worker; give a world size above 1"
        )
    if args.repeats < MIN_LAUNCHES:
        raise UsageError(f"--resolution looks first after the planned launches; give --repeats {MIN_LAUNCHES} or more")
    return {"resolution": args.resolution / 100, "timeout_s": args.resolution_timeout or SEQUENTIAL_TIMEOUT_S}


def resume(args) -> int:
    """`bench sweep --resume [SWEEP_ID]`: the sweep's stored plan finished; the exit status and --json are those of
    every launch of the sweep that ran, before and now."""
    refuse_plan_options(args)
    store = open_store(args.store, runs=True)
    if args.output:
        report_page().output_path(args.output)
    with LookPages(store, args.output) as pages:
        _, records = resume_sweep(store, None if args.resume is True else args.resume, on_look=pages)
    return finish(args, store, records)


def finish(args, store, records) -> int:
    """The sweep's launches as JSON (--json), its page (-o), and the exit status of what it measured."""
    if args.json:
        print_json([r.to_dict() for r in records])
    if args.output:
        latest, stamped = report_page().write_report_with_copy(store, args.output)
        note(f"report written to {latest} (and {stamped})")
    return status_exit([r.status for r in records if not r.task.measured(r)])


def refuse_plan_options(args) -> None:
    """An option that would shape a new sweep, given with --resume, refused in one line: the stored plan fixes what
    runs, and running other launches under its id would make it another sweep."""
    root = args.root_parser
    defaults = vars(root.parse_args(["sweep"]))
    given = [
        dest
        for dest, value in vars(args).items()
        if dest in defaults and dest not in (*RESUME_TAKES, "resume") and value != defaults[dest]
    ]
    if not given:
        return
    verbs = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    actions = [a for a in verbs.choices["sweep"]._actions if a.option_strings]
    flags = [next((a.option_strings[-1] for a in actions if a.dest == dest), dest) for dest in given]
    raise UsageError(
        f"--resume runs the sweep's stored plan, which fixes what {', '.join(flags)} would set; drop "
        f"{'it' if len(flags) == 1 else 'them'} (with --resume: --store, -o, --json, --allow-shared, "
        "--cores-timeout)"
    )
