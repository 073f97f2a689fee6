"""`bench slurm-script`: a ready sbatch script that runs a sweep (or one run, or an allreduce sweep) across the
nodes of its allocation, its records landing in the store given (bench/cluster/slurm.py writes it).

Writing it creates nothing but the script itself (with -o): the store's folder and the job's output are made by the
job. What the script will carry is refused here in one line where it cannot: names that are not plain words on an
#SBATCH line, and a control character (a newline, say) in any value, the store's path and the current folder
included."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.cluster.slurm import (
    NODE_CPUS,
    directive_problem,
    early_warning_note,
    job_arguments,
    planned_allocation,
    requested_seconds,
    script,
    shell_word,
    workers_per_node,
)
from bench.cluster.slurm import SCRIPT_DEFAULTS as d
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError
from bench.core.inputs import NAME_MAX, shown

VERBS = ("sweep", "run", "allreduce")
SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # what goes on an #SBATCH line as a name
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a newline, a carriage return, a tab...


def slurm_name(text: str) -> str:
    if len(text) > NAME_MAX or not SLURM_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{shown(text)}: 1 to {NAME_MAX} letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    problem = directive_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {problem}; choose another")
    return text


# --time at most a year: past it a value is a slip of the unit (a partition's own MaxTime, usually far less, applies
# too)
MAX_TIME_S = 365 * 24 * 3600


def time_limit(text: str) -> str:
    """--time, at most MAX_TIME_S; its form is checked where the script is written (bench.cluster.slurm.script)."""
    try:
        seconds = requested_seconds(text)
    except ValueError:
        return text  # not a time at all: refused there, in its own words
    if seconds > MAX_TIME_S:
        raise argparse.ArgumentTypeError(f"{shown(text)}: at most 365 days, 365-00:00:00")
    return text


def no_control_character(what: str, value: str, instead: str) -> str:
    """`value`, refused in one line where it holds a control character: bench writes none into a job script."""
    if CONTROL.search(value):
        raise UsageError(
            f"{what} {shown(value)} holds a control character (a newline, say), which bench does not "
            f"write into a job script; {instead}"
        )
    return value


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "slurm-script",
        help="write an sbatch script that runs a sweep across the nodes of its allocation",
        description="Submit the script unchanged with sbatch: inside the job bench runs with --scheduler slurm "
        "(elastic and ps through srun, horovod through horovodrun -H of the allocation's nodes). "
        "Arguments after -- go to the bench command, as on the command line.",
        epilog=examples(
            "bench slurm-script --nodes 2 --nproc-per-node 1 --time 30 --store results/cluster.sqlite "
            "-o sweep.sh -- --backend elastic,horovod --workload mnist_mlp",
            "bench slurm-script --verb allreduce --nodes 4 --partition gpu --gpus-per-node 4",
            "bench slurm-script --nodes 2 --gpus-per-node 8 --exclusive --partition gpu -- --backend elastic",
        ),
        parents=[
            options.store(),
            options.plan(),
            options.parent(
                None,
                ["--output"],
                helps={
                    "--output": (
                        "write the script there, mode 755, in a folder that exists "
                        "(default: stdout, to pipe into sbatch)"
                    )
                },
                refuses={"--output": ["/nonexistent/folder/job.sh"]},
            ),
        ],
    )

    options.declare(p, "--nodes", default=d["nodes"])
    options.declare(
        p,
        "--nproc-per-node",
        help=f"worker slots per node, a Slurm task each ({d['tasks_per_node']}; with --gpus-per-node one per GPU)",
    )
    options.declare(p, "--gpus-per-node")
    options.add(
        p,
        "--cpus-per-worker",
        type=options.positive_int,
        default=d["cpus_per_worker"],
        help="CPUs per worker slot (--cpus-per-task; %(default)s): a node's workers and the agent that starts them "
        "get its slots' CPUs together",
        invalid=["0", "x"],
    )
    options.add(
        p,
        "--exclusive",
        action="store_true",
        help="whole nodes: every CPU, GPU and all memory of each (--exclusive --mem=0), handed to the workers (off)",
    )
    options.add(
        p,
        "--time",
        type=time_limit,
        default=d["time_limit"],
        help="time limit: MINUTES, HH:MM:SS or D-HH:MM:SS (%(default)s; at most 365 days); bench records a run "
        "still going at the limit as timeout",
        invalid=["soon", "", "30\n", "30;x", "366-00:00:00", "99999999999"],
    )
    for flag, what in (
        ("--partition", "Slurm partition (the cluster's default when not given)"),
        ("--account", "Slurm account to charge (the user's default when not given)"),
    ):
        options.add(p, flag, type=slurm_name, help=what, invalid=["a b", "x;y", "", "gpu\n", "hetjob"])
    options.add(
        p,
        "--job-name",
        type=slurm_name,
        default=d["job_name"],
        help="the job's name (%(default)s)",
        invalid=["my job", "", "-x", "a" * (NAME_MAX + 1), "packjob1"],
    )
    # its own dest: `verb` is the verb bench was given (slurm-script), which its messages name
    options.add(
        p,
        "--verb",
        dest="job_verb",
        choices=VERBS,
        default=d["verb"],
        help="what the job runs (%(default)s)",
        invalid=["train"],
    )
    options.add(
        p,
        "bench_args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="arguments of the bench command inside the job, such as --backend elastic,horovod; relative "
        "paths among them are read from the folder this command runs in, as the job runs there",
        valid_because="they are checked here by the parser of the command the job runs",
    )
    p.set_defaults(func=cmd)


def plan_job(args, text: str, rest: list[str]) -> int:
    """--dry-run: the script on stdout (not written, -o or not), then the plan of its bench command in an allocation of
    the shape asked for (bench.cluster.slurm.planned_allocation): the srun line and each node's command."""
    sys.stdout.write(text)
    print(f"# the job's plan, in an allocation of {args.nodes} node(s) (names and job id stand in):", flush=True)
    if args.exclusive:
        print(f"# {NODE_CPUS}: every CPU of a node, as Slurm gives the job whole nodes (SLURM_JOB_CPUS_PER_NODE)")
    job = args.root_parser.parse_args(
        [args.job_verb, "--scheduler", "slurm", "--dry-run", *job_arguments(args.job_verb, rest, args.gpus_per_node)]
    )
    saved = {k: os.environ.get(k) for k in SLURM_VARIABLES}
    for k in SLURM_VARIABLES:
        os.environ.pop(k, None)
    workers = workers_per_node(args.nproc_per_node, args.gpus_per_node)
    os.environ.update(planned_allocation(args.nodes, workers, args.gpus_per_node, args.cpus_per_worker, args.exclusive))
    try:
        return job.func(job)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# what a planned allocation sets, and what it must not inherit from an allocation this command may run in
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GRES",
    "SLURM_GRES",
)


def cmd(args) -> int:
    rest = list(args.bench_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    for taken in ("--store", "--scheduler", "--hosts", "--hostfile"):
        if any(a == taken or a.startswith(taken + "=") for a in rest):
            raise UsageError(
                f"{taken} after --: the script sets it (the store with slurm-script's --store; the "
                "hosts are the allocation's nodes)"
            )
    for arg in rest:
        no_control_character("the argument", arg, "give the job's arguments without one")
    try:  # the job's arguments refused now, not when the job starts
        with contextlib.redirect_stdout(io.StringIO()):  # a help they ask for stays off stdout, the script's place
            args.root_parser.parse_args([args.job_verb, *rest])
    except SystemExit as exc:
        if exc.code:
            raise  # the job's parser said why, in one line
        raise UsageError(
            f"the arguments after -- ask for the help of bench {args.job_verb}, which is not a job; "
            f"see `bench {args.job_verb} --help`"
        ) from None
    try:  # the job runs where this command runs, so that its relative paths mean what they mean here
        workdir = os.getcwd()  # (as the system resolves it: no symbolic link in it)
    except OSError as exc:
        raise UsageError(
            f"the current folder cannot be read ({exc.strerror}); run bench slurm-script from a folder "
            "that exists on the job's nodes"
        ) from None
    no_control_character("the current folder", workdir, "run bench slurm-script from a folder without one")
    given = open_store(args.store).path
    # the store as the job's nodes find it: its symbolic links followed now, so the script names no link
    store = os.path.realpath(given)
    no_control_character("--store", str(given), "choose a store path without one")
    no_control_character("--store", store, f"{shown(str(given))} leads there: choose a store folder without one")
    open_store(store, runs=True)  # refused now if the job could not store its runs there; nothing is created
    text = script(
        nodes=args.nodes,
        tasks_per_node=args.nproc_per_node,
        time_limit=args.time,
        store=store,
        workdir=workdir,
        bench_args=rest,
        gpus_per_node=args.gpus_per_node,
        cpus_per_worker=args.cpus_per_worker,
        exclusive=args.exclusive,
        partition=args.partition,
        account=args.account,
        job_name=args.job_name,
        verb=args.job_verb,
    )
    if args.output is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        raise UsageError(
            f"--output {shown(args.output)}: its folder does not exist; make it first, or write the script to stdout"
        )
    if args.dry_run:
        return plan_job(args, text, rest)
    short = early_warning_note(args.time)
    if short:
        note(f"bench slurm-script: note: {short}")
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        with open(args.output, "w") as f:
            f.write(text)
        os.chmod(args.output, 0o755)
    except OSError as exc:
        raise UsageError(f"--output {shown(args.output)}: cannot write it ({exc.strerror})") from None
    note(f"bench slurm-script: wrote {shell_word(args.output)}; submit it with: sbatch {shell_word(args.output)}")
    return EXIT_OK
