"""What the verbs of the test clusters (testhosts, testslurm, testray) share: their progress lines, and how `down`
and `status` report."""

from __future__ import annotations

from bench.core.console import note
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED
from bench.testbed.protocol import Cluster


def progress(verb: str):
    """The `log` a test cluster's up() and down() take: a line on stderr, named after the verb."""
    return lambda text: note(f"bench {verb}: {text}")


def report_down(verb: str, removed: list[str], name: str) -> int:
    """Say what `bench VERB down` removed (the clusters' names), or that no `name` was here."""
    listed = ", ".join(removed[:-1]) + " and " + removed[-1] if len(removed) > 1 else "".join(removed)
    note(f"bench {verb}: " + (f"{listed} removed" if removed else f"no {name} here; nothing to do"))
    return EXIT_OK


def print_rows(rows: list[dict], line) -> None:
    """A cluster's status rows, each as line(row) writes it."""
    for row in rows:
        print(line(row))


def report_status(verb: str, cluster: Cluster, line, none_up: str) -> int:
    """Print the cluster's status rows (print_rows), exit 1 unless all of it is up; or say `none_up` and what is
    left over."""
    rows = cluster.status()
    if not rows:
        left = cluster.leftovers()
        note(
            f"bench {verb}: {none_up}"
            + (f"; left over: {', '.join(left)} (bench {verb} down removes them)" if left else "")
        )
        return EXIT_RUN_FAILED
    print_rows(rows, line)
    return EXIT_OK if cluster.all_up(rows) else EXIT_RUN_FAILED
