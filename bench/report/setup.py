"""The page's "What it takes to run": for each primary backend, how the environment of the page's latest run got it
and how long that took, what the build needed changed, from the set-up's own record that the run's fingerprint holds
(bench.core.environment.setup_record, written by bench.tools.horovod_build); then what its latest release supports,
from dated, cited facts (each backend's setup part, bench/backends/<its folder>/setup.py, found by
bench.core.registry.backend_part). Facts beside the answer, never weighed in it; the scorecard has a row of them."""

from __future__ import annotations

import re
import time
from types import ModuleType

from bench.backends.shared.setup import CHECKED, NO_RECORD, Fact
from bench.core.registry import PRIMARY, backend_part
from bench.report.sections import Bullets, Folded, Paragraph, ScoreRow, Section, Table, left

MEASURE = "what it takes to run"


def latest_record(frame):
    """The page's latest run that holds an environment fingerprint, None without one."""
    runs = [r for r in frame.sort_values("created_at")["record"] if r.environment]
    return runs[-1] if runs else None


def setup_module(backend: str) -> ModuleType | None:
    """The backend's own setup module (its FACTS and `installed`), None where it has none."""
    return backend_part(backend, "setup")


def cited(backend: str) -> tuple[Fact, ...]:
    module = setup_module(backend)
    return tuple(module.FACTS) if module else ()


def address(url: str) -> str:
    """A source as the page names it, without its scheme: the page links nowhere (it is self-contained)."""
    return re.sub(r"^https?://", "", url)


def backend_facts(frame) -> tuple[object, dict[str, dict]]:
    """(the latest run with an environment, backend -> its facts) for each of the primary pair on the page."""
    rec = latest_record(frame)
    env = rec.environment if rec is not None else {}
    on_page = set(frame["backend"])  # a page selected to one backend (--where) says nothing of the other
    modules = {b: setup_module(b) for b in PRIMARY if b in on_page}
    return rec, {
        b: m.installed(env) if m else dict.fromkeys(("installed", "took", "changes", "short"), NO_RECORD)
        for b, m in modules.items()
    }


def setup_rows(frame) -> list[ScoreRow]:
    """The scorecard's row of these facts: shown, never weighed (no winner, and `decides` False)."""
    rec, facts = backend_facts(frame)
    if rec is None or not facts:
        return []
    return [
        ScoreRow(
            MEASURE,
            "the set-up of the latest run's environment",
            {b: f["short"] for b, f in facts.items()},
            "-",
            "-",
            "facts, not compared (What it takes to run)",
            decides=False,
            compared="facts, not compared (What it takes to run)",
            test="-",
        )
    ]


def setup_section(frame) -> Section | None:
    """The section: how each backend was installed for the latest run and what that took, then each backend's cited
    facts with their sources and the day they were checked."""
    rec, facts = backend_facts(frame)
    if not facts:
        return None
    if rec is None:
        head = "No run on this page kept its environment: nothing is recorded of how its backends were installed."
    else:
        day = time.strftime("%Y-%m-%d", time.gmtime(rec.created_at))
        head = (
            f"How each backend was installed in the environment of this page's latest run ({rec.run_id}, {day}), "
            "from the record its set-up kept there; then what each backend's latest release supports, from its "
            f"public sources (checked {CHECKED}). Facts beside the answer, never weighed in it."
        )
    rows = [[b, f["installed"], f["took"], f["changes"]] for b, f in facts.items()]
    said = [
        f"{backend}, {fact.what}: {fact.said} (source: {address(fact.source)}, checked {CHECKED})"
        for backend in facts
        for fact in cited(backend)
    ]
    table = Table(
        [left("backend"), left("installed here"), left("time it took"), left("changes the build needed")], rows
    )
    sources = [Bullets(said)] if said else []
    # one line until opened: the page keeps its detail folded
    blocks = [
        Paragraph(head, "note"),
        Folded("how each backend was installed here, and what its latest release supports", [table, *sources]),
    ]
    return Section("setup", "What it takes to run", 65, blocks, nav="Set-up")
