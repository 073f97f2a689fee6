"""Options renamed so that one thing has one name on every verb: the old spelling is still accepted, not shown in
help, and says once on stderr what it is now called (with its value in the new spelling's unit or words, where those
changed too). One table, one mechanism (`add_old_spellings`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from bench.cli.options import FAULT_WORDS, at_most, nonnegative_float
from bench.core.console import note
from bench.tasks.fault.scenarios import JOIN, ON_ONE_MACHINE
from bench.workflows.selfcheck import MAX_MINUTES, MAX_MINUTES_WORDS

TIME_LIMITS = "every time limit is a --*-timeout, in seconds"
WORLD_SIZES = "a sweep's largest world size; --nproc and --gpus are one run's world size on every verb"
ONE_SET = f"one set of fault words on every verb: {', '.join(FAULT_WORDS)}"
# --signal's values (the signal a fault run records) -> --fault's words, from the scenarios' entries
WORD_OF_SIGNAL = {s.signal: s.word for s in ON_ONE_MACHINE if s.signal}
PER_NODE = "a node's processes are --nproc-per-node and its GPUs --gpus-per-node on bench k8s and bench slurm-script"


def minutes_as_seconds(text: str) -> str:
    """--max-minutes M, as it was refused, as the seconds of --pairs-timeout."""
    minutes = at_most(nonnegative_float, MAX_MINUTES, MAX_MINUTES_WORDS)(text)
    return f"{minutes * 60:g}"


def signal_as_word(text: str) -> str:
    """--signal KILL|TERM|STOP (any case, as it was taken) as bench fault's --fault word."""
    word = WORD_OF_SIGNAL.get(text.upper())
    if word is None:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(WORD_OF_SIGNAL)}; "
            f"now --fault {', '.join(WORD_OF_SIGNAL.values())})"
        )
    return word


@dataclass(frozen=True)
class Renamed:
    old: str
    new: str
    verbs: tuple[str, ...] | None = None  # the verbs the old spelling was an option of; None: every verb with `new`
    why: str = ""  # why it changed, where the new name alone does not say
    # the old value as the new spelling takes it (minutes as seconds); refuses what the old spelling refused
    convert: Callable[[str], str] | None = None
    value: str | None = None  # an old flag without a value: the new option's value it stands for (--join: join)
    converts: str = ""  # the conversion in words, for python -m bench.cli.docs

    def __post_init__(self):
        if self.convert is not None and not self.converts:
            raise ValueError(f"{self.old}: say in `converts` how its value becomes {self.new}'s")


RENAMED = (
    Renamed("--report", "--output", ("sweep", "converge"), "the file a verb writes is -o/--output on every verb"),
    Renamed("--no-allreduce", "--no-comm", ("selfcheck",), "skipping communication is --no-comm on every verb"),
    Renamed("--no-baseline", "--no-plain-loop", ("sweep",), "a baseline is the regression gate's"),
    Renamed("--launcher", "--hvd-launcher", None, "it chooses Horovod's launcher, beside the other --hvd-* options"),
    Renamed("--wait-for-cores", "--cores-timeout", None, TIME_LIMITS),
    Renamed(
        "--max-minutes",
        "--pairs-timeout",
        ("selfcheck",),
        TIME_LIMITS,
        convert=minutes_as_seconds,
        converts="minutes x 60",
    ),
    Renamed("--nproc", "--max-nproc", ("sweep",), WORLD_SIZES),
    Renamed("--gpus", "--max-gpus", ("sweep",), WORLD_SIZES),
    Renamed(
        "--signal",
        "--fault",
        ("fault",),
        ONE_SET,
        convert=signal_as_word,
        converts=f"{', '.join(WORD_OF_SIGNAL)}: {', '.join(WORD_OF_SIGNAL.values())}",
    ),
    Renamed("--join", "--fault", ("fault",), ONE_SET, value=JOIN.word),
    Renamed("--tasks-per-node", "--nproc-per-node", ("slurm-script",), PER_NODE),
    Renamed("--gpus-per-pod", "--gpus-per-node", ("k8s",), PER_NODE),
)


class OldSpelling(argparse.Action):
    """The old spelling of an option: says what it is called now, then does what the new one does."""

    def __init__(self, option_strings, dest, renamed: Renamed, target: argparse.Action, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.renamed, self.target = renamed, target

    def __call__(self, parser, namespace, values, option_string=None):
        r = self.renamed
        old, new = r.old, r.new
        if r.value is not None or r.convert is not None:  # the new option's value, through its own type
            try:
                text = r.value if r.value is not None else r.convert(values)
                converted = self.target.type(text) if self.target.type else text
            except argparse.ArgumentTypeError as exc:  # refused in the old spelling's words, before any notice
                raise argparse.ArgumentError(self, str(exc)) from None
            if r.convert is not None:
                old = f"{old} {values}"
            new, values = f"{new} {text}", converted
        note(
            f"{parser.prog}: {old} is now {new}"
            + (f" ({r.why})" if r.why else "")
            + "; the old name still works for now"
        )
        self.target(parser, namespace, values, r.new)


def add_old_spellings(verb: str, parser: argparse.ArgumentParser) -> None:
    """Accept, on `verb`'s parser, the old spelling of each of its renamed options."""
    for r in RENAMED:
        if r.verbs is not None and verb not in r.verbs:
            continue
        target = parser._option_string_actions.get(r.new)
        if target is None:
            if r.verbs is None:
                continue
            raise AssertionError(f"bench {verb} has no {r.new}, which {r.old} was renamed to")
        if r.value is not None:  # a flag: it takes nothing
            parser.add_argument(
                r.old,
                action=OldSpelling,
                renamed=r,
                target=target,
                dest=target.dest,
                nargs=0,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
        elif r.convert is not None:  # its own value, converted when given
            parser.add_argument(
                r.old,
                action=OldSpelling,
                renamed=r,
                target=target,
                dest=target.dest,
                metavar=target.metavar,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
        else:
            parser.add_argument(
                r.old,
                action=OldSpelling,
                renamed=r,
                target=target,
                dest=target.dest,
                nargs=target.nargs,
                type=target.type,
                choices=target.choices,
                metavar=target.metavar,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
