"""`bench testray up | down | status`: a real Ray cluster on the test hosts (a head node here with no CPUs, a worker
node on each host); bench/testbed/ray.py builds it."""

from __future__ import annotations

import time

from bench.cli import options
from bench.cli.common import examples
from bench.cli.testbed_verbs import print_rows, progress, report_down, report_status
from bench.core.console import note
from bench.core.errors import EXIT_OK
from bench.testbed import ray as testray
from bench.testbed.protocol import require_root

ROW = "{name:<12} {address:<15} {cpus:>3} CPU  {state}"  # a status row


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "testray",
        help="a Ray cluster on the test hosts: the head node here, a worker node on each",
        epilog=examples(
            "bench testray up --cpus 1   # after bench testhosts up N", "bench testray status", "bench testray down"
        ),
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up", help="start it on the test hosts that are up (bench testhosts up N first), replacing one already up"
    )
    options.add(
        up,
        "--cpus",
        type=options.positive_int,
        default=None,
        metavar="N",
        help="CPUs each host's node offers (default: this machine's CPUs shared by the hosts)",
        invalid=["0", "-1", "many"],
    )
    actions.add_parser("down", help="stop every process of it and remove its files")
    actions.add_parser("status", help="each node and whether it is alive (exit 1 if not all are)")
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    log = progress("testray")
    require_root(testray.ROOT_ONLY)
    if args.action == "up":
        started = time.monotonic()
        hosts, address = testray.up(cpus=args.cpus, log=log)
        note(f"bench testray: Ray cluster of {len(hosts)} worker node(s) ready in {time.monotonic() - started:.1f} s")
        print_rows(testray.status(), ROW.format_map)
        print(testray.export_line())
        print(
            f"try: bench run --backend ray --nproc {len(hosts)} --ray-address {address}; "
            "remove: bench testray down (bench testhosts down also removes it)"
        )
        return EXIT_OK
    if args.action == "down":
        return report_down("testray", [testray.NAME] if testray.down(log=log) else [], testray.NAME)
    return report_status("testray", testray, ROW.format_map, f"no {testray.NAME} is up")
