"""`bench doctor`: what this machine offers, and which backends can run."""

from __future__ import annotations

from bench.cli.common import examples
from bench.core.errors import EXIT_OK
from bench.tools.doctor import doctor_lines


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "doctor",
        help="what this machine offers, and which backends can run",
        description="The set-up's prerequisites (Linux, Python, a C++ compiler and CMake to build "
        "Horovod, disk space for the environment), each ok or missing with what to do; "
        "then the torch build, devices, communication libraries and which backends "
        "can run here.",
        epilog=examples("bench doctor"),
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    print("\n".join(doctor_lines()))
    return EXIT_OK
