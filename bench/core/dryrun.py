"""Whether this process only plans (`--dry-run`): what would run is built by the code that runs it, but no host is
contacted and nothing is started or made. The layers above ask `planning()` at the few points where a launch would
reach outside this process (ssh, a free port on a host, scontrol) or check this machine for what only the hosts
need (GPUs, NCCL)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

NOT_CHECKED = "not checked: dry run"
# the rendezvous port a launch finds free on the first host; a plan cannot ask the host, so it names it
PLANNED_PORT = "FREE_PORT"
# the interface, without --iface: the host check finds the one the hosts route to each other through
PLANNED_IFACE = "IFACE"

# the whole process's, not a context variable's: the checks run on every host at once from a thread pool, whose
# threads would not see a context variable set here
_planning = [False]


def planning() -> bool:
    return _planning[0]


@contextlib.contextmanager
def plan_only() -> Iterator[None]:
    """Within the block, the launch code plans and contacts nothing."""
    before = _planning[0]
    _planning[0] = True
    try:
        yield
    finally:
        _planning[0] = before
