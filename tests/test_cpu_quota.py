"""A CPU quota is fewer CPUs: a process whose cgroup allows it 1 CPU's time (a pod's limits.cpu, `docker run --cpus`)
on a machine of more counts 1 usable core, so that a run's threads are not throttled by the kernel unseen. Read from
/proc files as cgroup v1, v2 and a container's namespace give them, and for real in a cgroup of the test's own (root;
skipped saying why where none can be made)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.core.cgroups import affinity_cpus, cgroups_of, cpu_quota, usable_cpus, usable_cpus_words
from conftest import ROOT, remove_cgroup

V2_MOUNT = "30 25 0:26 {root} {mount} rw,nosuid - cgroup2 cgroup2 rw\n"
V1_CPU = "32 25 0:28 / {mount} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
V1_CPUSET = "33 25 0:29 / {mount} rw,nosuid - cgroup cgroup rw,cpuset\n"


def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return proc


def test_cgroup_v1_the_smallest_quota_on_the_way_up_counts(tmp_path):
    """The parent's 1.5 CPUs bind a child with no limit (-1) of its own; cpuset's hierarchy is not cpu's."""
    proc = fake_proc(
        tmp_path,
        "6:cpuset:/\n5:cpu,cpuacct:/kubepods/pod1/box\n0::/\n",
        V1_CPUSET.format(mount=tmp_path / "cpuset") + V1_CPU.format(mount=tmp_path / "cpu"),
        {
            "cpu/kubepods/pod1/box/cpu.cfs_quota_us": "-1\n",
            "cpu/kubepods/pod1/box/cpu.cfs_period_us": "100000\n",
            "cpu/kubepods/pod1/cpu.cfs_quota_us": "150000\n",
            "cpu/kubepods/pod1/cpu.cfs_period_us": "100000\n",
            "cpu/kubepods/cpu.cfs_quota_us": "-1\n",
            "cpu/kubepods/cpu.cfs_period_us": "100000\n",
            "cpuset/cpu.cfs_quota_us": "10000\n",  # (not a cpu hierarchy: never read)
            "cpuset/cpu.cfs_period_us": "100000\n",
        },
    )
    assert cpu_quota(proc) == 1.5
    assert usable_cpus(proc) == 1  # 1.5 CPUs' time keeps one thread busy, not two
    assert usable_cpus_words(proc).startswith("1 (its cgroup's CPU quota allows 1.5 CPUs' time of the ") or (
        affinity_cpus() == 1 and usable_cpus_words(proc) == "1"
    )


def test_cgroup_v2_cpu_max_of_a_containers_own_cgroup_and_its_ancestors(tmp_path):
    """A container's mount shows its own cgroup as its root: the walk up stops there, at the mount point."""
    mount = tmp_path / "cg2"
    proc = fake_proc(
        tmp_path,
        "0::/kubepods/pod1/inner\n",
        V2_MOUNT.format(root="/kubepods/pod1", mount=mount),
        {"cg2/inner/cpu.max": "max 100000\n", "cg2/cpu.max": "300000 100000\n", "cpu.max": "100000 100000\n"},
    )
    (cgroup,) = cgroups_of("cpu", proc)
    assert cgroup.up_to_root() == [mount / "inner", mount]
    assert cpu_quota(proc) == 3.0  # not the 1.0 above the mount, outside the container
    assert usable_cpus(proc) == min(3, affinity_cpus())


def test_no_quota_or_nothing_readable_leaves_the_cpus_the_process_may_run_on(tmp_path):
    mount = tmp_path / "cg2"
    proc = fake_proc(tmp_path, "0::/\n", V2_MOUNT.format(root="/", mount=mount), {"cg2/cpu.max": "max 100000\n"})
    assert cpu_quota(proc) is None and usable_cpus(proc) == affinity_cpus()
    assert usable_cpus_words(proc) == str(affinity_cpus())
    assert cpu_quota(tmp_path / "no-proc") is None


@pytest.fixture
def one_cpu_cgroup():
    """A cgroup of this test's own whose CPU quota is 1 CPU's time: under this process's cgroup of cgroup v1's cpu
    controller, or at the root of cgroup v2 where its cpu controller is on below it; removed on the way out."""
    if os.geteuid() != 0:
        pytest.skip("a cgroup of its own needs root")
    name = f"bench-test-quota-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    v1 = [c for c in cgroups_of("cpu") if c.version == 1]
    v2 = [c.mount for c in cgroups_of("cpu") if c.version == 2]
    if v1:
        folder, limits = v1[0].folder / name, [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "100000")]
    elif v2 and "cpu" in (v2[0] / "cgroup.subtree_control").read_text().split():
        folder, limits = v2[0] / name, [("cpu.max", "100000 100000")]
    else:
        pytest.skip("no cpu controller to make a limited cgroup in (/proc/self/cgroup, /proc/self/mountinfo)")
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup in {folder.parent}: {exc}")
    try:
        for file, value in limits:
            (folder / file).write_text(value)
        yield folder
    finally:
        remove_cgroup(folder)


def bench_in(cgroup: Path | None, *args: str) -> subprocess.CompletedProcess:
    """`bench ARGS` (or `python -c CODE`) in `cgroup`, or where this test runs."""

    def join():
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run(
        [sys.executable, *(args if args[0] == "-c" else ("-m", "bench", *args))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=join if cgroup is not None else None,
    )


@pytest.mark.skipif(affinity_cpus() < 2, reason="needs a machine of 2 CPUs or more, for a quota below them")
def test_under_a_one_cpu_quota_two_workers_are_refused_and_one_is_planned(one_cpu_cgroup):
    """The same plan that passes outside is refused inside, naming the quota; one worker still plans, on 1 thread."""
    two = ("run", "--backend", "elastic", "--nproc", "2", "--threads", "1", "--dry-run")
    assert bench_in(None, *two).returncode == 0
    proc = bench_in(one_cpu_cgroup, *two)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (
        "world size 2 x 1 thread(s) needs 2 cores, this machine has 1 (its cgroup's CPU quota allows 1 CPU's time "
        f"of the {affinity_cpus()} it may run on); lower --nproc or --threads" in proc.stderr
    )
    proc = bench_in(one_cpu_cgroup, "run", "--backend", "elastic", "--nproc", "1", "--dry-run")
    assert proc.returncode == 0 and "1 thread(s) a process" in proc.stdout, proc.stdout + proc.stderr


POD_CORES = """
import argparse, json
from bench.cli.common import pods_cluster
from bench.cluster.kubeflow_pod import pod_place
env = {"PET_NNODES": "1:2", "BENCH_JOB_PODS": "1", "PET_NPROC_PER_NODE": "1", "PET_RDZV_ENDPOINT": "bench-worker-0:1"}
cluster = pods_cluster(argparse.Namespace(nproc=None, gpus=None), pod_place(env, "bench-worker-0"))
print(json.dumps([machine["cpus"] for machine in cluster["machines"].values()]))
"""


@pytest.mark.skipif(affinity_cpus() < 2, reason="needs a machine of 2 CPUs or more, for a quota below them")
def test_a_kubeflow_pods_cores_are_its_cpu_limit_not_its_nodes(one_cpu_cgroup):
    """A pod's limits.cpu is its cgroup's quota: the pod's run shares that among its processes, not the node's cores
    its affinity lists."""

    def pod_cores(cgroup):
        proc = bench_in(cgroup, "-c", POD_CORES)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert pod_cores(None) == [affinity_cpus()]
    assert pod_cores(one_cpu_cgroup) == [1]
