"""Plain-text views for the terminal that are not a task's own: the table of stored runs."""

from __future__ import annotations

from bench.core.records import RunStatus


def runs_table(frame) -> str:
    """`bench list`: one line per stored run; the result column is the run's task's (Task.list_figure)."""
    rows = [("run", "when (UTC)", "status", "backend", "case", "world", "device", "batch", "threads", "result")]
    for _, r in frame.iterrows():
        rec = r["record"]
        status = r["status"] if r["status"] == RunStatus.OK else f"{r['status']}!"
        if r["shared"]:  # another bench run shared its cores: compared with nothing
            status += ", shared"
        rows.append((r["run_id"], r["created_at"].strftime("%Y-%m-%d %H:%M:%S"), status, r["backend"],
                     r["case"], str(r["world_size"]), r["device"], _count(r["batch_size"]), str(r["threads"]),
                     rec.task.list_figure(rec)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _count(value) -> str:
    """A whole number of the frame, or "-" where the run has none (a communication sweep's batch)."""
    try:
        return str(int(value))
    except (TypeError, ValueError):  # None, pandas' missing value, NaN
        return "-"
