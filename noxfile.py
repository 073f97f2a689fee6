"""Sessions: `nox` runs the tests; `nox -s bench -- ARGS` runs `bench sweep ARGS` and writes the report.

Both sessions install the project (torch 2.14.1, torchvision 0.29.1) and Horovod 0.28.1, built once
against that torch by `python -m bench.horovod_build` and cached outside the checkout.
"""

import nox

nox.options.sessions = ["tests"]
# torch is several GB: build each session's environment once and reuse it.
nox.options.reuse_venv = "yes"


def install(session, extras=""):
    session.install("-e", f".{extras}")
    session.run("python", "-m", "bench.horovod_build")


@nox.session
def tests(session):
    install(session, "[test]")
    session.run("pytest", *session.posargs)


@nox.session
def bench(session):
    """The main job: a sweep on this machine (CPU processes unless --gpus is given), then the report."""
    install(session)
    session.run("bench", "sweep", "--report", "reports/latest.html", *session.posargs)
