"""A rank the kernel's OOM killer ends is named so, not only "signal SIGKILL": its guard reads the OOM kills its memory
cgroup counts (bench.harness.oom) before and after. A real run in a memory cgroup too small for its rank (root, and a
memory cgroup to make one in; skipped saying why where there is none), and where the count is read from, on /proc
files as cgroup v1, v2, both and a container's namespace give them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core.cgroups import mounts_of
from bench.harness.oom import OomCount, oom_killed_words, own_oom_count
from conftest import FAST, ROOT, assert_nothing_left, remove_cgroup

HOG = '''
import os

from workloads import Size, Workload


def build(num_classes, image):
    import torch.nn as nn

    if os.environ.get("BENCH_RANK") is not None:  # in the run's rank, not in the check before it
        held = [b"\\x01" * (64 << 20) for _ in range(64)]  # 4 GiB, every page written: past its cgroup's limit
        print(f"held {len(held) * 64} MiB", flush=True)
    return nn.Sequential(nn.Flatten(), nn.Linear(image * image, 16), nn.ReLU(), nn.Linear(16, num_classes))


HOG = Workload(name="hog", summary="holds 4 GiB", channels=1, gpu=Size(16, 12, 4, 5), cpu=Size(16, 12, 4, 5),
               fixed_image=False, build=build)
'''
MEMORY_LIMIT = 1536 << 20  # room for bench, its lifeline, the guard and a rank with torch; not for the hog's 4 GiB


def read_or_nothing(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of this test's own, limited to MEMORY_LIMIT without swap: under this process's own cgroup of
    cgroup v1's memory controller, or at the root of cgroup v2 where its memory controller is on for the cgroups below;
    removed on the way out."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup of its own needs root")
    own = own_oom_count()
    v2 = [
        mount
        for _, mount in mounts_of("memory").get("v2", [])
        if "memory" in read_or_nothing(mount / "cgroup.subtree_control").split()
    ]
    name = f"bench-test-{os.getpid()}"
    if own is not None and own.where.name == "memory.oom_control":
        folder = own.where.parent / name
        limits = [("memory.limit_in_bytes", MEMORY_LIMIT), ("memory.memsw.limit_in_bytes", MEMORY_LIMIT)]
    elif v2:
        folder, limits = v2[0] / name, [("memory.max", MEMORY_LIMIT), ("memory.swap.max", 0)]
    else:
        pytest.skip(
            "no memory cgroup to make a limited one in: neither cgroup v1's memory controller nor cgroup v2's "
            "with its memory controller on below its root (/proc/self/cgroup, /proc/self/mountinfo)"
        )
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup in {folder.parent}: {exc}")
    try:
        for name, value in limits:
            if (folder / name).exists():
                (folder / name).write_text(str(value))
        yield folder
    finally:
        remove_cgroup(folder)


@pytest.mark.slow
def test_a_rank_the_oom_killer_ends_is_said_to_be(memory_cgroup, store, tmp_path):
    """The whole run in a memory cgroup too small for what its rank holds: the kernel's OOM killer ends the rank with
    SIGKILL, and the record names it, from the count of OOM kills of the rank's cgroup."""
    (tmp_path / "hog.py").write_text(HOG)
    procs = memory_cgroup / "cgroup.procs"

    def join_the_cgroup():
        procs.write_text(str(os.getpid()))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BENCH_STORE", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--backend",
            "single",
            "--nproc",
            "1",
            "--workload",
            f"{tmp_path}/hog.py:HOG",
            "--store",
            str(store),
            "--json",
            *FAST,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        preexec_fn=join_the_cgroup,
    )
    record = json.loads(proc.stdout)
    assert proc.returncode == 1 and record["status"] == "crashed", proc.stderr
    error = record["error"]
    assert (error["rank"], error["signal"], error["exit_code"]) == (0, "SIGKILL", None)
    assert error["message"].startswith(
        "rank 0 ended with signal SIGKILL (from the kernel's OOM killer: 1 OOM kill(s) "
        f"in its memory cgroup's count, {memory_cgroup}/memory."
    ), error["message"]
    assert "held 4096 MiB" not in error["tail"]
    assert_nothing_left(record)


# ---------------------------------------------------------------- where the count is read
def fake_proc(tmp_path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    (proc / "vmstat").write_text("pgfault 12\noom_kill 7\n")
    return proc


def count_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


V2_MOUNT = "30 25 0:26 {root} {mount} rw,nosuid - cgroup2 cgroup2 rw\n"
V1_MEMORY = "31 25 0:27 {root} {mount} rw,nosuid - cgroup cgroup rw,memory\n"
V1_CPU = "32 25 0:28 / {mount} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"


def test_the_count_is_cgroup_v2s_memory_events_of_the_process_cgroup(tmp_path):
    mount = tmp_path / "cg2"
    proc = fake_proc(tmp_path, "0::/user.slice/bench.scope\n", V2_MOUNT.format(root="/", mount=mount))
    events = count_file(mount / "user.slice/bench.scope/memory.events", "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    count = own_oom_count(proc)
    assert count.where == events and count.read() == 2


def test_in_a_hybrid_hierarchy_the_count_is_the_memory_controllers_of_cgroup_v1(tmp_path):
    v1, v2 = tmp_path / "memory", tmp_path / "unified"
    proc = fake_proc(
        tmp_path,
        "5:cpu,cpuacct:/\n4:memory:/jobs/a b\n0::/\n",
        V2_MOUNT.format(root="/", mount=v2)
        + V1_CPU.format(mount=tmp_path / "cpu")
        + V1_MEMORY.format(root="/", mount=str(v1).replace(" ", "\\040")),
    )
    count_file(v2 / "memory.events", "oom_kill 9\n")  # (the root of v2, without the memory controller here)
    control = count_file(v1 / "jobs/a b/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    assert own_oom_count(proc).where == control


def test_a_containers_own_cgroup_is_the_root_of_its_mount(tmp_path):
    """Without a cgroup namespace a container sees its cgroup's full path, and its mount's root is that cgroup."""
    mount = tmp_path / "cg2"
    proc = fake_proc(tmp_path, "0::/docker/abc/inner\n", V2_MOUNT.format(root="/docker/abc", mount=mount))
    events = count_file(mount / "inner/memory.events", "oom_kill 1\n")
    assert own_oom_count(proc).where == events


def test_without_a_cgroup_count_the_machines_is_read(tmp_path):
    """The root of cgroup v2 has no memory.events: the machine's count (/proc/vmstat) stands in."""
    mount = tmp_path / "cg2"
    mount.mkdir()
    proc = fake_proc(tmp_path, "0::/\n", V2_MOUNT.format(root="/", mount=mount))
    count = own_oom_count(proc)
    assert count.where == proc / "vmstat" and count.read() == 7


def test_a_count_that_rose_names_the_oom_killer_and_one_that_did_not_says_nothing(tmp_path):
    events = count_file(tmp_path / "memory.events", "oom_kill 3\n")
    count = OomCount(events)
    assert oom_killed_words(count, 3) is None
    assert oom_killed_words(count, None) is None and oom_killed_words(None, 0) is None
    assert oom_killed_words(count, 2) == (
        f"the kernel's OOM killer: 1 OOM kill(s) in its memory cgroup's count, {events}, while it ran"
    )
    events.unlink()  # (a cgroup gone meanwhile)
    assert oom_killed_words(count, 2) is None
