"""`python -m bench.cluster.fanout PLAN_JSON`: start one command on each host over ssh, as one launcher process.

A launcher that is started once per host (torchrun: one agent per node) becomes one process the supervisor
can watch: this one. PLAN_JSON is a list of {"host", "argv"}; each argv runs on its host in this checkout
with this process's environment written into the ssh command (ssh carries none), less what belongs to this
machine's login (HOME, SSH_*, ...). A step whose host is null runs here, a child of this process, with "env"
added to this process's environment: the workers a backend starts one by one on this machine, each with an
environment of its own (TensorFlow's MultiWorkerMirroredStrategy: a TF_CONFIG each). It exits when every host's
command has ended, with the first non-zero exit status among them; when one fails, the others are not waited for
longer than GRACE_S, and the supervisor ends what is left on every host (bench.harness.supervisor reap, run over
ssh).

With `--node-range` (torchrun agents with a range of nodes, in a fault run) a host's agent that fails is a node
the others go on without: the launcher waits for the rest, and once one host's agent has finished training
(exit 0) the others get GRACE_S to finish too (a cut-off agent may wait for its rendezvous far longer); it
exits 0 then, or with the first non-zero status when every host's agent failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from bench.cluster.hosts import ssh_command
from bench.core.environment import PROJECT_ROOT

GRACE_S = 10.0
# A login's own variables: each host has its own.
LOCAL_ONLY = (
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PWD",
    "OLDPWD",
    "HOSTNAME",
    "TERM",
    "DISPLAY",
    "MAIL",
    "SHLVL",
    "_",
    "TMUX",
    "TMUX_PANE",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_ID",
    "LS_COLORS",
)


def fanout_command(steps: list[tuple[str, list[str]]], node_range: bool = False) -> list[str]:
    """The launcher command that runs each (host, argv) of `steps` on its host."""
    return [
        sys.executable,
        "-m",
        "bench.cluster.fanout",
        *(["--node-range"] if node_range else []),
        json.dumps([{"host": h, "argv": a} for h, a in steps]),
    ]


def fanout_steps(command: list[str]) -> list[tuple[str | None, list[str]]] | None:
    """The (host, argv) steps of a command fanout_command or local_processes_command made (a host of None: this
    machine), or None for any other command: what a dry run shows per host."""
    if command[1:3] != ["-m", "bench.cluster.fanout"]:
        return None
    return [(step["host"], step["argv"]) for step in json.loads(command[-1])]


def local_processes_command(steps: list[tuple[dict[str, str], list[str]]]) -> list[str]:
    """The launcher command that runs each (extra environment, argv) of `steps` as a process of this machine."""
    return [
        sys.executable,
        "-m",
        "bench.cluster.fanout",
        json.dumps([{"host": None, "env": env, "argv": argv} for env, argv in steps]),
    ]


def start(step: dict, env: dict[str, str]) -> subprocess.Popen:
    if step["host"] is None:
        return subprocess.Popen(step["argv"], env={**os.environ, **step.get("env", {})}, stdin=subprocess.DEVNULL)
    return subprocess.Popen(ssh_command(step["host"], step["argv"], env, str(PROJECT_ROOT)), stdin=subprocess.DEVNULL)


def forwarded_environment(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in LOCAL_ONLY and not k.startswith(("SSH_", "BASH_FUNC_"))}


def main(argv: list[str]) -> int:
    node_range = argv[0] == "--node-range"
    plan = json.loads(argv[-1])
    env = forwarded_environment(dict(os.environ))
    procs = [start(step, env) for step in plan]

    def stop(signum, _frame):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the moment after which the others are given GRACE_S: the first failure, or with a node range the first success
    decided_at = None
    while True:
        codes = [proc.poll() for proc in procs]
        if all(code is not None for code in codes):
            break
        decisive = (0,) if node_range else tuple(c for c in codes if c not in (None, 0))
        if decided_at is None and any(code in decisive for code in codes if code is not None):
            decided_at = time.monotonic()
        if decided_at is not None and time.monotonic() - decided_at > GRACE_S:
            break
        time.sleep(0.1)
    codes = [proc.poll() for proc in procs]
    for step, code in zip(plan, codes):
        if code not in (None, 0):
            where = step["host"] or f"process {plan.index(step)}"
            print(f"bench.cluster.fanout: {where}: exited with {code}", file=sys.stderr, flush=True)
    if node_range and 0 in codes:
        return 0
    for code in codes:
        if code not in (None, 0):
            return code if code > 0 else 128 - code
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
