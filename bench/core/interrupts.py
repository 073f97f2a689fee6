"""Ctrl-C and SIGTERM while bench has nothing to end: as its modules load and its arguments are read, before its verb
starts anything, and once the verb is done. A signal then ends the process at once, in one line on stderr with the
exit status of an interrupted verb, instead of a traceback from wherever it landed (an import, argparse). While a
verb runs, the signals raise instead (bench.cli), so that what it started is ended and recorded.

Light on purpose: `python -m bench` and the `bench` script load it before the rest of the CLI (seconds of imports).
"""

from __future__ import annotations

import os
import signal
from types import FrameType

from bench.core.errors import EXIT_INTERRUPTED

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def end_at_once(when: str) -> None:
    """From now on (until the handlers are changed again), Ctrl-C or SIGTERM ends the process with EXIT_INTERRUPTED
    and `bench: interrupted (SIGTERM) WHEN` on stderr. Only where nothing was started that needs an ending."""

    def ended(signum: int, frame: FrameType | None) -> None:
        for sig in SIGNALS:  # a second signal must not cut the line short
            signal.signal(sig, signal.SIG_IGN)
        line = f"bench: interrupted ({signal.Signals(signum).name}) {when}\n"
        try:
            # straight to the file: the signal may have landed in the middle of a write to sys.stderr's buffer
            os.write(2, line.encode("utf-8", "backslashreplace"))
        except OSError:  # no stderr to say it on (closed, a full device): the exit status still says it
            pass
        os._exit(EXIT_INTERRUPTED)

    for sig in SIGNALS:
        signal.signal(sig, ended)


def ignore_while_exiting() -> None:
    """Once main has returned: Ctrl-C and SIGTERM are ignored while the interpreter exits. Python sets the default
    action back for each signal that has a handler of its own as it finalizes, so a signal then would end the
    process with the signal's own status (-2) after its work was done and said; ignored, it exits with its status."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
