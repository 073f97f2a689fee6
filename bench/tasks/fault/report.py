"""The report's view of fault-injection runs: the Elasticity section (a row per run, a sentence and a
throughput-over-time plot per case) and the scorecard's recovery rows."""

from __future__ import annotations

from statistics import median

from bench.core import stats
from bench.core.records import RunStatus
from bench.core.registry import PRIMARY
from bench.report.sections import (
    FAILURE,
    RECOVERS_SOONER,
    Cell,
    Folded,
    Paragraph,
    Plot,
    ReportPart,
    ScoreRow,
    Section,
    Table,
    code,
    colour_of,
    drawable,
    figure_png,
    fmt,
    judged_outcome,
    left,
    pyplot,
    right,
)
from bench.results.frame import distortion
from bench.tasks.fault import nccl_in_words
from bench.tasks.fault.results import recovery_cases, recovery_key

COLUMNS = [
    left("case"),
    left("backend"),
    left("fault"),
    right("world before"),
    right("world after"),
    right("detection s"),
    right("recovery s"),
    right("new worker's first step s"),
    right("steps redone"),
    right("restarts / resets"),
    right("ended after fault s"),
    left("collective timeout, error handling"),
    left("status"),
    left("run"),
]
NOTE = [
    "Detection: from the signal (or the join) to the first sign the system noticed it. Recovery: to the "
    "first training step completed after the run resumed. Steps redone: steps completed before the resume "
    "that had to be trained again (since the last checkpoint or commit). Each row is one run: recovery is "
    "one event per run, so repeat ",
    code("bench fault"),
    " to see its spread. The plots show samples per "
    "second completed by the process that is rank 0 at the time (batch x world size per step), in 80 equal "
    "bins of the run, time 0 at the signal or the join. Collective timeout, error handling: how long a rank waits "
    "in one collective (--comm-timeout) and, on GPUs, the NCCL settings the run had in force (torch's async error "
    "handling, Horovod's stall shutdown).",
]


def collectives_in_force(rec) -> str:
    """A fault run's collective timeout and, on GPUs, the NCCL settings it recorded (FaultMetrics.nccl)."""
    nccl = rec.metrics.nccl if rec.metrics is not None else None
    if nccl is None:
        if rec.spec.device == "cuda":
            return "NCCL, not recorded"
        # the one the launcher gave the collectives, where it chose one other than the spec's (Horovod's Gloo timeout
        # under a join: docs/method.md, "horovod")
        seconds = rec.launch.get("collective_timeout_s", rec.spec.collective_timeout)
        return f"gloo, {seconds:g} s"
    return nccl_in_words(nccl)


def _median(values):
    values = [v for v in values if v is not None]
    return median(values) if values else None


def run_row(r) -> list:
    """One fault run as a table row."""
    rec, f = r.record, r.record.metrics
    status = r.status + (f": {rec.error.message}" if rec.error and rec.error.message else "")
    if f is None:  # a run that ended before its figures could be read
        return [r.case, r.backend, "not injected", *["-"] * 6, "-", "-", "-", Cell(status, "warn"), r.run_id]
    return [
        r.case,
        r.backend,
        f"step {f.fault['step']}" if f.fault else "not injected",
        fmt(f.world_before, "d"),
        fmt(f.world_after, "d"),
        fmt(f.detection_s, ".2f"),
        fmt(f.recovery_s, ".2f"),
        fmt(f.join_contributes_s, ".2f"),
        fmt(f.steps_redone, "d"),
        f"{f.restarts or 0} / {f.resets or 0}",
        fmt(f.ended_after_fault_s, ".1f"),
        collectives_in_force(rec),
        Cell(status, "" if r.status == RunStatus.OK else "warn"),
        r.run_id,
    ]


def case_sentence(case: str, by_backend: dict) -> str:
    """How each backend came through one case: runs that came through, median recovery, world after."""
    parts = []
    for backend in sorted(by_backend, key=lambda b: (b not in PRIMARY, b)):
        recs = by_backend[backend]
        ok = [x.metrics for x in recs if x.ok and x.metrics is not None]
        if ok:
            after = sorted({f.world_after for f in ok if f.world_after is not None})
            parts.append(
                f"{backend} came through {len(ok)} of {len(recs)} run(s), recovering in "
                f"{fmt(_median([f.recovery_s for f in ok]), '.2f')} s (median) at world size "
                f"{', '.join(map(str, after))} with {fmt(_median([f.steps_redone for f in ok]), '.0f')} "
                "step(s) redone"
            )
        else:
            statuses = ", ".join(sorted({x.status for x in recs}))
            hang = _median([x.metrics.hang_observed_s for x in recs if x.metrics is not None])
            parts.append(
                f"{backend} did not come through ({statuses} in {len(recs)} run(s)"
                + (f"; hang noticed after {hang:.1f} s" if hang is not None else "")
                + ")"
            )
    return f"{case}: " + "; ".join(parts) + "."


def timeline_png(case: str, by_backend: dict) -> str | None:
    """Samples/s over time around the fault for the latest run of each backend: the fault at t = 0,
    recovery marked."""
    series = []
    for backend, recs in sorted(by_backend.items()):
        shown = ([x for x in recs if x.ok] or recs)[-1]  # the latest that came through, if any
        f = shown.metrics
        if f is None or not (f.timeline or {}).get("t") or not f.fault:
            continue
        offset = f.timeline["t0"] - f.fault["time"]
        # the timeline is kept as it was written: a point that is no finite number (a broken record's) is not drawn
        points = [(t + offset, v) for t, v in zip(f.timeline["t"], f.timeline["samples_per_s"]) if drawable(v)]
        points = [(t, v) for t, v in points if drawable(t)]
        if points:
            series.append((backend, [t for t, _ in points], [v for _, v in points], f.recovery_s, f.hang_observed_s))
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for backend, ts, thr, recovery, hang in series:
        color = colour_of(backend)
        ax.step(ts, thr, where="post", label=backend, color=color)
        if recovery is not None:
            ax.axvline(recovery, color=color, linestyle=":", linewidth=1.5)
            ax.annotate(
                f"{backend} recovered",
                (recovery, max(thr) * 0.95),
                color=color,
                fontsize=8,
                rotation=90,
                va="top",
                ha="right",
            )
        elif hang is not None:
            ax.annotate(f"{backend}: no step since", (0, max(thr) * 0.5), color=color, fontsize=8)
    ax.set_ylim(bottom=0)  # throughput from zero: a drop is drawn at its true size
    ax.axvline(0, color="black", linewidth=1.5)
    ax.annotate("fault", (0, ax.get_ylim()[1] * 0.98), color="black", fontsize=8, va="top", ha="left")
    ax.set_xlabel("seconds since the fault")
    ax.set_ylabel("samples/s")
    ax.set_title(case, fontsize=9)
    ax.legend(fontsize=8)
    return figure_png(fig)


def scorecard_rows(frame, family=None) -> list[ScoreRow]:
    """A row per fault case that both primary backends ran: each one's median time to recover (or how it failed),
    compared across the runs that came through where both did."""
    first, second = PRIMARY
    rows = []
    for case, by_backend in recovery_cases(frame).items():
        if first not in by_backend or second not in by_backend:
            continue
        sides = [by_backend[first], by_backend[second]]
        figures = {
            c.backend: (
                f"{c.median_s:.1f} s" + (" (median)" if len(c.times) > 1 else "")
                if c.times
                else f"did not recover ({c.failures()})"
            )
            for c in sides
        }
        launches = f"{len(sides[0].records)} + {len(sides[1].records)} runs"
        records = sides[0].records + sides[1].records
        common = {
            "condition": case,
            "figures": figures,
            "launches": launches,
            "operations": True,
            "weighs": FAILURE,
            "default": not records[-1].spec.hosts,
            "artefact": distortion({"device": records[-1].spec.device}, records, speed=False),
            "recovered": {c.backend: (len(c.times), len(c.records), c.failures()) for c in sides},
        }
        if all(c.times for c in sides) and min(sides[0].times + sides[1].times) > 0:  # (as comparisons() takes them)
            key = recovery_key(case, first, second)
            est = stats.ratio_of_cases([sides[0].times], [sides[1].times])
            said = judged_outcome(
                (family or stats.Family({key: est})).judge(key, est),
                first,
                second,
                higher_is_better=False,
                words=RECOVERS_SOONER,
            )
            failed = [c for c in sides if c.failures()]
            if failed:
                said["outcome"] += "; " + "; ".join(f"{c.backend} failed {c.failures()}" for c in failed)
        elif all(c.times for c in sides):  # a time of 0 s or less (clocks apart) has no log to compare on
            said = {"difference": "-", "outcome": "no ratio: a recovery time is not above 0 s"}
        else:
            through = [c.backend for c in sides if c.times]
            # never a winner on one run a side: a backend that failed once may come through the next run
            replicated = min(len(c.records) for c in sides) >= stats.MIN_LAUNCHES
            said = {
                "difference": "-",
                "standing": "failed",
                "winner": through[0] if len(through) == 1 and replicated else None,
                "outcome": " and ".join(f"{c.backend} did not recover ({c.failures()})" for c in sides if not c.times)
                + ("" if replicated else "; one run a side"),
            }
        rows.append(ScoreRow(sides[0].measure, **common, **said))
    return rows


def report_part(frame, context) -> ReportPart:
    """The fault runs' part of the page (`frame`: this task's runs only), side by side per case."""
    if frame.empty:
        summary = (
            "No fault-injection run is stored, so this page makes no claim about recovery; "
            f"`bench fault --backend {PRIMARY[0]}` and `--backend {PRIMARY[1]}` record them."
        )
        return ReportPart(sections=[Section("elasticity", "Elasticity", 50, [Paragraph(summary)])])
    runs = frame.sort_values("created_at")
    cases: dict[str, dict[str, list]] = {}
    for r in runs.itertuples():
        cases.setdefault(r.case, {}).setdefault(r.backend, []).append(r.record)
    summary = (
        f"{len(frame)} fault-injection run(s) in {len(cases)} case(s). Figures are per run "
        "(a recovery is one event), from the workers' journals and, for torchrun, the agent's own events."
    )
    lines = [case_sentence(case, by_backend) for case, by_backend in cases.items()]
    plots = []
    for case, by_backend in cases.items():
        png = timeline_png(case, by_backend)
        if png:
            plots.append(Plot(f"throughput over time, {case}", png))
    blocks = [
        Paragraph(summary),
        *map(Paragraph, lines),
        # every run's row, a click away: the sentences above say what they add up to
        Folded(
            f"every fault run ({len(runs)}): detection, recovery, steps redone, world before and after",
            [Table(COLUMNS, [run_row(r) for r in runs.itertuples()]), Paragraph(NOTE, "note")],
        ),
        *plots,
    ]
    return ReportPart(
        scorecard=scorecard_rows(frame, getattr(context, "family", None)),
        sections=[Section("elasticity", "Elasticity", 50, blocks)],
    )
