"""`bench testslurm`: a real Slurm cluster on the test hosts. The fast tests check the refusals and the
configuration anywhere; the others start the cluster on two test hosts and need root, slurm-wlm and munge (CI
installs them). They take down any test hosts and Slurm test cluster already on the machine, one module using
the test hosts at a time (the lock tests/test_testhosts.py takes too).

Then the suite under Slurm: a script `bench slurm-script` writes, submitted unchanged, runs every backend across
both nodes; a cancelled job's run is stored `interrupted` with nothing of it left, and a job at its time limit
`timeout` (the script asks Slurm for SIGTERM 45 s before the limit: a 1-minute job is warned 15 to 45 s in, as
slurmctld looks every 30 s, where waiting for the limit itself would take 60 to 90 s)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.testbed import hosts as testhosts
from bench.testbed import slurm as testslurm
from bench.testbed.hosts import TestHost
from bench.testbed.protocol import StateFile
from conftest import FAST, ROOT, assert_fails_in_one_line, bench, bench_in_process, held_test_hosts
from needs import needs


def needs_cluster(test):
    skip = needs("slurm")
    return pytest.mark.slow(skip(test))


# ---------------------------------------------------------------- refusals and configuration (no root needed)
@pytest.mark.parametrize(
    "args, fragments",
    [
        ([], ["required: ACTION"]),
        (["sideways"], ["invalid choice: 'sideways'"]),
        (["up", "2"], ["unrecognized arguments: 2"]),
    ],
)
def test_bad_input_is_refused(args, fragments):
    assert_fails_in_one_line(bench_in_process("testslurm", *args), 2, *fragments)


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_refused_when_not_root(monkeypatch, action):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert_fails_in_one_line(bench_in_process("testslurm", action), 2, "root", "sudo")


def test_refused_without_slurm_or_munge(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testhosts, "netns_problem", lambda: None)
    monkeypatch.setattr(testhosts, "tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(testslurm, "tool", lambda name: None if name in ("slurmctld", "munged") else f"/usr/bin/{name}")
    assert_fails_in_one_line(
        bench_in_process("testslurm", "up"), 2, "munged, slurmctld not found", "apt-get install -y slurm-wlm munge"
    )


def test_refused_without_test_hosts(monkeypatch, tmp_path):
    monkeypatch.setattr(testslurm, "unavailable_reason", lambda: None)
    monkeypatch.setattr(testhosts, "STATE", StateFile(tmp_path))  # no state file: no hosts were built
    monkeypatch.setattr(testslurm, "build", lambda *a: pytest.fail("built without test hosts"))
    assert_fails_in_one_line(bench_in_process("testslurm", "up"), 2, "no test hosts are up", "bench testhosts up 2")


def test_configuration_is_the_clusters_own():
    hosts = [TestHost("bench-th1", "10.213.7.11"), TestHost("bench-th2", "10.213.7.12")]
    conf = testslurm.slurm_conf(hosts, "box", "10.213.7.1", 4)
    lines = conf.splitlines()
    state = str(testslurm.STATE_DIR)
    assert "SlurmctldHost=box(10.213.7.1)" in lines
    assert f"AuthInfo=socket={state}/munge/munge.socket" in lines  # its own munged, never /run/munge
    assert "NodeName=bench-th2 NodeAddr=10.213.7.12 NodeHostname=bench-th2 CPUs=4 State=UNKNOWN" in lines
    assert "PartitionName=bench Nodes=bench-th1,bench-th2 Default=YES MaxTime=INFINITE State=UP" in lines
    for option in (
        # confined as a production partition confines: cgroups of the cores given, each task bound to its cores
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "TaskPluginParam=cores",
        "ReturnToService=2",
        "SlurmUser=root",
        "MpiDefault=none",
        f"SlurmctldPort={testslurm.CTLD_PORT}",
    ):
        assert option in lines
    paths = [
        line.split("=", 1)[1] for line in lines if line.split("=")[0].endswith(("Location", "Dir", "File", "Config"))
    ]
    assert len(paths) == 7 and all(p.startswith(state + "/") for p in paths), paths
    assert "/etc/" not in conf
    assert testslurm.environment() == {"SLURM_CONF": f"{state}/slurm.conf"}
    # slurmd mounts the controllers itself, in its namespace, under the state directory (`ip netns exec` leaves it
    # a /sys without /sys/fs/cgroup's mounts)
    assert testslurm.cgroup_conf(True).splitlines()[1:] == [
        "CgroupPlugin=cgroup/v1",
        f"CgroupMountpoint={state}/cgroup",
        "CgroupAutomount=yes",
        "ConstrainCores=yes",
    ]
    bare = testslurm.slurm_conf(hosts, "box", "10.213.7.1", 4, cgroups=False).splitlines()
    assert {"ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity", "TaskPluginParam=cores"} <= set(bare)
    assert testslurm.cgroup_conf(False).splitlines()[1:] == ["CgroupPlugin=cgroup/v1"]


HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


@pytest.mark.parametrize(
    "mounts, problem",
    [
        (HYBRID, None),
        (
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n",
            "no cgroup v1 hierarchy of cpuset and freezer",
        ),
        ("\n".join(line for line in HYBRID.splitlines() if "freezer" not in line), "no cgroup v1 hierarchy of freezer"),
    ],
)
def test_cgroups_are_used_where_this_machine_has_their_hierarchies(mounts, problem):
    found = testslurm.cgroup_problem(mounts)
    assert found == problem if problem is None else problem in found
    if problem is None:
        assert testslurm.cgroup_hierarchies(mounts) == [Path("/sys/fs/cgroup/cpuset"), Path("/sys/fs/cgroup/freezer")]


# ---------------------------------------------------------------- the suite's side of Slurm (anywhere)
def test_the_allocation_is_read_as_slurm_writes_it(monkeypatch):
    from bench.cluster import slurm

    assert slurm.tasks_per_node("2(x3),1") == [2, 2, 2, 1] and slurm.tasks_per_node("4") == [4]
    assert [slurm.limit_seconds(t) for t in ("00:10:00", "1-02:00:00", "05:00")] == [600, 93600, 300]
    monkeypatch.setattr(slurm, "_scontrol", lambda *args: "n1\nn2\n")
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}
    assert slurm.allocation(env) == {
        "name": "slurm",
        "job_id": "7",
        "nodelist": "n[1-2]",
        "hosts": [{"name": "n1", "slots": 2}, {"name": "n2", "slots": 2}],
        "gpus_per_node": None,
        "cpus_per_task": None,  # Slurm said nothing of the CPUs: srun's default
    }
    assert slurm.allocation({**env, "SLURM_JOB_CPUS_PER_NODE": "4(x2)"})["cpus_per_task"] == "4"
    assert slurm.allocation({**env, "SLURM_GPUS_ON_NODE": "4"})["gpus_per_node"] == 4
    with pytest.raises(slurm.UsageError, match="names 1 nodes, the node list 2"):
        slurm.allocation({**env, "SLURM_TASKS_PER_NODE": "2"})
    with pytest.raises(slurm.UsageError, match="not inside a Slurm allocation"):
        slurm.allocation({})


@pytest.mark.parametrize(
    "state, seconds_in, ending",
    [
        ("CANCELLED", 5, "interrupted"),  # scancel: whatever EndTime says
        ("TIMEOUT", 5, "timeout"),
        ("RUNNING", 20, "timeout"),  # the script's warning, 45 s before a 1-minute limit
        ("RUNNING", 1, "timeout"),  # ... which Slurm may send up to 60 s early: as the job starts
        ("RUNNING", 500, "timeout"),  # 100 s before a 10-minute limit: 55 s early
        ("RUNNING", 200, "interrupted"),  # a SIGTERM far from a 10-minute limit: a cancel Slurm has not shown yet
        ("SIGNALING", 20, "timeout"),  # the warning, seen while Slurm is still delivering it
        ("SIGNALING", 200, "interrupted"),  # `scancel --signal TERM` far from the limit
    ],
)
def test_a_sigterm_in_a_job_is_judged_from_its_state_and_limit(monkeypatch, state, seconds_in, ending):
    from bench.cluster import slurm

    monkeypatch.setattr(slurm, "_judged", {})  # what it judges stays in this test (run_specs stops on any judgement)

    limit = "00:01:00" if seconds_in < 60 else "00:10:00"
    start = time.time() - seconds_in
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    monkeypatch.setattr(
        slurm,
        "_scontrol",
        lambda *args: f"JobId=9 JobState={state} TimeLimit={limit} StartTime={stamp} EndTime={stamp}",
    )
    judged = slurm.job_ending({"SLURM_JOB_ID": "9"})
    assert judged[0] == ending and "Slurm job 9" in judged[1]
    assert slurm.job_ending({}) is None


@pytest.mark.parametrize(
    "text, seconds",
    [("30", 1800), ("1:30", 90), ("1:00:00", 3600), ("2-0", 172800), ("1-2:30", 95400), ("0-0:1:45", 105)],
)
def test_the_requested_time_reads_as_sbatch_reads_it(text, seconds):
    from bench.cluster import slurm

    assert slurm.requested_seconds(text) == seconds


def test_a_limit_too_short_for_the_warning_is_pointed_out(tmp_path):
    short = bench("slurm-script", "--time", "1", "--store", tmp_path / "b.sqlite", "--output", tmp_path / "a.sh")
    assert short.returncode == 0 and "may get it as it starts" in short.stderr
    enough = bench("slurm-script", "--time", "2", "--store", tmp_path / "b.sqlite", "--output", tmp_path / "b.sh")
    assert enough.returncode == 0 and "note:" not in enough.stderr


def test_a_sigterm_is_judged_by_the_remembered_limit_when_scontrol_cannot_answer(monkeypatch, capsys):
    from bench.cluster import slurm

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 70))
    monkeypatch.setattr(
        slurm, "_scontrol", lambda *args: f"JobId=8 JobState=RUNNING TimeLimit=00:02:00 StartTime={stamp}"
    )
    monkeypatch.setattr(slurm, "_known_limit", {})
    monkeypatch.setattr(slurm, "_judged", {})
    slurm.remember_limit({"SLURM_JOB_ID": "8"})

    def down(*args):
        raise slurm.UsageError("scontrol show job -o 8 failed: Socket timed out")

    monkeypatch.setattr(slurm, "_scontrol", down)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    assert slurm.job_ending({"SLURM_JOB_ID": "8"})[0] == "timeout"
    assert "judged by its time limit" in capsys.readouterr().err
    assert slurm.job_ending({"SLURM_JOB_ID": "9"}) is None  # nothing known of that job: said, not guessed
    assert "cannot tell how Slurm job 9 is ending" in capsys.readouterr().err


def test_srun_starts_one_task_per_node_with_its_own_command():
    from bench.cluster import slurm

    command = slurm.srun_command([("n1", ["torchrun", "a"]), ("n2", ["env", "X=1", "torchrun", "b"])])
    assert command[:5] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2"]
    assert command[-3:-1] == ["bench.cluster.slurm", "task"]
    assert json.loads(command[-1]) == {"n1": ["torchrun", "a"], "n2": ["env", "X=1", "torchrun", "b"]}


def test_a_generated_script_asks_for_what_was_given(tmp_path):
    proc = bench(
        "slurm-script",
        "--nodes",
        3,
        "--time",
        "1:00:00",
        "--partition",
        "gpu",
        "--account",
        "lab",
        "--gpus-per-node",
        8,
        "--store",
        tmp_path / "s" / "b.sqlite",
        "--",
        "--backend",
        "elastic",
        "--world-sizes",
        "6",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for line in (
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=8",  # a worker a GPU, each with a CPU of its own
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --time=1:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --signal=B:TERM@45",
        "#SBATCH --open-mode=append",
    ):
        assert line in lines
    # the job's output beside the store, in the folder the job makes (writing the script makes none)
    assert f"mkdir -p -- {tmp_path}/s" in lines and not (tmp_path / "s").exists()
    assert lines[-1].endswith(
        f"-m bench sweep --scheduler slurm --store {tmp_path}/s/b.sqlite --backend elastic --world-sizes 6"
    )
    script = tmp_path / "job.sh"
    proc = bench("slurm-script", "--store", tmp_path / "new" / "b.sqlite", "--output", script)
    assert proc.returncode == 0, proc.stderr
    assert script.read_text().startswith("#!/bin/bash\n") and os.access(script, os.X_OK)
    assert sorted(os.listdir(tmp_path)) == ["job.sh"]


def test_launcher_slurm_is_the_scheduler(tmp_path):
    """`--launcher slurm`, as people write it for a Slurm launch, asks for the allocation (here: there is none)."""
    from bench.cli import slurm_launcher_alias

    assert slurm_launcher_alias(["run", "--launcher", "slurm", "--nproc", "2"]) == [
        "run",
        "--scheduler",
        "slurm",
        "--nproc",
        "2",
    ]
    assert slurm_launcher_alias(["run", "--launcher=slurm"]) == ["run", "--scheduler", "slurm"]
    assert slurm_launcher_alias(["run", "--launcher", "mpi"]) == ["run", "--launcher", "mpi"]
    assert slurm_launcher_alias(["slurm-script", "--", "--launcher", "slurm"])[-2:] == ["--launcher", "slurm"]
    proc = bench_in_process("run", "--launcher", "slurm", "--store", tmp_path / "b.sqlite")
    assert proc.returncode == 2 and "not inside a Slurm allocation (no SLURM_JOB_ID)" in proc.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--", "--store", "x.sqlite"], "--store after --: the script sets it"),
        (["--", "--hosts", "a:1"], "--hosts after --"),
        (["--", "--windows", "x"], "--windows"),  # what the command's parser refuses (the rest waits for the job)
        (["--", "--nproc", "0"], "--nproc"),
    ],
)
def test_a_script_that_could_not_run_is_not_written(tmp_path, args, fragment):
    proc = bench_in_process("slurm-script", "--store", tmp_path / "s" / "b.sqlite", *args)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------- the real cluster (root)
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two test hosts and the cluster on them, taken down afterwards, also when a test fails."""
    with held_test_hosts(2) as hosts:
        try:
            testslurm.up()
            yield {"hosts": hosts, "folder": tmp_path_factory.mktemp("slurm")}
        finally:
            testslurm.down()


def slurm(*args, cwd=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **testslurm.environment()},
    )


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
            if (
                proc.cmdline()[-1:] == ["300"]
                and proc.name() == "sleep"
                and proc.environ().get("SLURM_JOB_ID") == job
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
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
    assert [line.split() for line in proc.stdout.splitlines()] == [
        [h.name, h.address, "idle"] for h in cluster["hosts"]
    ], proc.stdout


@needs_cluster
def test_srun_runs_a_task_on_each_host_in_its_namespace(cluster):
    """srun from the root namespace: each task runs in its host's network namespace (its address only), with its
    hostname, and its output comes back across the bridge."""
    proc = slurm(
        "srun",
        "-N2",
        "--ntasks-per-node=1",
        "sh",
        "-c",
        'echo "$SLURMD_NODENAME $(hostname) $(readlink /proc/self/ns/net) $(hostname -I)"',
        cwd=cluster["folder"],
    )
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
def test_a_task_is_confined_to_the_cores_slurm_gave_it(cluster):
    """As on a production partition: a task of one CPU is bound to it and, where this machine has the cgroup v1
    hierarchies (cgroup_problem: everywhere this suite runs so far), is in its step's cgroup (cpuset and freezer,
    under its node's slurm_<node>), so that asking the kernel for every CPU still leaves it the one it was given;
    with --cpus-per-task 2 it has both."""
    confined = testslurm.cgroup_problem() is None
    assert testslurm.STATE.read()["cgroups"] == ("cgroup/v1" if confined else testslurm.cgroup_problem())
    affinity = "import os; a = sorted(os.sched_getaffinity(0)); os.sched_setaffinity(0, range(os.cpu_count()))"
    affinity += "; print(len(a), len(os.sched_getaffinity(0)))"
    # the task's cpuset and freezer cgroups as one word ("none" where it has neither)
    cgroups = "grep -E ':(cpuset|freezer):' /proc/self/cgroup | cut -d: -f2,3 | sort | paste -sd,"
    command = f'cg=$({cgroups}); echo $SLURMD_NODENAME "${{cg:-none}}" $({sys.executable} -c "{affinity}")'
    for cpus in (1, 2):
        proc = slurm("srun", "-N2", "--ntasks-per-node=1", f"--cpus-per-task={cpus}", "sh", "-c", command)
        assert proc.returncode == 0, proc.stderr
        seen = sorted(line.split() for line in proc.stdout.splitlines())
        assert [words[0] for words in seen] == [h.name for h in cluster["hosts"]], proc.stdout
        for node, groups, bound, widened in seen:
            assert int(bound) == cpus, proc.stdout  # task/affinity: the task's cores as Slurm gave them
            if confined:
                cpuset, freezer = groups.split(",")
                assert cpuset.startswith(f"cpuset:/slurm_{node}/uid_0/job_"), proc.stdout
                assert cpuset.endswith("/step_0"), proc.stdout
                assert freezer == cpuset.replace("cpuset:", "freezer:"), proc.stdout
                assert int(widened) == cpus, proc.stdout  # the cpuset holds, whatever the task asks for


@needs_cluster
def test_each_nodes_workers_get_every_core_the_job_holds_there(cluster):
    """A job of 2 workers a node (a task, a CPU each) runs one torchrun agent a node through srun, which hands it
    both CPUs of its node: each worker may run on both (one each if srun gave the agent one, as the binding to cores
    does to a task that asks for nothing)."""
    script, store = job_script(cluster, "cores", "--backend", "elastic", "--oversubscribe", *FAST, tasks_per_node=2)
    assert "#SBATCH --ntasks-per-node=2" in script.read_text()
    proc = slurm("sbatch", "--wait", str(script), cwd=script.parent, timeout=240)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, *(p.read_text() for p in script.parent.glob("slurm-*")))
    (record,) = records_of(store)
    assert record.status == "ok", record.error
    assert record.command[:6] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--nodelist=bench-th1,bench-th2",
        "--cpus-per-task=2",
    ]
    assert sorted(row.host for row in record.rank_map) == sorted(2 * [h.name for h in cluster["hosts"]])
    assert all(len(row.cpus) == 2 for row in record.rank_map), [(row.host, row.cpus) for row in record.rank_map]
    assert_nothing_of_the_runs_left([record])


# ---------------------------------------------------------------- the suite under Slurm
def job_script(cluster, name, *args, time_limit="10", verb="run", tasks_per_node=1, written_from=None):
    """A script from `bench slurm-script` for 2 nodes x `tasks_per_node` tasks into its own store in folder `name`,
    written by bench run in folder `written_from` (the checkout when None): (script, store)."""
    folder = cluster["folder"] / name
    folder.mkdir()
    store = folder / "bench.sqlite"
    cwd = None
    if written_from is not None:
        cwd = cluster["folder"] / written_from
        cwd.mkdir()
    proc = bench(
        "slurm-script",
        "--nodes",
        2,
        "--nproc-per-node",
        tasks_per_node,
        "--time",
        time_limit,
        "--verb",
        verb,
        "--store",
        store,
        "--output",
        folder / "job.sh",
        "--",
        "--workload",
        "mnist_mlp",
        "--threads",
        1,
        *args,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    return folder / "job.sh", store


def records_of(store):
    from bench.core.store import Store

    return Store(store).records()


def assert_nothing_of_the_runs_left(records):
    from conftest import processes_of_run

    for record in records:
        assert processes_of_run(record.run_id) == [], record.run_id


# Folders named to run a command where a shell reads them unquoted: the first was run on the other node when
# horovodrun wrote the folder it ran in into the remote worker's shell line (`cd FOLDER > /dev/null 2>&1 ; ...`).
CANARY = "PWNED-by-a-slurm-job"
HOSTILE_WORK, HOSTILE_STORE = f"x;cd;touch {CANARY};y", f"My bob's; $(touch {CANARY}) `touch {CANARY}2` x"


@needs_cluster
def test_a_generated_script_runs_every_backend_across_the_allocation(cluster):
    """The script `bench slurm-script` writes from a folder named to run a command, for a store in another such folder,
    submitted unchanged: bash reads it as written, every backend's run spans both nodes (Horovod's: horovodrun on the
    first, its worker on the second over ssh) and is stored ok, and nothing runs from either name."""
    script, store = job_script(
        cluster,
        HOSTILE_STORE,
        "--backend",
        "elastic,horovod,ps",
        "--world-sizes",
        2,
        "--repeats",
        1,
        "--no-comm",
        "--oversubscribe",
        *FAST,
        verb="sweep",
        written_from=HOSTILE_WORK,
    )
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    proc = slurm("sbatch", "--wait", str(script), cwd=script.parent, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, *(p.read_text() for p in script.parent.glob("slurm-*")))
    job = proc.stdout.split()[-1]
    records = records_of(store)
    assert sorted(r.spec.backend for r in records) == ["elastic", "horovod", "ps", "single"]
    names = [h.name for h in cluster["hosts"]]
    for record in records:
        assert record.status == "ok", record.error
        assert record.spec.scheduler == {"name": "slurm", "job_id": job, "nodelist": "bench-th[1-2]"}
        assert [h["name"] for h in record.spec.hosts] == names
        if record.spec.backend != "single":
            assert {row.host for row in record.rank_map} == set(names)
    commands = {r.spec.backend: r.command for r in records}
    assert commands["elastic"][0] == "srun" and commands["ps"][0] == "srun"  # one torchrun agent per node
    # the job runs in the hostile folder, which horovodrun writes unquoted into its ssh line: it runs in the checkout
    assert commands["horovod"][:2] == ["env", f"--chdir={ROOT}"], commands["horovod"]
    assert commands["horovod"][2].endswith("horovodrun") and "bench-th1:1,bench-th2:1" in commands["horovod"]
    assert_nothing_of_the_runs_left(records)
    home = Path(os.path.expanduser("~"))  # where `cd;touch` puts its file: an ssh login's folder too
    assert [p for folder in (cluster["folder"], home) for p in folder.rglob(f"{CANARY}*")] == []


@needs_cluster
def test_a_cancelled_job_leaves_an_interrupted_run_and_nothing_running(cluster):
    script, store = job_script(cluster, "cancel", "--backend", "elastic", "--windows", 1000)
    job = submit(script.parent, str(script))
    assert wait_until(lambda: any((store.parent / "runs").glob("*/launch.json")), 60), job_state(job)
    time.sleep(3)  # the ranks running on both nodes
    assert slurm("scancel", job).returncode == 0
    assert wait_until(
        lambda: job_state(job) == "CANCELLED" and records_of(store) if store.exists() else False,
        testslurm.KILL_WAIT_S + 10,
    )
    (record,) = records_of(store)
    assert record.status == "interrupted" and f"Slurm job {job} was cancelled" in record.error.message
    assert_nothing_of_the_runs_left([record])


@needs_cluster
@pytest.mark.claims_apart
def test_a_job_at_its_time_limit_leaves_a_timeout_run(cluster):
    """The script asks for SIGTERM 45 s before the limit, which Slurm may send up to 60 s early: with a 2-minute
    limit it comes 15 to 75 s into the job, after the run has started (a few seconds in). The run waits for it idle,
    its rank 1 hung from step 3 (its deadline far past the limit), so that it claims its cores apart and the other
    tests' runs go on meanwhile: what is checked is what the limit leaves, not what the run did until then. Elastic's:
    its survivor waits in gloo asleep, where Horovod's background loop keeps a core busy."""
    script, store = job_script(
        cluster, "limit", "--backend", "elastic", "--inject", "hang:1:3", "--timeout", 600, time_limit="2"
    )
    proc = slurm("sbatch", "--wait", str(script), cwd=script.parent, timeout=200)
    output = "".join(p.read_text() for p in script.parent.glob("slurm-*.out"))
    assert store.exists(), (proc.stdout, proc.stderr, output)
    (record,) = records_of(store)
    assert record.status == "timeout", (record.error, output)
    assert "reached its time limit (00:02:00)" in record.error.message
    assert_nothing_of_the_runs_left([record])


@needs_cluster
def test_down_leaves_no_process_and_is_safe_to_repeat(cluster):
    daemons = [p for p in testslurm.processes() if p.name() in testslurm.DAEMONS]
    assert sorted(p.name() for p in daemons) == ["munged", "slurmctld", "slurmd", "slurmd"]
    assert testslurm.down() is True
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in daemons)
    assert testslurm.processes() == [] and not testslurm.STATE_DIR.exists()
    assert testslurm.cgroup_leftovers() == []  # the nodes' slurm_<node> cgroups removed too
    assert testslurm.down() is False
    assert testslurm.status() == []
    proc = bench("testslurm", "status")
    assert proc.returncode == 1 and "no Slurm test cluster is up" in proc.stderr
