"""The command line's full help, printed from the parser: `python -m bench.cli.docs` (every verb's help with the
conventions, the old spellings, the fault words and the launchers' flags; tests/test_cli_parser.py checks it holds
each). It is printed, not stored: a copy in docs/ would be one more thing to keep in step with the parser.

Help is laid out at a fixed width, so that what it prints does not depend on the terminal it is printed in.
"""

from __future__ import annotations

import argparse
import functools
import sys

from bench.cli import EXIT_INTERNAL, VERB_GROUPS, build_parser
from bench.cli.common import HelpFormatter
from bench.cli.hints import FOREIGN
from bench.cli.options import FAULT_WORDS, FAULTS_TAKEN, test_only_flags
from bench.cli.renamed import RENAMED
from bench.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED
from bench.core.registry import BACKEND_MODULES, get_backend

COMMAND = "python -m bench.cli.docs"
WIDTH = 100


def _commands(parser: argparse.ArgumentParser, words=("bench",)):
    """(words, parser) of `bench`, of every verb and of every verb's own action (testhosts up ...)."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*words, name))


def _help(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = functools.partial(HelpFormatter, width=WIDTH)
    return parser.format_help().rstrip()


def _renamed_rows() -> list[str]:
    rows = ["| old spelling | now | on | why |", "|---|---|---|---|"]
    for r in RENAMED:
        on = ", ".join(f"`{verb}`" for verb in r.verbs) if r.verbs else f"every verb with `{r.new}`"
        now = f"`{r.new} {r.value}`" if r.value else f"`{r.new}` ({r.converts})" if r.converts else f"`{r.new}`"
        rows.append(f"| `{r.old}` | {now} | {on} | {r.why} |")
    return rows


def _foreign_rows() -> list[str]:
    rows = ["| flag | whose | bench |", "|---|---|---|"]
    flags_of: dict = {}  # the flags that share one answer, on one row
    for flag, f in FOREIGN.items():
        flags_of.setdefault(f, []).append(flag)
    for f, flags in flags_of.items():
        instead = " (a sweep: ".join(f"`{i}`" for i in f.instead) + (")" if len(f.instead) > 1 else "")
        rows.append(f"| {', '.join(f'`{flag}`' for flag in flags)} | {f.whose} | {instead or f.advice} |")
    return rows


def _fault_rows() -> list[str]:
    rows = ["| word | the fault | taken by |", "|---|---|---|"]
    for word, what in FAULT_WORDS.items():
        taken = ", ".join(f"`{where}`" for where, words in FAULTS_TAKEN.items() if word in words)
        rows.append(f"| `{word}` | {what} | {taken} |")
    return rows


def fault_only_flags() -> list[str]:
    """Each once, though backends share it (horovod-tf takes horovod's)."""
    flags = [opt.flag for name in BACKEND_MODULES for opt in get_backend(name).options if opt.fault_only]
    return list(dict.fromkeys(flags))


def page() -> str:
    parser = build_parser()
    groups = "; ".join(f"{group}: " + ", ".join(f"`{name}`" for name in names) for group, names in VERB_GROUPS)
    lines = [
        "# The command line",
        "",
        f"Every option of every verb, with its default, printed from the parser itself by `{COMMAND}`.",
        "",
        "## Conventions",
        "",
        f"- The verbs come in groups: {groups}.",
        f"- `bench` with no verb prints the help below on stderr and exits {EXIT_BAD_INPUT}, as argparse does for a "
        "missing argument; `bench --help` prints it on stdout and exits 0; `bench --version` prints the version.",
        f"- Exit codes: {EXIT_OK} ok; {EXIT_RUN_FAILED} a run not ok, or a comparison that failed; {EXIT_BAD_INPUT} "
        f"bad input (one line on stderr, before anything is created or launched); {EXIT_INTERNAL} a bug in bench "
        f"(`BENCH_DEBUG=1` shows the traceback); {EXIT_INTERRUPTED} interrupted.",
        "- One flag has one meaning on every verb. `--backend` and `--workload` take one name, a comma-separated "
        "list or `all`, and a verb that runs one (`run`, `fault`) runs each given in turn; `--nproc` and `--gpus` "
        "are one run's world size, `--max-nproc` and `--max-gpus` a sweep's largest, `--world-sizes` the list a "
        "verb runs; every time limit is a `--*-timeout` in seconds (`bench slurm-script --time` is sbatch's own "
        "option, in sbatch's format, as its other options are sbatch's); the file a verb writes is `-o/--output`; "
        "skipping communication is `--no-comm`; Horovod's options are `--hvd-*`. Defaults are said in each option's "
        "help, and where a verb's default differs from another's, its help says why.",
        "- A mistyped verb, choice or option is answered with the closest one (`bench swep`: did you mean sweep?), "
        "an option of another verb with the verbs that take it, and a flag of torchrun, horovodrun or mpirun with "
        "bench's own (the table below); each in one line, exit 2.",
        f"- Test-only options ({', '.join(f'`{flag}`' for flag in test_only_flags())}) and, outside `bench fault`, the "
        f"options of fault runs only ({', '.join(f'`{flag}`' for flag in fault_only_flags())}) are accepted but not "
        "shown in help.",
        "- Old spellings still work for now: each says once on stderr what it is called now. `--launcher slurm`, "
        "as people write it for a Slurm launch, means `--scheduler slurm`.",
        "",
        *_renamed_rows(),
        "",
        "- The fault words are the same on every verb that makes a fault; each verb takes those it can make:",
        "",
        *_fault_rows(),
        "",
        "- What users of torchrun, horovodrun and mpirun type, and bench's spelling (`bench run -np 4`: -np is "
        "horovodrun's and mpirun's process count; bench's is --nproc 4):",
        "",
        *_foreign_rows(),
        "",
    ]
    for words, sub in _commands(parser):
        lines += [f"## {' '.join(words)}", "", "```text", _help(sub), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(page())
