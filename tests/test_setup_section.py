"""The page's "What it takes to run": from the set-up's record that a run's environment holds (how Horovod was
installed, its build's time and changes), or said plainly where the runs kept none; each backend's cited facts with
their source and the day they were checked; and a scorecard row of them, never weighed."""

from __future__ import annotations

import dataclasses
import html
import re

import pytest

from bench.backends.shared.setup import CHECKED
from bench.core.errors import UsageError
from bench.core.registry import BACKEND_MODULES, PRIMARY, backend_part
from bench.core.store import Store
from bench.report.page import render_report
from bench.report.setup import address, cited
from bench.results.frame import load_frame
from factories import ENVIRONMENT, sweep_records

TIED = {("elastic", 2): [150, 152, 149], ("horovod", 2): [151, 149, 150]}
BUILD = {
    "horovod": "0.28.1",
    "source": "horovod==0.28.1, the source distribution on PyPI",
    "torch": "2.14.1+cu130",
    "tensorflow": None,
    "features": ["gloo"],
    "changes": [
        "CMakeLists.txt: CMAKE_CXX_STANDARD 14 -> 20",
        "horovod/torch/CMakeLists.txt: CMAKE_CXX_STANDARD 14 -> 20",
        "cmake/Modules/FindPytorch.cmake: Pytorch_CUDA FALSE for a CPU-only build",
    ],
    "build_seconds": 450.0,
    "built": "2026-12-06",
}
SETUP = {
    "key": "k",
    "how": "built from source here",
    "install_seconds": 472.3,
    "installed": "2026-12-06",
    "build": BUILD,
}


def page_of(tmp_path, environment: dict) -> str:
    """The page of a store whose runs' environment is `environment`, its text as a reader sees it."""
    path = tmp_path / "bench.sqlite"
    store = Store(path)
    for rec in sweep_records("s1", TIED):
        store.save(dataclasses.replace(rec, environment=environment))
    page = render_report(load_frame(Store(path)), "test")
    return html.unescape(re.sub(r"<[^>]+>", " ", page.split("</style>")[1]))


def section_of(text: str) -> str:
    """The section's text: from its heading (the last "What it takes to run" before its first words) to the next."""
    first = text.index("How each backend was installed")
    start = text.rindex("What it takes to run", 0, first)
    return " ".join(text[start : text.index("Environment", start)].split())


def test_the_set_up_record_of_the_runs_says_how_horovod_was_built_and_what_it_took(tmp_path):
    text = page_of(tmp_path, {**ENVIRONMENT, "torch": "2.14.1+cu130", "horovod_setup": SETUP})
    said = section_of(text)
    assert "horovod Horovod 0.28.1 built from source here, 2026-12-06" in said
    assert "its build 7.5 min (2026-12-06, against torch 2.14.1+cu130); this install 7.9 min" in said
    assert "CMakeLists.txt: CMAKE_CXX_STANDARD 14 -> 20; horovod/torch/CMakeLists.txt" in said
    assert "elastic with torch 2.14.1+cu130 (pip's wheel, a dependency of this project)" in said
    assert "none: nothing is built" in said
    for backend in PRIMARY:
        assert cited(backend), backend  # each primary backend's own facts, each with its source and day
        for fact in cited(backend):
            assert fact.source.startswith("https://") and address(fact.source) in said
            assert f"{backend}, {fact.what}: {fact.said} (source: {address(fact.source)}, checked {CHECKED})" in said
    row = " ".join(text[text.index("what it takes to run", text.index("Scorecard")) :].split())
    assert row.startswith(
        "what it takes to run the set-up of the latest run's environment ships with torch 2.14.1+cu130; nothing "
        "built built from source in 7.5 min, 3 change(s) to build - facts, not compared"
    ), row[:300]
    # beside the answer, never in it: the tie is still the only scenario, the rows shown beside start-up's alone
    assert "Tied: training speed in 1 of 1 scenario(s)" in text
    assert "scaling efficiency restates throughput): 1 row(s)." in text


def test_runs_that_kept_no_set_up_record_say_so_plainly(tmp_path):
    said = section_of(page_of(tmp_path, {**ENVIRONMENT, "torch": "2.14.1+cu130"}))
    assert "horovod no set-up record: the runs' environment kept none" in said
    assert said.count("not recorded") >= 2 and "elastic with torch 2.14.1+cu130" in said
    bare = section_of(page_of(tmp_path / "bare", dict(ENVIRONMENT)))  # not even torch's version
    assert "elastic no set-up record" in bare and "horovod no set-up record" in bare


def test_a_backends_setup_part_is_found_by_name_as_a_tasks_parts_are():
    """bench.core.registry.backend_part: the module of the backend's own folder, None where it has none, and one-line
    errors for an unknown backend or part."""
    for backend in PRIMARY:
        part = backend_part(backend, "setup")
        assert part.__name__ == f"{BACKEND_MODULES[backend]}.setup" and part.FACTS and callable(part.installed)
    assert backend_part("ps", "setup") is None  # no set-up of its own to state
    with pytest.raises(UsageError, match="unknown backend 'horovd'"):
        backend_part("horovd", "setup")
    with pytest.raises(ValueError, match="unknown backend part 'report'"):
        backend_part("elastic", "report")
