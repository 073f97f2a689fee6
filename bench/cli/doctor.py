"""`bench doctor`: what this machine offers, and which backends can run."""

from __future__ import annotations

from bench.core.errors import EXIT_OK
from bench.tools.doctor import doctor_lines


def add_parser(verbs) -> None:
    p = verbs.add_parser("doctor", help="what this machine offers, and which backends can run")
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    print("\n".join(doctor_lines()))
    return EXIT_OK
