"""Options renamed so that one thing has one name on every verb: the old spelling is still accepted, not shown in
help, and says once on stderr what it is now called. One table, one mechanism (`add_old_spellings`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.core.console import note


@dataclass(frozen=True)
class Renamed:
    old: str
    new: str
    verbs: tuple[str, ...] | None = None  # the verbs the old spelling was an option of; None: every verb with `new`
    why: str = ""  # why it changed, where the new name alone does not say


RENAMED = (
    Renamed("--report", "--output", ("sweep", "converge"), "the file a verb writes is -o/--output on every verb"),
    Renamed("--no-allreduce", "--no-comm", ("selfcheck",), "skipping communication is --no-comm on every verb"),
    Renamed("--no-baseline", "--no-plain-loop", ("sweep",), "a baseline is the regression gate's"),
    Renamed("--launcher", "--hvd-launcher", None, "it chooses Horovod's launcher, beside the other --hvd-* options"),
)


class OldSpelling(argparse.Action):
    """The old spelling of an option: says what it is called now, then does what the new one does."""

    def __init__(self, option_strings, dest, renamed: Renamed, target: argparse.Action, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.renamed, self.target = renamed, target

    def __call__(self, parser, namespace, values, option_string=None):
        r = self.renamed
        note(f"{parser.prog}: {r.old} is now {r.new}" + (f" ({r.why})" if r.why else "") +
             "; the old name still works for now")
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
        parser.add_argument(r.old, action=OldSpelling, renamed=r, target=target, dest=target.dest,
                            nargs=target.nargs, type=target.type, choices=target.choices, metavar=target.metavar,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)
