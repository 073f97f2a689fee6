"""`bench agreement`: do stored sweeps of the same code agree? Each comparison the report makes, taken from
each sweep on its own; exit 1 when two sweeps contradict each other or disagree beyond their resolution."""

from __future__ import annotations

from bench.cli import options
from bench.cli.common import comma_list, examples, open_store, print_json
from bench.core.errors import EXIT_OK, EXIT_RUN_FAILED, UsageError
from bench.report.agreement_table import format_agreement
from bench.results.agreement import agreement, disagree
from bench.results.sweeps import looks_of


def add_parser(verbs) -> None:
    p = verbs.add_parser(
        "agreement",
        help="compare the verdicts of stored sweeps; exit 1 when two contradict "
        "each other or disagree beyond their resolution",
        epilog=examples(
            "bench agreement --store results/bench.sqlite   # every sweep stored there",
            "bench agreement --sweeps SWEEP_A,SWEEP_B --json",
        ),
        parents=[options.store(), options.json_output()],
    )
    options.add(
        p,
        "--sweeps",
        type=options.id_names,
        metavar="ID,ID,...",
        help="comma-separated sweeps to compare (default: every sweep in the store)",
        invalid=["../x", "s1,a/b"],
    )
    p.set_defaults(func=cmd)


def cmd(args) -> int:
    store = open_store(args.store)
    sweeps: dict[str, list] = {}
    for rec in store.records():
        if rec.spec.sweep_id:
            sweeps.setdefault(rec.spec.sweep_id, []).append(rec)
    wanted = comma_list(args.sweeps)
    if wanted:
        missing = [s for s in wanted if s not in sweeps]
        if missing:
            raise UsageError(
                f"no sweep {', '.join(missing)} in {store.path}; stored: {', '.join(sorted(sweeps)) or 'none'}"
            )
        sweeps = {s: sweeps[s] for s in wanted}
    if len(sweeps) < 2:
        raise UsageError(
            f"{store.path} holds {len(sweeps)} sweep(s); agreement needs two or more "
            "(run `bench sweep` again into the same store)"
        )
    result = agreement(sweeps, looks_of(store.sweeps()))
    if args.json:
        print_json(
            {
                "sweeps": result["sweeps"],
                "claims": {
                    s: {
                        k: {
                            "ratio": c.estimate.ratio,
                            "low": c.estimate.low,
                            "high": c.estimate.high,
                            "significant": c.estimate.significant,
                            "launches": c.estimate.launches,
                        }
                        for k, c in cl.items()
                    }
                    for s, cl in result["claims"].items()
                },
                "contradictions": [
                    {"sweeps": list(pair), "comparisons": keys} for pair, keys in result["pairs"].items() if keys
                ],
                "beyond_resolution": [
                    {"sweeps": list(pair), "comparisons": keys} for pair, keys in result["apart"].items() if keys
                ],
            }
        )
    else:
        print(format_agreement(result))
    return EXIT_RUN_FAILED if disagree(result) else EXIT_OK
