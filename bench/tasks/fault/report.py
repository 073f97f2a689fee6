"""The report's view of fault-injection runs: the Elasticity section (a row per run, a sentence and a
throughput-over-time plot per case) and the scorecard's recovery rows."""

from __future__ import annotations

from statistics import median

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
    advantage,
    ahead_of,
    code,
    colour_of,
    drawable,
    figure_png,
    fmt,
    left,
    oriented,
    pyplot,
    ratio_words,
    right,
)
from bench.results.frame import distortion
from bench.tasks.fault import nccl_in_words
from bench.tasks.fault.results import (
    CAME_THROUGH,
    RUNS_TO_DECIDE,
    Decision,
    RecoveryCase,
    case_decision,
    recovery_cases,
)

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
            times = sorted(f.recovery_s for f in ok if f.recovery_s is not None)
            parts.append(
                f"{backend} came through {len(ok)} of {len(recs)} run(s), recovering in "
                + (f"{fmt(_median(times), '.2f')} s (median; {seconds_range(times)})" if times else "- s")
                + " at world size "
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


def runs_listed(times: list[float]) -> str:
    """Each run's time, in order: "0.14, 0.42 s"."""
    return ", ".join(f"{t:.2f}" for t in sorted(times)) + " s"


def seconds_range(times: list[float]) -> str:
    """The runs' times from the least to the most: "0.14-0.42 s", or one "4.80 s"."""
    low, high = min(times), max(times)
    return f"{low:.2f} s" if low == high else f"{low:.2f}-{high:.2f} s"


def factor_range(low: float, high: float) -> str:
    """How much sooner, from the least to the most across runs: "11-37 times", "2.1-4.5 times", "by 5-30%"."""
    if low >= 2:
        spec = ".0f" if low >= 10 else ".1f"
        return f"{format(low, spec)}-{format(high, spec)} times"
    return f"by {100 * (low - 1):.0f}-{100 * (high - 1):.0f}%" if high < 2 else f"by {low - 1:.0%} to {high:.1f} times"


def figure_of(side: RecoveryCase) -> str:
    """A side's figure in the scorecard: the median and every run's time, and how the others ended."""
    times, failed = side.times, side.failures()
    if not times:
        return f"did not recover ({failed})"
    said = f"{times[0]:.2f} s" if len(times) == 1 else f"median {side.median_s:.2f} s; runs {runs_listed(times)}"
    return said + (f"; {failed}" if failed else "")


def brief_of(side: RecoveryCase) -> str:
    """A side's figure in the scorecard's line: the median time of the runs that came through, and how the others
    ended ("median 10.49 s, timeout in 1 run"; "timeout in 6 runs" where none came through)."""
    times, failed = side.times, side.failures()
    if not times:
        return failed
    said = f"{times[0]:.2f} s" if len(times) == 1 else f"median {side.median_s:.2f} s"
    return said + (f", {failed}" if failed else "")


def compared_words(found: Decision, sides: list[RecoveryCase]) -> dict:
    """The case's comparison one way (ScoreRow.compared) and its test: the side ahead and by what ratio of recovery
    times, with the exact interval, only where the permutation test calls it; who came through where Fisher's test
    calls that; else a tie or "not significant"."""
    first, second = (c.backend for c in sides)
    if found.standing in ("one launch", "neither", "no ratio"):
        said = {"one launch": "one run a side: cannot tell", "neither": "neither came through"}
        return {"compared": said.get(found.standing, "no ratio: a recovery time is not above 0 s"), "test": "-"}
    if found.basis == CAME_THROUGH:
        test = f"p {found.p:.2g} (Fisher's exact)"
        if found.winner is None:
            return {"compared": "not significant", "test": test}
        other = second if found.winner == first else first
        ahead = f"{found.winner} came through in every run, {other} in none" if found.leader else "more often"
        return {"compared": ahead if found.leader else f"{found.winner} came through {ahead}", "test": test}
    est = found.estimate
    assert est is not None
    if not est.replicated:
        return {"compared": "not significant: one time a side", "test": "-"}
    test = f"p {est.p:.2g} (permutation test)"
    if found.standing == "ahead":
        side, factor = ahead_of(est.ratio, first, second, higher_is_better=False)
        low, high = oriented(est.low, est.high, side == first, higher_is_better=False)
        return {"compared": ratio_words(side, factor, low, high, RECOVERS_SOONER), "test": test}
    if found.standing == "within":
        return {"compared": f"a tie within ±{found.margin:.0%}", "test": test}
    return {"compared": "not significant", "test": test}


def to_decide(sides: list[RecoveryCase]) -> str:
    """What would decide a case not yet decided: the runs a side that can (RUNS_TO_DECIDE, the cap of the sweep's
    added fault launches), or more runs than that."""
    if min(len(c.records) for c in sides) < RUNS_TO_DECIDE:
        return f"{RUNS_TO_DECIDE} a side can decide it"
    return "more runs a side (`bench sweep --fault-repeats N`) can decide it"


def count_words(found: Decision, sides: list[RecoveryCase]) -> dict:
    """The row of a case whose sides came through in different shares of their runs: Fisher's exact test."""
    counts = " against ".join(f"{c.backend} {len(c.times)} of {len(c.records)}" for c in sides)
    difference = f"came through: {counts}; p {found.p:.2g} (Fisher's exact)"
    if found.leader is not None:
        other = next(c.backend for c in sides if c.backend != found.leader)
        said = f"{found.leader} came through in every run and {other} in none"
    else:
        better = max(sides, key=lambda c: len(c.times) / len(c.records))
        said = f"{better.backend} came through more often"
    shares = " against ".join(f"{len(c.times)} of {len(c.records)}" for c in sides) + " runs"
    if found.winner is not None:
        return {"difference": difference, "outcome": said if found.leader else f"{said} ({shares})"}
    return {"difference": difference, "outcome": f"not yet decided: {said} ({shares}); {to_decide(sides)}"}


def time_words(found: Decision, sides: list[RecoveryCase]) -> dict:
    """The row of a case where both came through in the same share of their runs: their recovery times, the runs
    themselves beside the permutation test's verdict, and its exact interval only where the runs allow one."""
    est = found.estimate
    assert est is not None
    first, second = (c.backend for c in sides)
    side, factor = ahead_of(est.ratio, first, second, higher_is_better=False)
    fast, slow = (sides[0], sides[1]) if side == first else (sides[1], sides[0])
    apart = f"{seconds_range(fast.times)} against {seconds_range(slow.times)}"
    runs = f"{len(sides[0].records)} + {len(sides[1].records)} runs"
    point = advantage(side, factor, RECOVERS_SOONER) if factor > 1 else "no difference"
    if not est.replicated:
        return {"difference": f"{point} (one time a side)", "outcome": f"not yet decided: {apart}; {to_decide(sides)}"}
    if 0 < est.low and est.high < float("inf"):
        # the interval of the slower side's time over the faster's, as the point estimate reads
        low, high = (1 / est.high, 1 / est.low) if side == first else (est.low, est.high)
        interval = f"{low:.3g} to {high:.3g} times, exact 95% interval"
    else:
        interval = f"{runs} allow no 95% interval"
    difference = f"{point} ({interval}), p {est.p:.2g} (permutation test)"
    spread = f"{apart}, {factor_range(min(slow.times) / max(fast.times), max(slow.times) / min(fast.times))}"
    failed = "".join(f"; {c.backend} failed {c.failures()}" for c in sides if c.failures())
    if found.standing == "ahead":
        every = f", in every run ({spread})" if found.leader else f" (runs {apart})"
        return {"difference": difference, "outcome": advantage(side, factor, RECOVERS_SOONER, 0) + every + failed}
    if found.standing == "within":
        return {"difference": difference, "outcome": f"within ±{found.margin:.0%} of each other ({apart}){failed}"}
    if found.leader is not None:
        said = f"not yet decided: {side} recovers sooner in every one of {runs} ({spread}); {to_decide(sides)}"
    elif found.margin < float("inf"):
        said = f"not resolved at ±{found.margin:.0%}: the runs overlap ({apart}); {to_decide(sides)}"
    else:
        said = f"not yet decided: the runs overlap ({apart}) and {runs} allow no interval; {to_decide(sides)}"
    return {"difference": difference, "outcome": said + failed}


def scorecard_rows(frame, family=None) -> list[ScoreRow]:
    """A row per fault case that both primary backends ran: each one's recovery time in every run (or how it
    failed), decided by the case's exact tests (bench.tasks.fault.results.decide). `family` is not read: each
    fault case is judged on its own (bench.core.stats.Family leaves exact estimates out of Holm's correction)."""
    first, second = PRIMARY
    rows = []
    for case, by_backend in recovery_cases(frame).items():
        found = case_decision(by_backend)
        if found is None:
            continue
        sides = [by_backend[first], by_backend[second]]
        launches = f"{len(sides[0].records)} + {len(sides[1].records)} runs"
        records = sides[0].records + sides[1].records
        common = {
            "condition": case,
            "figures": {c.backend: figure_of(c) for c in sides},
            "brief": {c.backend: brief_of(c) for c in sides},
            **compared_words(found, sides),
            "launches": launches,
            "operations": True,
            "weighs": FAILURE,
            "default": not records[-1].spec.hosts,
            "artefact": distortion({"device": records[-1].spec.device}, records, speed=False),
            "recovered": {
                c.backend: (len(c.times), len(c.records), c.failures(), seconds_range(c.times) if c.times else "")
                for c in sides
            },
            "winner": found.winner,
            "leader": found.leader,
            "margin": found.margin,
            "to_decide": "" if found.settled else to_decide(sides),
        }
        if found.standing == "one launch":
            said = {"difference": "-", "standing": "one launch", "outcome": "one run a side; " + to_decide(sides)}
        elif found.standing == "neither":
            said = {
                "difference": "-",
                "standing": "failed",
                "outcome": " and ".join(f"{c.backend} did not recover ({c.failures()})" for c in sides),
            }
        elif found.standing == "no ratio":
            said = {"difference": "-", "outcome": "no ratio: a recovery time is not above 0 s"}
        elif found.basis == CAME_THROUGH:
            said = {**count_words(found, sides), "standing": "failed" if found.winner else found.standing}
        else:
            said = {**time_words(found, sides), "standing": found.standing}
        rows.append(ScoreRow(sides[0].measure, **common, **said))
    return rows


METHOD = (
    "Fault recovery: each run is one event, so runs are compared, never windows. Whether each backend came through "
    "is compared with Fisher's exact test on the counts; where both came through in the same share of their runs, "
    "their recovery times with a permutation test of the mean log time (every split of the pooled runs), its interval "
    "the exact one that inverts the test, and each run's time shown beside it. Each case is decided on its own at 5% "
    f"two-sided; one side ahead in every run is called from {RUNS_TO_DECIDE} runs a side on (2 / C(8, 4) = 0.029), "
    f"so a sweep adds runs to a case not yet decided until it is, or has {RUNS_TO_DECIDE} a side. A tie: the times "
    "shown within ±25% by the exact 90% interval (docs/method.md, 'Fault recovery')."
)


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
        method=[METHOD],
    )
