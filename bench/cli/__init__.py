"""`bench`: its verbs, in the groups `bench --help` shows (VERB_GROUPS): measure (run, sweep, allreduce, converge,
fault), analyse what is stored (list, report, compare, agreement, predict, import), the regression gate (regress,
baseline), check this machine and the suite (doctor, selfcheck), clusters (slurm-script, k8s, testhosts, testslurm,
testray).

One module per verb, each with `add_parser(verbs)` and the function that carries the verb out; VERBS is the
registry. Bad input is one line on stderr and exit 2; a run not ok exits 1, an interrupted one 130. Output that
cannot be written (a closed pipe, a full device) changes neither what runs nor the exit status: it is dropped and
said once on the stream that still works (bench.core.console). Plain `bench` prints the help on stderr and exits 2
(no verb is bad input, as argparse has it); `bench --version` prints the version. Old spellings of renamed options
still work, with a notice (bench.cli.renamed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap

from bench import __version__
from bench.cli import (
    agreement,
    allreduce,
    compare,
    converge,
    doctor,
    fault,
    import_runs,
    k8s,
    list_runs,
    predict,
    regress,
    report,
    run,
    selfcheck,
    slurm_script,
    sweep,
    testhosts,
    testray,
    testslurm,
)
from bench.cli.common import Parser, before_runs
from bench.cli.renamed import add_old_spellings
from bench.cluster.slurm import last_ending
from bench.core.console import guard_std_streams, lost_output, note
from bench.core.dryrun import plan_only
from bench.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, BenchError, Interrupted
from bench.core.inputs import terminal_text
from bench.core.interrupts import end_at_once
from bench.harness.supervisor import signals_held

VERBS = (
    run,
    sweep,
    allreduce,
    converge,
    list_runs,
    report,
    compare,
    agreement,
    predict,
    regress,
    fault,
    selfcheck,
    import_runs,
    doctor,
    slurm_script,
    k8s,
    testhosts,
    testslurm,
    testray,
)
# How `bench --help` lists the verbs: by what they are for.
VERB_GROUPS = (
    ("measure", ("run", "sweep", "allreduce", "converge", "fault")),
    ("analyse what is stored", ("list", "report", "compare", "agreement", "predict", "import")),
    ("regression gate", ("regress", "baseline")),
    ("check this machine and the suite", ("doctor", "selfcheck")),
    ("clusters", ("slurm-script", "k8s", "testhosts", "testslurm", "testray")),
)
VERB_LIST_WIDTH = 100
EXIT_INTERNAL = 3  # a bug in bench itself


def build_parser() -> Parser:
    parser = Parser(
        prog="bench",
        usage="bench [-h] [--version] VERB ...",
        description="Measure PyTorch Distributed Elastic vs Horovod vs a parameter server, under identical conditions.",
        epilog="`bench VERB --help` says what a verb takes, with examples.",
    )
    parser.add_argument("--version", action="version", version=f"bench {__version__}", help="print bench's version")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser, metavar="VERB", prog="bench")
    for module in VERBS:
        module.add_parser(verbs)
    for name, sub in verbs.choices.items():
        add_old_spellings(name, sub)
    verbs.help = argparse.SUPPRESS  # listed in groups, in the description, instead of argparse's one flat list
    parser.description += "\n\n" + verb_list(verbs)
    parser.set_defaults(root_parser=parser)  # a verb that checks another verb's arguments (slurm-script) parses with it
    return parser


def verb_list(verbs) -> str:
    """The verbs by group (VERB_GROUPS), each with its one-line help, as `bench --help` shows them."""
    helps = {action.dest: action.help for action in verbs._choices_actions}
    grouped = [name for _, names in VERB_GROUPS for name in names]
    if sorted(grouped) != sorted(helps):
        raise AssertionError(f"VERB_GROUPS lists {sorted(grouped)}, the verbs are {sorted(helps)}")
    width = max(map(len, helps)) + 2

    def line(name: str) -> str:  # wrapped here: the formatter keeps an indented paragraph as written
        return "\n".join(
            textwrap.wrap(
                helps[name], VERB_LIST_WIDTH, initial_indent=f"  {name:<{width}}", subsequent_indent=" " * (width + 2)
            )
        )

    return "\n\n".join(f"{group}:\n" + "\n".join(map(line, names)) for group, names in VERB_GROUPS)


def _raise_interrupted(signum, frame):
    raise Interrupted()


def slurm_launcher_alias(argv: list[str]) -> list[str]:
    """`--launcher slurm` as people write it for a Slurm launch is `--scheduler slurm` here (`--hvd-launcher`, once
    `--launcher`, chooses Horovod's launcher: gloo, mpi, mpirun); said once."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--":  # what follows belongs to another command (bench slurm-script)
            return out + argv[i:]
        if argv[i] == "--launcher=slurm" or (argv[i] == "--launcher" and argv[i + 1 : i + 2] == ["slurm"]):
            print(
                "bench: --launcher slurm is --scheduler slurm (--hvd-launcher chooses Horovod's launcher)",
                file=sys.stderr,
            )
            out += ["--scheduler", "slurm"]
            i += 1 if "=" in argv[i] else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    # While the arguments are read nothing has started: Ctrl-C or SIGTERM ends bench at once, in one line (as while
    # its modules load: bench.__main__), even where a shell started us with SIGINT ignored.
    end_at_once("before it started anything; nothing is left running")
    # A closed pipe or a full device on stdout or stderr must neither end a run halfway nor change the exit status:
    # writes that fail are dropped, and said once at the end.
    guard_std_streams()
    verb = None
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        if not argv:  # no verb: what there is to choose from, and the exit status of bad input
            sys.stderr.write(parser.format_help())
            return EXIT_BAD_INPUT
        args = parser.parse_args(slurm_launcher_alias(argv))
        verb = args.verb
        return _carry_out(args)
    finally:
        # the verb is done, and has said so: a signal from here on ends the exit in one line too
        end_at_once("as it was exiting, its work done")
        _report_lost_output(verb)


def _report_lost_output(verb: str | None) -> None:
    """Flush stdout now (at interpreter exit a failure would turn the exit status into 120), and say on stderr, if
    it still works, that what went to stdout is lost (a stream closed when bench started is one: bench.core.console)."""
    if sys.stdout is not None:  # (main called where guard_std_streams could not give it /dev/null)
        sys.stdout.flush()
    lost = lost_output()
    if "stdout" in lost and "stderr" not in lost:
        note(
            f"bench{' ' + verb if verb else ''}: its output on stdout could not be written ({lost['stdout']}) and "
            "is lost; the exit status is still the outcome's, and every run it made is stored"
        )


def _carry_out(args) -> int:
    """The verb, its errors turned into one line and an exit code."""
    try:
        # From here Ctrl-C and SIGTERM raise, so that the verb ends what it started and records its runs.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _raise_interrupted)
        if getattr(args, "dry_run", False):  # plans only: nothing of this machine is claimed, no host contacted
            with plan_only():
                return args.func(args)
        if hasattr(args, "allow_shared"):  # a verb that runs something on this machine
            before_runs(args)
        return args.func(args)
    except BenchError as exc:
        # bad input is one line; a failure may add lines on purpose (a test cluster's logs), never a control character
        said = terminal_text(str(exc), keep_newlines=exc.exit_code != EXIT_BAD_INPUT)
        print(f"bench {args.verb}: error: {said}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted):
        # a run in progress records its own interruption and reaps its processes (bench.harness.runner.execute)

        with signals_held():  # a second signal must not cut this line short
            judged = last_ending()  # inside a Slurm job: which of scancel and the time limit it was
        why = f" ({judged[1]})" if judged else ""
        print(
            f"bench {args.verb}: interrupted{why}; nothing it started is left running, every run it launched is stored",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line, and the traceback on request
        if os.environ.get("BENCH_DEBUG"):
            raise
        print(
            f"bench {args.verb}: internal error: {type(exc).__name__}: {terminal_text(str(exc))} "
            "(set BENCH_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
