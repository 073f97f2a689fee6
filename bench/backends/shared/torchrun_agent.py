"""torchrun's agent as bench starts it: `python -m bench.backends.shared.torchrun_agent TORCHRUN_ARGS`.

It runs torchrun's own main (torch.distributed.run.main, what `torchrun` and `python -m torch.distributed.run` run) with
those arguments, by the interpreter that runs bench, and once main has returned (the workers done, the exit barrier
passed, the rendezvous closed) it leaves at once (leave): the interpreter's own teardown of a process that imported
torch took 0.6 to 0.9 s more on a 2-core machine, at the end of every run and in none of its figures (the ranks leave
the same way, bench.rank.entry). An agent whose main raises (its workers failed, a signal) exits as torchrun does,
through Python's exit, with its traceback and exit status unchanged.
"""

from __future__ import annotations

import atexit
import os
import sys


def leave() -> None:
    """Exit 0 now: what Python's exit would run first (atexit's handlers: logging's flush among them) and the
    standard streams flushed, not the teardown of every module."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(0)


def main(argv: list[str]) -> None:
    import torch.distributed.run

    torch.distributed.run.main(argv)
    leave()


if __name__ == "__main__":
    main(sys.argv[1:])
