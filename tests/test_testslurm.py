"""`bench testslurm`: a real Slurm cluster on the test hosts. The fast tests check the refusals and the
configuration anywhere; the others start the cluster on two test hosts and need root, slurm-wlm and munge (CI
installs them). They take down any test hosts and Slurm test cluster already on the machine, one module using
the test hosts at a time (the lock tests/test_testhosts.py takes too).

No test of a job over its time limit: the shortest limit is a minute and slurmctld looks for such jobs every
30 s, so the job ends 60 to 90 s after it starts (measured: 89 s; over a minute more for this module)."""

import fcntl
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from bench import testhosts, testslurm
from bench.testhosts import Host
from conftest import bench, bench_in_process
from test_testhosts import assert_one_line_error

UNAVAILABLE = testslurm.unavailable_reason()


def needs_cluster(test):
    skip = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"the Slurm test cluster cannot run here: {UNAVAILABLE}")
    return pytest.mark.slow(skip(test))


# ---------------------------------------------------------------- refusals and configuration (no root needed)
@pytest.mark.parametrize("args, fragments", [
    ([], ["required: ACTION"]),
    (["sideways"], ["invalid choice: 'sideways'"]),
    (["up", "2"], ["unrecognized arguments: 2"]),
])
def test_bad_input_is_refused(args, fragments):
    assert_one_line_error(bench_in_process("testslurm", *args), 2, *fragments)


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_refused_when_not_root(monkeypatch, action):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert_one_line_error(bench_in_process("testslurm", action), 2, "root", "sudo")


def test_refused_without_slurm_or_munge(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testhosts, "netns_problem", lambda: None)
    monkeypatch.setattr(testhosts, "tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(testslurm, "tool", lambda name: None if name in ("slurmctld", "munged") else f"/usr/bin/{name}")
    assert_one_line_error(bench_in_process("testslurm", "up"), 2, "munged, slurmctld not found",
                          "apt-get install -y slurm-wlm munge")


def test_refused_without_test_hosts(monkeypatch):
    monkeypatch.setattr(testslurm, "unavailable_reason", lambda: None)
    monkeypatch.setattr(testhosts, "read_state", lambda: None)
    monkeypatch.setattr(testslurm, "build", lambda *a: pytest.fail("built without test hosts"))
    assert_one_line_error(bench_in_process("testslurm", "up"), 2, "no test hosts are up",
                          "bench testhosts up 2")


def test_configuration_is_the_clusters_own():
    hosts = [Host("bench-th1", "10.213.7.11"), Host("bench-th2", "10.213.7.12")]
    conf = testslurm.slurm_conf(hosts, "box", "10.213.7.1", 4)
    lines = conf.splitlines()
    state = str(testslurm.STATE_DIR)
    assert "SlurmctldHost=box(10.213.7.1)" in lines
    assert f"AuthInfo=socket={state}/munge/munge.socket" in lines  # its own munged, never /run/munge
    assert "NodeName=bench-th2 NodeAddr=10.213.7.12 NodeHostname=bench-th2 CPUs=4 State=UNKNOWN" in lines
    assert "PartitionName=bench Nodes=bench-th1,bench-th2 Default=YES MaxTime=INFINITE State=UP" in lines
    for option in ("ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "ReturnToService=2",
                   "SlurmUser=root", "MpiDefault=none", f"SlurmctldPort={testslurm.CTLD_PORT}"):
        assert option in lines
    paths = [line.split("=", 1)[1] for line in lines
             if line.split("=")[0].endswith(("Location", "Dir", "File", "Config"))]
    assert len(paths) == 7 and all(p.startswith(state + "/") for p in paths), paths
    assert "/etc/" not in conf and "cgroup" not in conf.lower()
    assert testslurm.environment() == {"SLURM_CONF": f"{state}/slurm.conf"}


# ---------------------------------------------------------------- the real cluster (root)
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two test hosts and the cluster on them, taken down afterwards, also when a test fails."""
    lock = open(Path(__file__).with_name("test_testhosts.py"))
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        hosts = testhosts.up(2)
        testslurm.up()
        yield {"hosts": hosts, "folder": tmp_path_factory.mktemp("slurm")}
    finally:
        try:
            testslurm.down()
        finally:
            try:
                testhosts.down()
            finally:
                lock.close()


def slurm(*args, cwd=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **testslurm.environment()})


def submit(folder, *args) -> str:
    proc = slurm("sbatch", "--parsable", f"--output={folder}/job-%j.out", *args, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def job_state(job: str) -> str:
    proc = slurm("scontrol", "show", "job", job)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("JobState=", 1)[1].split()[0]


def sleeps_of(job: str) -> list[psutil.Process]:
    """The live `sleep 300` tasks of the job, on any host."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.cmdline()[-1:] == ["300"] and proc.name() == "sleep" \
                    and proc.environ().get("SLURM_JOB_ID") == job and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def netns_of(pid) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def host_netns(host) -> str:
    return f"net:[{os.stat(f'/run/netns/{host.name}').st_ino}]"


def wait_until(condition, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


@needs_cluster
def test_status_lists_every_node_idle(cluster):
    proc = bench("testslurm", "status")
    assert proc.returncode == 0, proc.stderr
    assert [line.split() for line in proc.stdout.splitlines()] == [[h.name, h.address, "idle"]
                                                                   for h in cluster["hosts"]], proc.stdout


@needs_cluster
def test_srun_runs_a_task_on_each_host_in_its_namespace(cluster):
    """srun from the root namespace: each task runs in its host's network namespace (its address only), with its
    hostname, and its output comes back across the bridge."""
    proc = slurm("srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
                 'echo "$SLURMD_NODENAME $(hostname) $(readlink /proc/self/ns/net) $(hostname -I)"',
                 cwd=cluster["folder"])
    assert proc.returncode == 0, proc.stderr
    seen = sorted(tuple(line.split()) for line in proc.stdout.splitlines())
    assert seen == [(h.name, h.name, host_netns(h), h.address) for h in cluster["hosts"]], proc.stdout


@needs_cluster
def test_scancel_ends_every_process_of_the_job_on_both_hosts(cluster):
    job = submit(cluster["folder"], "-N2", "--wrap", "srun --ntasks-per-node=1 sleep 300")
    assert wait_until(lambda: len(sleeps_of(job)) == 2, 30), (job_state(job), sleeps_of(job))
    assert sorted(netns_of(p.pid) for p in sleeps_of(job)) == sorted(host_netns(h) for h in cluster["hosts"])
    started = time.monotonic()
    assert slurm("scancel", job).returncode == 0
    assert wait_until(lambda: not sleeps_of(job), testslurm.KILL_WAIT_S + 10), sleeps_of(job)
    assert wait_until(lambda: job_state(job) == "CANCELLED", 10), job_state(job)
    assert time.monotonic() - started < testslurm.KILL_WAIT_S + 10
    # its nodes idle again (completing until both stepds are gone), so the next job starts at once
    assert wait_until(lambda: [r["state"] for r in testslurm.status()] == ["idle", "idle"], 15), testslurm.status()


@needs_cluster
def test_sbatch_wait_runs_a_two_node_job(cluster):
    """sbatch --wait looks at the job 2 s after submitting it, then 8 s later: 2 s when the job starts at once
    (so after the test above, which takes slurmctld's first few seconds, when it starts no batch job)."""
    folder = cluster["folder"]
    out = folder / "nodes.txt"
    script = folder / "nodes.sh"
    script.write_text(f"#!/bin/sh\nsrun --ntasks-per-node=1 sh -c 'echo $SLURMD_NODENAME >> {out}'\n")
    proc = slurm("sbatch", "--wait", "-N2", f"--output={folder}/job-%j.out", str(script), cwd=folder, timeout=90)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert sorted(out.read_text().split()) == [h.name for h in cluster["hosts"]]


@needs_cluster
def test_down_leaves_no_process_and_is_safe_to_repeat(cluster):
    daemons = [p for p in testslurm.processes() if p.name() in testslurm.DAEMONS]
    assert sorted(p.name() for p in daemons) == ["munged", "slurmctld", "slurmd", "slurmd"]
    assert testslurm.down() is True
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in daemons)
    assert testslurm.processes() == [] and not testslurm.STATE_DIR.exists()
    assert testslurm.down() is False
    assert testslurm.status() == []
    proc = bench("testslurm", "status")
    assert proc.returncode == 1 and "no Slurm test cluster is up" in proc.stderr
