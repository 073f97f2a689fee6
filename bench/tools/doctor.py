"""`bench doctor`: the set-up's prerequisites, what this machine offers, and whether each backend can run here."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

from bench.core.cgroups import usable_cpus_words
from bench.core.environment import fingerprint
from bench.core.registry import BACKEND_MODULES, get_backend
from bench.tools.horovod_build import cxx_compiler, cxx_standard_for

MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python
# What the environment takes on disk (torch, torchvision, Ray, Horovod built from source): nox's `tests`
# environment measured 6.3 to 6.5 GB
ENVIRONMENT_GB = 6.3
CHECKOUT = Path(__file__).resolve().parents[2]  # where `nox` builds its environments (.nox)


def _first_line(command: list[str]) -> str | None:
    """The first line a command prints about itself (--version), or None when it does not run."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def linux_line() -> str:
    if platform.system() == "Linux":
        return f"ok ({platform.system()} {platform.release()}, {platform.machine()})"
    return (
        f"missing: this is {platform.system()}; bench runs on Linux only (process groups, /proc, network "
        "namespaces): use a Linux machine or container"
    )


def python_line() -> str:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] >= MIN_PYTHON:
        return f"ok ({version})"
    return (
        f"missing: this is Python {version}; bench needs {'.'.join(map(str, MIN_PYTHON))} or later: install "
        "one and build the environment with it"
    )


def compiler_line(torch_version: str | None) -> str:
    """The compiler Horovod's build uses, and whether it takes the C++ standard torch's headers demand."""
    name = cxx_compiler()
    path = shutil.which(name)
    if path is None:
        return f"missing: no {name} on PATH; Horovod is built from source with one: apt-get install g++ (or set CXX)"
    standard = cxx_standard_for(torch_version) if torch_version else 20
    shown = f"{path}: {_first_line([path, '--version']) or 'version unknown'}"
    try:
        takes = (
            subprocess.run(
                [path, f"-std=c++{standard}", "-x", "c++", "-fsyntax-only", "-"],
                input="",
                capture_output=True,
                text=True,
                timeout=60,
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        takes = False
    if not takes:
        return (
            f"missing: {shown} does not take -std=c++{standard}, which torch's headers need; install GCC 10 "
            "or later (or set CXX to one)"
        )
    return f"ok ({shown}; C++{standard})"


def cmake_line() -> str:
    path = shutil.which("cmake")
    if path is None:
        return "missing: no cmake on PATH; Horovod's build needs it: pip install cmake, or apt-get install cmake"
    return f"ok ({path}: {_first_line([path, '--version']) or 'version unknown'})"


def disk_line(folder: Path = CHECKOUT) -> str:
    """Free space where the environment is built, against what it takes."""
    free = shutil.disk_usage(folder).free / 1e9
    said = f"{free:.1f} GB free at {folder}; the environment takes about {ENVIRONMENT_GB:g} GB"
    if free >= ENVIRONMENT_GB:
        return f"ok ({said})"
    return f"low: {said}; free some, or build it on another disk (nox --envdir DIR)"


def prerequisite_lines(torch_version: str | None) -> list[str]:
    """The quick start's prerequisites, one line each: ok, or missing with what to do."""
    checks = [
        ("Linux", linux_line()),
        (f"Python {'.'.join(map(str, MIN_PYTHON))}+", python_line()),
        ("C++ compiler", compiler_line(torch_version)),
        ("CMake", cmake_line()),
        ("disk", disk_line()),
    ]
    return ["prerequisites:"] + [f"  {name:<13}{state}" for name, state in checks]


def mpirun_version() -> str:
    path = shutil.which("mpirun")
    if path is None:
        return "not found (apt-get install openmpi-bin libopenmpi-dev)"
    return f"{path} ({_first_line([path, '--version']) or 'version unknown'})"


def doctor_lines() -> list[str]:
    env = fingerprint()
    lines = [
        *prerequisite_lines(env["torch"]),
        f"python      {env['python']} ({env['python_executable']})",
        f"machine     {env['hostname']}: {env['cpu_model']}, {usable_cpus_words()} usable cores, "
        f"{(env['memory_bytes'] or 0) / 2**30:.1f} GiB",
        f"torch       {env['torch']} (CUDA build: {env['torch_cuda_build'] or 'none'}, "
        f"cuDNN: {env['cudnn'] or 'none'})",
        f"torchvision {env['packages']['torchvision'] or 'not installed'}",
        f"tensorflow  {env['packages']['tensorflow'] or 'not installed'} "
        f"(tf_keras: {env['packages']['tf-keras'] or 'not installed'})",
        f"CUDA        {len(env['cuda_devices'])} device(s)"
        + (": " + ", ".join(env["cuda_devices"]) if env["cuda_devices"] else ""),
        f"gloo        {'yes' if env['gloo'] else 'no'}",
        f"NCCL        {'yes' if env['nccl'] else 'no'}"
        + (f" ({env['nccl_version']})" if env["nccl_version"] else "")
        + ("" if env["cuda_devices"] else " (no CUDA device to use it)"),
        f"MPI         torch.distributed: {'yes' if env['mpi'] else 'no'}; mpirun: {mpirun_version()}",
        "backends:",
    ]
    devices = ["cpu"] + (["cuda"] if env["cuda_devices"] else [])
    for name in BACKEND_MODULES:
        backend = get_backend(name)
        states = []
        for device in devices:
            problem = backend.unavailable_reason(device)
            states.append(f"{device}: {'usable' if problem is None else 'not usable: ' + problem}")
        lines.append(f"  {name:<10} {backend.summary}")
        lines.append(f"  {'':<10} " + "; ".join(states))
        lines += [f"  {'':<10} {extra}" for extra in backend.doctor_lines()]
    return lines
