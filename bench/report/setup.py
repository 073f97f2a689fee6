"""The page's "What it takes to run": for each primary backend, how the environment of the page's latest run got it
and how long that took, what the build needed changed, from the set-up's own record that the run's fingerprint holds
(bench.core.environment.setup_record, written by bench.tools.horovod_build); then what its latest release supports,
from dated, cited facts (bench.report.setup_facts). Facts beside the answer, never weighed in it; the scorecard has a
row of them."""

from __future__ import annotations

import time

from bench.core.registry import PRIMARY
from bench.report.sections import Bullets, Paragraph, ScoreRow, Section, Table, left
from bench.report.setup_facts import CHECKED, FACTS

MEASURE = "what it takes to run"
NO_RECORD = "no set-up record"


def latest_record(frame):
    """The page's latest run that holds an environment fingerprint, None without one."""
    runs = [r for r in frame.sort_values("created_at")["record"] if r.environment]
    return runs[-1] if runs else None


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def horovod_facts(env: dict) -> dict:
    """How the environment got Horovod, in how long, and what its build changed, from the set-up's record; each
    said plainly as not recorded where the environment kept none."""
    record = env.get("horovod_setup")
    if not isinstance(record, dict):
        return {
            "installed": f"{NO_RECORD}: the runs' environment kept none (set up before its set-up recorded its "
            "Horovod build, or by other means)",
            "took": "not recorded",
            "changes": "not recorded",
            "short": NO_RECORD,
        }
    build = record.get("build") if isinstance(record.get("build"), dict) else {}
    version = build.get("horovod") or (env.get("packages") or {}).get("horovod") or "?"
    installed = f"Horovod {version} {record.get('how', 'installed')}, {record.get('installed', 'undated')}"
    took = []
    if build.get("build_seconds") is not None:
        against = f"torch {build.get('torch') or '?'}" + (
            f" and TensorFlow {build['tensorflow']}" if build.get("tensorflow") else ""
        )
        took.append(f"its build {minutes(build['build_seconds'])} ({build.get('built', 'undated')}, against {against})")
    else:
        took.append("its build's time not recorded")
    if record.get("install_seconds") is not None:
        took.append(f"this install {minutes(record['install_seconds'])}")
    changes = build.get("changes")
    changed = "; ".join(changes) if changes else ("none" if isinstance(changes, list) else "not recorded")
    short = (
        f"built from source in {minutes(build['build_seconds'])}, {len(changes or [])} change(s) to build"
        if build.get("build_seconds") is not None
        else f"Horovod {version}; its build not recorded"
    )
    return {"installed": installed, "took": "; ".join(took), "changes": changed, "short": short}


def elastic_facts(env: dict) -> dict:
    """torchrun ships with torch: nothing built; its version is the runs' torch."""
    torch = env.get("torch")
    if not torch:
        return {"installed": NO_RECORD, "took": "not recorded", "changes": "not recorded", "short": NO_RECORD}
    return {
        "installed": f"with torch {torch} (pip's wheel, a dependency of this project): torchrun is part of it",
        "took": "not recorded apart from torch's own install",
        "changes": "none: nothing is built",
        "short": f"ships with torch {torch}; nothing built",
    }


FACTS_OF = {"horovod": horovod_facts, "elastic": elastic_facts}


def backend_facts(frame) -> tuple[object, dict[str, dict]]:
    """(the latest run with an environment, backend -> its facts) for the primary pair; no facts without such a run."""
    rec = latest_record(frame)
    env = rec.environment if rec is not None else {}
    return rec, {b: FACTS_OF[b](env) for b in PRIMARY if b in FACTS_OF}


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
    cited = [
        f"{backend}, {fact.what}: {fact.said} (source: {fact.source}, checked {CHECKED})"
        for backend in facts
        for fact in FACTS.get(backend, ())
    ]
    blocks = [
        Paragraph(head, "note"),
        Table([left("backend"), left("installed here"), left("time it took"), left("changes the build needed")], rows),
    ]
    if cited:
        blocks.append(Bullets(cited))
    return Section("setup", "What it takes to run", 65, blocks, nav="Set-up")
