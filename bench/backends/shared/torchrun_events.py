"""torchrun with its events kept: `python -m bench.backends.shared.torchrun_events EVENTS_FILE -- TORCHRUN_ARGS`.

The elastic agent reports what it does (rendezvous and rank assignment with their durations per
attempt, worker failures, restarts) through torch.distributed.elastic's event and metric handlers,
which plain torchrun discards (event handler "null", no metric handler). This entry point registers
handlers that append each as one JSON line with its wall-clock time to EVENTS_FILE, then runs
torchrun's own main. The agent's INFO log lines about membership are kept the same way. The process it runs in is
torchrun's agent (the elastic backend's fault runs start it), so torch is imported at the top.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import torch.distributed.run
from torch.distributed.elastic import metrics
from torch.distributed.elastic.events import handlers
from torch.distributed.elastic.metrics.api import MetricHandler

from bench.backends.shared.torchrun_agent import leave
from bench.core.codec import dumps

HANDLER_NAME = "bench"
LOG_PHRASES = ("new nodes", "Rendezvous complete", "closing signal", "Worker group", "restart")
# polled every monitor interval (0.1 s): kept out of the file
QUIET_METRICS = ("_monitor_workers.success", "_monitor_workers.duration.ms", ".healthy", ".remaining_restarts")


def _append(path: str, entry: dict) -> None:
    # one short write per line on a file opened for append: lines from two agents never interleave
    with open(path, "a") as fh:
        fh.write(dumps(entry, default=str) + "\n")


class _EventLines(logging.Handler):
    def __init__(self, path: str, kind: str):
        super().__init__()
        self.path, self.kind = path, kind

    def emit(self, record):
        try:
            body = json.loads(record.getMessage())
        except ValueError:
            body = {"message": record.getMessage()}
        # Event.timestamp is 0 in these records: the time is the log record's
        _append(self.path, {"t": record.created, "agent_pid": os.getpid(), "kind": self.kind, **body})


class _AgentLog(logging.Handler):
    def __init__(self, path: str):
        super().__init__(level=logging.INFO)
        self.path = path

    def emit(self, record):
        message = record.getMessage()
        if any(p in message for p in LOG_PHRASES):
            _append(self.path, {"t": record.created, "agent_pid": os.getpid(), "kind": "log", "message": message[:500]})


def install(path: str) -> None:
    class _MetricLines(MetricHandler):
        def emit(self, m):
            if any(m.name.endswith(noise) for noise in QUIET_METRICS):
                return
            _append(
                path,
                {
                    "t": m.timestamp or time.time(),
                    "agent_pid": os.getpid(),
                    "kind": "metric",
                    "group": m.group_name,
                    "name": m.name,
                    "value": m.value,
                },
            )

    registry = getattr(handlers, "_log_handlers", None)
    if isinstance(registry, dict):  # a private table in torch; without it the run goes on without events
        registry[HANDLER_NAME] = _EventLines(path, "agent")
        registry["dynamic_rendezvous"] = _EventLines(path, "rdzv")
    metrics.configure(_MetricLines())

    # torch's elastic loggers (importing torch.distributed.run created the agent's) take their level from $LOGLEVEL
    # (WARNING) when created; the membership lines are INFO. Raise only those loggers, and keep their lines out of
    # the workers' environment.
    for name, log in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("torch.distributed.elastic") and isinstance(log, logging.Logger):
            log.setLevel(logging.INFO)
    logging.getLogger("torch.distributed.elastic").addHandler(_AgentLog(path))


def main(argv: list[str]) -> None:
    path, rest = argv[0], argv[argv.index("--") + 1 :]
    install(path)
    torch.distributed.run.main(["--event-log-handler", HANDLER_NAME, *rest])
    leave()  # at once, as bench's other agents (bench.backends.shared.torchrun_agent)


if __name__ == "__main__":
    main(sys.argv[1:])
