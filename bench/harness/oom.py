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

PROC = Path("/proc")


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
    mounts = _cgroup_mounts(proc)
    files = []
    for line in _read(proc / "self" / "cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            files += [_under(root, mount, path) / "memory.oom_control" for root, mount in mounts.get("memory", [])]
        elif controllers == "":  # cgroup v2 (the memory controller is v1's where both are mounted: hybrid)
            files += [_under(root, mount, path) / "memory.events" for root, mount in mounts.get("v2", [])]
    v1 = [f for f in files if f.name == "memory.oom_control"]
    return (v1 or files) + [proc / "vmstat"]


def _cgroup_mounts(proc: Path) -> dict[str, list[tuple[str, Path]]]:
    """{"memory": [(the mount's root in the hierarchy, mount point)] of cgroup v1's memory controller, "v2": [...] of
    cgroup v2}, from /proc/self/mountinfo."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for line in _read(proc / "self" / "mountinfo").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fs_type, options = _unescape(fields[3]), Path(_unescape(fields[4])), tail[0], tail[2]
        if fs_type == "cgroup2":
            found.setdefault("v2", []).append((root, mount_point))
        elif fs_type == "cgroup" and "memory" in options.split(","):
            found.setdefault("memory", []).append((root, mount_point))
    return found


def _under(root: str, mount_point: Path, path: str) -> Path:
    """The folder of cgroup `path` (as /proc/self/cgroup gives it) below a mount of the hierarchy whose root is `root`
    (a container's mount shows its own cgroup as its root)."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")) :]
    return mount_point / path.lstrip("/")


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (a space is \\040)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit() and len(text[i + 1 : i + 4]) == 3:
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


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
