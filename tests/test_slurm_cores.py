"""Cores for every worker under Slurm, planned for a 2 x 8-GPU allocation without Slurm or a GPU: the script of
`bench slurm-script --gpus-per-node 8` asks for a task (a core) per GPU worker, or whole nodes, and the srun that
starts each node's torchrun agent hands it every CPU the allocation holds on the node. srun no longer takes
--cpus-per-task from the job (Slurm 22.05), and where a site binds tasks to cores, a task that asks for nothing has
one core for its agent and all its workers. The real cluster's side is in tests/test_testslurm.py."""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error, bench_in_process

# what Slurm sets inside `salloc -N2 --gpus-per-node 8 --ntasks-per-node 8 --cpus-per-task 8` on 8-GPU nodes
SALLOC_2X8 = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_TASKS_PER_NODE": "8(x2)",
    "SLURM_JOB_CPUS_PER_NODE": "64(x2)",
    "SLURM_CPUS_ON_NODE": "64",
    "SLURM_CPUS_PER_TASK": "8",  # the job's, which srun 22.05 and later does not read
    "SLURM_GPUS_ON_NODE": "8",
}
SLURM_NAMES = (*SALLOC_2X8, "SLURM_NODELIST", "SLURM_GPUS_PER_NODE", "SLURM_JOB_GRES", "SLURM_GRES")


@pytest.fixture(autouse=True)
def outside_slurm(monkeypatch):
    """No allocation this test process may run in leaks into the plans."""
    for name in SLURM_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("BENCH_STORE", raising=False)


def job_plan(tmp_path, *options, rest=("--backend", "elastic")) -> tuple[list[str], list[str]]:
    """`bench slurm-script --nodes 2 --gpus-per-node 8 OPTIONS --verb run --dry-run -- REST`: (the script's #SBATCH
    lines, the plan's srun lines)."""
    proc = bench_in_process(
        "slurm-script",
        "--nodes",
        2,
        "--gpus-per-node",
        8,
        *options,
        "--verb",
        "run",
        "--store",
        tmp_path / "b.sqlite",
        "--dry-run",
        "--",
        *rest,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    return [line for line in lines if line.startswith("#SBATCH")], srun_lines(lines)


def srun_lines(lines: list[str]) -> list[list[str]]:
    """The srun command of each launch a plan shows (its words up to the per-node plan)."""
    return [line.split("started here: ", 1)[1].split()[:6] for line in lines if "started here: srun" in line]


def cpus_of(srun: list[str]) -> str:
    """srun's --cpus-per-task, which follows its node list."""
    assert srun[4].startswith("--nodelist=") and srun[5].startswith("--cpus-per-task="), srun
    return srun[5]


def test_a_2x8_gpu_job_asks_for_a_core_per_gpu_worker_and_hands_a_node_s_cores_to_its_agent(tmp_path):
    directives, sruns = job_plan(tmp_path)
    for line in ("--nodes=2", "--ntasks-per-node=8", "--cpus-per-task=1", "--gpus-per-node=8"):
        assert f"#SBATCH {line}" in directives, directives
    assert sruns == [
        ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=node1,node2", "--cpus-per-task=8"]
    ]


def test_cores_per_worker_and_whole_nodes(tmp_path):
    directives, sruns = job_plan(tmp_path, "--cpus-per-worker", 12)
    assert "#SBATCH --cpus-per-task=12" in directives and "#SBATCH --exclusive" not in directives
    assert cpus_of(sruns[0]) == "--cpus-per-task=96"  # 8 workers x 12
    directives, sruns = job_plan(tmp_path, "--exclusive", rest=("--backend", "elastic,horovod"))
    assert {"#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --ntasks-per-node=8"} <= set(directives), directives
    assert cpus_of(sruns[0]) == "--cpus-per-task=NODE_CPUS"  # every CPU Slurm finds there, unknown to a plan
    # horovodrun runs in the batch step, which holds every CPU of the job on the first node: no srun of its own
    assert len(sruns) == 1


def test_inside_salloc_the_agent_gets_every_cpu_the_allocation_holds_on_its_node(monkeypatch):
    monkeypatch.setenv("BENCH_STORE", "/nonexistent/never-written.sqlite")
    for name, value in SALLOC_2X8.items():
        monkeypatch.setenv(name, value)

    def plan(**env) -> list[str]:
        for name, value in env.items():
            if value is None:
                monkeypatch.delenv(name)
            else:
                monkeypatch.setenv(name, value)
        proc = bench_in_process("run", "--backend", "elastic", "--scheduler", "slurm", "--dry-run")
        assert proc.returncode == 0, proc.stderr
        assert "world size 16 on cuda" in proc.stdout, proc.stdout
        (srun,) = srun_lines(proc.stdout.splitlines())
        return srun

    assert cpus_of(plan()) == "--cpus-per-task=64"  # not the job's 8 a task: the node's 8 workers and their agent
    assert cpus_of(plan(SLURM_JOB_CPUS_PER_NODE="64,48")) == "--cpus-per-task=48"  # what every node can give
    assert cpus_of(plan(SLURM_JOB_CPUS_PER_NODE=None, SLURM_CPUS_ON_NODE="32")) == "--cpus-per-task=32"


def test_a_cpu_count_slurm_did_not_write_is_refused_in_one_line(monkeypatch):
    for name, value in {**SALLOC_2X8, "SLURM_JOB_CPUS_PER_NODE": "lots"}.items():
        monkeypatch.setenv(name, value)
    proc = bench_in_process("run", "--backend", "elastic", "--scheduler", "slurm", "--dry-run")
    assert_one_line_error(proc, "SLURM_JOB_CPUS_PER_NODE=lots is not Slurm's N(xM),... form")


def test_a_task_count_other_than_the_gpus_is_refused(tmp_path):
    proc = bench_in_process(
        "slurm-script", "--gpus-per-node", 8, "--nproc-per-node", 2, "--store", tmp_path / "b.sqlite"
    )
    assert_one_line_error(proc, "--nproc-per-node 2 with --gpus-per-node 8", "one worker per GPU")
    assert not (tmp_path / "b.sqlite").exists()
