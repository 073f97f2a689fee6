"""Console output for the person at the terminal: lines on stderr (stdout carries results only), durations."""

from __future__ import annotations

import sys


def note(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout carries results only)."""
    print(text, file=sys.stderr, flush=True)


def format_duration(seconds: float) -> str:
    """A duration for a progress line: 42s, 3m05s."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
