"""A sweep's plan and state as the store keeps them (bench.core.store: one row of its `sweeps` table per sweep), and
what the sweep's stored runs say against that plan: how many of its planned launches ran, and which are left.

A sweep is `running` from its start until its last planned launch has run (`complete`), or until it stops before
that (`interrupted`: Ctrl-C or SIGTERM, a launch refused after waiting for cores, an error). A row that still says
running while the bench process it names is gone (SIGKILL, an OOM kill, a reboot) is read as interrupted: nothing is
left to finish it. A planned launch has run when the sweep holds a record of it whose status is not `interrupted`:
an interrupted launch measured nothing and is run again on resume, while one that failed on its own is the sweep's
result, as it would be in a sweep never interrupted. Launches are matched to the plan by their whole spec (which
round, which link, every option), so each planned launch is counted, and run again, at most once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass

from bench.core.codec import RecordError, dumps
from bench.core.errors import UsageError
from bench.core.records import SCHEMA_VERSION, RunStatus
from bench.core.spec import RunSpec
from bench.core.stats import Looks

RUNNING, COMPLETE, INTERRUPTED = "running", "complete", "interrupted"
STATES = (RUNNING, COMPLETE, INTERRUPTED)
GONE = "its bench process ended without marking it (killed, or its machine restarted)"


def this_process() -> dict:
    """The owner a sweep's row names while this process runs it: host, pid and the process's start time (a pid
    reused by another process since is not taken for it)."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(), "started": psutil.Process().create_time()}


def owner_alive(owner: dict | None) -> bool | None:
    """Whether the bench process a row names still runs; None where that cannot be told from here (another host)."""
    import psutil

    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return False
    if owner.get("host") != socket.gethostname():
        return None
    try:
        proc = psutil.Process(owner["pid"])
        return (
            abs(proc.create_time() - float(owner.get("started") or 0)) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.Error, TypeError, ValueError):
        return False


def plan_text(specs: list[RunSpec], code: dict | None, sequential: dict | None = None) -> str:
    """A plan as the store keeps it: the specs of every planned launch in order, the schema they were written with,
    and the code (commit, changes) that planned them; for a sweep that adds launches until it is sure (`bench sweep
    --resolution`), its `sequential` settings: resolution, timeout_s, spent_s (seconds of added launches so far),
    first and most (its Looks, once fixed)."""
    plan = {"schema_version": SCHEMA_VERSION, "code": code, "specs": [s.to_dict() for s in specs]}
    return dumps(plan | ({"sequential": sequential} if sequential else {}))


def sequential_of(row: dict) -> dict | None:
    """The `sequential` settings of a sweep's row (plan_text), None for a sweep of fixed launches or a plan that
    cannot be read."""
    try:
        found = json.loads(row["plan"]).get("sequential")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def looks_of(rows: list[dict]) -> dict[str, Looks]:
    """sweep id -> the Looks of each sweep of `rows` that looked at its comparisons after its rounds: the page
    judges those comparisons at the share of the look where the sweep left them (bench.core.stats.sequential)."""
    out = {}
    for row in rows:
        settings = sequential_of(row) or {}
        try:
            out[row["sweep_id"]] = Looks(int(settings["first"]), int(settings["most"]))
        except (KeyError, TypeError, ValueError):
            continue  # not sequential, or stopped before its first look fixed them
    return out


def plan_of(row: dict) -> tuple[list[RunSpec], dict | None]:
    """(the planned specs, the code that planned them) of a sweep's row, or a one-line UsageError where this bench
    cannot run that plan."""
    where = f"sweep {row['sweep_id']}"
    try:
        data = json.loads(row["plan"])
        version = data["schema_version"]
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"{where}: its stored plan cannot be read ({type(exc).__name__}); start a new sweep") from None
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"{where} was planned by a bench of record schema {version}, and this one writes "
            f"{SCHEMA_VERSION}: its launches would not be the ones planned; resume it with that bench, "
            "or start a new sweep"
        )
    try:
        specs = [RunSpec.from_dict(spec) for spec in data["specs"]]
    except (RecordError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(
            f"{where}: its stored plan cannot be read ({' '.join(str(exc).split())}); start a new sweep"
        ) from None
    return specs, data.get("code")


def launch_key(spec: RunSpec) -> str:
    """What identifies one planned launch: its whole spec."""
    return dumps(spec.to_dict(), sort_keys=True)


def ran(records: list) -> list:
    """The records of launches that ran (every status but `interrupted`)."""
    return [r for r in records if r.status != RunStatus.INTERRUPTED]


def missing_launches(specs: list[RunSpec], records: list) -> list[RunSpec]:
    """The planned launches (in plan order) that no record of a launch that ran answers."""
    have = Counter(launch_key(r.spec) for r in ran(records))
    left = []
    for spec in specs:
        key = launch_key(spec)
        if have[key]:
            have[key] -= 1
        else:
            left.append(spec)
    return left


def launches(records: list) -> list:
    """A sweep's records without the interrupted launches run again later (by a resume) under the same spec: the
    sweep's launches, in the records' order."""
    again = {launch_key(r.spec) for r in ran(records)}
    return [r for r in records if r.status != RunStatus.INTERRUPTED or launch_key(r.spec) not in again]


@dataclass
class SweepStatus:
    """One sweep as its row and its records say: its state now (a running row whose process is gone: interrupted)."""

    sweep_id: str
    title: str
    description: str
    state: str
    why: str | None
    planned: int
    ran: int  # its planned launches that ran
    created_at: float
    owner: dict | None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    @property
    def started(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created_at))

    def sentence(self) -> str:
        """The sweep's state in one sentence, for the page and the command line."""
        head = f"Sweep {self.sweep_id} ({self.title}, started {self.started})"
        if self.state == COMPLETE:
            return f"{head} is complete: all {self.planned} of its planned launches ran."
        if self.state == RUNNING:
            owner = self.owner or {}
            return (
                f"{head} is still running (bench process {owner.get('pid')} on {owner.get('host')}): {self.ran} of "
                f"its {self.planned} planned launches have run so far, so what it measured is shown part-way."
            )
        why = self.why or "stopped before its plan ended"
        resume = f"`bench sweep --resume {self.sweep_id}` (with its --store)"
        if self.ran >= self.planned:
            return (
                f"{head} was interrupted ({why}) after all {self.planned} of its planned launches ran; {resume} "
                "marks it complete."
            )
        return (
            f"{head} was interrupted ({why}): only {self.ran} of its {self.planned} planned launches ran, and its "
            f"figures rest on those alone; {resume} runs the other {self.planned - self.ran}."
        )


def sweep_status(row: dict, records: list) -> SweepStatus:
    """The status of a sweep from its row and its records (those with its sweep id)."""
    owner = None
    try:
        owner = json.loads(row["owner"]) if row.get("owner") else None
    except ValueError:
        pass
    state, why = row["state"], row.get("why")
    if state == RUNNING and owner_alive(owner) is False:
        state, why = INTERRUPTED, GONE
    elif state not in STATES:  # written by a newer bench: not known to be complete
        state, why = INTERRUPTED, f"its state is {state!r}, which this bench does not know"
    return SweepStatus(
        row["sweep_id"],
        row["title"],
        row["description"],
        state,
        why,
        int(row["planned"]),
        min(int(row["planned"]), len(ran(records))),
        row["created_at"],
        owner,
    )


def sweep_statuses(rows: list[dict], records: list) -> dict[str, SweepStatus]:
    """sweep id -> its status, for every sweep row of a store (`records`: the store's runs, any of them)."""
    mine: dict[str, list] = {}
    for rec in records:
        if rec.spec.sweep_id:
            mine.setdefault(rec.spec.sweep_id, []).append(rec)
    return {row["sweep_id"]: sweep_status(row, mine.get(row["sweep_id"], [])) for row in rows}
