"""Whether this process only plans (`--dry-run`): what would run is built by the code that runs it, but no host is
contacted and nothing is started or made. The layers above ask `planning()` at the few points where a launch would
reach outside this process (ssh, a free port on a host, scontrol) or check this machine for what only the hosts
need (GPUs, NCCL)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

NOT_CHECKED = "not checked: dry run"
# the rendezvous port a launch finds free on the first host; a plan cannot ask the host, so it names it
PLANNED_PORT = "FREE_PORT"

_planning = contextvars.ContextVar("bench_planning", default=False)


def planning() -> bool:
    return _planning.get()


@contextlib.contextmanager
def plan_only() -> Iterator[None]:
    """Within the block, the launch code plans and contacts nothing."""
    token = _planning.set(True)
    try:
        yield
    finally:
        _planning.reset(token)
