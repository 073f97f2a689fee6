"""Test-only injected failures and slowdowns (--inject, --inject-delay): what a real hang, exception,
OOM kill or slower step looks like to the harness. Parsed in the parent, fired in any process of a run.
(Not to be confused with `bench fault`, which measures a backend's recovery: bench.tasks.fault.)"""

from __future__ import annotations

import os
import signal
import sys
import time

from bench.core.errors import UsageError

INJECT_KINDS = ("hang", "crash", "kill", "exit")


def parse_inject(text: str | None) -> dict | None:
    """'KIND:RANK:STEP' -> dict. Test-only: makes rank RANK hang, raise, SIGKILL itself, or exit with code 0
    without a word (os._exit: no error, no result) at STEP."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in INJECT_KINDS or not all(p.isdigit() for p in parts[1:]):
        raise UsageError(
            f"--inject {text!r}: expected KIND:RANK:STEP with KIND one of "
            f"{', '.join(INJECT_KINDS)}, for example hang:1:3"
        )
    return {"kind": parts[0], "rank": int(parts[1]), "step": int(parts[2])}


def parse_step_delay(text: str | None) -> dict | None:
    """'20%' -> a delay of 20% of the warm-up's median step time; '5ms' or '0.005s' -> a fixed delay.

    Test-only (--inject-delay): every rank sleeps that long in every timed step, so a run is slower by a
    known amount; the regression gate's tests use it to show a 20% slowdown is caught."""
    if not text:
        return None
    t = text.strip().lower()
    try:
        if t.endswith("%"):
            value = {"fraction": float(t[:-1]) / 100}
        elif t.endswith("ms"):
            value = {"seconds": float(t[:-2]) / 1000}
        elif t.endswith("s"):
            value = {"seconds": float(t[:-1])}
        else:
            raise ValueError
    except ValueError:
        raise UsageError(
            f"--inject-delay {text!r}: give a share of the step time (20%) or a duration (5ms, 0.005s)"
        ) from None
    if not all(0 <= v < 100 for v in value.values()):
        raise UsageError(f"--inject-delay {text!r}: must be 0 or more (and under 100 s or 10000%)")
    return value


def injected_for(spec, rank: int) -> dict | None:
    """The --inject failure aimed at this rank, if any."""
    return spec.inject if spec.inject and spec.inject["rank"] == rank else None


def fire_injected(kind: str, step: int) -> None:
    """Make this process hang, raise, SIGKILL itself, or leave at once with exit code 0."""
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "crash":
        raise RuntimeError(f"injected crash at step {step}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "exit":
        print(f"injected exit (code 0) at step {step}", file=sys.stderr, flush=True)
        os._exit(0)
