"""`bench import RUN_DIR ...`: add runs to a store from their run directories (record.json), for a run whose
store could not be written when it ended, or runs copied from another machine; `bench import -`: from the record
lines of a log on stdin (`bench run --record-lines`, as in a Kubeflow job's pods: kubectl logs POD | bench import -)."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.core.codec import RECORD_LINE_MARK, RecordError, parse_json, read_record_line
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError
from bench.core.inputs import RECORD_LIMIT, RUNS_FILE_LIMIT, read_text_file, shown
from bench.core.records import RunRecord
from bench.core.rundir import RunDir, write_atomic
from bench.core.store import os_reason
from bench.harness.keep import drop_spare, spare_folder


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "import",
        help="add runs to a store from their run directories (their record.json, checked "
        "against the directory's name and its spec.json)",
        epilog=examples(
            "bench import results/runs/RUN_ID",
            "bench import --store results/cluster.sqlite copied/runs/*",
            "bench import --store results/k8s.sqlite - < master.log   # kubectl logs bench-master-0 > master.log",
        ),
        parents=[options.store()],
    )
    options.add(
        p,
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory holding record.json and spec.json, named after its run; or -, alone: the record lines "
        "(bench run --record-lines) of a log read from stdin, its other lines passed over",
        invalid=["/nonexistent/run", "/", __file__, "/dev/null"],
    )
    p.set_defaults(func=cmd)


def read_json_file(path: Path):
    """A run file's JSON (a regular file, RECORD_LIMIT at most, nested MAX_DEPTH levels at most), or a one-line
    refusal."""
    text = read_text_file(path, "run file", RECORD_LIMIT)
    try:
        return parse_json(text)
    except RecordError as exc:
        raise UsageError(f"{path} is not a run file this bench reads: {exc}") from None
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


def read_record_lines(stream) -> list[RunRecord]:
    """The records of the marked lines of a log (bench.core.codec.record_line), each once; a marked line that is cut,
    changed or not a record this bench reads is refused, naming its line."""
    data = stream.read(RUNS_FILE_LIMIT + 1)
    if len(data) > RUNS_FILE_LIMIT:
        raise UsageError(f"stdin holds more than {RUNS_FILE_LIMIT // 2**20} MiB; give the log of the pods that record")
    records: dict[str, RunRecord] = {}
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            found = read_record_line(line)
            if found is None:
                continue
            record = RunRecord.from_dict(found)
        except RecordError as exc:
            raise UsageError(f"stdin line {number}: a {RECORD_LINE_MARK} line, but {exc}; nothing was stored") from None
        records.setdefault(record.run_id, record)  # a log read twice, or two pods' logs, may hold a line twice
    if not records:
        raise UsageError(
            f"no {RECORD_LINE_MARK} line on stdin: give the log of the pod that records the run "
            "(kubectl logs POD | bench import -), made with bench run --record-lines"
        )
    return list(records.values())


def settle_spare(record: RunRecord, folder: Path) -> str:
    """After `record` is stored from `folder`: where that is the run's spare folder (bench.harness.keep: the copy kept
    in the temporary directory when neither the store nor the run directory could take the record), the copy goes
    back to the run's own directory if that lacks its record.json (as the next command on the store would put it
    there), and the spare folder is removed. Where the run directory still cannot take it, the folder is kept, the
    only file that holds the record. Until the record is stored (an import refused or failed) it is always kept.
    Returns what became of the folder, in words ("" for a folder that is no spare folder)."""
    try:
        if folder.resolve() != spare_folder(record.run_id).resolve():
            return ""
    except OSError:
        return ""
    own = RunDir(record.run_dir)
    if own.path.is_dir() and not os.path.lexists(own.record_file):
        try:
            write_atomic(own.record_file, (folder / own.record_file.name).read_bytes())
        except OSError as exc:
            return f"; its copy is kept in {folder}, as {own.path} cannot take it ({os_reason(exc)})"
    drop_spare(record.run_id)  # (which leaves a folder in a temporary directory that is not this user's own)
    return "" if os.path.lexists(folder) else f"; its kept copy in {folder} is removed"


def cmd(args) -> int:
    from_stdin = "-" in args.run_dirs
    if from_stdin and len(args.run_dirs) > 1:
        raise UsageError("-, the record lines on stdin, comes alone: import the run directories in another call")
    if from_stdin:
        read = [(record, None) for record in read_record_lines(sys.stdin.buffer)]
    else:  # every one checked before any is stored
        read = [(read_record(path), Path(path)) for path in args.run_dirs]
    store = open_store(args.store)
    store.check_writable()
    stored = store.stored_run_ids([r.run_id for r, _ in read]) if from_stdin else set()
    for record, folder in read:
        if record.run_id in stored:  # a record line is its run's last word: the store's copy is the same run
            note(f"run {record.run_id} is already in {store.path}: not stored again")
            continue
        store.save(record)
        where = "stdin" if folder is None else Path(record.run_dir)
        settled = "" if folder is None else settle_spare(record, folder)
        note(f"stored run {record.run_id} ({record.status}) from {where} in {store.path}{settled}")
    return EXIT_OK
