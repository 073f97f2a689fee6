"""Sessions: `nox` runs the tests; `nox -s bench -- ARGS` runs `bench sweep ARGS` and writes the report."""

import nox

nox.options.sessions = ["tests"]
# torch is several GB: build each session's environment once and reuse it.
nox.options.reuse_venv = "yes"


@nox.session
def tests(session):
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def bench(session):
    """The main job: a sweep on this machine (CPU processes unless --gpus is given), then the report."""
    session.install("-e", ".")
    session.run("bench", "sweep", "--report", "reports/latest.html", *session.posargs)
