"""The suite's image recipe (image/Containerfile) and its one install script (image/install.sh): the recipe runs the
script on a CUDA base, the script runs in a clean virtual environment on a machine with no GPU (its CUDA-only parts
skipped and said so), and `bench k8s` and docs/clusters.md name how the image is built and use it in their examples."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench.cluster import k8s
from bench.tools import horovod_build
from conftest import ROOT, assert_fails_in_one_line, bench_in_process

IMAGE_DIR = ROOT / "image"
INSTALL = IMAGE_DIR / "install.sh"
# what `pip install .` of the checkout reads: the packages and the project's files
SOURCES = ("bench", "workloads", "image", "pyproject.toml", "README.md")


def test_the_recipe_is_the_install_script_on_a_cuda_devel_base():
    text = (IMAGE_DIR / "Containerfile").read_text()
    [base] = re.findall(r"^ARG BASE=(\S+)$", text, re.M)
    # CUDA 13 (torch 2.14.1's wheels), with cuDNN and the compiler Horovod's CUDA kernels need
    assert re.fullmatch(r"docker\.io/nvidia/cuda:13\.\d+\.\d+-cudnn-devel-ubuntu24\.04", base), base
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
    # every install step is the script's: one RUN, which runs it in the image's mode
    runs = re.findall(r"^RUN ((?:.*\\\n)*.*)", text, re.M)
    assert len(runs) == 1 and "image/install.sh --image" in runs[0], runs
    # the GPUs Horovod's kernels are compiled for, which CUDA 13 can compile for (7.5 and later)
    [cc_list] = re.findall(r"^ARG HOROVOD_BUILD_CUDA_CC_LIST=(\S+)$", text, re.M)
    assert all(int(cc) >= 75 for cc in cc_list.split(","))
    script = INSTALL.read_text()
    assert os.access(INSTALL, os.X_OK)
    for part in ("openssh-server", "openmpi-bin", "libopenmpi-dev", "[gpu]", "bench.tools.horovod_build"):
        assert part in script, part
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in script


def test_bench_k8s_and_the_docs_name_the_image_and_how_it_is_built():
    help_text = bench_in_process("k8s", "--help").stdout
    assert k8s.RECIPE_BUILD in " ".join(help_text.split())  # the help's lines are wrapped
    docs = (ROOT / "docs" / "clusters.md").read_text()
    assert k8s.RECIPE_BUILD in docs
    # the docs' bench k8s examples use the recipe's image
    images = re.findall(r"^bench k8s .*--image (\S+)", docs, re.M)
    assert images and set(images) == {k8s.RECIPE_IMAGE}, images
    assert "registry.example.com" in k8s.RECIPE_IMAGE and k8s.image_problem(k8s.RECIPE_IMAGE) is None


@pytest.mark.parametrize(
    "args, env, fragment",
    [
        (["--bogus"], {}, "unknown argument '--bogus'"),
        ([], {"BENCH_IMAGE_CUDA": "maybe"}, "BENCH_IMAGE_CUDA='maybe': require, skip or auto"),
    ],
)
def test_install_script_refuses_bad_usage_in_one_line(args, env, fragment):
    proc = subprocess.run([str(INSTALL), *args], capture_output=True, text=True, timeout=30, env={**os.environ, **env})
    assert_fails_in_one_line(proc, 2, fragment)


@pytest.mark.slow
def test_install_script_in_a_clean_virtual_environment(tmp_path):
    """image/install.sh, as CI runs it: a copy of the checkout installed into a new virtual environment with no GPU
    and the CUDA-only parts skipped (said so); Horovod from the tests' environment's cached build where there is one
    (the build itself is what every test set-up runs), else built. The environment it leaves runs bench, imports
    Horovod's PyTorch library and holds the [gpu] extra."""
    source = tmp_path / "checkout"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = tmp_path / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "BENCH_IMAGE_CUDA": "skip"}
    for name in ("PYTHONPATH", "BENCH_HOROVOD_WHEEL"):  # the new environment, not this checkout or this process's
        env.pop(name, None)
    key = horovod_build.installed_key()
    wheels = sorted((horovod_build.cache_root() / key).glob("horovod-*.whl")) if key else []
    if wheels:
        env["BENCH_HOROVOD_WHEEL"] = str(wheels[0])
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        proc = subprocess.run(
            [str(source / "image" / "install.sh")], capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
        assert "skipping the CUDA-only parts" in proc.stdout and proc.stdout.rstrip().endswith("done"), proc.stdout
        python = venv / "bin" / "python"
        checked = subprocess.run(
            [
                str(python),
                "-c",
                "import bench, horovod.torch as hvd, pynvml, torch; "
                "print(bench.__file__, torch.__version__, bool(hvd.gloo_built()))",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={k: v for k, v in env.items() if k != "BENCH_HOROVOD_WHEEL"},
            cwd=tmp_path,
        )
        assert checked.returncode == 0, checked.stderr
        where, torch_version, gloo = checked.stdout.split()
        assert Path(where).is_relative_to(venv) and torch_version.startswith("2.14.1") and gloo == "True"
        bench_script = venv / "bin" / "bench"
        version = subprocess.run([str(bench_script), "--version"], capture_output=True, text=True, timeout=300)
        assert version.stdout.strip() == f"bench {bench.__version__}", version
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # several GB: not left for pytest's kept temporary folders
