"""This process's cgroups, as /proc names them, and what the kernel limits or counts there.

A cgroup's folder is found from /proc/self/cgroup (the process's path in each hierarchy) and /proc/self/mountinfo
(where each hierarchy is mounted, and from which of its folders: a container's mount shows its own cgroup as the
root). cgroup v1 mounts a hierarchy per set of controllers, cgroup v2 one for all; a hybrid machine mounts both, and a
controller is active in one of them. Read here: the CPU time a CFS bandwidth limit allows (cpu_quota: a Kubernetes
pod's `limits.cpu`, `docker run --cpus`, systemd's CPUQuota), and, by bench.harness.oom, the OOM kills of the memory
cgroup.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Cgroup:
    """One hierarchy's folder of this process's cgroup: `version` 1 or 2, `mount` the folder the hierarchy's visible
    root is mounted on (the folder and its ancestors up to it are the cgroups whose limits apply)."""

    version: int
    folder: Path
    mount: Path

    def up_to_root(self) -> list[Path]:
        """The folder, then each parent folder up to the mount point."""
        chain = [self.folder]
        while chain[-1] != self.mount and self.mount in chain[-1].parents:
            chain.append(chain[-1].parent)
        return chain


def cgroups_of(controller: str, proc: Path = PROC) -> list[Cgroup]:
    """The folders of this process's cgroup where `controller` ("memory", "cpu") may be active: cgroup v1's
    hierarchies holding it first, then cgroup v2's."""
    mounts = mounts_of(controller, proc)
    found: list[Cgroup] = []
    for line in read_text(proc / "self" / "cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controller in controllers.split(","):
            found += [Cgroup(1, under(root, mount, path), mount) for root, mount in mounts.get("v1", [])]
        elif controllers == "":  # cgroup v2's line
            found += [Cgroup(2, under(root, mount, path), mount) for root, mount in mounts.get("v2", [])]
    return sorted(found, key=lambda c: c.version)


def mounts_of(controller: str, proc: Path = PROC) -> dict[str, list[tuple[str, Path]]]:
    """{"v1": [(the mount's root in the hierarchy, mount point)] of cgroup v1's hierarchies holding `controller`,
    "v2": [...] of cgroup v2}, from /proc/self/mountinfo."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for line in read_text(proc / "self" / "mountinfo").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fs_type, options = unescape(fields[3]), Path(unescape(fields[4])), tail[0], tail[2]
        if fs_type == "cgroup2":
            found.setdefault("v2", []).append((root, mount_point))
        elif fs_type == "cgroup" and controller in options.split(","):
            found.setdefault("v1", []).append((root, mount_point))
    return found


def cpu_quota(proc: Path = PROC) -> float | None:
    """How many CPUs' time the CFS bandwidth limits of this process's cgroup and its ancestors allow together: the
    smallest quota / period on the way up (cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us, cgroup v2's cpu.max);
    None where none is set or none can be read."""
    limits = []
    for cgroup in cgroups_of("cpu", proc):
        for folder in cgroup.up_to_root():
            if cgroup.version == 1:
                quota, period = read_text(folder / "cpu.cfs_quota_us"), read_text(folder / "cpu.cfs_period_us")
            else:
                quota, _, period = read_text(folder / "cpu.max").strip().partition(" ")
            try:
                q, p = int(quota), int(period)
            except ValueError:  # "max", or no such file
                continue
            if q > 0 and p > 0:
                limits.append(q / p)
    return min(limits) if limits else None


def affinity_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def usable_cpus(proc: Path = PROC) -> int:
    """How many CPUs this process's threads can keep busy at once without the kernel throttling them: the CPUs it may
    run on, or fewer where a CPU quota allows less time (whole CPUs, at least 1: 1.5 CPUs' time keeps 1 thread busy
    and a second half the time)."""
    cpus, quota = affinity_cpus(), cpu_quota(proc)
    return cpus if quota is None else max(1, min(cpus, math.floor(quota + 1e-9)))


def usable_cpus_words(proc: Path = PROC) -> str:
    """usable_cpus, said with why where a quota sets it: '4', or '1 (its cgroup's CPU quota allows 1.5 CPUs' time
    of the 64 it may run on)'."""
    usable, quota = usable_cpus(proc), cpu_quota(proc)
    if quota is None or usable == affinity_cpus():
        return str(usable)
    return f"{usable} (its cgroup's CPU quota allows {quota_words(quota)} of the {affinity_cpus()} it may run on)"


def quota_words(quota: float | None) -> str:
    """A CPU quota as the record holds it (cpu_quota: CPUs' time, None for no limit) in words: '1.5 CPUs' time'."""
    if quota is None:
        return "no limit"
    return f"{quota:g} CPU's time" if quota == 1 else f"{quota:g} CPUs' time"


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def under(root: str, mount_point: Path, path: str) -> Path:
    """The folder of cgroup `path` (as /proc/self/cgroup gives it) below a mount of the hierarchy whose root is `root`
    (a container's mount shows its own cgroup as its root)."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")) :]
    return mount_point / path.lstrip("/")


def unescape(text: str) -> str:
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
