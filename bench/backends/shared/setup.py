"""What a backend's "What it takes to run" is made of (bench.report.setup): a dated, cited fact about its releases,
and the words shared by the backends' own modules (bench/backends/<its folder>/setup.py: its FACTS, and `installed`,
what the set-up's record in a run's environment says of it)."""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "2026-12-06"  # the day every backend's cited source was read
NO_RECORD = "no set-up record"


@dataclass(frozen=True)
class Fact:
    what: str  # "latest release", ...
    said: str  # the fact, in the source's terms
    source: str  # the address it was read from


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
