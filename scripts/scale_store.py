"""A large store for measuring `bench list` and `bench report` at scale (docs/studies/store-scale.md): the runs of
a store copied until there are RUNS of them, each copy with fresh run ids and sweep ids and moved later in time,
so that every copy is a new set of launches and the page's latest launches are the last copy's.

Rows are copied as they are stored (each record in the schema it was written with, read through its upgrades as
any old store is), into a copy of the source file, so the store made has the source's table layout.

Usage: python scripts/scale_store.py [--source reports/sample/bench.sqlite] [--runs 30000] TARGET
Standard library only: it makes the same store for any version of bench.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "reports" / "sample" / "bench.sqlite"


def run_id_at(created_at: float, rng: random.Random) -> str:
    """A run id as bench makes one (bench.harness.runner.new_run_id), for a run started at `created_at`."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(created_at)) + "-" + f"{rng.getrandbits(24):06x}"


def copied(columns: list[str], row: tuple, shift: float, ids: dict, rng: random.Random) -> tuple:
    """One stored row as a run `shift` seconds later, with a fresh run id and its sweep's fresh id (`ids`: old id ->
    new id within one copy, so that the runs of a sweep stay one sweep)."""
    values = dict(zip(columns, row))
    record = json.loads(values["record"])
    created_at = values["created_at"] + shift
    run_id = run_id_at(created_at, rng)
    old_sweep = values.get("sweep_id")
    sweep_id = ids.setdefault(old_sweep, run_id_at(created_at, rng)) if old_sweep else None
    record.update(
        run_id=run_id, created_at=record["created_at"] + shift, run_dir=str(Path(record["run_dir"]).parent / run_id)
    )
    record["spec"]["sweep_id"] = sweep_id
    values.update(run_id=run_id, created_at=created_at, sweep_id=sweep_id, record=json.dumps(record, allow_nan=False))
    return tuple(values[c] for c in columns)


def scale(source: Path, target: Path, runs: int, seed: int = 0) -> int:
    shutil.copyfile(source, target)
    rng = random.Random(seed)
    with contextlib.closing(sqlite3.connect(target)) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM runs ORDER BY created_at").fetchall()
        first, last = rows[0][columns.index("created_at")], rows[-1][columns.index("created_at")]
        span = last - first + 86400.0  # each copy a day after the one before it ends
        with conn:
            for k in range(1, math.ceil(runs / len(rows))):
                ids: dict = {}
                conn.executemany(
                    f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                    [copied(columns, row, k * span, ids, rng) for row in rows],
                )
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", type=Path, help="the store to write (replaced if it exists)")
    p.add_argument("--source", type=Path, default=SAMPLE, help="the store whose runs are copied (default: the sample)")
    p.add_argument("--runs", type=int, default=30000, help="at least this many runs (whole copies of the source)")
    args = p.parse_args(argv)
    if not args.source.is_file():
        p.error(f"no store at {args.source}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    for suffix in ("-wal", "-shm"):
        Path(f"{args.target}{suffix}").unlink(missing_ok=True)
    print(f"{scale(args.source, args.target, args.runs)} runs in {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
