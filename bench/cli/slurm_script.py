"""`bench slurm-script`: a ready sbatch script that runs a sweep (or one run, or an allreduce sweep) across the
nodes of its allocation, its records landing in the store given (bench/cluster/slurm.py writes it)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.cluster.slurm import SCRIPT_DEFAULTS as d
from bench.cluster.slurm import early_warning_note, script
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError

VERBS = ("sweep", "run", "allreduce")
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # what goes on an #SBATCH line as a name


def slurm_name(text: str) -> str:
    if not SLURM_NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits, '.', '_' and '-' only")
    return text


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "slurm-script", help="write an sbatch script that runs a sweep across the nodes of its allocation",
        description="Submit the script unchanged with sbatch: inside the job bench runs with --scheduler slurm "
                    "(elastic and ps through srun, horovod through horovodrun -H of the allocation's nodes). "
                    "Arguments after -- go to the bench command, as on the command line.",
        epilog=examples("bench slurm-script --nodes 2 --tasks-per-node 1 --time 30 --store results/cluster.sqlite "
                        "-o sweep.sh -- --backend elastic,horovod --workload mnist_mlp",
                        "bench slurm-script --verb allreduce --nodes 4 --partition gpu --gpus-per-node 4"),
        parents=[options.store()])

    options.add(p, "--nodes", type=options.positive_int, default=d["nodes"], help="nodes (%(default)s)", invalid=["0", "x"])
    options.add(p, "--tasks-per-node", type=options.positive_int, default=d["tasks_per_node"],
                help="worker slots per node (%(default)s)", invalid=["0", "x"])
    options.add(p, "--gpus-per-node", type=options.positive_int, help="GPUs per node (none by default)",
                invalid=["0", "x"])
    options.add(p, "--time", default=d["time_limit"], help="time limit: MINUTES, HH:MM:SS or D-HH:MM:SS (%(default)s); bench "
                                                "records a run still going at the limit as timeout",
                invalid=["soon", ""])
    for flag, what in (("--partition", "Slurm partition (the cluster's default when not given)"),
                       ("--account", "Slurm account to charge (the user's default when not given)")):
        options.add(p, flag, type=slurm_name, help=what, invalid=["a b", "x;y", ""])
    options.add(p, "--job-name", type=slurm_name, default=d["job_name"], help="the job's name (%(default)s)",
                invalid=["my job", ""])
    # its own dest: `verb` is the verb bench was given (slurm-script), which its messages name
    options.add(p, "--verb", dest="job_verb", choices=VERBS, default=d["verb"], help="what the job runs (%(default)s)",
                invalid=["train"])
    options.add(p, "-o", "--output", metavar="FILE", help="write the script there, mode 755 (default: stdout)",
                invalid=["/nonexistent/folder/job.sh"])
    options.add(p, "bench_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                help="arguments of the bench command inside the job, such as --backend elastic,horovod",
                valid_because="they are checked here by the parser of the command the job runs")
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    rest = list(args.bench_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    for taken in ("--store", "--scheduler", "--hosts", "--hostfile"):
        if any(a == taken or a.startswith(taken + "=") for a in rest):
            raise UsageError(f"{taken} after --: the script sets it (the store with slurm-script's --store; the "
                             "hosts are the allocation's nodes)")
    args.root_parser.parse_args([args.job_verb, *rest])  # the job's arguments refused now, not when the job starts
    store = open_store(args.store, runs=True)
    folder = os.path.dirname(os.path.abspath(store.path))
    text = script(nodes=args.nodes, tasks_per_node=args.tasks_per_node, time_limit=args.time,
                  store=str(store.path), bench_args=rest, gpus_per_node=args.gpus_per_node,
                  partition=args.partition, account=args.account, job_name=args.job_name, verb=args.job_verb)
    out_folder = os.path.dirname(os.path.abspath(args.output)) if args.output is not None else None
    if out_folder is not None and out_folder != folder and not os.path.isdir(out_folder):
        raise UsageError(f"--output {args.output}: its folder does not exist")  # (the store's folder is made)
    try:  # the job writes its output beside the store: the folder must exist when it starts
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"the store's folder {folder} cannot be made ({exc})") from None
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
        raise UsageError(f"--output {args.output}: cannot write it ({exc})") from None
    note(f"bench slurm-script: wrote {args.output}; submit it with: sbatch {args.output}")
    return EXIT_OK
