"""Console output for the person at the terminal: lines on stderr (stdout carries results only), durations, and
standard streams whose failed writes never end a run.

A closed pipe (the reader of `bench ... | head` gone) or a full device (`>/dev/full`) makes a write to stdout or
stderr raise (Python ignores SIGPIPE, so EPIPE comes back as BrokenPipeError). Raised in the middle of a run, that
would end it unrecorded. `guard_std_streams` wraps both streams so that a failed write is dropped and remembered
(`lost_output`); the CLI reports it once, on the stream that still works (bench.cli.main).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO


class GuardedStream:
    """A standard stream whose failed writes are dropped instead of raised. On the first failure its file descriptor
    is pointed at /dev/null, so that nothing pending fails again (Python's flush at exit included) and a process
    started afterwards does not inherit the dead stream."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.lost: str | None = None  # why a write failed, once one has

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        self.lost = _why(exc)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
            self._stream.flush()  # what the failed write left in the buffer now goes to /dev/null
        except (OSError, ValueError, io.UnsupportedOperation):
            pass  # a stream without a descriptor (captured output): it is simply never written again

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


STD_FDS = {"stdin": 0, "stdout": 1, "stderr": 2}
CLOSED = "it was closed when bench started"  # the `lost` of a stream closed before the process began (`>&-`)


def guard_std_streams() -> None:
    """Wrap sys.stdout and sys.stderr in GuardedStream (once). A standard descriptor closed when the process began
    (`bench ... >&-`; Python then sets the stream to None) is given /dev/null first: left closed, its number would go
    to the next file bench opens (a lock, a log, the store), and a process started afterwards would take that file as
    its own stdout. A closed stdout or stderr is then a stream whose output is lost (`lost_output`), as one whose
    writes fail."""
    for name, fd in STD_FDS.items():
        if getattr(sys, name) is None and _closed(fd):
            _devnull_at(fd)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            stream = GuardedStream(_devnull_stream(STD_FDS[name]))
            stream.lost = CLOSED
            setattr(sys, name, stream)
        elif not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _devnull_at(fd: int) -> None:
    """/dev/null opened on descriptor `fd` (which is closed)."""
    opened = os.open(os.devnull, os.O_RDWR)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def _devnull_stream(fd: int) -> TextIO:
    """A text stream on `fd` where it is /dev/null (as _devnull_at left it), else on a /dev/null of its own (the
    descriptor was taken by something else before bench could give it /dev/null, and is left to it)."""
    try:
        if os.path.samestat(os.fstat(fd), os.stat(os.devnull)):
            return open(fd, "w", closefd=False)
    except OSError:
        pass
    return open(os.devnull, "w")


def lost_output() -> dict[str, str]:
    """The standard streams a write to has failed, with why: {"stdout": "Broken pipe"}."""
    lost = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, GuardedStream) and stream.lost is not None:
            lost[name] = stream.lost
    return lost


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def note(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout carries results only). A line that cannot be written
    is dropped, never raised: it must not end what it reports on (a guarded stderr also remembers it)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:  # an unguarded stderr (bench's functions called from elsewhere than bench.cli.main)
        pass


def format_duration(seconds: float) -> str:
    """A duration for a progress line: 42s, 3m05s."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
