"""`bench report`: a single-file HTML report of stored runs."""

from __future__ import annotations

import os

from bench.cli import options
from bench.cli.common import examples, open_store, report_page
from bench.core.errors import EXIT_OK
from bench.core.inputs import printable
from bench.core.store import collector_paused


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "report",
        help="write a single-file HTML report",
        parents=[
            options.store(),
            options.parent(
                None,
                ["--output"],
                helps={
                    "--output": (
                        "HTML file to write (default %(default)s, since writing the page is what this verb does)"
                    )
                },
                output=os.path.join("reports", "report.html"),
            ),
        ],
        epilog=examples(
            "bench report -o reports/report.html   # the decision page, one file",
            "bench report --where backend=elastic,horovod --where workload=resnet18 -o r.html",
        ),
    )
    options.add(
        p,
        "--where",
        action="append",
        metavar="KEY=V1,V2",
        help="keep runs whose KEY (a `bench list` column: backend, workload, world_size, device, status, "
        "sweep_id, ...) is one of the values; repeatable (default: every run)",
        invalid=["backend", "nokey=1", "=x"],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    # a page is made once, from records that live until it is written: the collector's passes over them would be
    # a third of a large store's report (the cyclic garbage its plots leave, tens of MB, is collected after it)
    with collector_paused():
        path = report_page().write_report(open_store(args.store), args.output, args.where)
    print(f"report written to {printable(str(path))}")
    return EXIT_OK
