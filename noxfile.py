"""Sessions: `nox` runs the tests; `nox -s bench` runs the main job's sweep (MAIN_JOB_SEQUENTIAL) and writes the
report, `nox -s bench -- ARGS` runs `bench sweep ARGS` instead;
`nox -s regress` is the regression gate (fixed CPU/gloo matrix vs results/baselines/, exit 1 on a
regression); `nox -s baseline` refreshes that baseline on this machine. Those two keep their runs in the gate's own
store, bench's default for those verbs (results/regress.sqlite), as `bench regress` run by hand does.

Both sessions install the project (torch 2.14.1, torchvision 0.29.1) and Horovod 0.28.1, built once
against that torch by `python -m bench.tools.horovod_build` (with CUDA and NCCL, torch's own, where a CUDA device is
present) and cached outside the checkout; `tests` and `bench` also
install Ray Train (the `ray` extra) for the ray backend; `regress` and `baseline` too (the gate's Ray case). `bench`
installs the `gpu` extra (nvidia-ml-py, NVML) too where `nvidia-smi -L` lists a GPU. `tests`
installs TensorFlow 2.21.0 and tf_keras (the `tf` extra) for the TensorFlow backends, before Horovod's build, which
then builds Horovod's TensorFlow library too (one Horovod for both frameworks). `bench` does not: its default sweep
is PyTorch's (elastic and Horovod), and TensorFlow would add a large download and a longer build to the first set-up;
`pip install -e .[tf]` and `python -m bench.tools.horovod_build --force` in its environment add them.

`nox -s lint` checks the code without installing the project: ruff's linter and its formatter (`--check`: it changes
nothing), then mypy (strict on bench/core and bench/harness; the backends' interface too), with the configuration in
pyproject.toml.
"""

import nox

nox.options.sessions = ["tests"]
# torch is several GB: build each session's environment once and reuse it.
nox.options.reuse_venv = "yes"


def install(session, extras=""):
    session.install("-e", f".{extras}")
    # the checkout's bytecode, once: every process of a run imports the suite, and where PYTHONDONTWRITEBYTECODE is
    # set, as on CI's machines, each would compile it again
    session.run("python", "-m", "compileall", "-q", "bench", "workloads")
    session.run("python", "-m", "bench.tools.horovod_build")


# the linters' versions, pinned: a new release may flag code that passed
LINT_TOOLS = ["ruff==0.17.5", "mypy==2.4.1"]


@nox.session
def lint(session):
    """ruff check, ruff format --check and mypy (seconds): the formatter's and linter's fixes are `ruff format` and
    `ruff check --fix`, run by hand."""
    session.install(*LINT_TOOLS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


# The tests side by side, two at a time: most of a test's time is not its runs (the CLI's start, checks, pages, test
# hosts and their clusters coming up) and bench's core claims still keep any two runs from overlapping (the workers
# share one claims folder, and tests/conftest.py hands them whole files and groups of files); then, alone, the tests
# that assert what a run measured (`serial`).
SIDE_BY_SIDE = ["-n", "2"]
# First, every fast test once, as on a fresh machine: the optional system programs hidden and Horovod's optional builds
# (MPI, NCCL) answering "absent" (tests/needs.py), so that a test needing one of them without declaring it fails, and
# a failure shows in minutes. The fast tests that declare such a need skip there; marked `optional`, they run again
# with everything present, among the slow ones.
AS_ON_A_FRESH_MACHINE = {"BENCH_TESTS_WITHOUT_OPTIONAL": "1"}


@nox.session
def tests(session):
    """The test suite (docs/testing.md); `nox -s tests -- ARGS` runs `pytest ARGS` instead, one test at a time."""
    install(session, "[test,ray,tf]")
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    session.run("pytest", *SIDE_BY_SIDE, "-m", "not slow", env=AS_ON_A_FRESH_MACHINE)
    session.run("pytest", *SIDE_BY_SIDE, "-m", "not serial and (slow or optional)")
    session.run("pytest", "-m", "serial")


# The main job's own sweep (no ARGS): only what the answer weighs (training at 2 or more workers and the fault runs;
# not the one-worker, plain-loop and allreduce rows it never weighs), its page written after the first round and as it
# goes; after its planned launches, rounds of the two-worker training rows until each is a difference or within ±8%,
# for at most 135 s of added launches (docs/studies/main-job.md: what that takes and resolves). With ARGS the sweep is
# the caller's, as given: `nox -s bench -- --resolution 8` adds the rows that are not weighed.
MAIN_JOB_SEQUENTIAL = ["--weighed-only", "--resolution", "8", "--resolution-timeout", "135"]


def nvidia_gpu_listed() -> bool:
    """Whether `nvidia-smi -L` lists a GPU here: the GPU machine on which Horovod's set-up builds NCCL
    (bench.tools.horovod_build decides the same way where torch does not see the GPU), and on which a GPU run's use
    is sampled through NVML, the `gpu` extra. Self-contained: nox imports this file without the project's packages."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and any(line.startswith("GPU ") for line in listed.stdout.splitlines())


@nox.session
def bench(session):
    """The main job: a sweep on this machine (CPU processes unless --gpus is given), then the report; on a GPU machine
    with the `gpu` extra (NVML), through which the GPU runs' use is sampled."""
    install(session, "[ray,gpu]" if nvidia_gpu_listed() else "[ray]")
    session.run("bench", "sweep", "--output", "reports/latest.html", *(session.posargs or MAIN_JOB_SEQUENTIAL))


@nox.session
def regress(session):
    """The regression gate: `bench regress -- ARGS` (for instance `-- --inject-delay 20%` to see it fail)."""
    install(session, "[test,ray]")
    session.run("bench", "regress", *session.posargs)


@nox.session
def baseline(session):
    """Refresh results/baselines/ from a run of the regression matrix on this machine (then commit it)."""
    install(session, "[test,ray]")
    session.run("bench", "baseline", *session.posargs)
