"""Paths and names that reach a shell reach it as one quoted word each, or are refused before anything runs.

Horovod runs its host discovery script through a shell (a command line: horovod.runner.elastic.discovery), and each
remote worker through ssh with the folder horovodrun runs in written unquoted into the line
(horovod.runner.gloo_run): the store's folder (which holds a run's directory and bench's discovery script), a
cluster's own script, and the folder bench runs in reach those lines. A Slurm job's node names reach ssh's argv and
horovodrun's hosts, so each is checked as a --hosts name is. Every hostile folder here holds commands that would
make a file named CANARY (or CANARY2) if a shell ran them. A real Slurm job written from such folders runs every
backend across the test cluster's nodes in tests/test_testslurm.py."""

from __future__ import annotations

import json
import os
import pwd
import shlex
from pathlib import Path

import pytest

from bench.cluster.hosts import planned_check
from bench.core.dryrun import plan_only
from bench.core.hostlist import Host
from bench.core.registry import get_backend
from bench.core.rundir import RunDir
from bench.tasks.fault.spec import FAULT_DEFAULTS
from bench.tasks.fault.spec import build_spec as build_fault_spec
from conftest import ROOT, SHORT, assert_nothing_left, assert_one_line_error, bench, bench_in_process
from needs import needs

CANARY = "PWNED-by-a-path"
# folders named to break a shell line or run a command in it; none holds "/", as no folder's name can
HOSTILE = [
    f"My bob's; $(touch {CANARY}) `touch {CANARY}2` x",
    f"x;cd;touch {CANARY};y",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"x && touch {CANARY} #",
    f"x|touch {CANARY}",
    "a b",
    "it's",
    '"',
    "\\",
    "$HOME",
]
HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)  # where `cd;touch` puts its file: an ssh login's folder too


def canaries(*folders: Path) -> list[Path]:
    """Every CANARY file under `folders`, at any depth, and in the home folder and the checkout."""
    found = [p for folder in folders for p in folder.rglob(f"{CANARY}*")]
    return found + [p for folder in (HOME, ROOT) for p in folder.glob(f"{CANARY}*")]


@pytest.fixture(autouse=True)
def no_canary_left():
    """A canary a failing case made outside its own folders is removed once the case has looked for it, so that the
    next case finds none of it."""
    yield
    for path in canaries():
        path.unlink()


@pytest.fixture
def hostile_folder(tmp_path, request) -> Path:
    folder = tmp_path / request.param
    folder.mkdir()
    return folder


# ---------------------------------------------------------------- Horovod elastic's discovery script
def kill_spec():
    """A Horovod fault run of 2 workers on this machine, as `bench fault --backend horovod` builds it."""
    return build_fault_spec(
        backend="horovod", workload="mnist_mlp", world_size=2, fault="kill", rank=1, at_step=25,
        max_restarts=3, checkpoint_every=10, total_steps=60,
        comm_timeout=FAULT_DEFAULTS["comm_timeout"], recovery_timeout=FAULT_DEFAULTS["recovery_timeout"],
    )  # fmt: skip


def cluster_script_spec(script: Path):
    """A Horovod drop-host run across hosts a and b reading the cluster's discovery script (planned: no host asked)."""
    hosts = [Host("a", 1), Host("b", 1)]
    with plan_only():
        cluster = {**planned_check(hosts, "eth0", None).cluster(hosts), "link": None, "scheduler": None}
        return build_fault_spec(
            backend="horovod", workload="mnist_mlp", world_size=2, fault="drop-host", host="b", cluster=cluster,
            rank=0, at_step=5, max_restarts=3, checkpoint_every=2, total_steps=None,
            comm_timeout=FAULT_DEFAULTS["comm_timeout"], recovery_timeout=1.0,
            backend_options={"hvd_discovery_script": str(script)},
        )  # fmt: skip


def horovods_discovery(command: list[str]) -> dict[str, int]:
    """What horovodrun's own discovery makes of the script the command hands it (--host-discovery-script: run as
    horovodrun runs it, through a shell), with --slots where the command gives them."""
    from horovod.runner.elastic.discovery import HostDiscoveryScript

    script = command[command.index("--host-discovery-script") + 1]
    slots = int(command[command.index("--slots") + 1]) if "--slots" in command else None
    return HostDiscoveryScript(script, slots).find_available_hosts_and_slots()


@needs("backend:horovod")
@pytest.mark.parametrize("hostile_folder", HOSTILE, indirect=True)
def test_horovod_reads_benchs_discovery_script_in_a_hostile_store_folder(hostile_folder, tmp_path, monkeypatch):
    """The run directory in the store's folder: horovodrun's discovery reads the two "hosts" bench wrote, and
    nothing in the folder's name runs."""
    monkeypatch.chdir(tmp_path)
    run_dir = RunDir(hostile_folder / "runs" / "RUN").create()
    command, _, _ = get_backend("horovod").elastic.launch(kill_spec(), kill_spec().fault, ["rank"], "RUN", run_dir)
    assert horovods_discovery(command) == {"localhost": 1, "127.0.0.1": 1}
    assert canaries(tmp_path) == []


@needs("backend:horovod")
@pytest.mark.parametrize("hostile_folder", HOSTILE, indirect=True)
def test_horovod_runs_the_clusters_discovery_script_from_a_hostile_folder(hostile_folder, tmp_path, monkeypatch):
    """--hvd-discovery-script names a file: horovodrun runs that file, as bench itself does (discovered), wherever
    it is."""
    monkeypatch.chdir(tmp_path)
    script = hostile_folder / "discover_hosts.sh"
    script.write_text("#!/bin/sh\necho a\necho b\n")
    script.chmod(0o755)
    spec = cluster_script_spec(script)
    run_dir = RunDir(tmp_path / "run").create()
    with plan_only():
        command, _, info = get_backend("horovod").elastic.launch(spec, spec.fault, ["rank"], "RUN", run_dir)
    assert horovods_discovery(command) == {"a": 1, "b": 1}
    assert get_backend("horovod").elastic.discovered(spec, 10) == ["a", "b"]
    assert info["discovery_script"] == str(script)
    assert canaries(tmp_path) == []


@needs("backend:horovod")
@pytest.mark.parametrize("hostile_folder", HOSTILE[:2], indirect=True)
def test_the_clusters_script_named_from_a_hostile_folder_is_read_where_horovodrun_runs(hostile_folder, monkeypatch):
    """Run from such a folder, horovodrun (which reaches the hosts over ssh) starts in the checkout, and still runs
    the script the option named from the folder bench ran in; bench's own reading of it agrees."""
    monkeypatch.chdir(hostile_folder)
    Path("discover_hosts.sh").write_text("#!/bin/sh\necho a\necho b\n")
    Path("discover_hosts.sh").chmod(0o755)
    spec = cluster_script_spec(Path("discover_hosts.sh"))
    run_dir = RunDir(hostile_folder / "run").create()
    with plan_only():
        command, _, _ = get_backend("horovod").elastic.launch(spec, spec.fault, ["rank"], "RUN", run_dir)
    assert command[:2] == ["env", f"--chdir={ROOT}"]
    assert get_backend("horovod").elastic.discovered(spec, 10) == ["a", "b"]
    monkeypatch.chdir(ROOT)  # where horovodrun runs
    assert horovods_discovery(command) == {"a": 1, "b": 1}
    assert canaries(hostile_folder.parent) == []


@pytest.mark.slow
@needs("backend:horovod")
def test_a_horovod_fault_run_with_its_store_in_a_hostile_folder_recovers(tmp_path):
    """A real `bench fault --backend horovod` kill run whose store is in a folder named to break a shell line and
    run commands in it: recovered and stored ok, and nothing ran."""
    folder = tmp_path / HOSTILE[0]
    store, work = folder / "bench.sqlite", tmp_path / "work"
    work.mkdir()
    proc = bench("fault", "--store", store, "--backend", "horovod", "--nproc", 2, "--kill-rank", 1, *SHORT, "--json",
                 cwd=work, timeout=400)  # fmt: skip
    record = json.loads(proc.stdout)
    assert proc.returncode == 0 and record["status"] == "ok", (record["error"], proc.stderr[-2000:])
    f = record["metrics"]
    assert f["fault"]["delivered"] and f["resets"] == 1 and f["steps_completed"] == 60
    assert Path(record["run_dir"]).parent.parent == folder
    assert canaries(tmp_path) == []
    assert_nothing_left(record)


# ---------------------------------------------------------------- the folder horovodrun runs in
SLURM_2X1 = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"}


@needs("backend:horovod")
@pytest.mark.parametrize(
    "verb",
    [
        ["run", "--backend", "horovod", "--nproc", 2],
        ["fault", "--backend", "horovod", "--nproc", 2, "--drop-host", "node2"],
    ],
)
@pytest.mark.parametrize("hostile_folder", HOSTILE[:2], indirect=True)
def test_horovodrun_in_a_slurm_job_runs_in_a_folder_a_shell_reads_as_written(
    verb, hostile_folder, tmp_path, monkeypatch
):
    """Inside an allocation horovodrun runs where bench runs, and Horovod writes that folder unquoted into each remote
    worker's shell line: from a folder whose name a shell would not read as itself, the plan starts horovodrun in the
    checkout."""
    monkeypatch.chdir(hostile_folder)
    for name, value in SLURM_2X1.items():
        monkeypatch.setenv(name, value)
    proc = bench_in_process(*verb, "--scheduler", "slurm", "--dry-run", "--store", tmp_path / "s.sqlite")
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("  on this machine")]
    command = shlex.split(line.split(": ", 1)[1])
    start = next(i for i, arg in enumerate(command) if arg.endswith("horovodrun"))
    assert command[:start] == ["env", f"--chdir={ROOT}"] and shlex.quote(str(ROOT)) == str(ROOT)


# ---------------------------------------------------------------- Slurm's node names
BAD_NODES = ["-oProxyCommand=touch x", f"a;touch {CANARY}", "n1,$(touch x)", "n[1-2],-J"]


@pytest.mark.parametrize("nodes", BAD_NODES)
def test_a_slurm_node_that_is_not_a_host_name_is_refused_before_a_plan(nodes, nothing_runs, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", nodes)
    line = assert_one_line_error(
        bench_in_process("run", "--backend", "horovod", "--scheduler", "slurm", "--dry-run"),
        "SLURM_JOB_NODELIST=",
        "is not a host name or address",
    )
    assert nodes.split(",")[-1] in line.split(": ", 1)[1], line  # the name, after the variable's value


@needs("sbatch")  # slurm-client's scontrol, as sbatch is: its `show hostnames` needs no cluster
@pytest.mark.parametrize("nodes", BAD_NODES)
def test_a_slurm_node_that_is_not_a_host_name_is_refused_before_a_run(nodes, nothing_runs, monkeypatch, tmp_path):
    """A run reads the names as Slurm's scontrol expands the list (under a configuration of its own, which names no
    controller it asks): each is refused as a --hosts name would be, before any host is contacted."""
    conf = tmp_path.parent / f"{tmp_path.name}-slurm.conf"  # (nothing_runs' folder stays as it was)
    conf.write_text("ClusterName=bench-names-only\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", nodes)
    monkeypatch.delenv("SLURM_TASKS_PER_NODE", raising=False)
    assert_one_line_error(
        bench_in_process("run", "--backend", "horovod", "--scheduler", "slurm"),
        "SLURM_JOB_NODELIST=",
        "is not a host name or address",
    )
    assert canaries(tmp_path) == []


def test_a_slurm_node_list_read_from_slurm_nodelist_names_that_variable(nothing_runs, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.setenv("SLURM_NODELIST", "n1,x;y")
    assert_one_line_error(
        bench_in_process("run", "--backend", "elastic", "--scheduler", "slurm", "--dry-run"),
        "SLURM_NODELIST=",
        "'x;y' is not a host name or address",
    )
