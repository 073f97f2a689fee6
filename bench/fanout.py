"""`python -m bench.fanout PLAN_JSON`: start one command on each host over ssh, as one launcher process.

A launcher that is started once per host (torchrun: one agent per node) becomes one process the supervisor
can watch: this one. PLAN_JSON is a list of {"host", "argv"}; each argv runs on its host in this checkout
with this process's environment written into the ssh command (ssh carries none), less what belongs to this
machine's login (HOME, SSH_*, ...). It exits when every host's command has ended, with the first non-zero
exit status among them; when one fails, the others are not waited for longer than GRACE_S, and the
supervisor ends what is left on every host (bench.supervisor reap, run over ssh).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from bench.hosts import ssh_command

GRACE_S = 10.0
# A login's own variables: each host has its own.
LOCAL_ONLY = ("HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "HOSTNAME", "TERM", "DISPLAY", "MAIL", "SHLVL",
              "_", "TMUX", "TMUX_PANE", "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "LS_COLORS")


def fanout_command(steps: list[tuple[str, list[str]]]) -> list[str]:
    """The launcher command that runs each (host, argv) of `steps` on its host."""
    return [sys.executable, "-m", "bench.fanout", json.dumps([{"host": h, "argv": a} for h, a in steps])]


def forwarded_environment(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in LOCAL_ONLY and not k.startswith(("SSH_", "BASH_FUNC_"))}


def main(argv: list[str]) -> int:
    from bench.environment import PROJECT_ROOT

    plan = json.loads(argv[0])
    env = forwarded_environment(dict(os.environ))
    procs = [subprocess.Popen(ssh_command(step["host"], step["argv"], env, str(PROJECT_ROOT)),
                              stdin=subprocess.DEVNULL) for step in plan]

    def stop(signum, _frame):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed_at = None
    while True:
        codes = [proc.poll() for proc in procs]
        if all(code is not None for code in codes):
            break
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            break
        time.sleep(0.1)
    for step, proc in zip(plan, procs):
        code = proc.poll()
        if code not in (None, 0):
            print(f"bench.fanout: {step['host']}: exited with {code}", file=sys.stderr, flush=True)
            return code if code > 0 else 128 - code
    return 0 if all(proc.poll() == 0 for proc in procs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
