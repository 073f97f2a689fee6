"""`bench testslurm up | down | status`: a real Slurm cluster on the test hosts (slurmctld here, a slurmd on
each host, a munged of its own); bench/testbed/slurm.py builds it."""

from __future__ import annotations

import time

from bench.cli.common import examples
from bench.cli.testbed_verbs import print_rows, progress, report_down, report_status
from bench.core.console import note
from bench.core.errors import EXIT_OK
from bench.testbed import slurm as testslurm
from bench.testbed.protocol import require_root

ROW = "{name:<12} {address:<15} {state}"  # a status row


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "testslurm",
        help="a Slurm cluster on the test hosts: slurmctld here, a slurmd on each",
        epilog=examples(
            "bench testslurm up       # after bench testhosts up N", "bench testslurm status", "bench testslurm down"
        ),
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "up", help="start it on the test hosts that are up (bench testhosts up N first), replacing one already up"
    )
    actions.add_parser("down", help="cancel its jobs, stop its daemons and remove its files")
    actions.add_parser("status", help="each node and its state in sinfo (exit 1 if not all are up)")
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    log = progress("testslurm")
    if args.action == "up":
        started = time.monotonic()
        hosts = testslurm.up(log=log)
        note(
            f"bench testslurm: Slurm cluster {testslurm.CLUSTER} of {len(hosts)} node(s) ready in "
            f"{time.monotonic() - started:.1f} s"
        )
        print_rows(testslurm.status(), ROW.format_map)
        print(testslurm.export_line())
        print(f"try: srun -N{len(hosts)} hostname; remove: bench testslurm down (before bench testhosts down)")
        return EXIT_OK
    require_root(testslurm.ROOT_ONLY)
    if args.action == "down":
        return report_down("testslurm", [testslurm.NAME] if testslurm.down(log=log) else [], testslurm.NAME)
    return report_status("testslurm", testslurm, ROW.format_map, f"no {testslurm.NAME} is up")
