"""`bench fault`: a fault (or a joining worker) injected into a run under a backend's elastic mode, and the
detection, recovery and work lost measured."""

from __future__ import annotations

import argparse

from bench.cli import options
from bench.cli.common import (
    add_record_lines,
    check_record_lines,
    chosen_backends,
    cluster_of,
    examples,
    run_each,
    spec_options,
    world_of,
)
from bench.core.console import note
from bench.core.errors import UsageError
from bench.core.registry import DEFAULT_BACKEND, elastic_backends, get_backend
from bench.core.spec import MAX_TIMEOUT_WORDS
from bench.harness.plan import print_plans
from bench.tasks.fault.scenarios import ACROSS_HOSTS, FAULT_FLAG, ON_ONE_MACHINE, SCENARIOS, listed
from bench.tasks.fault.spec import (
    AT_STEP_WINDOWS,
    CHECKPOINT_WINDOWS,
    FAULT_DEFAULTS,
    build_spec,
    check_scenario_hosts,
    check_scenario_of,
)
from workloads import WORKLOADS


def fault_help() -> str:
    """--fault's help, from its scenarios' entries: the signals to rank --kill-rank, then the others."""
    signals = listed((f"{s.word} ({s.help})" for s in ON_ONE_MACHINE if s.signal), "or")
    others = "; ".join(f"or {s.word}: {s.help}" for s in ON_ONE_MACHINE if not s.signal)
    return (
        f"{signals} rank --kill-rank at --at-step; {others} (default %(default)s; the fault words of every verb: "
        "docs/usage.md, 'Faults')"
    )


def _per_workload(windows: float) -> str:
    """`windows` x each workload's window, in steps, on CPUs and on GPUs (their windows differ), for the help text."""

    def steps(device: str) -> str:
        return ", ".join(f"{int(windows * w.size(device).window_steps)} for {name}" for name, w in WORKLOADS.items())

    return f"{steps('cpu')} on CPUs; {steps('cuda')} on GPUs"


class OneFault(argparse._StoreAction):
    """--fault, given once a run (or its old spellings, --signal and --join): two different faults are refused rather
    than the last one kept."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, "fault_given", None)
        if before is not None and before != values:
            raise argparse.ArgumentError(self, f"--fault {before} and --fault {values}: choose one fault a run")
        namespace.fault_given = values
        super().__call__(parser, namespace, values, option_string)


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "fault",
        help="inject a fault (or a joining worker) into an elastic run and measure detection, recovery and work lost",
        description=f"Backends with an elastic mode: {', '.join(elastic_backends())}. Runs CPU processes over gloo "
        "(--nproc), or one process per GPU over NCCL (--gpus), with NCCL's timeout and error handling recorded.",
        epilog=examples(
            "bench fault --backend elastic --nproc 2 --kill-rank 1     # SIGKILL a worker mid-run",
            "bench fault --backend horovod --nproc 2 --fault hang      # a hung worker",
            "bench fault --backend elastic --nproc 1 --fault join      # scale-up: a worker joins",
            "bench fault --backend ray --nproc 1 --fault join --ray-resize-interval 5",
            "bench fault --backend all --nproc 2 --fault hang          # each elastic mode in turn",
            "bench fault --backend elastic --gpus 2 --fault hang       # a hung GPU worker, over NCCL",
            "bench fault --backend horovod --hosts a:1,b:1 --drop-host b   # the cluster drops a node",
        ),
        parents=[
            options.what_runs("fault", refuses={"--backend": ["ps"]}),
            options.placement(("--nproc", "--gpus", "--threads", "--oversubscribe")),
            options.hosts(),
            options.parent(
                "run",
                ("--batch-size", "--image-size", "--seed", "--lr", "--timeout", "--check-timeout", "--save-params"),
            ),
            options.numerics(),
            options.backend_options(elastic_backends(), fault=True),
            options.sharing(),
            options.plan(),
            options.store(),
            options.json_output(),
        ],
    )
    g = p.add_argument_group("the fault")
    d = FAULT_DEFAULTS
    options.add(
        g,
        "--kill-rank",
        type=options.count,
        default=d["kill_rank"],
        help="rank that receives the signal (%(default)s)",
        invalid=["-1", "x", "7"],
    )
    options.add(
        g,
        "--at-step",
        type=options.positive_int,
        help=f"the signal comes when that rank has completed this many steps ({AT_STEP_WINDOWS:g} x the "
        f"workload's window: {_per_workload(AT_STEP_WINDOWS)})",
        invalid=["0", "x"],
    )
    options.add(
        g,
        FAULT_FLAG,
        action=OneFault,
        type=options.fault_word,
        default=FAULT_DEFAULTS["fault"],
        metavar="|".join(options.FAULTS_TAKEN["bench fault --fault"]),
        help=fault_help(),
        invalid=["HUP", "", "crash", "stop", "kil"],
    )
    for scenario in ACROSS_HOSTS:  # each its own flag, naming the host
        options.add(g, scenario.flag, metavar="HOST", help=scenario.help, invalid=["10.213.7.12"])
    options.add(
        g,
        "--max-restarts",
        type=options.count,
        default=d["max_restarts"],
        help="restarts (or resets) the elastic launcher allows (%(default)s)",
        invalid=["-1", "x"],
    )
    options.add(
        g,
        "--checkpoint-every",
        type=options.positive_int,
        help=f"steps between checkpoints or state commits ({CHECKPOINT_WINDOWS:g} x the workload's "
        f"window: {_per_workload(CHECKPOINT_WINDOWS)})",
        invalid=["0", "x"],
    )
    options.add(
        g,
        "--steps",
        type=options.positive_int,
        help="steps to train in all (default at-step + 3 x checkpoint-every)",
        invalid=["0", "x", "1"],
    )
    add_time_limits(g, d, {"comm_timeout": "%(default)s", "recovery_timeout": "%(default)s"})
    add_record_lines(p, "bench k8s --drop-worker sets it")
    p.set_defaults(func=cmd)


def add_time_limits(group, defaults: dict | None, said: dict[str, str]) -> None:
    """A fault run's --comm-timeout and --recovery-timeout, declared once for bench fault (`defaults`: its own) and for
    bench sweep's fault runs (None: the sweep resolves them, bench.workflows.plan.fault_limits); `said`, what each
    one's help says of its default."""
    for flag, key, what in (
        ("--comm-timeout", "comm_timeout", "collective timeout in seconds, how soon a stopped peer is noticed"),
        (
            "--recovery-timeout",
            "recovery_timeout",
            "seconds after the fault with no training step before a run is called hung",
        ),
    ):
        options.add(
            group,
            flag,
            type=options.timeout_seconds,
            metavar="SECONDS",
            **({"default": defaults[key]} if defaults else {}),
            help=f"{what} ({said[key]}; at most {MAX_TIMEOUT_WORDS})",
            invalid=options.BAD_TIMEOUTS,
        )


def cmd(args) -> int:
    check_record_lines(args)
    specs = specs_of(args)
    if args.dry_run:
        return print_plans(specs)
    return run_each(specs, args.store, args.json, "fault", show_progress=False, record_lines=args.record_lines)


def specs_of(args) -> list:
    """Every run the arguments ask for, built and checked before the first starts (a one-line error otherwise)."""
    # the fault asked for: a host's flag, else --fault's word (a signal to --kill-rank, which a host's flag leaves
    # unused, or a scenario of its own: one fault a run)
    word = SCENARIOS[args.fault]
    on_hosts = [s for s in ACROSS_HOSTS if getattr(args, s.dest)]
    chosen = [*([f"{FAULT_FLAG} {word.word}"] if word.signal is None else []), *(s.flag for s in on_hosts)]
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)}: choose one fault a run")
    scenario = on_hosts[0] if on_hosts else word
    host = getattr(args, scenario.dest) if on_hosts else None
    if not options.is_all(args.backend):  # a backend named that cannot make it is refused before any host is asked
        for name in set(options.chosen(args.backend, elastic_backends(), [DEFAULT_BACKEND])) & set(elastic_backends()):
            check_scenario_of(name, scenario)
    hosts = args.hosts or args.hostfile
    if not (args.hosts and args.hostfile) and not getattr(args, "scheduler", None):
        # what the names alone refuse, before any host is asked (an allocation's hosts are checked with the spec)
        slots = sum(h.slots for h in hosts or [])
        check_scenario_hosts(
            scenario, [h.to_dict() for h in hosts] if hosts else None, host, min(args.nproc or slots, slots)
        )
    cluster = cluster_of(args)
    device, world = world_of(args, cluster)  # a dry run's --gpus are the GPUs given, as for bench run
    backends = chosen_backends(
        args.backend, options.every_backend("fault"), device=device, verb="fault", cluster=cluster, world=world
    )
    if options.is_all(args.backend):  # every elastic mode that can make this fault; one named is refused if it cannot
        for name in [b for b in backends if not get_backend(b).elastic.supports(scenario)]:
            note(f"bench fault: skipping {name}: its elastic mode has no {scenario.scenario} scenario")
            backends.remove(name)
        if not backends:
            raise UsageError(f"--backend all: no elastic mode that can run here makes a {scenario.scenario} fault")
    given = spec_options(args, backends)
    return [
        build_spec(
            backend=backend,
            workload=workload,
            world_size=world,
            fault=scenario.word,
            host=host,
            cluster=cluster,
            rank=args.kill_rank,
            at_step=args.at_step,
            max_restarts=args.max_restarts,
            checkpoint_every=args.checkpoint_every,
            total_steps=args.steps,
            comm_timeout=args.comm_timeout,
            recovery_timeout=args.recovery_timeout,
            device=device,
            **given,
        )
        for workload in options.chosen(args.workload, WORKLOADS)
        for backend in backends
    ]
