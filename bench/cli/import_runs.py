"""`bench import RUN_DIR ...`: add runs to a store from their run directories (record.json), for a run whose
store could not be written when it ended, or runs copied from another machine."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.core.codec import RecordError
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError
from bench.core.inputs import RECORD_LIMIT, read_text_file, shown
from bench.core.records import RunRecord
from bench.core.rundir import RunDir


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "import",
        help="add runs to a store from their run directories (their record.json, checked "
        "against the directory's name and its spec.json)",
        epilog=examples(
            "bench import results/runs/RUN_ID", "bench import --store results/cluster.sqlite copied/runs/*"
        ),
        parents=[options.store()],
    )
    options.add(
        p,
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory holding record.json and spec.json, named after its run",
        invalid=["/nonexistent/run", "/", __file__, "/dev/null"],
    )
    p.set_defaults(func=cmd)


def read_json_file(path: Path):
    """A run file's JSON (a regular file, RECORD_LIMIT at most), or a one-line refusal."""
    text = read_text_file(path, "run file", RECORD_LIMIT)
    try:
        return json.loads(text)
    except ValueError:
        raise UsageError(f"{path} is not readable JSON") from None


def read_record(path: str):
    run_dir = RunDir(path)
    if not os.path.isdir(run_dir.path):  # os.path: False, not an error, for a name too long for the file system
        raise UsageError(f"{path} is not a run directory; give the folder of a run (it holds record.json)")
    if not os.path.lexists(run_dir.record_file):
        raise UsageError(
            f"{run_dir.record_file} does not exist; that run ended before its record was made, "
            "so there is nothing to import"
        )
    data = read_json_file(run_dir.record_file)
    raw_spec = copy.deepcopy(data.get("spec")) if isinstance(data, dict) else None  # before any upgrade
    try:
        record = RunRecord.from_dict(data)
    except RecordError as exc:
        raise UsageError(f"{run_dir.record_file} is not a run record this bench can read ({exc})") from None
    # the record must be this directory's: a record copied into another run's folder would be stored under a
    # run id whose files are not the ones beside it
    name = run_dir.path.resolve().name
    if name != record.run_id:
        raise UsageError(
            f"{run_dir.record_file} is the record of run {record.run_id}, but its directory is named "
            f"{shown(name)}; import the directory of run {record.run_id} itself"
        )
    if not os.path.lexists(run_dir.spec_file):
        raise UsageError(
            f"{run_dir.spec_file} does not exist; a run directory holds the spec it was launched with, "
            "so this folder is not a whole run directory"
        )
    if read_json_file(run_dir.spec_file) != raw_spec:
        raise UsageError(
            f"{run_dir.spec_file} is not the spec of the record beside it (run {record.run_id}); "
            "the directory holds another run's files"
        )
    return record


def cmd(args) -> int:
    records = [read_record(path) for path in args.run_dirs]  # every one checked before any is stored
    store = open_store(args.store)
    store.check_writable()
    for record in records:
        store.save(record)
        note(f"stored run {record.run_id} ({record.status}) from {Path(record.run_dir)} in {store.path}")
    return EXIT_OK
