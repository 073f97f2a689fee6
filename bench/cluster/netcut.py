"""A host cut off from the others mid-run (`bench fault --partition-host`, and `--kill-host`, where the cut comes
first so that the lost host's processes send nothing as they end, as a machine that loses power sends nothing).

The cut is a blackhole route on the cut-off host to each other host, and on each other host to it: packets between
them are dropped silently, in both directions, whatever their protocol or port, and nothing tells the peers (no
reset, no unreachable), as when a cable or switch port fails. The machine that runs bench keeps its own path to
every host (its address is never cut), so the suite can still heal the cut and end the run's processes there:
bench must therefore run on a machine that is not one of the hosts, and the cut refuses to start otherwise. The
routes carry their own protocol number (ROUTE_PROTO), so healing is stateless: `heal` removes every route with
it, which the run's end, its lifeline and `bench testhosts down` do whatever happened before.

`python -m bench.cluster.netcut check|cut|heal [HOST ...]` runs on a host over ssh (bench.cluster.hosts.on_every_host)
and prints one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from bench.cluster.hosts import json_answer, on_every_host

ROUTE_PROTO = "213"  # marks the routes bench adds: `ip route show proto 213` lists a cut in place
IP_TIMEOUT_S = 10


def _controller_address() -> str | None:
    """The address this ssh session came from: the machine that runs bench."""
    client = os.environ.get("SSH_CLIENT", "").split()
    return client[0] if client else None


def _resolve(names: list[str]) -> dict[str, str]:
    return {name: socket.gethostbyname(name) for name in names}


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def remote(argv: list[str]) -> dict:
    """What `python -m bench.cluster.netcut ACTION HOST...` does on a host: check that it could cut itself off from
    HOSTs (root, iproute2, names that resolve, none of them the controller's address), cut, or heal."""
    action, peers = argv[0], argv[1:]
    try:
        addresses = _resolve(peers)
    except OSError as exc:
        return {"error": f"{socket.gethostname()} cannot resolve a peer's name ({exc})"}
    controller = _controller_address()
    kept = [name for name, address in addresses.items() if address == controller]
    if kept:
        return {
            "error": f"bench runs on {kept[0]}, one of the hosts: a cut would also cut bench off from the host it "
            "must heal; run bench from a machine outside the hosts"
        }
    if action == "check":
        if os.geteuid() != 0:
            return {"error": f"{socket.gethostname()}: cutting a link needs root (it adds routes)"}
        try:
            probe = _ip("route", "show", "proto", ROUTE_PROTO)
        except OSError:
            return {"error": f"{socket.gethostname()} has no `ip` (install iproute2)"}
        return {"ok": True} if probe.returncode == 0 else {"error": probe.stderr.strip()[-200:]}
    if action == "cut":
        for address in addresses.values():
            done = _ip("route", "replace", "blackhole", f"{address}/32", "proto", ROUTE_PROTO)
            if done.returncode != 0:
                return {"error": f"ip route on {socket.gethostname()} failed: {done.stderr.strip()[-200:]}"}
        return {"cut": sorted(addresses.values()), "time": time.time()}
    if action == "heal":
        done = _ip("route", "flush", "proto", ROUTE_PROTO)
        return {"healed": done.returncode == 0} if done.returncode == 0 else {"error": done.stderr.strip()[-200:]}
    return {"error": f"unknown action {action!r}"}


# ---------------------------------------------------------------- the harness side
def _on_every_host(hosts: list[str], argv_of) -> dict[str, dict]:
    """This module's command on every host at once: {host: its JSON answer, or {"error": ...}}."""
    return {host: json_answer(proc) for host, proc in on_every_host(hosts, argv_of).items()}


def _plan(hosts: list[str], victim: str) -> dict[str, list[str]]:
    """Who cuts whom: the victim every other host, each other host the victim."""
    return {h: [p for p in hosts if p != victim] if h == victim else [victim] for h in hosts}


def check(hosts: list[str], victim: str, python: str) -> str | None:
    """None when `victim` can be cut off from the other hosts, else why not (in the host's words)."""
    plan = _plan(hosts, victim)
    answers = _on_every_host(hosts, lambda h: [python, "-m", "bench.cluster.netcut", "check", *plan[h]])
    return next((f"{host}: {a['error']}" for host, a in answers.items() if "error" in a), None)


def cut(hosts: list[str], victim: str, python: str) -> dict:
    """Cut `victim` off from the other hosts, on every host at once: {"time": when the last side was cut,
    "took_s": from the order to then, "errors": {host: why}}."""
    plan = _plan(hosts, victim)
    ordered = time.time()
    answers = _on_every_host(hosts, lambda h: [python, "-m", "bench.cluster.netcut", "cut", *plan[h]])
    done = max((a["time"] for a in answers.values() if "time" in a), default=time.time())
    return {
        "time": done,
        "took_s": done - ordered,
        "errors": {host: a["error"] for host, a in answers.items() if "error" in a},
    }


def heal(hosts: list[str], python: str) -> dict[str, str]:
    """Remove every cut bench made on these hosts; {host: why} for those where that failed."""
    answers = _on_every_host(hosts, lambda h: [python, "-m", "bench.cluster.netcut", "heal"])
    return {host: a["error"] for host, a in answers.items() if "error" in a}


if __name__ == "__main__":
    print(json.dumps(remote(sys.argv[1:])))
