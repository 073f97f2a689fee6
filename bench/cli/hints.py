"""Did you mean: the one line a mistyped verb, choice or option gets instead of argparse's, and the flags users of
torchrun, horovodrun and mpirun type, each answered with bench's own spelling (FOREIGN)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.cli.options import closest


@dataclass(frozen=True)
class Foreign:
    """A launcher's flag: whose it is and what it does, and bench's spelling (the first of `instead` that the verb
    takes), or what to do where bench has none (`advice`)."""

    whose: str
    instead: tuple[str, ...] = ()  # bench's options, in order of preference (a verb takes the first it has)
    takes_value: bool = True  # whether the launcher's flag takes a value (repeated after bench's spelling)
    advice: str = ""


PROCESSES = ("--nproc", "--max-nproc")  # one run's world size; a sweep's largest
NODES = Foreign(
    "torchrun's nodes",
    advice="bench starts every host's processes itself: give the hosts, --hosts H1:N,H2:N or --hostfile FILE",
)
RENDEZVOUS = Foreign(
    "torchrun's rendezvous",
    advice="bench sets up every backend's rendezvous itself; across hosts give --hosts H1:N,H2:N (and --iface)",
)
FOREIGN = {
    "-np": Foreign("horovodrun's and mpirun's process count", PROCESSES),
    "-n": Foreign("mpirun's process count", PROCESSES),
    **dict.fromkeys(("--nproc_per_node", "--nproc-per-node"), Foreign("torchrun's processes per node", PROCESSES)),
    **dict.fromkeys(("--nnodes", "--node_rank", "--node-rank"), NODES),
    "-H": Foreign("horovodrun's and mpirun's host list", ("--hosts",)),
    "--host": Foreign("mpirun's host list", ("--hosts",)),
    "-hostfile": Foreign("horovodrun's and mpirun's host file", ("--hostfile",)),
    **dict.fromkeys(
        (
            "--rdzv-endpoint",
            "--rdzv_endpoint",
            "--rdzv-backend",
            "--rdzv_backend",
            "--rdzv-id",
            "--rdzv_id",
            "--master-addr",
            "--master_addr",
            "--master-port",
            "--master_port",
        ),
        RENDEZVOUS,
    ),
    "--standalone": Foreign(
        "torchrun's one-host rendezvous",
        takes_value=False,
        advice="bench sets up every backend's rendezvous itself, on one host too: drop it",
    ),
    "-x": Foreign(
        "mpirun's exported variable",
        advice="bench's workers get the environment bench runs in, on every host: set the variable there",
    ),
    "--gloo": Foreign("horovodrun's Gloo controller", ("--hvd-launcher gloo",), takes_value=False),
    "--mpi": Foreign("horovodrun's MPI controller", ("--hvd-launcher mpi",), takes_value=False),
    **dict.fromkeys(
        ("--network-interface", "--network_interface"), Foreign("horovodrun's network interface", ("--iface",))
    ),
    "--max_restarts": Foreign("torchrun's restart count", ("--max-restarts",)),
    **dict.fromkeys(
        ("--min-np", "--max-np"),
        Foreign(
            "horovodrun's elastic bounds",
            advice="bench fault measures elastic runs (--fault join: one more worker joins)",
        ),
    ),
}


def subparsers(parser: argparse.ArgumentParser):
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def innermost(parser: argparse.ArgumentParser, namespace) -> argparse.ArgumentParser:
    """The parser of the command a namespace was parsed for (`bench run`, `bench testhosts up`)."""
    action = subparsers(parser)
    name = getattr(namespace, action.dest, None) if action else None
    return innermost(action.choices[name], namespace) if name in (action.choices if action else {}) else parser


def verbs_taking(root: argparse.ArgumentParser, flag: str) -> list[str]:
    """The verbs whose help shows `flag`."""
    action = subparsers(root)
    return [
        name
        for name, sub in action.choices.items()
        if flag in sub._option_string_actions and sub._option_string_actions[flag].help != argparse.SUPPRESS
    ]


def shown_options(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for flag, action in parser._option_string_actions.items() if action.help != argparse.SUPPRESS]


def foreign_hint(root, verb_parser, verb: str, flag: str, value: str | None) -> str:
    """The line for a launcher's flag given to `bench VERB`: whose it is, and bench's spelling."""
    f = FOREIGN[flag]
    said = f"{flag} is {f.whose}"
    for instead in f.instead:
        if instead.split()[0] in shown_options(verb_parser):  # not an old spelling: --nproc on a sweep
            return f"{said}; bench's is {instead}" + (f" {value}" if f.takes_value and value else "")
    if f.instead:
        first = f.instead[0].split()[0]
        elsewhere = verbs_taking(root, first)
        return f"{said}; bench {verb} takes no {first}" + (
            f" (an option of bench {', '.join(elsewhere)})" if elsewhere else ""
        )
    return f"{said}; {f.advice}"


def check_foreign_flags(root, argv: list[str]) -> None:
    """A launcher's flag in `argv` (before any `--`, which passes what follows to another command) that the verb does
    not take itself: refused with bench's spelling, one line, before argparse reads it another way (-hostfile as -h)."""
    action = subparsers(root)
    verb = next((a for a in argv if not a.startswith("-")), None)
    if action is None or verb not in action.choices:
        return
    sub = action.choices[verb]
    rest = argv[argv.index(verb) + 1 :]
    for i, token in enumerate(rest):
        if token == "--":
            return
        flag, eq, value = token.partition("=")
        if flag in FOREIGN and flag not in sub._option_string_actions:
            if not eq:
                following = rest[i + 1] if i + 1 < len(rest) else None
                value = following if following is not None and not following.startswith("-") else None
            sub.error(foreign_hint(root, sub, verb, flag, value))


def unrecognized(root, parser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments", with the closest option of this command where one is close, or the verbs
    whose option it is."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    flag = next((e.partition("=")[0] for e in extras if e.startswith("--")), None)
    if flag is None:
        return message
    hint = closest(flag, shown_options(parser))
    if hint:
        return f"{message}{hint}"
    elsewhere = verbs_taking(root, flag)
    return f"{message} ({flag} is an option of bench {', '.join(elsewhere)})" if elsewhere else message


def choice_message(action: argparse.Action, value) -> str:
    """argparse's "invalid choice", with the closest choice where one is close (a mistyped verb: bench swep)."""
    hint = closest(value, [str(c) for c in action.choices]) if isinstance(value, str) else ""
    if hint:
        return f"invalid choice: {value!r}{hint}"
    return f"invalid choice: {value!r} (choose from {', '.join(map(repr, action.choices))})"
