"""Host lists as horovodrun and mpirun take them (`--hosts h1:2,h2:2`, `--hostfile FILE`), and where each process
goes: the values a run spec holds. Reaching the hosts (ssh, checks, links) is bench.cluster.hosts's."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.core.errors import UsageError
from bench.core.inputs import HOSTFILE_LIMIT, read_text_file, shown

HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?")  # the whole name (fullmatch: no "\n" after it)
# The most hosts one run takes: well above any cluster bench measures or projects to (--cluster's 65,536 workers),
# and a bound on what a host list (--hosts, --hostfile, a Slurm node list) costs to read before anything runs.
MAX_HOSTS = 65_536


def too_many_hosts(where: str) -> UsageError:
    return UsageError(f"{where} names more than {MAX_HOSTS:,} hosts, the most bench takes")


@dataclass(frozen=True)
class Host:
    name: str
    slots: int

    def to_dict(self) -> dict[str, str | int]:
        return {"name": self.name, "slots": self.slots}


def _host(name: str, slots_text: str, where: str) -> Host:
    if not HOST_NAME.fullmatch(name):
        raise UsageError(f"{where}: {shown(name)} is not a host name or address")
    try:
        slots = int(slots_text)
    except ValueError:
        raise UsageError(f"{where}: slots {shown(slots_text)} of host {name} is not an integer") from None
    if slots < 1:
        raise UsageError(f"{where}: host {name} needs at least 1 slot, not {slots}")
    return Host(name, slots)


def parse_hosts(text: str) -> list[Host]:
    """`h1:2,h2:2` (a host without `:N` has 1 slot), as horovodrun -H and mpirun -H take it."""
    # a message is one line, and short: a list of thousands of hosts is said by its start
    hosts: list[Host] = []
    where = f"--hosts {text if text.isprintable() and len(text) <= 80 else shown(text)}"
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if len(hosts) == MAX_HOSTS:
            raise too_many_hosts(where)
        name, _, slots = item.partition(":")
        hosts.append(_host(name, slots or "1", where))
    return _distinct(hosts, where)


def read_hostfile(path: str) -> list[Host]:
    """One `host slots=N` (or `host`) per line, `#` comments, as mpirun and horovodrun read it."""
    lines = read_text_file(path, "--hostfile", HOSTFILE_LIMIT).splitlines()
    hosts: list[Host] = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = "1"
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key not in ("slots", "max_slots", "max-slots"):
                raise UsageError(f"--hostfile {path}, line {number}: {shown(word)} is not slots=N")
            if key == "slots":
                slots = value
        if len(hosts) == MAX_HOSTS:
            raise too_many_hosts(f"--hostfile {path}")
        hosts.append(_host(words[0], slots, f"--hostfile {path}, line {number}"))
    return _distinct(hosts, f"--hostfile {path}")


def _distinct(hosts: list[Host], where: str) -> list[Host]:
    if not hosts:
        raise UsageError(f"{where} names no host")
    if len(hosts) > MAX_HOSTS:
        raise too_many_hosts(where)
    seen: set[str] = set()
    for host in hosts:  # one pass: the first name given again is the one said
        if host.name in seen:
            raise UsageError(f"{where} names host {host.name} twice; give its slots once")
        seen.add(host.name)
    return hosts


def placement(hosts: list[Host], processes: int) -> list[tuple[Host, int]]:
    """(host, processes on it) in order: hosts filled slot by slot; hosts left empty are dropped."""
    total = sum(h.slots for h in hosts)
    if processes > total:
        raise UsageError(
            f"{processes} processes do not fit the {total} slot(s) of the hosts given; lower --nproc or give more slots"
        )
    out, left = [], processes
    for host in hosts:
        take = min(host.slots, left)
        if take:
            out.append((host, take))
        left -= take
    return out
