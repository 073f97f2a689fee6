"""`bench testslurm up | down | status`: a real Slurm cluster on the test hosts (slurmctld here, a slurmd on
each host, a munged of its own); bench/testbed/slurm.py builds it."""

from __future__ import annotations

import time

from bench.core.console import note
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED


def add_parser(verbs) -> None:
    p = verbs.add_parser("testslurm", help="a Slurm cluster on the test hosts: slurmctld here, a slurmd on each")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("up", help="start it on the test hosts that are up (bench testhosts up N first), "
                                  "replacing one already up")
    actions.add_parser("down", help="cancel its jobs, stop its daemons and remove its files")
    actions.add_parser("status", help="each node and its state in sinfo (exit 1 if not all are up)")
    p.set_defaults(func=cmd)


def print_rows(rows: list[dict]) -> None:
    for row in rows:
        print(f"{row['name']:<12} {row['address']:<15} {row['state']}")


def cmd(args) -> int:
    from bench.testbed import slurm as testslurm

    if args.action == "up":
        started = time.monotonic()
        hosts = testslurm.up(log=lambda text: note(f"bench testslurm: {text}"))
        note(f"bench testslurm: Slurm cluster {testslurm.CLUSTER} of {len(hosts)} node(s) ready in "
             f"{time.monotonic() - started:.1f} s")
        print_rows(testslurm.status())
        print(testslurm.export_line())
        print(f"try: srun -N{len(hosts)} hostname; remove: bench testslurm down (before bench testhosts down)")
        return EXIT_OK
    testslurm.require_root()
    if args.action == "down":
        removed = testslurm.down(log=lambda text: note(f"bench testslurm: {text}"))
        note("bench testslurm: " + ("Slurm test cluster removed" if removed else
                                    "no Slurm test cluster here; nothing to do"))
        return EXIT_OK
    rows = testslurm.status()
    if not rows:
        left = testslurm.leftovers()
        note("bench testslurm: no Slurm test cluster is up" +
             (f"; left over: {', '.join(left)} (bench testslurm down removes them)" if left else ""))
        return EXIT_RUN_FAILED
    print_rows(rows)
    return EXIT_OK if testslurm.all_up(rows) else EXIT_RUN_FAILED
