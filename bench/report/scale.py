"""The page's "At your scale" section: the scaling model (bench.projection) fitted on the page's runs on one host,
projected to the named cluster profiles up to 1,024 workers, with the N where the predicted fastest backend changes,
and the model's error against the page's runs across test hosts that it was not fitted on. Every figure here is a
model projection, and the section says so wherever one is shown."""

from __future__ import annotations

from bench.core.registry import PROJECTED
from bench.projection.clusters import PROFILES, profile
from bench.projection.fit import cases_in, fit_backends, gives
from bench.projection.model import SCOPE, crossover, fastest_words, project
from bench.projection.published import track_record
from bench.projection.validate import GOAL_MEDIAN, GOAL_WORST, validate
from bench.report.sections import (
    Bullets,
    Paragraph,
    Plot,
    Section,
    Table,
    advantage,
    at_least_zero,
    code,
    colour_of,
    figure_png,
    fmt,
    left,
    pyplot,
    right,
    strong,
)

SHOWN_AT = (2, 8, 64, 1024)  # worker counts the table gives
ORDER = 35  # after "Where the time goes", before startup


def scale_section(records: list) -> Section | None:
    """The section; where the page has no run the model can start from, what to run for one; None on a page with no
    training run at all."""
    cases = cases_in(records)
    if not cases:
        if not any(gives(r, "step") for r in records):
            return None
        return Section(
            "scale",
            "At your scale (model projection)",
            ORDER,
            [
                Paragraph(
                    [
                        "Nothing to project: the scaling model starts from a plain-loop run at one worker with its "
                        "warm-up profiled (runs recorded by older versions of bench have none). Run ",
                        code("bench sweep --world-sizes 1,2"),
                        " (or ",
                        code("nox -s bench"),
                        "), then this section projects each backend to the cluster profiles; "
                        "docs/studies/projection.md shows it checked on runs across test hosts.",
                    ],
                    "note",
                )
            ],
            nav="At your scale",
        )
    blocks: list = [
        Paragraph(
            [
                strong("Model projection, not a measurement. "),
                "Step time at N workers = compute (measured: the plain loop at one worker) + the "
                "communication the backend does not hide behind the backward pass (replayed from the "
                "measured gradient order, each backend's own schedule and the latency-bandwidth fit of its "
                "communication sweep, plus the cluster's link) + the backend's per-step overhead "
                "(measured at 2 workers on one host) + what grows with N: Horovod's negotiation each cycle and "
                "the wait for the slowest of N workers (from the measured spread of a step). Efficiency is the "
                "step at 1 worker over the step at N (same per-worker batch). Intervals carry the spread of the "
                "measured inputs over their launches (docs/method.md, \"Projection\"). ",
                code("bench predict"),
                " gives every figure and part, for any cluster.",
            ],
            "note",
        )
    ]
    record = track_record()
    blocks.append(
        Paragraph(
            [
                strong("Track record on published GPU clusters: "),
                record.summary() + ". ",
                strong("Scope: "),
                SCOPE + ".",
            ],
            "note" if record.meets_goal() else "warn",
        )
    )
    blocks += validation_blocks(records)
    gpu_profiles = [name for name, c in PROFILES.items() if c.device == "cuda"]
    for case in cases:
        fitted, why_not = fit_backends(records, PROJECTED, case)
        missing = [f"{backend}: {why}" for backend, why in why_not.items()]
        if not fitted:
            blocks.append(Paragraph(f"{case.workload}: no backend can be projected: " + "; ".join(missing), "note"))
            continue
        blocks.append(inputs_table(case, fitted))
        per_host = max(i.fit_world for i in fitted.values())
        names = [n for n, c in PROFILES.items() if c.device == case.device]
        for name in names:
            cluster = profile(name, per_host)
            points = {b: project(i, cluster) for b, i in fitted.items()}
            blocks += projection_blocks(case, cluster, points)
        if missing:
            blocks.append(Paragraph("Not projected: " + "; ".join(missing), "note"))
        if case.device != "cuda":
            blocks.append(
                Paragraph(
                    f"GPU profiles ({', '.join(gpu_profiles)}) need a GPU's measured step: this page has no GPU run of "
                    f"{case.workload}. Use {code('bench predict --cluster ib-100g --compute-ms MS').text} with a step "
                    "measured there, or `bench import` that machine's runs. The GPU inputs are untested.",
                    "note",
                )
            )
    return Section("scale", "At your scale (model projection)", ORDER, blocks, nav="At your scale")


def projection_blocks(case, cluster, points: dict) -> list:
    title = f"{case.workload}, batch {case.batch}/worker, on {cluster.name}"
    changes = crossover(points)
    # speed is the step's length; the table's efficiency is each backend against its own one worker, so a backend
    # can scale better and still train slower: the sentence says which it ranks, and names one only where its step's
    # interval lies below the others' (bench.projection.model.fastest)
    said = (
        "predicted fastest (the shortest step), named only where its 95% interval lies below the others': "
        + fastest_words(points)
    )
    said += "; the efficiencies below are each backend's against its own one worker"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for backend, pts in points.items():
        xs = [p.workers for p in pts]
        colour = colour_of(backend)
        ax.plot(xs, [100 * p.efficiency for p in pts], marker="o", markersize=3, label=backend, color=colour)
        ax.fill_between(
            xs, [100 * p.efficiency_low for p in pts], [100 * p.efficiency_high for p in pts], color=colour, alpha=0.15
        )
    for n, _, _ in changes:
        ax.axvline(n, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers")
    ax.set_ylabel("scaling efficiency, % (projection)")
    ax.set_ylim(0, 110)
    ax.set_title(f"model projection: {title}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    rows = []
    for backend, pts in points.items():
        by_n = {p.workers: p for p in pts}
        cells = [backend]
        for n in SHOWN_AT:
            p = by_n.get(n)
            cells.append(f"{p.efficiency:.0%} ({p.efficiency_low:.0%}-{p.efficiency_high:.0%})" if p else "-")
        last = pts[-1]
        cells.append(
            f"{fmt(last.step * 1e3, ',.1f')} ms: compute {fmt(last.parts.compute * 1e3, ',.1f')}, exposed "
            f"{at_least_zero(last.parts.exposed * 1e3, ',.1f', ' ms')}, "
            f"overhead {at_least_zero(last.parts.overhead * 1e3, ',.1f', ' ms')}, "
            f"negotiation {at_least_zero(last.parts.coordination * 1e3, ',.1f', ' ms')}, "
            f"stragglers {at_least_zero(last.parts.stragglers * 1e3, ',.1f', ' ms')}"
        )
        rows.append(cells)
    columns = [
        left("backend"),
        *(right(f"efficiency at {n}") for n in SHOWN_AT),
        left(f"step at {pts[-1].workers} (parts)"),
    ]
    return [
        Paragraph(
            [
                strong(f"{title}: "),
                f"{cluster.summary}. {said} (model projection). Source of the cluster's figures: {cluster.source}.",
            ]
        ),
        Plot(f"model projection of scaling efficiency, {title}", figure_png(fig)),
        Table(columns, rows),
    ]


INPUT_WORDS = (
    ("compute", "compute: plain loop, 1 worker (ms/step)", 1e3),
    ("overhead_one", "overhead at 1 worker (ms/step)", 1e3),
    ("overhead", "overhead at 2+ workers (ms/step)", 1e3),
    ("slowdown", "slowdown (s per s of overlapped processing)", 1.0),
    ("alpha", "latency: cost per collective (us)", 1e6),
    ("beta", "time per bus byte (ns)", 1e9),
)


COSTS = {"overhead_one", "overhead", "alpha", "beta"}  # inputs that cannot be negative: a negative fit is noise


def inputs_table(case, fitted: dict) -> Table:
    """Each measured input of each backend's model, with its standard error, launches and runs."""
    rows = []
    for backend, i in fitted.items():
        for name, words, scale in INPUT_WORDS:
            v = getattr(i, name)
            rows.append(
                [
                    backend,
                    words,
                    at_least_zero(v.mean * scale, ",.3g") if name in COSTS else fmt(v.mean * scale, ",.3g"),
                    fmt(v.se * scale, ",.2g") if v.se else "-",
                    v.dof + 1 if v.runs else "-",
                    ", ".join(v.runs) or "-",
                ]
            )
        rows.append([backend, "gradient order and times (the profile)", "-", "-", 1, i.shape.run or "-"])
    return Table(
        [left("backend"), left("input"), right("value"), right("standard error"), right("launches"), left("runs")],
        rows,
        details=f"{case.workload}: the model's inputs, each with the runs it came from",
    )


def validation_blocks(records: list) -> list:
    """The model against the page's runs across test hosts (never used to fit it), or where that check lives."""
    checked = validate(records)
    if not checked.rows:
        return [
            Paragraph(
                "This page's store has no run across test hosts with a shaped link, so the model is not "
                "checked here; docs/studies/projection.md checks it on such runs (run "
                "`bench predict --validate` on a store that has them).",
                "note",
            )
        ]
    sig = checked.significant_winners
    good = checked.meets_goal()
    rows = [
        [
            r.workload,
            r.backend,
            r.hosts,
            r.link,
            f"{fmt(r.measured.mean * 1e3, ',.1f')} "
            f"({fmt(r.measured_low * 1e3, ',.1f')}-{fmt(r.measured_high * 1e3, ',.1f')}), n={len(r.runs)}",
            f"{fmt(r.point.step * 1e3, ',.1f')} ({fmt(r.point.step_low * 1e3, ',.1f')}-"
            f"{fmt(r.point.step_high * 1e3, ',.1f')})",
            f"{r.error:+.1%}",
            f"{r.compute_share:.0%}",
            "measured" if r.link_measured else "nominal",
            f"{r.nominal_error:+.1%}",
            r.left_out or "judged",
        ]
        for r in checked.rows
    ]
    blocks = [
        Paragraph(
            [
                strong("Checked on runs it was not fitted on: "),
                checked.summary() + ". ",
                "The goal is met."
                if good
                else "The goal is not met: read the projections with that "
                f"error in mind (goal: median at most {GOAL_MEDIAN:.0%}, none worse than {GOAL_WORST:.0%}, "
                "the winner right wherever the measured difference is significant).",
            ],
            "rec" if good else "warn",
        ),
        Table(
            [
                left("workload"),
                left("backend"),
                right("hosts"),
                left("link"),
                right("measured step ms (95%)"),
                right("predicted ms (95%)"),
                right("error"),
                right("compute share (predicted)"),
                left("link"),
                right("error, nominal link"),
                left("judged?"),
            ],
            rows,
            details=f"predicted against measured step time at {len(rows)} points (model projection)",
        ),
    ]
    wrong = [w for w in sig if not w.agrees]
    if wrong:
        blocks.append(
            Bullets(
                [
                    f"{w.workload} at {w.hosts} hosts, {w.link}: measured {advantage(w.faster, w.ratio)} (against "
                    f"{w.slower}), predicted {w.predicted_faster} faster"
                    for w in wrong
                ],
                "warn",
            )
        )
    return blocks
