"""Plain-text views for the terminal that are not a task's own: the table of stored runs."""

from __future__ import annotations

import time


def runs_table(records: list) -> str:
    """`bench list`: one line per stored run (RunRecords, in the order given); the result column is the run's task's
    (Task.list_figure). Built from the records themselves, without a frame: listing the latest runs of a large store
    reads only those."""
    rows = [("run", "when (UTC)", "status", "backend", "case", "world", "device", "batch", "threads", "result")]
    for rec in records:
        spec = rec.spec
        status = str(rec.status) if rec.ok else f"{rec.status}!"
        if rec.shared_with:  # another bench run shared its cores: compared with nothing
            status += ", shared"
        rows.append(
            (
                rec.run_id,
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rec.created_at)),
                status,
                spec.backend,
                rec.task.case(spec),
                str(spec.world_size),
                spec.device,
                "-" if spec.batch_size is None else str(spec.batch_size),
                str(spec.threads),
                rec.task.list_figure(rec),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
