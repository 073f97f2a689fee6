"""The report's view of training runs: the verdict (the primary pair per conditions and world size, and
the companion backends against the better of them), the recommendation, throughput and scaling,
where the time goes (exposed communication against the plain loop) and startup.

Every comparison is a test across launches (docs/method.md, "Replication"): a case is the ok launches of
one backend, world size and conditions in its latest sweep, each launch contributing its mean over
windows; two cases are compared by the ratio of their geometric means with a Welch t interval on the
log scale (bench.core.stats.ratio_of_cases). Windows describe one launch and never decide a comparison.
"""

from __future__ import annotations

import math
import statistics

from bench.core import stats
from bench.core.registry import COUNTERPART, PLAIN_LOOP, PRIMARY, RIVAL, framework_words
from bench.core.spec import numerics_note, pinned_words
from bench.report.sections import (
    SCALES_BETTER,
    SPEED,
    SPREAD,
    STARTS_SOONER,
    Bullets,
    Cell,
    Folded,
    Heading,
    Paragraph,
    Plot,
    ReportPart,
    ScoreRow,
    Section,
    Table,
    at_least_zero,
    code,
    colour_of,
    difference_words,
    drawable,
    em,
    env_differences,
    figure_png,
    fmt,
    judged_outcome,
    left,
    pct,
    pyplot,
    right,
    strong,
)
from bench.results.frame import CONDITIONS, comparable_runs, distortion
from bench.tasks.train import INPUT_BOUND_SHARE, input_limited
from bench.tasks.train.results import (
    TrainingCase,
    difference,
    efficiency_ratio,
    network_words,
    pair_key,
    replicated_cases,
)

REPEAT_HINT = "bench sweep --repeats 3"  # what to run when a comparison rests on one launch a side


def _cond_title(cond: dict) -> str:
    passes = f" x {cond['backward_passes']} passes" if cond["backward_passes"] != 1 else ""
    fed = "" if cond.get("input", "on device") == "on device" else f" through a {cond['input']}"
    return (
        f"{cond['workload']} on {cond['device']}: batch {cond['batch_size']}{passes}/worker, "
        f"{cond['threads']} thread(s)/worker{pinned_words(cond.get('cpu_bind'))}, {cond['data']} data{fed}, "
        f"{cond['image_size']}px{numerics_note(cond.get('numerics'))}{network_words(cond)}"
    )


def _launches(a: TrainingCase, b: TrainingCase) -> str:
    return f"{a.launches} + {b.launches} launch{'es' if a.launches + b.launches > 1 else ''}"


def difference_text(d: dict, a: str, b: str, judgement=None) -> str:
    """The figures behind a comparison of a against b, in words: the difference said as the scorecard says it
    (difference_words), whichever side the comparison names first."""
    f, s = d["faster"], d["slower"]
    if not d["replicated"]:
        return f"{f.backend} {f.throughput:,.0f} vs {s.backend} {s.throughput:,.0f} samples/s, {_launches(f, s)}"
    means = f"{f.backend} {f.throughput:,.0f} vs {s.backend} {s.throughput:,.0f} samples/s, means of {_launches(f, s)}"
    adjusted = f", {judgement.p_adjusted:.2g} after Holm's correction" if judgement is not None else ""
    est = d["estimate"]
    level = 1 - est.share * (1 - est.confidence)
    looked = (
        " (the sweep looked after every round: its last look's share of the error rate, p over that share)"
        if est.share < 1
        else ""
    )
    return (
        f"{means}; {difference_words(est, a, b)} at {100 * level:.3g}% confidence{looked}, p = {d['p']:.2g}{adjusted}"
    )


# ---------------------------------------------------------------- comparisons in words, and the scorecard
def judge(family, key: str, est: stats.Estimate):
    """The family's judgement of comparison `key` (a page judges all its comparisons together); alone where the
    view is used without a page's family."""
    return (family or stats.Family({key: est})).judge(key, est)


def case_groups(cases: list[TrainingCase]) -> dict[tuple, dict[str, TrainingCase]]:
    """Cases by (conditions, world size), then backend."""
    groups: dict[tuple, dict[str, TrainingCase]] = {}
    for c in cases:
        groups.setdefault((*(c.cond[k] for k in CONDITIONS), c.world_size), {})[c.backend] = c
    return groups


def verdict(cases: list[TrainingCase], family=None) -> tuple[list[str], list[str]]:
    """Each comparison in words, per conditions and world size (the primary pair, and each companion backend
    against the better primary), and fairness notes: compared runs whose environments differ."""
    sentences, fairness = [], []
    first, second = PRIMARY
    for key, rows in sorted(case_groups(cases).items(), key=lambda kv: str(kv[0])):
        cond = {**dict(zip(CONDITIONS, key)), "world_size": key[-1]}
        where = (
            f"{cond['workload']}, {cond['world_size']} worker(s) on {cond['device']} "
            f"(batch {cond['batch_size']}/worker, {cond['threads']} thread(s)/worker"
            f"{pinned_words(cond.get('cpu_bind'))}, "
            f"{cond['data']} data{numerics_note(cond.get('numerics'))}{network_words(cond)})"
        )
        pairs = [PRIMARY] if all(b in rows for b in PRIMARY) else []
        primaries = [rows[b] for b in PRIMARY if b in rows]
        for other in sorted(set(rows) - set(PRIMARY) - {PLAIN_LOOP}):  # companion backends (the PS, Ray)
            if primaries:
                counterpart = COUNTERPART.get(other)
                best = rows[counterpart] if counterpart in rows else max(primaries, key=lambda c: c.throughput)
                pairs.append((other, best.backend))
            rival = RIVAL.get(other)
            if rival in rows:
                pairs.append((other, rival))
        for a, b in pairs:
            x, y = rows[a], rows[b]
            d = difference(x, y)
            j = judge(family, pair_key("", a, b, x.place), d["estimate"])
            said = judged_outcome(j, a, b)
            caution = [c.backend for c in (x, y) if c.unstable]
            caution = f" Caution: {', '.join(caution)} unstable." if caution else ""
            what = a if (a, b) == PRIMARY else f"{a} ({backend_options_words(x)})"
            label = framework_words(a, b)
            label = f"{label}, " if label else ""
            sentences.append(
                f"{where}: {label}{what} against {b}: {said['outcome']}; {difference_text(d, a, b, j)}.{caution}"
            )
        if pairs and pairs[0] == PRIMARY:
            differs = env_differences([rows[first].latest, rows[second].latest])
            if differs:
                fairness.append(
                    f"{where}: the {first} and {second} runs differ in {', '.join(differs)}; "
                    "their comparison is not like for like."
                )
    return sentences, fairness


def backend_options_words(case: TrainingCase) -> str:
    """A companion backend's options as the page states them: set ones only, in words."""
    opts = {k: v for k, v in case.latest.spec.backend_options.items() if v is not None}
    return (
        ", ".join(
            f"{k.replace('_', ' ')} {v:g}" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
            for k, v in opts.items()
        )
        or "its defaults"
    )


def condition_words(cond: dict, world: int, varying: set[str]) -> str:
    """A case's conditions as a scorecard row states them: the workload, workers, device, pinning and network,
    then whichever other condition differs between the page's cases."""
    words = [cond["workload"], f"{world} worker{'s' if world > 1 else ''}", cond["device"]]
    if cond["device"] == "cpu":
        words.append("pinned" if cond.get("cpu_bind") == "cores" else "unpinned")
    words.append("one host" if cond.get("network", "one host") == "one host" else f"across {cond['network']}")
    extra = {
        "batch_size": f"batch {cond['batch_size']}/worker",
        "threads": f"{cond['threads']} thread(s)/worker",
        "backward_passes": f"{cond['backward_passes']} passes/step",
        "data": f"{cond['data']} data",
        "input": f"input {cond['input']}",
        "image_size": f"{cond['image_size']}px",
        "hardware": f"on {cond['hardware']}",
    }
    words += [text for key, text in extra.items() if key in varying and cond.get(key)]
    return ", ".join(words)


def setting_words(cond: dict) -> str:
    """Where a case ran, shortly: pinned or not, one host or across which, and the machine where a page has two."""
    pinned = (
        ("pinned" if cond.get("cpu_bind") == "cores" else "unpinned")
        if cond.get("device") == "cpu"
        else cond.get("device", "")
    )
    where = "one host" if cond.get("network", "one host") == "one host" else cond["network"]
    return ", ".join(w for w in (pinned, where, cond.get("hardware") or "") if w)


def error_bars(centres: list[float], intervals: list[tuple[float, float]]) -> list[list[float]]:
    """How far each interval reaches below and above its centre, as errorbar takes it: a finite distance, else none (a
    record's interval need not hold the mean it is drawn around, nor be a number)."""
    below = [centre - low if 0 <= centre - low < math.inf else 0.0 for centre, (low, _) in zip(centres, intervals)]
    above = [high - centre if 0 <= high - centre < math.inf else 0.0 for centre, (_, high) in zip(centres, intervals)]
    return [below, above]


def throughput_axes(plt, with_efficiency: bool):
    """A figure with a throughput panel, and a scaling-efficiency panel only where there is an efficiency to
    draw (no empty panel)."""
    fig, axes = plt.subplots(
        1, 2 if with_efficiency else 1, figsize=(10 if with_efficiency else 5.5, 3.6), squeeze=False
    )
    return fig, axes[0][0], (axes[0][1] if with_efficiency else None)


def runs_table(cases: list[TrainingCase]) -> Table:
    """The run ids behind each case of a table, collapsed: `bench list` finds them."""
    rows = [
        [c.cond["workload"], setting_words(c.cond), c.backend, c.world_size, c.run_ids]
        for c in sorted(cases, key=lambda c: (c.cond["workload"], setting_words(c.cond), c.backend, c.world_size))
    ]
    return Table(
        [left("workload"), left("condition"), left("backend"), right("world"), left("runs")],
        rows,
        details=f"The runs behind these rows ({sum(c.launches for c in cases)})",
    )


def is_default_condition(cond: dict, artefact: str) -> bool:
    """The conditions of the default sweep: pinned CPU workers (or GPUs) on one host, data held on the device."""
    return (
        not artefact
        and cond.get("network", "one host") == "one host"
        and cond.get("input") == "on device"
        and cond.get("backward_passes") == 1
    )


def launches_words(*cases: TrainingCase) -> str:
    sweeps = max(c.sweeps for c in cases)
    return " + ".join(str(c.launches) for c in cases) + (f" ({sweeps} sweeps pooled)" if sweeps > 1 else "")


def scorecard_rows(cases: list[TrainingCase], family=None) -> list[ScoreRow]:
    """Rows of the page's scorecard where both primary backends ran under the same conditions: throughput at each
    world size, scaling efficiency and startup to the first step at the largest."""
    first, second = PRIMARY
    varying = {
        k
        for k in CONDITIONS
        if k != "workload"
        and any(
            len({str(c.cond[k]) for c in cases if c.cond["workload"] == w}) > 1
            for w in {c.cond["workload"] for c in cases}
        )
    }
    ones = {(tuple(c.cond.values()), c.backend): c for c in cases if c.world_size == 1}
    groups = case_groups(cases)
    largest: dict[tuple, int] = {}
    for key, rows in groups.items():
        if all(b in rows for b in PRIMARY):
            largest[key[:-1]] = max(largest.get(key[:-1], 0), key[-1])
    out = []
    for key, rows in groups.items():
        if not all(b in rows for b in PRIMARY):
            continue
        e, h = rows[first], rows[second]
        cond, world = dict(zip(CONDITIONS, key)), key[-1]
        artefact = distortion(cond, e.records + h.records)
        common = {
            "condition": condition_words(cond, world, varying),
            "artefact": artefact,
            "default": is_default_condition(cond, artefact),
        }
        est = difference(e, h)["estimate"]
        said = judged_outcome(judge(family, pair_key("", first, second, e.place), est), first, second)
        out.append(
            ScoreRow(
                "training throughput",
                figures={c.backend: f"{c.throughput:,.0f} samples/s" for c in (e, h)},
                launches=launches_words(e, h),
                decides=world > 1,
                weighs=SPEED,
                **common,
                **said,
            )
        )
        if world != largest[key[:-1]]:
            continue
        e1, h1 = ones.get((tuple(e.cond.values()), first)), ones.get((tuple(h.cond.values()), second))
        if world > 1 and e1 is not None and h1 is not None:
            est = efficiency_ratio(e, e1, h, h1)
            said = judged_outcome(
                judge(family, pair_key("efficiency ", first, second, e.place), est), first, second, words=SCALES_BETTER
            )
            out.append(
                ScoreRow(
                    "scaling efficiency",
                    figures={c.backend: fmt(c.efficiency.ratio, ".0%") for c in (e, h)},
                    launches=launches_words(e, h, e1, h1),
                    **common,
                    **said,
                )
            )
        if e.startup_values and h.startup_values:
            est = stats.ratio_of_cases([e.startup_values], [h.startup_values])
            said = judged_outcome(
                judge(family, pair_key("startup ", first, second, e.place), est),
                first,
                second,
                higher_is_better=False,
                words=STARTS_SOONER,
            )
            out.append(
                ScoreRow(
                    "startup to the first step",
                    operations=True,
                    figures={c.backend: f"{statistics.median(c.startup_values):.1f} s (median)" for c in (e, h)},
                    brief={c.backend: f"median {statistics.median(c.startup_values):.1f} s" for c in (e, h)},
                    launches=f"{len(e.startup_values)} + {len(h.startup_values)}",
                    **common,
                    **said,
                )
            )
    return out


# ---------------------------------------------------------------- sections
def _estimate_cell(est: stats.Estimate | None) -> str:
    if est is None:
        return "-"
    if not est.replicated:
        return f"{est.ratio:.1%} (1 launch)"
    return f"{est.ratio:.1%} ({est.low:.1%} to {est.high:.1%})"


def throughput_blocks(cases: list[TrainingCase]) -> list:
    """Per conditions: a row per backend and world size (the mean over launches), and a figure of
    throughput and scaling efficiency."""
    if not cases:
        return [Paragraph("No successful training run in this selection.")]
    plt = pyplot()
    ci = f"{pct(stats.CONFIDENCE)} CI"
    columns = [
        left("backend"),
        right("world"),
        right("launches"),
        right("samples/s"),
        right(ci),
        right(SPREAD),
        right(f"efficiency ({ci})"),
        right(f"vs plain loop ({ci})"),
        right("step ms"),
        right("straggler ratio"),
        right("peak RSS MiB"),
    ]
    blocks = [
        Paragraph(
            [
                "Each row is the mean over launches of the case (each launch: its mean over windows); "
                f"the interval and the {SPREAD} are across launches, or over the windows of a single launch "
                "where the case has one. Efficiency and vs plain loop are ratios of case means with "
                "their interval across launches. The plots' throughput axes start at zero."
            ],
            "note",
        )
    ]
    by_cond: dict[tuple, list[TrainingCase]] = {}
    for c in cases:
        by_cond.setdefault(tuple(c.cond[k] for k in CONDITIONS), []).append(c)
    for key in sorted(by_cond, key=str):
        group = sorted(by_cond[key], key=lambda c: (c.backend, c.world_size))
        cond = dict(zip(CONDITIONS, key))
        rows = []
        for c in group:
            low, high = c.interval
            thr = f"{fmt(c.throughput, ',.0f')}" + (" (unstable)" if c.unstable else "")
            rows.append(
                [
                    c.backend,
                    c.world_size,
                    c.launches,
                    Cell(thr, "warn") if c.unstable else thr,
                    f"{fmt(low, ',.0f')} to {fmt(high, ',.0f')}",
                    fmt(c.spread, ".1%"),
                    _estimate_cell(c.efficiency),
                    _estimate_cell(c.vs_plain),
                    fmt(c.step_time_s * 1000 if c.step_time_s else None, ".2f"),
                    fmt(c.latest.metrics.straggler_ratio, ".3f"),
                    fmt(max(r.metrics.peak_rss_bytes_max for r in c.records) / 2**20, ",.0f"),
                ]
            )
        fig, ax_thr, ax_eff = throughput_axes(plt, any(c.efficiency is not None for c in group))
        sizes = sorted({c.world_size for c in group})
        for backend in sorted({c.backend for c in group}):
            mine = [c for c in group if drawable(c.throughput) and c.backend == backend]  # (the table has the others)
            xs = [c.world_size for c in mine]
            means = [c.throughput for c in mine]
            err = error_bars(means, [c.interval for c in mine])
            ax_thr.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=backend, color=colour_of(backend))
            eff = [
                (c.world_size, c.efficiency) for c in mine if c.efficiency is not None and drawable(c.efficiency.ratio)
            ]
            if eff and ax_eff is not None:
                ax_eff.errorbar(
                    [x for x, _ in eff],
                    [100 * e.ratio for _, e in eff],
                    yerr=error_bars(
                        [100 * e.ratio for _, e in eff],
                        [(100 * e.low, 100 * e.high) if e.replicated else (100 * e.ratio,) * 2 for _, e in eff],
                    ),
                    marker="o",
                    capsize=3,
                    label=backend,
                    color=colour_of(backend),
                )
        ax_thr.set_ylim(bottom=0)  # from zero: a gap between backends is drawn at its true size
        panels = [(ax_thr, f"throughput (samples/s, {ci} across launches)")]
        if ax_eff is not None:
            ax_eff.axhline(100, color="grey", linestyle="--", linewidth=1, label="ideal")
            ax_eff.set_ylim(bottom=0)
            panels.append((ax_eff, "scaling efficiency (%)"))
        for ax, title in panels:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.set_xlabel("world size (workers)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        title = _cond_title(cond)
        blocks += [
            Heading(title),
            Table(columns, rows),
            Plot(f"throughput and scaling efficiency of {title}", figure_png(fig)),
        ]
    return blocks + [runs_table(cases)]


def exposed_blocks(cases: list[TrainingCase]) -> list:
    """Step time against the plain loop's under the same conditions: the communication not hidden.
    Its share of the step is 1 - vs plain loop (step time is global batch / throughput), so it carries
    that ratio's interval across launches. A cost cannot be negative: a negative estimate is noise around
    zero, shown as 0 with what was measured, and its interval starts at 0."""
    rows, shares = [], []
    plain = {tuple(c.cond[k] for k in CONDITIONS): c for c in cases if c.backend == PLAIN_LOOP and c.world_size == 1}
    for c in sorted(cases, key=lambda c: (c.cond["workload"], setting_words(c.cond), c.backend, c.world_size)):
        base = plain.get(tuple(c.cond[k] for k in CONDITIONS))
        if c.backend == PLAIN_LOOP or base is None or c.vs_plain is None:
            continue
        est = c.vs_plain
        share = 1 - est.ratio
        interval = f"{max(0.0, 1 - est.high):.1%} to {max(0.0, 1 - est.low):.1%}" if est.replicated else "- (1 launch)"
        rows.append(
            [
                c.cond["workload"],
                setting_words(c.cond),
                c.backend,
                c.world_size,
                f"{c.launches} + {base.launches}",
                fmt(c.step_time_s * 1000, ".2f"),
                fmt(base.step_time_s * 1000, ".2f"),
                at_least_zero((c.step_time_s - base.step_time_s) * 1000, ".2f", " ms"),
                at_least_zero(share, ".1%"),
                interval,
            ]
        )
        shares.append((f"{c.cond['workload']}, {setting_words(c.cond)}: {c.backend} x{c.world_size}", c.backend, est))
    if not rows:
        return [
            Paragraph(
                [
                    "Needs a plain single-process run (backend ",
                    em(PLAIN_LOOP),
                    ") under the same conditions as the distributed runs; ",
                    code("bench sweep"),
                    " records one unless ",
                    code("--no-plain-loop"),
                    ".",
                ]
            )
        ]
    ci = f"{pct(stats.CONFIDENCE)} CI"
    columns = [
        left("workload"),
        left("condition"),
        left("backend"),
        right("world"),
        right("launches (+ plain)"),
        right("step ms"),
        right("plain loop step ms"),
        right("exposed communication ms"),
        right("share of the step"),
        right(ci),
    ]
    note = Paragraph(
        "Exposed communication is a cost, so never below zero: where the step measured shorter than the plain "
        "loop's, it is shown as 0 with the figure measured (noise around zero), and its interval and bar start "
        "at zero.",
        "note",
    )
    return [note, Table(columns, rows), Plot("exposed communication share", exposed_png(shares))]


def exposed_png(shares: list[tuple[str, str, stats.Estimate]]) -> str:
    """One horizontal bar per case (label, backend, its ratio to the plain loop), the share of the step not hidden,
    clipped at zero with its interval: the labels on the side, one line each, never overlap however many cases."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.32 * len(shares)))
    ys = list(range(len(shares)))[::-1]  # the table's first row on top
    widths = [max(0.0, 100 * (1 - e.ratio)) for _, _, e in shares]
    # the share's interval is 1 - (the ratio's), clipped at zero: its lower end comes from the ratio's upper end
    err = [
        [w - max(0.0, 100 * (1 - e.high)) if e.replicated else 0 for w, (_, _, e) in zip(widths, shares)],
        [max(0.0, 100 * (1 - e.low)) - w if e.replicated else 0 for w, (_, _, e) in zip(widths, shares)],
    ]
    ax.barh(ys, widths, xerr=err, capsize=3, color=[colour_of(b) for _, b, _ in shares])
    ax.set_yticks(ys, [label for label, _, _ in shares], fontsize=7)
    ax.set_xlabel("exposed communication (% of the step, from 0)")
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    return figure_png(fig)


def input_rows(cases: list[TrainingCase]) -> list[tuple[TrainingCase, float]]:
    """(case, median share of step time its workers waited for input) of the cases a DataLoader fed."""
    out = []
    for c in sorted(cases, key=lambda c: (c.cond["workload"], c.backend, c.world_size)):
        shares = [r.metrics.input_wait_share for r in c.records if r.metrics.input_wait_share is not None]
        if c.cond.get("input", "on device") != "on device" and shares:
            out.append((c, statistics.median(shares)))
    return out


def input_blocks(cases: list[TrainingCase]) -> tuple[list, list[str]]:
    """The input pipeline's cost where a DataLoader fed the run: a table and, for each case it limits, a
    sentence for the verdict (docs/method.md, "Input pipeline")."""
    rows = input_rows(cases)
    if not rows:
        return [], []
    table = [
        [
            c.cond["workload"],
            c.backend,
            c.world_size,
            c.cond["input"],
            c.launches,
            f"{share:.0%}",
            Cell("input limits throughput", "warn") if input_limited(share) else "compute and communication",
        ]
        for c, share in rows
    ]
    limited = [
        f"{c.backend} {c.cond['workload']} world {c.world_size} through a {c.cond['input']}: input limits "
        f"throughput (its workers waited for batches {share:.0%} of each step)"
        for c, share in rows
        if input_limited(share)
    ]
    columns = [
        left("workload"),
        left("backend"),
        right("world"),
        left("input"),
        right("launches"),
        right("input wait (share of step)"),
        left("what limits throughput"),
    ]
    note = [
        "Runs fed through ",
        code("--loader dataloader"),
        " (or an image folder): the share of each timed step "
        "the slowest worker spent waiting for its next batch (median over launches). From "
        f"{INPUT_BOUND_SHARE:.0%} on, input, not communication, limits throughput: a faster collective would "
        "change little. Runs with data held on the device never wait.",
    ]
    return [Heading("Input pipeline"), Paragraph(note, "note"), Table(columns, table)], limited


def startup_blocks(cases: list[TrainingCase]) -> list:
    if not cases:
        return [Paragraph("No successful training run in this selection.")]
    rows = []
    for c in sorted(cases, key=lambda c: (c.cond["workload"], setting_words(c.cond), c.backend, c.world_size)):
        ups = [r.metrics.startup for r in c.records]
        rows.append(
            [
                c.cond["workload"],
                setting_words(c.cond),
                c.backend,
                c.world_size,
                c.launches,
                fmt(statistics.median(u.launch_to_process_s for u in ups), ".2f"),
                fmt(statistics.median(u.rendezvous_s for u in ups), ".3f"),
                fmt(c.startup_s, ".2f"),
                launcher_phases(ups),
            ]
        )
    columns = [
        left("workload"),
        left("condition"),
        left("backend"),
        right("world"),
        right("launches"),
        right("launch to processes s"),
        right("rendezvous s"),
        right("launch to first step s"),
        left("launcher's own phases s"),
    ]
    return [
        Paragraph(
            "Medians over the launches of each case. The launcher's own phases are those a launcher "
            "reports of its start-up (starting a runtime, placing the workers), within launch to first "
            "step.",
            "note",
        ),
        Table(columns, rows),
    ]


def launcher_phases(ups: list) -> str:
    """Each start-up phase the launcher reported, in its order, as the median over the launches that have it."""
    phases = list(dict.fromkeys(phase for u in ups for phase in u.launcher_phases))
    return (
        ", ".join(
            f"{phase} {statistics.median(u.launcher_phases[phase] for u in ups if phase in u.launcher_phases):.2f}"
            for phase in phases
        )
        or "-"
    )


# ---------------------------------------------------------------- across shaped links
def _link(case: TrainingCase) -> tuple[float, str]:
    """(bytes/s, label) of the link a case's hosts were shaped to; an unshaped link sorts last."""
    link = case.latest.spec.link
    return (
        (link["rate_bytes_per_s"], link["rate"] + (f" {link['delay']}" if link["delay"] else ""))
        if link
        else (math.inf, "unlimited")
    )


def link_groups(cases: list[TrainingCase]) -> dict[tuple, list[TrainingCase]]:
    """Cases across hosts under the same conditions but for the link, where two or more links were measured."""
    groups: dict[tuple, list[TrainingCase]] = {}
    for c in cases:
        if c.latest.spec.hosts:
            key = (*(c.cond[k] for k in CONDITIONS if k != "network"), len(c.latest.spec.hosts))
            groups.setdefault(key, []).append(c)
    return {k: g for k, g in groups.items() if len({_link(c) for c in g}) >= 2}


def judged_difference(a: TrainingCase, b: TrainingCase, family=None) -> dict:
    """difference(a, b) with the family's judgement of it (`judgement`), and `significant` as the family says."""
    d = difference(a, b)
    j = judge(family, pair_key("", a.backend, b.backend, a.place), d["estimate"])
    return {**d, "judgement": j, "significant": j.significant}


def link_verdicts(group: list[TrainingCase], family=None) -> tuple[list[tuple[str, dict | None]], str]:
    """The primary pair at the largest world size, link by link from the slowest: [(link, difference or None)],
    and the sentence saying at which link, if any, the verdict changes."""
    first, second = PRIMARY
    top = max(c.world_size for c in group)
    at: dict[tuple, dict[str, TrainingCase]] = {}
    for c in group:
        if c.world_size == top:
            at.setdefault(_link(c), {})[c.backend] = c
    steps = [
        (label, judged_difference(rows[first], rows[second], family) if first in rows and second in rows else None)
        for (_, label), rows in sorted(at.items())
    ]
    won = [(label, d["faster"].backend) for label, d in steps if d and d["significant"]]
    winners = {w for _, w in won}
    where = f"{group[0].cond['workload']} at {top} workers across {len(group[0].latest.spec.hosts)} hosts"
    if len(winners) > 1:
        change = next(i for i in range(1, len(won)) if won[i][1] != won[i - 1][1])
        (slow_label, slow_w), (fast_label, fast_w) = won[change - 1], won[change]
        sentence = (
            f"{where}: the verdict changes between links {slow_label} and {fast_label}: {slow_w} is "
            f"faster at {slow_label}, {fast_w} at {fast_label}."
        )
    elif winners:
        sentence = (
            f"{where}: {won[0][1]} is faster at every link where the difference is significant "
            f"({', '.join(label for label, _ in won)} of {len(steps)} measured); no crossover in that range."
        )
    else:
        sentence = f"{where}: no link measured shows a significant difference between {first} and {second}."
    return steps, sentence


def _standing(d: dict | None) -> str:
    """What a difference between the pair can be called: never "significant" on one launch a side."""
    if d is None:
        return "not both backends"
    if not d["replicated"]:
        return "cannot tell: one launch on a side"
    if d["significant"]:
        return f"significant (p {d['judgement'].p_adjusted:.2g}, Holm)"
    return judged_outcome(d["judgement"], *PRIMARY)["outcome"]


def link_blocks(cases: list[TrainingCase], family=None) -> tuple[list, list[str]]:
    """Throughput and efficiency against the link per backend, and where the verdict changes (with the
    sentences for the verdict)."""
    groups = link_groups(cases)
    if not groups:
        return [
            Paragraph(
                [
                    "Needs runs across hosts at two or more links: ",
                    code("bench sweep --hosts H1,H2 --links 1gbit,10gbit,unlimited"),
                    ".",
                ]
            )
        ], []
    plt = pyplot()
    blocks, sentences = [], []
    for key in sorted(groups, key=str):
        group = groups[key]
        steps, sentence = link_verdicts(group, family)
        sentences.append(sentence)
        top = max(c.world_size for c in group)
        links = sorted({_link(c) for c in group})
        finite = [rate for rate, _ in links if math.isfinite(rate)]
        where_x = {link: (link[0] if math.isfinite(link[0]) else max(finite) * 4) * 8 / 1e9 for link in links}
        fig, ax_thr, ax_eff = throughput_axes(plt, any(c.efficiency is not None for c in group if c.world_size == top))
        rows = []
        for backend in sorted({c.backend for c in group}):
            mine = sorted(
                (c for c in group if c.backend == backend and c.world_size == top and drawable(c.throughput)), key=_link
            )
            xs = [where_x[_link(c)] for c in mine]
            ax_thr.errorbar(
                xs,
                [c.throughput for c in mine],
                yerr=error_bars([c.throughput for c in mine], [c.interval for c in mine]),
                marker="o",
                capsize=3,
                label=backend,
                color=colour_of(backend),
            )
            eff = [
                (where_x[_link(c)], c.efficiency)
                for c in mine
                if c.efficiency is not None and drawable(c.efficiency.ratio)
            ]
            if eff and ax_eff is not None:
                xs_eff, ys_eff = [x for x, _ in eff], [100 * e.ratio for _, e in eff]
                ax_eff.plot(xs_eff, ys_eff, marker="o", label=backend, color=colour_of(backend))
            for c in mine:
                rows.append(
                    [_link(c)[1], backend, top, c.launches, fmt(c.throughput, ",.0f"), _estimate_cell(c.efficiency)]
                )
        ax_thr.set_ylim(bottom=0)
        panels = [(ax_thr, f"throughput at {top} workers (samples/s)")]
        if ax_eff is not None:
            ax_eff.set_ylim(bottom=0)
            panels.append((ax_eff, "scaling efficiency (%)"))
        for ax, title in panels:
            ax.set_xscale("log")
            ax.set_xticks([where_x[link] for link in links], [label for _, label in links], fontsize=8)
            ax.set_xlabel("link (every host's, shaped with tc)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        title = _cond_title({**dict(zip([k for k in CONDITIONS if k != "network"], key)), "network": "one host"})
        first, second = PRIMARY
        verdict_rows = [
            [label, difference_words(d["estimate"], first, second) if d else "-", _standing(d)] for label, d in steps
        ]
        blocks += [
            Heading(f"{title}, across {key[-1]} hosts"),
            Paragraph(sentence),
            Table(
                [left("link"), left(f"difference ({pct(stats.CONFIDENCE)} CI)"), left("across launches")], verdict_rows
            ),
            Table(
                [
                    left("link"),
                    left("backend"),
                    right("world"),
                    right("launches"),
                    right("samples/s"),
                    right("efficiency"),
                ],
                rows,
            ),
            Plot(f"throughput and efficiency against the link, {title}", figure_png(fig)),
        ]
    return blocks, sentences


def method() -> list:
    """The Methodology bullets for training runs; the figures come from the code that applies them."""
    return [
        [
            strong("Windows."),
            " After W warm-up steps (never timed), each rank times K consecutive steps per "
            "window, for R windows; all ranks meet at a barrier and the device is synchronised before each window, "
            "outside the timed region. A window's time is the max over ranks. Throughput = global batch x K / "
            "window time (samples/s); a launch's throughput is its mean over windows.",
        ],
        [
            strong("Launches are the unit of replication."),
            " A sweep launches every case several times in "
            "interleaved rounds. A case's figure is the mean over its launches with a "
            f"{pct(stats.CONFIDENCE)} confidence interval across launches (Student's t). Two cases are compared by "
            "the ratio of their geometric means with a Welch t interval on the log scale. The page's comparisons "
            f"are judged as one family: a difference is significant when its p-value, adjusted by Holm's method "
            f"over them all, is below {SIGNIFICANCE:g}, so the page calls a true tie a difference with a chance of "
            f"at most {SIGNIFICANCE:g} however many comparisons it makes. Where none is found, two one-sided tests "
            f"at {SIGNIFICANCE:g} give the margin the two are shown to be within. Sweeps of the same code are "
            "pooled. A comparison with a single launch on a side says it cannot tell. Windows of one launch "
            "describe that launch only.",
        ],
        [
            strong("Uncertainty of one launch."),
            f" Mean over windows with a {pct(stats.CONFIDENCE)} confidence "
            f"interval of the mean (Student's t). A result is unstable when its standard deviation exceeds "
            f"{pct(stats.UNSTABLE_REL_STDEV)} of its mean or it has fewer than {stats.MIN_STABLE_WINDOWS} windows "
            f"(pyperf's rules); a case is unstable when a launch is, or its launches spread by more than that.",
        ],
        [
            strong("Scaling."),
            " Weak scaling (fixed per-worker batch). Efficiency E(N) = thr(N) / (N x thr(1)), "
            "thr(1) the same backend at one worker under the same conditions; also against the plain "
            "single-process loop. Both are ratios of case means, with their interval across launches.",
        ],
        [
            strong("Placement."),
            " CPU workers on one host are pinned by default (--cpu-bind auto): the worker of "
            "local rank r and every thread it runs, the backend's own included, on cores [r x T, (r+1) x T). "
            "Unpinned, a backend's helper threads (Horovod's background loop, gloo's I/O) run on the other "
            "workers' cores. Pinned and unpinned runs are never compared; each case's title says which it is.",
        ],
        [
            strong("Exposed communication"),
            " = step time at N workers - step time of the plain loop (one "
            "process, no wrapper) at the same per-worker batch, as a share of the step (= 1 - vs plain loop).",
        ],
        [
            strong("Startup"),
            ": launch to worker processes, rendezvous (process-group initialisation), launch "
            "to the end of the first step (max over ranks); medians over launches. One backend reaches its first "
            "step sooner only when every launch's time of the cases both ran differs significantly across "
            "launches, as throughput is compared.",
        ],
    ]


def resolution_note(cases: list) -> list:
    """Why the page's ties are as wide as they are, from its own runs: one launch's figure varies between launches of
    a case (the largest part of the spread: docs/studies/spread.md, docs/studies/noise.md), pooled over the two
    compared backends' cases of 2 workers or more; a comparison of n launches a side resolves about
    t x sd x sqrt(2 / n) before the page's corrections for many comparisons and looks, which widen it."""
    compared = [c for c in cases if c.world_size >= 2 and c.backend in PRIMARY and c.launches >= stats.MIN_LAUNCHES]
    if not compared:
        return []
    squares = dof = 0.0
    for case in compared:
        logs = [math.log(v) for v in case.values]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    sd = math.sqrt(squares / dof)
    side = round(statistics.median(c.launches for c in compared))

    def resolution(n: int) -> str:
        # infinite where launches differ by hundreds of orders of magnitude: they resolve nothing, said so
        bound = stats.resolution_at(sd, n)
        return f"±{bound:.0%}" if math.isfinite(bound) else "no bound"

    return [
        [
            strong("Resolution."),
            f" On these runs one launch's figure varies by {sd:.1%} between launches of a case (the standard deviation "
            f"of its log, pooled over the {len(compared)} compared case(s) of 2 workers or more). A comparison of n "
            f"launches a side therefore resolves about ±t x {sd:.1%} x sqrt(2/n), before the corrections for many "
            f"comparisons and looks: {resolution(side)} at the {side} launches a side here, "
            f"{resolution(4 * side)} at {4 * side}. More windows a launch do not narrow it, nor does adjusting "
            "by the machine's speed measured beside it: the spread is set as a launch starts (docs/studies/noise.md).",
        ]
    ]


LINK_METHOD = [
    [
        strong("Across hosts."),
        " Processes fill the hosts in order, slot by slot; every backend uses one "
        "interface. A shaped link is every host's sending side limited with tc for the run (a token "
        "bucket for a rate, netem when a delay is given) and undone after it; the verdict at each link "
        "compares the pair at the largest world size across launches, as everywhere on this page, and "
        "the verdict changes between two links only where both are significant and disagree.",
    ]
]


SIGNIFICANCE = round(1 - stats.CONFIDENCE, 10)  # stated in the method: p below this is significant


def report_part(frame, context) -> ReportPart:
    """The training runs' part of the page (`frame`: this task's runs only)."""
    ok = comparable_runs(frame)
    cases = replicated_cases(ok) if not ok.empty else []
    family = getattr(context, "family", None)
    sentences, fairness = verdict(cases, family) if cases else ([], [])
    unmeasured = ok[~(ok["throughput"] > 0)]  # what replicated_cases leaves out: no log to compare on
    if not unmeasured.empty:
        fairness = [
            *fairness,
            f"{len(unmeasured)} ok run(s) left out of every comparison, as their throughput is not a positive number: "
            + ", ".join(f"{r.run_id} ({fmt(r.throughput, ',.6g')} samples/s)" for r in unmeasured.itertuples()),
        ]
    links, crossovers = link_blocks(cases, family)
    inputs, _ = input_blocks(cases)
    across_hosts = any(c.latest.spec.hosts for c in cases)
    unstable = [
        f"{r.run_id}: {r.backend} {r.workload} world {r.world_size}, {SPREAD} {r.rel_stdev:.1%} over "
        f"{r.record.metrics.throughput.n} windows"
        for r in ok[ok["unstable"].eq(True)].itertuples()
    ]
    unstable += [
        f"{c.backend} {c.cond['workload']} world {c.world_size}: its {c.launches} launches' {SPREAD} {c.spread:.1%}"
        for c in cases
        if c.launches >= stats.MIN_LAUNCHES and c.spread > stats.UNSTABLE_REL_STDEV
    ]
    rows = scorecard_rows(cases, family)
    no_verdict = (
        ""
        if rows
        else (
            f"No workload and world size has ok runs of both {' and '.join(PRIMARY)} under the same conditions "
            "in this selection, so there is no training figure to compare; "
            f"`bench sweep --backend {','.join(PRIMARY)}` "
            "records them."
        )
    )
    said = sentences + crossovers
    # the scorecard above says each in a row; the sentences, with every figure behind it, open on demand
    words = (
        [Folded(f"each comparison in words ({len(said)}), with the figures behind it", [Bullets(said)])] if said else []
    )
    return ReportPart(
        no_verdict=no_verdict,
        fairness=fairness,
        unstable=unstable,
        scorecard=rows,
        method=method() + resolution_note(cases) + (LINK_METHOD if across_hosts else []),
        shown=[r for c in cases for r in c.records],
        sections=[
            Section("throughput", "Throughput and scaling", 10, words + throughput_blocks(cases), nav="Throughput"),
            Section("time", "Where the time goes", 30, exposed_blocks(cases) + inputs),
            Section("startup", "Startup and rendezvous", 40, startup_blocks(cases), nav="Startup"),
            *([Section("links", "Across hosts: the link", 20, links, nav="Links")] if across_hosts else []),
        ],
    )
