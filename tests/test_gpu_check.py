"""scripts/gpu_check.sh, as far as a machine without a GPU can check it: it parses, and it refuses in one line,
exit 2, writing nothing, where there is no GPU or its arguments are wrong. Its GPU steps run on a GPU machine only
(docs/testing.md, "The GPU check")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def has_a_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return listed.returncode == 0 and "GPU " in listed.stdout


def run_script(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_script_parses():
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(has_a_gpu(), reason="this machine has a GPU: the script would run")
def test_without_a_gpu_it_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "gpu-check"
    proc = run_script(str(out), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "gpu_check: no NVIDIA GPU here (nvidia-smi lists none); run it on a GPU machine"
    ]
    assert list(tmp_path.iterdir()) == []  # not even OUTDIR


@pytest.mark.parametrize("args", [(), ("a", "1", "extra"), ("",)])
def test_wrong_arguments_are_one_line(tmp_path, args):
    proc = run_script(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("gpu_check: usage: scripts/gpu_check.sh OUTDIR [GPUS]")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def one_fake_gpu(tmp_path):
    """An nvidia-smi that lists one GPU: the script gets past its GPU check and plans its steps, which, filtered
    away by GPU_CHECK_STEPS, launch nothing."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: a listed GPU (UUID: GPU-0)"\nexit 0\n')
    smi.chmod(0o755)
    return dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}", PYTHON=sys.executable)


def step_lines(summary: str) -> dict[str, str]:
    """The summary's step table: each step's name and its status."""
    table = summary.split("step (logs/STEP.log)", 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    return {line.split()[0]: line.split(None, 2)[2] for line in table}


def test_a_step_filter_runs_only_the_steps_it_names_and_says_so(tmp_path, one_fake_gpu):
    """GPU_CHECK_STEPS names one step that runs here too: the plan of 8 GPUs (--dry-run starts nothing)."""
    out = tmp_path / "gpu-check"
    env = dict(one_fake_gpu, GPU_CHECK_STEPS="plan-8-.*")
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    assert "only the steps GPU_CHECK_STEPS matches: plan-8-.*" in summary
    steps = step_lines(summary)
    # every step is listed, in order; the one named ran, each other one is filtered away or skipped for a reason of
    # its own; a plan stores nothing
    assert list(steps)[:3] == ["doctor", "plan-8-gpus", "plan-2x8-gpus"]
    assert list(steps)[-4:] == ["sweep-gpus", "selfcheck-elastic-gpu", "converge-gpu", "report"]
    assert steps.pop("plan-8-gpus") == "ok"
    filtered = {name for name, status in steps.items() if status == "skipped: not in GPU_CHECK_STEPS"}
    assert {"doctor", "plan-2x8-gpus", "allreduce-elastic", "train-elastic-1-gpu-fp32", "sweep-gpus"} <= filtered
    assert all(status.startswith("skipped: ") for status in steps.values()), steps
    assert steps["report"] == "skipped: nothing stored"
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["plan-8-gpus.log"]
    assert "--gpus 8" in (out / "logs" / "plan-8-gpus.log").read_text()


def test_a_step_filter_that_is_no_regular_expression_is_one_line(tmp_path, one_fake_gpu):
    env = dict(one_fake_gpu, GPU_CHECK_STEPS="train-(")
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "gpu_check: GPU_CHECK_STEPS 'train-(' is not a regular expression; give one, such as 'doctor|sweep-.*'"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]  # the fake nvidia-smi's folder, and nothing else


def test_on_8_gpus_every_part_keeps_time_for_a_step_in_the_worst_case(tmp_path):
    """With 8 GPUs the fault runs' and training's step limits add up to many times the budget: where every step runs
    to its limit (GPU_CHECK_WORST_CASE: nothing runs, each step takes its whole limit on the script's clock), each
    part still gets a step, training and the workflows included, and the steps given time fit the budget less the
    page's reserve."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = -L ] && for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: a listed GPU (UUID: GPU-$i)"; done\n'
        "exit 0\n"
    )
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}", PYTHON=sys.executable)
    env["GPU_CHECK_WORST_CASE"] = "1"
    out = tmp_path / "gpu-check"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    assert "8 of 8 GPU(s) used" in summary
    steps = step_lines(summary)
    given = {
        name: int(status.split()[-1].rstrip("s"))
        for name, status in steps.items()
        if status.startswith("worst case: given")
    }
    parts = {
        "topology": ["doctor"],
        "plans": ["plan-8-gpus", "plan-2x8-gpus"],
        "faults": [n for n in steps if n.startswith("fault-")],
        "allreduce": [n for n in steps if n.startswith("allreduce-")],
        "training": [n for n in steps if n.startswith("train-")],
        "workflows": ["sweep-gpus", "selfcheck-elastic-gpu", "converge-gpu"],
    }
    assert len(parts["training"]) == 32  # 1, 8, 2 and 4 GPUs x fp32, bf16 x 4 backends
    for part, names in parts.items():
        assert any(n in given for n in names), f"{part} got no step: {steps}"
    assert "train-elastic-1-gpu-fp32" in given and "sweep-gpus" in given
    assert all(seconds >= 30 for seconds in given.values()), given
    assert sum(given.values()) <= 600 - 100
    skipped = [s for s in steps.values() if not s.startswith("worst case: given")]
    assert all(s.startswith("skipped: out of time (") or s.startswith("worst case: not made") for s in skipped)
    assert list((out / "logs").iterdir()) == []  # nothing ran
