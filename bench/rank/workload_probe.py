"""The process that loads and checks a user's own workload before a run (`python -m bench.rank.workload_probe
ADDRESS [--data]`, started by bench.harness.workload_check): the user's code, and torch with it, run here and
never in bench's own process."""

from __future__ import annotations

import sys

from bench.rank.answer import answer_parent


def main(argv: list[str]) -> int:
    """`python -m bench.rank.workload_probe ADDRESS [--data]`: the user's workload loaded and checked
    (workloads.external.probe), its answer one line of JSON on the stdout this process was started with:
    {"answer": probe's} or {"error": the one-line refusal}. What the user's code prints goes to stderr, never into
    the answer."""
    from workloads import WorkloadError  # the workload's code, and torch with it, in this process only
    from workloads.external import probe

    return answer_parent(lambda: probe(argv[0], with_data="--data" in argv[1:]), (WorkloadError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
