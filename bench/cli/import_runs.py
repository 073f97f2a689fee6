"""`bench import RUN_DIR ...`: add runs to a store from their run directories (record.json), for a run whose
store could not be written when it ended, or runs copied from another machine."""

from __future__ import annotations

from pathlib import Path

from bench.cli import options
from bench.cli.common import open_store
from bench.core.codec import RecordError
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError
from bench.core.records import RunRecord
from bench.core.rundir import RunDir


def add_parser(verbs) -> None:
    p = verbs.add_parser("import", help="add runs to a store from their run directories (their record.json)",
                         parents=[options.store()])
    options.add(p, "run_dirs", nargs="+", metavar="RUN_DIR", help="a run directory holding record.json",
                invalid=["/nonexistent/run", "/", __file__])
    p.set_defaults(func=cmd)


def read_record(path: str):
    run_dir = RunDir(path)
    if not run_dir.path.is_dir():
        raise UsageError(f"{path} is not a run directory; give the folder of a run (it holds record.json)")
    if not run_dir.record_file.is_file():
        raise UsageError(f"{run_dir.record_file} does not exist; that run ended before its record was made, "
                         "so there is nothing to import")
    data = run_dir.read_json(run_dir.record_file)
    if data is None:
        raise UsageError(f"{run_dir.record_file} is not readable JSON")
    try:
        return RunRecord.from_dict(data)
    except RecordError as exc:
        raise UsageError(f"{run_dir.record_file} is not a run record this bench can read ({exc})") from None


def cmd(args) -> int:
    records = [read_record(path) for path in args.run_dirs]  # every one checked before any is stored
    store = open_store(args.store)
    store.check_writable()
    for record in records:
        store.save(record)
        note(f"stored run {record.run_id} ({record.status}) from {Path(record.run_dir)} in {store.path}")
    return EXIT_OK
