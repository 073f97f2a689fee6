"""What a test needs beyond the project's own Python packages, declared once, on the test: `@needs("mpi")`, or
`pytest.param(..., marks=needs("mpi"))` for one case of a parametrized test. Each name is one entry of NEEDS: what it
adds to the tests, and how its absence is found (once per process). Where something a test needs is missing:
- on a user's machine, the test skips, saying what to install (the README's test command passes on a fresh machine);
- under CI (CI=true), whose .ci/run installs every optional package, it fails saying what is missing, so that CI
  never passes by skipping;
- in CI's pass "as on a fresh machine" (BENCH_TESTS_WITHOUT_OPTIONAL=1), the optional system programs are hidden
  (HIDDEN_PROGRAMS: `shutil.which` answers None for them in the test process, and the processes it starts get a PATH
  without them) and Horovod's optional builds answer "absent" (HIDDEN_HOROVOD_FEATURES): the tests then skip as they
  would on a machine that never had them, and any test that needs one of them without declaring it fails."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

WITHOUT_OPTIONAL = os.environ.get("BENCH_TESTS_WITHOUT_OPTIONAL") == "1"
IN_CI = os.environ.get("CI") == "true" and not WITHOUT_OPTIONAL
# the system programs of the optional packages .ci/run installs (OpenMPI's launchers, sshd, Slurm and MUNGE,
# Chromium), hidden in the pass as on a fresh machine. OpenMPI's compiler wrappers stay: the installed Horovod was
# built with them, and the set-up's own check of that build (bench.tools.horovod_build) must find the same build.
HIDDEN_PROGRAMS = frozenset(
    {
        *("mpirun", "mpiexec", "orterun", "prterun"),
        *("sshd",),
        *("slurmctld", "slurmd", "sbatch", "srun", "salloc", "scontrol", "sinfo", "squeue", "munged", "munge"),
        *("chromium", "chromium-browser"),
    }
)
# where the system's programs are (PATH's folders and the daemons' sbin ones): a program a test writes itself
# elsewhere (a fake nvidia-smi or mpirun in its temporary folder) is never hidden
SYSTEM_FOLDERS = frozenset(
    os.path.realpath(folder)
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/local/sbin", "/usr/sbin", "/sbin"]
    if folder
)
# what a Horovod built on such a machine lacks: its MPI controller (no OpenMPI to build it with) and GPU operations
HIDDEN_HOROVOD_FEATURES = frozenset({"MPI", "NCCL"})
# the needs that pass takes away (every one that HIDDEN_PROGRAMS or HIDDEN_HOROVOD_FEATURES makes missing; a test
# checks that none is left out): a test that declares one is marked `optional` (mark_optional), and `nox -s tests`
# runs the fast ones among them again with everything present, after that pass has run every fast test
HIDDEN_NEEDS = frozenset({"mpi", "chromium", "hosts", "slurm", "sbatch", "ray-cluster", "horovod-gpu"})


def programs_missing(*names: str, install: str) -> str | None:
    """Why something that runs the system programs `names` cannot run here, naming the package that installs them
    (`install`, as apt-get takes it); None where every one is on PATH."""
    missing = [name for name in names if shutil.which(name) is None]
    return f"{', '.join(missing)} not found: apt-get install {install} (.ci/run does)" if missing else None


def _mpi() -> str | None:
    from bench.backends.horovod import built_with, check_build

    problem = programs_missing("mpirun", "mpicxx", install="openmpi-bin libopenmpi-dev")
    if problem or check_build()[0]:
        return problem or check_build()[0]
    if not built_with("MPI"):
        return (
            "this Horovod is built without its MPI controller: apt-get install libopenmpi-dev, then "
            "python -m bench.tools.horovod_build --force"
        )
    return None


def _horovod_gpu() -> str | None:
    from bench.backends.horovod import built_with

    if not built_with("NCCL"):
        return "this Horovod has no NCCL operations: build it on a CUDA machine with HOROVOD_GPU_OPERATIONS=NCCL"
    return None


def _python(*modules: str, extra: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [name for name in modules if find_spec(name) is None]
        return f"{' and '.join(absent)} not installed (pip install -e '.[{extra}]')" if absent else None

    return missing


def _test_hosts() -> str | None:
    from bench.testbed import hosts

    problem = hosts.unavailable_reason()
    return f"test hosts need root, network namespaces and sshd: {problem}" if problem else None


def _slurm() -> str | None:
    from bench.testbed import slurm

    problem = slurm.unavailable_reason()
    return f"the Slurm test cluster cannot run here: {problem}" if problem else None


def _ray_cluster() -> str | None:
    from bench.testbed import ray

    problem = ray.unavailable_reason()
    return f"the Ray test cluster cannot run here: {problem}" if problem else None


def _nccl() -> str | None:
    from bench.backends.shared.ddp import distributed_problem

    return distributed_problem("cuda")


@dataclass(frozen=True)
class Need:
    adds: str  # what it adds to the tests (the README's line)
    missing: Callable[[], str | None]  # why it is not here, or None


NEEDS: dict[str, Need] = {
    "mpi": Need("OpenMPI (before Horovod's build): Horovod's MPI controllers and plain mpirun", _mpi),
    "chromium": Need(
        "Chromium: the page opened in a browser",
        lambda: (
            None
            if shutil.which("chromium") or shutil.which("chromium-browser")
            else "chromium not found: apt-get install chromium (.ci/run does)"
        ),
    ),
    "hosts": Need("sshd, as root: runs across test hosts (network namespaces)", _test_hosts),
    "slurm": Need("Slurm and MUNGE, as root: runs under a Slurm test cluster on those hosts", _slurm),
    "sbatch": Need(
        "Slurm's sbatch: the batch script read by Slurm's own parser",
        lambda: programs_missing("sbatch", install="slurm-client"),
    ),
    "ray": Need("the `ray` extra: the ray backend", _python("ray", extra="ray")),
    "ray-cluster": Need("Ray and sshd, as root: a Ray cluster over test hosts", _ray_cluster),
    "tf": Need("the `tf` extra: the tf-mwms and horovod-tf backends", _python("tensorflow", "tf_keras", extra="tf")),
    "nccl": Need("a torch with NCCL (PyPI's default build): GPU runs planned", _nccl),
    "horovod-gpu": Need("a Horovod built with NCCL on a CUDA machine: its GPU operations", _horovod_gpu),
}


# a backend's own, by name (`backend:horovod`): what the backend says it lacks to run CPU processes here
BACKEND = "backend:"


@functools.cache
def missing(name: str) -> str | None:
    """Why the need `name` is not met here, or None."""
    if name.startswith(BACKEND):
        from bench.core.registry import get_backend

        return get_backend(name.removeprefix(BACKEND)).unavailable_reason("cpu")
    return NEEDS[name].missing()


def needs(*names: str) -> pytest.MarkDecorator:
    """The mark of a test that needs each of `names` (NEEDS' keys, or `backend:NAME`)."""
    unknown = [name for name in names if name not in NEEDS and not name.startswith(BACKEND)]
    if unknown:
        raise ValueError(f"unknown need(s) {unknown}; declare them in tests/needs.py NEEDS")
    return pytest.mark.needs(*names)


def check(item: pytest.Item) -> None:
    """Before a test runs: skip it (or, under CI, fail it) where something it declares it needs is missing."""
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            why = missing(name)
            if why is None:
                continue
            if IN_CI:
                pytest.fail(f"CI must have {name}: {why}", pytrace=False)
            pytest.skip(why)


def mark_optional(item: pytest.Item) -> None:
    """Mark `optional` a test that declares a need the pass as on a fresh machine takes away (HIDDEN_NEEDS)."""
    if any(name in HIDDEN_NEEDS for mark in item.iter_markers("needs") for name in mark.args):
        item.add_marker(pytest.mark.optional)


def hide_optional() -> None:
    """In the pass as on a fresh machine: this process's `shutil.which` answers None for HIDDEN_PROGRAMS, the
    processes it starts get a PATH of links to every other program of PATH, and Horovod's build answers without
    HIDDEN_HOROVOD_FEATURES."""
    which = shutil.which

    def which_but_hidden(cmd, mode=os.F_OK | os.X_OK, path=None):
        found = which(cmd, mode, path)
        if found is None or os.path.basename(found) not in HIDDEN_PROGRAMS:
            return found
        return None if os.path.dirname(os.path.realpath(found)) in SYSTEM_FOLDERS else found

    shutil.which = which_but_hidden
    folder = Path(tempfile.mkdtemp(prefix="bench-tests-path-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        try:
            entries = sorted(os.scandir(directory or "."), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            link = folder / entry.name
            if entry.name not in HIDDEN_PROGRAMS and not link.exists() and os.access(entry.path, os.X_OK):
                link.symlink_to(os.path.abspath(entry.path))
    os.environ["PATH"] = str(folder)

    import bench.backends.horovod as horovod

    probed = horovod.check_build

    def check_build_without_optional():
        problem, flags = probed()
        return problem, {name: (False if name in HIDDEN_HOROVOD_FEATURES else value) for name, value in flags.items()}

    check_build_without_optional.cache_clear = probed.cache_clear  # type: ignore[attr-defined]
    horovod.check_build = check_build_without_optional


README_BLOCK = ("<!-- needs:begin -->", "<!-- needs:end -->")


def readme_block() -> str:
    """The README's list of what each optional part adds to the tests, one line each (tests/test_docs.py checks it;
    `python tests/needs.py` writes it)."""
    lines = [
        README_BLOCK[0],
        "What each optional part adds to the tests (.ci/run installs all; without one, its tests skip, saying so):",
        "",
        *(f"- {need.adds}" for need in NEEDS.values()),
        README_BLOCK[1],
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    readme = Path(__file__).resolve().parent.parent / "README.md"
    text = readme.read_text()
    begin, end = (text.index(marker) for marker in README_BLOCK)
    readme.write_text(text[:begin] + readme_block() + text[end + len(README_BLOCK[1]) :])
