"""`bench testhosts up N | down | status`: real network hosts on this machine (network namespaces with
their own address, hostname and sshd) for multi-host runs; bench/testbed/hosts.py builds them. `down` takes the
Slurm and Ray test clusters on them down first (bench.testbed.teardown)."""

from __future__ import annotations

import time

from bench.cli.common import examples
from bench.cli.testbed_verbs import progress, report_down, report_status
from bench.core.console import note
from bench.core.errors import EXIT_OK
from bench.testbed import hosts as testhosts
from bench.testbed import teardown
from bench.testbed.hosts import DEFAULT_SUBNET, MAX_HOSTS
from bench.testbed.protocol import require_usable


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "testhosts",
        help="test hosts on this machine: network namespaces with their own sshd",
        epilog=examples(
            "bench testhosts up 2         # two hosts, each with its own address and sshd",
            "bench testhosts status",
            "bench testhosts down       # also takes down the clusters on them",
        ),
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help=f"build N test hosts (1 to {MAX_HOSTS}), replacing any already up")
    n = up.add_argument("n", type=int, metavar="N", help="how many hosts")
    subnet = up.add_argument(
        "--subnet",
        default=DEFAULT_SUBNET,
        help=f"a private /24 for the hosts; the bridge gets .1, host i .(10+i) ({DEFAULT_SUBNET})",
    )
    # the values each must refuse, as every option declares them (bench.cli.options)
    n.invalid, n.valid_because, n.needs = ("0", "51", "-1", "two", ""), None, ()
    subnet.invalid, subnet.valid_because, subnet.needs = (
        ("8.8.8.0/24", "192.0.2.0/24", "10.1.0.0/16", "10.213.7.5/24", "fd00::/64", "lan", ""),
        None,
        ("2",),
    )
    actions.add_parser("down", help="remove the test hosts and everything they put on this machine")
    actions.add_parser("status", help="the test hosts, their sshd and whether ssh reaches them (exit 1 if not all)")
    p.set_defaults(func=cmd)


def row_line(row: dict) -> str:
    sshd = f"sshd pid {row['sshd_pid']}" if row["sshd_pid"] else "sshd not running"
    return f"{row['name']:<12} {row['address']:<15} {sshd:<16} ssh {row['ssh']}"


def cmd(args) -> int:
    if args.action == "up":
        testhosts.plan(args.n, args.subnet)  # bad input refused before anything is checked or touched
        started = time.monotonic()
        # hosts replaced, or a failed set-up rolled back, take the clusters on them along
        hosts = testhosts.up(args.n, args.subnet, log=progress("testhosts"), take_down=teardown.down)
        note(f"bench testhosts: {len(hosts)} test host(s) ready in {time.monotonic() - started:.1f} s")
        for h in hosts:
            print(f"{h.name:<12} {h.address:<15} sshd pid {testhosts.sshd_pid(h)}")
        print(f"--hosts {testhosts.hosts_option(hosts)}")
        print(f"hostfile {testhosts.hostfile()}")
        print(f"try: ssh {hosts[0].address} hostname; remove: bench testhosts down")
        return EXIT_OK
    require_usable(testhosts.unavailable_reason())
    if args.action == "down":
        return report_down("testhosts", teardown.down(progress("testhosts")), testhosts.NAME)
    return report_status("testhosts", testhosts, row_line, "no test hosts are up")
