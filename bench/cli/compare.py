"""`bench compare`: runs against a baseline, metric by metric (exit 1 on a significant regression), or an
A/A calibration of the gate on stored sweeps."""

from __future__ import annotations

import os

from bench.cli import options
from bench.cli.common import examples, open_store, print_json
from bench.core.console import note
from bench.core.errors import EXIT_OK, UsageError
from bench.results.baselines import BASELINE_DIR, BASELINE_FILE, latest_sweep, read_runs_file
from bench.results.gate import aa_rates, format_aa
from bench.workflows.regress import compare_and_print, this_host


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "compare",
        help="compare runs with a baseline, metric by metric; exit 1 on a significant regression",
        epilog=examples(
            "bench compare --baseline results/baselines/cpu-gloo.json   # the latest sweep stored",
            "bench compare --baseline results/baselines/cpu-gloo.json --store results/bench.sqlite --sweep SWEEP_ID",
            "bench compare --aa --store results/bench.sqlite   # how often the gate fails A/A",
        ),
        parents=[options.store(), options.parent(None, ["--sweep"]), options.json_output()],
    )
    not_runs_files = ["/nonexistent/baseline.json", "/", options.LONG_PATH, __file__]
    options.add(
        p,
        "--baseline",
        metavar="FILE",
        help=f"baseline file (from `bench baseline`; the committed one is {os.path.join(BASELINE_DIR, BASELINE_FILE)})",
        invalid=not_runs_files,
    )
    options.add(
        p,
        "--current",
        metavar="FILE",
        help="runs to judge, as a baseline-format file (instead of a sweep "
        "in --store; default: the latest sweep there)",
        invalid=not_runs_files,
        needs=["--baseline", os.path.join(BASELINE_DIR, BASELINE_FILE)],
    )
    p.add_argument(
        "--aa",
        action="store_true",
        help="A/A calibration: compare every pair of sweeps in --store (same code, same machine) and print "
        "how often the gate would have failed",
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    if args.aa:
        return compare_aa(args)
    if not args.baseline:
        raise UsageError("give --baseline FILE (from `bench baseline`), or --aa to calibrate on stored sweeps")
    if args.store and args.current:
        raise UsageError("give either --store (the latest sweep stored there) or --current FILE, not both")
    baseline = read_runs_file(args.baseline, "baseline")
    machine = None
    if args.current:
        given = read_runs_file(args.current, "current")
        current, machine = given["records"], given["machine"]
    else:
        store = open_store(args.store)
        sweep_id, current = latest_sweep(store.records(), args.sweep)
        if not current:
            raise UsageError(
                f"no sweep {'named ' + args.sweep + ' ' if args.sweep else ''}in {store.path}; "
                "run `bench sweep` (or `bench regress`) first, or give --current FILE"
            )
        note(
            f"bench compare: baseline {args.baseline} (sweep {baseline.get('sweep_id')}) vs sweep "
            f"{sweep_id} in {store.path}"
        )
        machine = this_host_if_made_here(current)
    code, _ = compare_and_print(baseline, current, args.json, machine=machine)
    return code


def this_host_if_made_here(records: list) -> dict | None:
    """Runs made on this host get its calibration, measured now; runs from elsewhere none (their absolute
    figures are then not gated)."""
    import socket

    hosts = {r.environment.get("hostname") for r in records}
    return this_host(records) if hosts == {socket.gethostname()} else None


def compare_aa(args) -> int:
    if args.baseline or args.current:
        raise UsageError("--aa compares the sweeps of --store with each other; drop --baseline/--current")
    store = open_store(args.store)
    sweeps: dict[str, list] = {}
    for rec in store.records():
        if rec.spec.sweep_id:
            sweeps.setdefault(rec.spec.sweep_id, []).append(rec)
    if len(sweeps) < 2:
        raise UsageError(
            f"--aa needs two sweeps or more of the same matrix in {store.path} "
            f"(found {len(sweeps)}); run `bench sweep` again with the same arguments"
        )
    rows, pairs = aa_rates(sweeps)
    if args.json:
        print_json({"pairs": pairs, "sweeps": list(sweeps), "rows": rows})
    else:
        print(format_aa(rows, pairs))
    return EXIT_OK
