"""`bench doctor` checks the set-up's prerequisites, one line each: Linux, Python, a C++ compiler and CMake (to
build Horovod) and the disk space the environment takes; each ok, or missing (or low) with what to do."""

import shutil
import subprocess
import sys

import pytest

from bench.tools.doctor import ENVIRONMENT_GB, disk_line
from conftest import bench

PREREQUISITES = ("Linux", "Python 3.10+", "C++ compiler", "CMake", "disk")


def prerequisites(stdout: str) -> dict[str, str]:
    """name -> its state, from doctor's prerequisites block."""
    block = stdout.split("prerequisites:\n", 1)[1].split("\npython ", 1)[0]
    found = {}
    for line in block.splitlines():
        name = next(n for n in PREREQUISITES if line.strip().startswith(n))
        found[name] = line.strip()[len(name) :].strip()
    return found


@pytest.mark.slow
def test_every_prerequisite_is_ok_where_the_suite_is_built():
    """This machine built the environment the tests run in: it has them all (and free disk, or says low)."""
    proc = bench("doctor", timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = prerequisites(proc.stdout)
    assert list(found) == list(PREREQUISITES)
    for name in ("Linux", "Python 3.10+", "C++ compiler", "CMake"):
        assert found[name].startswith("ok ("), (name, found[name])
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in found["Python 3.10+"]
    assert "C++20" in found["C++ compiler"] and shutil.which("cmake") in found["CMake"]


@pytest.mark.slow
def test_a_missing_compiler_and_cmake_say_what_to_do(tmp_path):
    """A PATH with neither a compiler nor CMake on it (an empty folder), and CXX naming a compiler that is not
    there: doctor still runs, and says for each what to install."""
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = bench("doctor", env={"PATH": str(empty), "CXX": str(tmp_path / "g++-99")}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = prerequisites(proc.stdout)
    assert found["C++ compiler"].startswith(f"missing: no {tmp_path}/g++-99 on PATH")
    assert "apt-get install g++ (or set CXX)" in found["C++ compiler"]
    assert found["CMake"].startswith("missing: no cmake on PATH") and "pip install cmake" in found["CMake"]
    assert found["Linux"].startswith("ok") and found["Python 3.10+"].startswith("ok")


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 MiB tmpfs, unmounted afterwards (also when the test fails)."""
    if shutil.which("mount") is None:
        pytest.skip("mount not found: apt-get install mount")
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_too_little_disk_is_low_with_what_to_do(small_disk):
    line = disk_line(small_disk)
    assert line.startswith(f"low: 0.1 GB free at {small_disk}; the environment takes about {ENVIRONMENT_GB:g} GB")
    assert "nox --envdir" in line


def test_enough_disk_is_ok(tmp_path):
    free = shutil.disk_usage(tmp_path).free / 1e9
    line = disk_line(tmp_path)
    assert line.startswith("ok (" if free >= ENVIRONMENT_GB else "low: ") and f"{free:.1f} GB free" in line
