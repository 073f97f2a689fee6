"""Whether the kernel's OOM killer ended a process: the OOM kills its memory cgroup counts, read before and after.

A process the OOM killer ends dies of SIGKILL, as one killed by hand does: its exit status cannot tell them apart. The
kernel counts each OOM kill in the memory cgroup of the process it killed (and in that cgroup's ancestors): `oom_kill`
in cgroup v2's memory.events, and in cgroup v1's memory.oom_control (Linux 4.13 and later), whether the cgroup's own
limit or the whole machine ran out. A process of a cgroup without that file (the root of cgroup v2) is counted in
/proc/vmstat's `oom_kill`, the machine's count. The per-rank guard (bench.harness.guard) reads the count of its own
cgroup, which its rank inherits, before it starts the rank and again once the rank has died of SIGKILL: a count that
rose means the OOM killer killed a process of that cgroup meanwhile (the rank, the one that died of SIGKILL; another
process of the cgroup killed by it at the same time cannot be told apart, so what is said names the count read).
The kernel's log (dmesg) would name the process, but is not readable everywhere (kernel.dmesg_restrict) and not
for long: the counts are.
"""

from __future__ import annotations

from pathlib import Path

from bench.core.cgroups import PROC, cgroups_of


class OomCount:
    """The OOM-kill count of this process's memory cgroup (`where`: the file it is read from)."""

    def __init__(self, where: Path):
        self.where = where

    def read(self) -> int | None:
        """The count now, or None where it cannot be read."""
        try:
            text = self.where.read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None


def own_oom_count(proc: Path = PROC) -> OomCount | None:
    """The count of the memory cgroup this process is in (cgroup v1's memory controller where it is mounted, else
    cgroup v2's), else the machine's; None where none can be read."""
    for where in _count_files(proc):
        count = OomCount(where)
        if count.read() is not None:
            return count
    return None


def _count_files(proc: Path) -> list[Path]:
    files = [
        cgroup.folder / ("memory.oom_control" if cgroup.version == 1 else "memory.events")
        for cgroup in cgroups_of("memory", proc)
    ]
    v1 = [f for f in files if f.name == "memory.oom_control"]
    return (v1 or files) + [proc / "vmstat"]


def oom_killed_words(count: OomCount | None, before: int | None) -> str | None:
    """What to say of a process that died of SIGKILL, given the count read before it started: 'killed by the kernel's
    OOM killer (...)' where the count rose meanwhile, else None."""
    if count is None or before is None:
        return None
    after = count.read()
    if after is None or after <= before:
        return None
    whose = "the machine's count" if count.where.name == "vmstat" else "its memory cgroup's count"
    return f"the kernel's OOM killer: {after - before} OOM kill(s) in {whose}, {count.where}, while it ran"
