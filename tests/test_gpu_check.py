"""scripts/gpu_check.sh, as far as a machine without a GPU can check it: it parses, and it refuses in one line,
exit 2, writing nothing, where there is no GPU or its arguments are wrong. Its GPU steps run on a GPU machine only
(docs/testing.md, "The GPU check")."""

from __future__ import annotations

import shutil
import subprocess

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
