"""GPU runs across hosts, in a Slurm allocation and on a Ray cluster, as `--dry-run` plans them: the contract a CPU
machine can check. Every command line asserted is the one the backend's launcher builds for the same run (its
builder called here), so the plan cannot say one thing and the launch do another. Nothing is launched: no host
named here exists, and a plan that tried to reach one would fail."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from bench.backends.ray.launcher import scaling
from bench.cluster.fanout import fanout_steps
from bench.cluster.hosts import PROBE, gpu_answers, planned_check
from bench.cluster.slurm import expand_nodelist, gpus_per_node, srun_steps
from bench.core.dryrun import plan_only
from bench.core.errors import UsageError
from bench.core.hostlist import Host
from bench.core.registry import get_backend
from bench.core.rundir import RunDir
from bench.harness.plan import RUN_DIR, RUN_ID
from bench.harness.runner import rank_command_of
from bench.tasks.train import build_spec
from conftest import ROOT, assert_one_line_error, bench_in_process

TWO_HOSTS = ["--hosts", "a:8,b:8", "--gpus", "8"]
SLURM_2X4 = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_GPUS_PER_NODE": "4",
}


def launcher_command(backend: str, world_size: int, hosts: list[Host] | None, scheduler=None, **options) -> list:
    """What the backend's launcher builds for a GPU training run of the MLP (the plan's placeholders: RUN_DIR,
    RUN_ID; under plan_only, so that the rendezvous port is named, not asked for)."""
    with plan_only():
        cluster = None
        if hosts:
            cluster = {
                **planned_check(hosts, None, hosts[0].slots).cluster(hosts),
                "link": None,
                "scheduler": scheduler,
            }
        spec = build_spec(
            backend=backend,
            workload="mnist_mlp",
            world_size=world_size,
            device="cuda",
            cluster=cluster,
            backend_options=options,
        )
        return get_backend(backend).launcher.command(spec, rank_command_of(spec, RunDir(RUN_DIR)), RUN_ID), spec


def planned(*args, tmp_path) -> list[str]:
    store = tmp_path / "never.sqlite"
    proc = bench_in_process(*args, "--dry-run", "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert not store.exists() and not (tmp_path / "runs").exists()  # a plan makes no store and no run folder
    return proc.stdout.splitlines()


@pytest.mark.parametrize("backend", ["elastic", "ps"])
def test_torchrun_backends_plan_one_agent_per_host_of_8_gpus(backend, tmp_path):
    lines = planned("run", "--backend", backend, *TWO_HOSTS, tmp_path=tmp_path)
    command, spec = launcher_command(backend, 16, [Host("a", 8), Host("b", 8)])
    steps = fanout_steps(command)
    assert [h for h, _ in steps] == ["a", "b"]
    for host, argv in steps:
        assert f"  on {host}: {shlex.join(argv)}" in lines
        assert "--rdzv-endpoint a:FREE_PORT" in shlex.join(argv) and f"--local-addr {host}" in shlex.join(argv)
        assert "--log-dir /dev/null" in shlex.join(argv)  # no torchelastic_* folder left on the host
    assert lines[0].startswith(f"launch 1/1: {backend} mnist_mlp: world size 16 on cuda")
    # every transport on the interface the host check finds (named, not asked for, in a plan)
    assert {"  env NCCL_SOCKET_IFNAME=IFACE", "  env GLOO_SOCKET_IFNAME=IFACE"} <= set(lines)
    if backend == "elastic":
        assert all("--nnodes 2 --nproc-per-node 8 " in shlex.join(argv) for _, argv in steps)
        assert any("cuda:LOCAL_RANK" in line and "NCCL carries" in line for line in lines)
    else:  # a server per host beside its 8 workers, and the exchange through host memory over gloo
        assert all(argv[:2] == ["env", "BENCH_PS_SERVERS_HERE=1"] for _, argv in steps)
        assert all("--nproc-per-node 9 " in shlex.join(argv) for _, argv in steps)
        assert any("stage gradients and parameters through host memory" in line for line in lines)
        assert not any("NCCL carries" in line for line in lines)


@pytest.mark.parametrize("launcher", ["gloo", "mpirun"])
def test_horovod_plans_horovodrun_or_mpirun_on_the_first_host_of_two_8_gpu_hosts(launcher, tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")  # a user's NCCL setting: every rank on every host must get it
    lines = planned("run", "--backend", "horovod", "--hvd-launcher", launcher, *TWO_HOSTS, tmp_path=tmp_path)
    command, _ = launcher_command("horovod", 16, [Host("a", 8), Host("b", 8)], launcher=launcher)
    [(host, argv)] = fanout_steps(command)
    assert host == "a" and f"  on a: {shlex.join(argv)}" in lines
    if launcher == "gloo":
        assert argv[1:6] == ["--gloo", "-np", "16", "-H", "a:8,b:8"]
    else:
        assert argv[1:5] == ["-np", "16", "-H", "a:8,b:8"]
        assert "-x NCCL_IB_HCA" in shlex.join(argv)  # mpirun passes only what -x names to remote ranks
    assert "  env NCCL_IB_HCA=mlx5_0" in lines
    assert any(
        "cuda:hvd.local_rank()" in line and "NCCL where this Horovod was built with it" in line for line in lines
    )


def test_a_slurm_allocation_of_2_nodes_x_4_gpus_plans_srun_and_horovodrun(tmp_path, monkeypatch):
    for name, value in SLURM_2X4.items():
        monkeypatch.setenv(name, value)
    lines = planned("run", "--backend", "elastic,horovod", tmp_path=tmp_path)
    scheduler = {"name": "slurm", "job_id": "4242", "nodelist": "gpu[01-02]"}
    hosts = [Host("gpu01", 4), Host("gpu02", 4)]
    elastic, _ = launcher_command("elastic", 8, hosts, scheduler)
    assert elastic[:5] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=gpu01,gpu02"]
    for node, argv in srun_steps(elastic):
        assert f"  on {node}: {shlex.join(argv)}" in lines
        assert "--nproc-per-node 4 " in shlex.join(argv)
    horovod, _ = launcher_command("horovod", 8, hosts, scheduler)
    assert horovod[1:6] == ["--gloo", "-np", "8", "-H", "gpu01:4,gpu02:4"]
    assert f"  on this machine (the batch script's node, the allocation's first): {shlex.join(horovod)}" in lines
    assert sum(line.startswith("launch ") and "world size 8 on cuda" in line for line in lines) == 2


def test_slurm_script_with_gpus_per_node_runs_gpu_work_and_plans_it(tmp_path):
    out = tmp_path / "job.sh"
    store = tmp_path / "cluster.sqlite"
    proc = bench_in_process(
        "slurm-script", "--nodes", "2", "--gpus-per-node", "4", "--verb", "run", "--store", store, "-o", out,
        "--dry-run", "--", "--backend", "elastic",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not out.exists() and not store.exists()
    script = proc.stdout.split("# the job's plan")[0]
    assert "#SBATCH --gpus-per-node=4\n" in script
    assert script.rstrip().splitlines()[-1].endswith("--backend elastic --gpus 4")  # the job runs on the GPUs
    plan = proc.stdout.split("# the job's plan")[1]
    assert "world size 8 on cuda" in plan and "--nodelist=node1,node2" in plan


def test_a_ray_cluster_plan_asks_ray_for_a_gpu_per_worker(tmp_path):
    lines = planned("run", "--backend", "ray", "--ray-address", "10.0.0.1:6379", "--gpus", "16", tmp_path=tmp_path)
    command, spec = launcher_command("ray", 16, None, ray_address="10.0.0.1:6379")
    assert f"  on this machine: {shlex.join(command)}" in lines
    assert not any("this machine's GPUs" in line for line in lines)  # the cluster's GPUs, not this machine's
    config = scaling(spec)
    assert config == {"num_workers": 16, "use_gpu": True, "resources_per_worker": {"CPU": spec.threads, "GPU": 1}}
    assert any(
        f"ScalingConfig(num_workers=16, use_gpu=True, resources_per_worker={config['resources_per_worker']})" in line
        and "10.0.0.1:6379" in line
        for line in lines
    )


def test_sweep_allreduce_and_fault_plan_every_launch(tmp_path):
    lines = planned(
        "sweep", "--backend", "elastic,horovod", "--workload", "mnist_mlp", "--world-sizes", "16", "--no-comm",
        "--no-faults", "--no-plain-loop", "--repeats", "1", "--hosts", "a:8,b:8", "--max-gpus", "8", tmp_path=tmp_path,
    )  # fmt: skip
    assert [line.split(":")[0] for line in lines if line.startswith("launch ")] == ["launch 1/2", "launch 2/2"]
    lines = planned("allreduce", "--backend", "elastic", *TWO_HOSTS, tmp_path=tmp_path)
    assert lines[0].startswith("launch 1/1: elastic communication sweep") and "on cuda" in lines[0]
    lines = planned("fault", "--backend", "elastic", "--hosts", "a:2,b:2", "--kill-host", "b", tmp_path=tmp_path)
    assert any("bench.backends.shared.torchrun_events" in line and line.startswith("  on b:") for line in lines)


def test_the_host_check_reads_a_hosts_gpus_and_refuses_one_with_fewer(tmp_path):
    # the probe as a host runs it (here: this machine's torch, which has no CUDA device)
    proc = subprocess.run([sys.executable, "-c", PROBE, "", "", "gpus"], capture_output=True, text=True, timeout=60)
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["gpus"] == 0 and "cuda" in answer and "nccl" in answer
    with pytest.raises(UsageError, match=r"^host gpu7 has no CUDA device.*--gpus 8"):
        gpu_answers({"gpu7": answer}, 8)
    four = {**answer, "gpus": 4, "cuda": "12.4", "nccl": "2.21.5"}
    with pytest.raises(UsageError, match=r"^host b has 4 CUDA device\(s\), fewer than --gpus 8; give --gpus 4"):
        gpu_answers({"a": {**four, "gpus": 8}, "b": four}, 8)
    assert gpu_answers({"a": four}, 4) == {"a": {"gpus": 4, "cuda": "12.4", "nccl": "2.21.5"}}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", *TWO_HOSTS, "--nproc", "2", "--dry-run"], "give either --nproc"),
        (["report", "--dry-run"], "--dry-run"),
        (["converge", "--dry-run"], "--dry-run"),
        (["sweep", "--resume", "--dry-run"], "--dry-run"),
    ],
)
def test_what_cannot_be_planned_is_refused_in_one_line(args, fragment):
    assert_one_line_error(bench_in_process(*args), fragment)


def test_ray_across_ssh_hosts_is_refused_after_the_hosts_are_named():
    # Ray spans hosts as a Ray cluster (--ray-address), not over ssh; the hosts' lines come first, as in a run
    proc = bench_in_process("run", "--backend", "ray", *TWO_HOSTS, "--dry-run")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert (
        proc.stderr.splitlines()[-1]
        == "bench run: error: backend ray runs on one host only; give one host (across nodes it runs on a Ray "
        "cluster: --ray-address HOST:PORT)"
    )  # not --nproc, which a --gpus run cannot take
    proc = bench_in_process("run", "--backend", "ray", "--hosts", "a:2,b:2", "--nproc", "3", "--dry-run")
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith(
        "bench run: error: backend ray runs on one host only; give --nproc 2 or fewer, or one host"
    )


def test_slurm_gpu_counts_and_node_lists_read_without_scontrol():
    assert gpus_per_node({"SLURM_GPUS_ON_NODE": "4"}) == 4
    assert gpus_per_node({"SLURM_GPUS_PER_NODE": "a100:8"}) == 8
    assert gpus_per_node({"SLURM_JOB_GRES": "gpu:h100:2"}) == 2
    assert gpus_per_node({"SLURM_JOB_GRES": "tmpdisk:100"}) is None
    assert expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_nodelist("r[1-2]n[01-02]-ib") == ["r1n01-ib", "r1n02-ib", "r2n01-ib", "r2n02-ib"]
    for bad in ("gpu[a-b]", "gpu[1-2", "gpu]"):
        with pytest.raises(UsageError, match="SLURM_JOB_NODELIST"):
            expand_nodelist(bad)


def test_one_8_gpu_node_plans_the_readme_command_without_counting_this_machines_gpus(tmp_path):
    lines = planned("run", "--backend", "elastic,horovod", "--gpus", "8", tmp_path=tmp_path)
    for backend in ("elastic", "horovod"):
        command, _ = launcher_command(backend, 8, None)
        assert f"  on this machine: {shlex.join(command)}" in lines
    assert [line.split(":")[0] for line in lines if line.startswith("launch ")] == ["launch 1/2", "launch 2/2"]
    assert "  this machine's GPUs: not checked: dry run (a run refuses more than torch.cuda.device_count())" in lines


def test_a_plan_made_where_horovod_is_not_installed_names_horovodrun(tmp_path, monkeypatch):
    """A GPU machine without Horovod still plans the command that a machine with it runs, naming horovodrun as that
    machine's PATH finds it (before, the plan ended in an internal error). `--hvd-launcher mpirun` without mpirun is
    planned (the hosts' mpirun, Open MPI's form), and a run is refused in one line."""
    import bench.backends.horovod.launcher

    monkeypatch.setattr(bench.backends.horovod.launcher, "horovodrun_path", lambda: None)
    lines = planned("run", "--backend", "elastic,horovod", "--gpus", "8", tmp_path=tmp_path)
    here = "  on this machine: "  # a launch's command line (not the CPU binding's "cores on this machine: ")
    commands = [shlex.split(line.removeprefix(here)) for line in lines if line.startswith(here)]
    assert len(commands) == 2 and commands[1][:6] == ["horovodrun", "--gloo", "-np", "8", "-H", "localhost:8"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun here either
    lines = planned("run", "--backend", "horovod", "--hvd-launcher", "mpirun", "--gpus", "8", tmp_path=tmp_path)
    [command] = [shlex.split(line.removeprefix(here)) for line in lines if line.startswith(here)]
    assert command[:5] == ["mpirun", "-np", "8", "-H", "localhost:8"] and "btl_tcp_if_include" not in command
    store = tmp_path / "run.sqlite"
    proc = bench_in_process("run", "--backend", "horovod", "--hvd-launcher", "mpirun", "--nproc", "2", "--store", store)
    assert_one_line_error(proc, "--hvd-launcher mpirun needs mpirun", "apt-get install openmpi-bin")
    assert not store.exists()


def store_host_as_torch_reads_it(argv: list[str]) -> bool | None:
    """Whether torchrun, given a planned agent's arguments, hosts the c10d store: torch's own parser and rendezvous
    parameters read them (None: torch left to guess from the endpoint and this machine's hostname)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config
    from torch.distributed.run import parse_args

    # bench's agent (torchrun's main, what follows its name), or its wrapper that keeps the agent's events and hands
    # torchrun what follows --
    if "bench.backends.shared.torchrun_events" in argv:
        first = argv.index("--")
    else:
        first = argv.index("bench.backends.shared.torchrun_agent")
    args = parse_args(argv[first + 1 :])
    conf = _parse_rendezvous_config(args.rdzv_conf)
    params = RendezvousParameters(args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, 1, 2, **conf)
    return params.get_as_bool("is_host")


def test_only_the_first_hosts_agent_hosts_the_rendezvous_store_whatever_the_hosts_are_called(tmp_path):
    """torch decides which agent hosts the c10d store by matching the endpoint against its hostname and that name's
    addresses unless told: a first host named by a secondary NIC's address or an alias had no agent host it, and the
    rendezvous timed out. Each agent is told (is_host), in the one --rdzv-conf torchrun keeps."""
    lines = planned("run", "--backend", "elastic", "--hosts", "10.0.0.1:8,alias-b:8", "--gpus", "8", tmp_path=tmp_path)
    command, _ = launcher_command("elastic", 16, [Host("10.0.0.1", 8), Host("alias-b", 8)])
    steps = fanout_steps(command)
    assert all(f"  on {host}: {shlex.join(argv)}" in lines for host, argv in steps)
    assert [(host, store_host_as_torch_reads_it(argv)) for host, argv in steps] == [
        ("10.0.0.1", True),
        ("alias-b", False),
    ]
    # a fault run's agents keep their node range's short last call beside it
    lines = planned("fault", "--backend", "elastic", "--hosts", "10.0.0.1:2,alias-b:2", "--kill-host", "alias-b",
                    tmp_path=tmp_path)  # fmt: skip
    hosts = ("  on 10.0.0.1: ", "  on alias-b: ")
    agents = [shlex.split(line.split(": ", 1)[1]) for line in lines if line.startswith(hosts)]
    assert [store_host_as_torch_reads_it(argv) for argv in agents] == [True, False]
    assert all(argv.count("--rdzv-conf") == 1 and "last_call_timeout=1," in shlex.join(argv) for argv in agents)


def test_the_users_socket_interfaces_are_kept_across_hosts_and_the_plan_says_they_are_unchecked(tmp_path, monkeypatch):
    """NCCL_SOCKET_IFNAME=ib0 was replaced by the routed interface; a set NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME is
    kept, the one left unset filled, and the plan says the hosts' interfaces are not checked."""
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    lines = planned("run", "--backend", "elastic", *TWO_HOSTS, tmp_path=tmp_path)
    assert {"  env NCCL_SOCKET_IFNAME=ib0", "  env GLOO_SOCKET_IFNAME=IFACE"} <= set(lines)
    assert any(
        line.startswith("  note: NCCL_SOCKET_IFNAME=ib0 is the environment's, kept") and "not checked: dry run" in line
        for line in lines
    )
    lines = planned("run", "--backend", "elastic", *TWO_HOSTS, "--iface", "ib0", tmp_path=tmp_path)
    assert {"  env NCCL_SOCKET_IFNAME=ib0", "  env GLOO_SOCKET_IFNAME=ib0"} <= set(lines)


@pytest.mark.parametrize(
    "variable, value, agrees",
    [
        ("NCCL_SOCKET_IFNAME", "ib0", False),
        ("NCCL_SOCKET_IFNAME", "eth", True),  # NCCL's prefix
        ("NCCL_SOCKET_IFNAME", "=eth", False),  # "=": exactly eth
        ("NCCL_SOCKET_IFNAME", "^docker,lo", True),
        ("NCCL_SOCKET_IFNAME", "^eth", False),  # excludes --iface
        ("GLOO_SOCKET_IFNAME", "eth0", True),
        ("GLOO_SOCKET_IFNAME", "eth0,ib0", False),
    ],
)
def test_a_kept_socket_interface_that_disagrees_with_iface_is_refused_in_one_line(variable, value, agrees, monkeypatch):
    monkeypatch.setenv(variable, value)
    proc = bench_in_process("run", "--backend", "elastic", *TWO_HOSTS, "--iface", "eth0", "--dry-run")
    if agrees:
        assert proc.returncode == 0, proc.stderr
        assert f"  env {variable}={value}" in proc.stdout.splitlines()
    else:
        assert_one_line_error(proc, f"{variable}={value} in the environment disagrees with --iface eth0")


def test_a_cuda_visible_devices_passed_to_every_host_is_said_by_the_plan(tmp_path, monkeypatch):
    """The launching shell's CUDA_VISIBLE_DEVICES reaches every host's processes (as horovodrun and mpirun -x pass
    it): the plan says so, and that the host check counts the GPUs it leaves visible there (tests/
    test_gpu_first_contact.py checks that it does)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    lines = planned("run", "--backend", "elastic,horovod", *TWO_HOSTS, tmp_path=tmp_path)
    assert lines.count("  env CUDA_VISIBLE_DEVICES=0,1") == 2
    said = "  note: CUDA_VISIBLE_DEVICES=0,1 of this shell is passed on to every host"
    assert [line for line in lines if line.startswith(said) and "not checked: dry run" in line] == [
        line for line in lines if line.startswith(said)
    ] and sum(line.startswith(said) for line in lines) == 2


def test_the_readmes_8_gpu_sweep_is_as_many_launches_as_its_plan(tmp_path):
    readme = (ROOT / "README.md").read_text()
    [posargs] = re.findall(r"^nox -s bench -- (.+?)\s+#", readme, re.MULTILINE)
    [said] = re.findall(r"the sweep is (\d+) launches", readme)
    lines = planned("sweep", *shlex.split(posargs), tmp_path=tmp_path)
    assert lines[-1].startswith(f"dry run: {said} launch(es) planned")
