"""`bench testray up | down | status`: a real Ray cluster on the test hosts (a head node here with no CPUs, a worker
node on each host); bench/testbed/ray.py builds it."""

from __future__ import annotations

import time

from bench.cli import options
from bench.core.console import note
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED


def add_parser(verbs) -> None:
    p = verbs.add_parser("testray", help="a Ray cluster on the test hosts: the head node here, a worker node on each")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start it on the test hosts that are up (bench testhosts up N first), "
                                       "replacing one already up")
    options.add(up, "--cpus", type=options.positive_int, default=None, metavar="N",
                help="CPUs each host's node offers (default: this machine's CPUs shared by the hosts)",
                invalid=["0", "-1", "many"])
    actions.add_parser("down", help="stop every process of it and remove its files")
    actions.add_parser("status", help="each node and whether it is alive (exit 1 if not all are)")
    p.set_defaults(func=cmd)


def print_rows(rows: list[dict]) -> None:
    for row in rows:
        print(f"{row['name']:<12} {row['address']:<15} {row['cpus']:>3} CPU  {row['state']}")


def cmd(args) -> int:
    from bench.testbed import ray as testray

    testray.require_root()
    if args.action == "up":
        started = time.monotonic()
        hosts, address = testray.up(cpus=args.cpus, log=lambda text: note(f"bench testray: {text}"))
        note(f"bench testray: Ray cluster of {len(hosts)} worker node(s) ready in {time.monotonic() - started:.1f} s")
        print_rows(testray.status())
        print(testray.export_line())
        print(f"try: bench run --backend ray --nproc {len(hosts)} --ray-address {address}; "
              "remove: bench testray down (bench testhosts down also removes it)")
        return EXIT_OK
    if args.action == "down":
        removed = testray.down(log=lambda text: note(f"bench testray: {text}"))
        note("bench testray: " + ("Ray test cluster removed" if removed else "no Ray test cluster here; nothing to do"))
        return EXIT_OK
    rows = testray.status()
    if not rows:
        left = testray.leftovers()
        note("bench testray: no Ray test cluster is up" +
             (f"; left over: {', '.join(left)} (bench testray down removes them)" if left else ""))
        return EXIT_RUN_FAILED
    print_rows(rows)
    return EXIT_OK if testray.all_up(rows) else EXIT_RUN_FAILED
