"""`bench list`: stored runs as a table."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import examples, open_store
from bench.core.console import note
from bench.core.errors import EXIT_OK
from bench.core.inputs import printable
from bench.harness.keep import kept_record
from bench.harness.lifeline import unrecorded
from bench.results.listing import runs_table


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "list",
        help="stored runs as a table",
        parents=[options.store()],
        epilog=examples("bench list", "bench list --last 20 --store results/cluster.sqlite"),
    )
    options.add(
        p,
        "--last",
        type=options.positive_int,
        metavar="N",
        help="only the last N runs (default: all)",
        invalid=["0", "x"],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    store = open_store(args.store)
    records = store.records(last=args.last)
    print(printable(runs_table(records) if records else f"no runs stored in {store.path}"))
    for run_dir, _ in unrecorded(store):
        kept = kept_record(run_dir)
        if kept is not None:
            data, file = kept
            note(
                f"bench list: run {run_dir.path.name} ended {data.get('status')} but is not stored yet (its record is "
                f"kept in {file}); the next run on this store stores it, or `bench import {file.parent} --store "
                f"{store.path}`"
            )
        else:
            note(
                f"bench list: run {run_dir.path.name} was abandoned (its bench process died) and is not stored yet; "
                "the next run on this store records it"
            )
    return EXIT_OK
