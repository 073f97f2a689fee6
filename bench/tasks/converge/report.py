"""The report's view of time-to-accuracy runs (bench converge): the Time to accuracy section, a plot of
held-out accuracy against training time and against samples seen per case, a row per run, and whether the
backends reach the same accuracy."""

from __future__ import annotations

from statistics import median

from bench.core.registry import PRIMARY
from bench.core.stats import runs_to_decide
from bench.report.sections import (
    Cell,
    Folded,
    Heading,
    Paragraph,
    Plot,
    ReportPart,
    Section,
    Table,
    code,
    colour_of,
    figure_png,
    fmt,
    left,
    pyplot,
    right,
)
from bench.results.frame import distortion
from bench.tasks.converge import ACCURACY_TOLERANCE

COLUMNS = [
    left("backend"),
    right("world"),
    left("lr rule"),
    right("peak lr"),
    right("time to target s"),
    right("epochs to target"),
    right("samples to target"),
    right("final accuracy"),
    right("final loss"),
    right("training s"),
    right("samples/s"),
    left("replicas"),
    left("status"),
    left("run"),
]


def case_key(rec) -> tuple:
    s, c = rec.spec, rec.spec.converge
    return (s.workload, s.data, c.target, s.world_size, c.lr_scaling, s.batch_size, s.lr, c.epochs)


def case_title(rec) -> str:
    s, c = rec.spec, rec.spec.converge
    rule = "linear scaling" if c.lr_scaling == "linear" else "not scaled"
    return (
        f"{s.workload} on {s.data} to {c.target:.0%}, world {s.world_size}, batch {s.batch_size}/worker, "
        f"lr {s.lr:g} ({rule})"
    )


def run_row(rec) -> list:
    s, c, m = rec.spec, rec.spec.converge, rec.metrics
    status = rec.status + (f": {rec.error.message}" if rec.error and rec.error.message else "")
    head = [s.backend, s.world_size, c.lr_scaling]
    if m is None:
        return head + ["-"] * 9 + [Cell(status, "warn"), rec.run_id]
    return head + [
        fmt(m.lr_peak, "g"),
        fmt(m.time_to_target_s, ".2f"),
        fmt(m.epochs_to_target, ".2f"),
        fmt(m.samples_to_target, ",d"),
        f"{m.final_accuracy:.1%}",
        f"{m.final_loss:.4f}",
        f"{m.train_time_s:.2f}",
        f"{m.samples_per_s:,.0f}",
        Cell(
            {True: "agree", False: "DIFFER", None: "async"}[m.replicas_agree],
            "bad" if m.replicas_agree is False else "",
        ),
        Cell(status, "" if rec.ok else "warn"),
        rec.run_id,
    ]


def latest_ok(recs: list) -> dict:
    """The latest ok run of each backend that had its cores to itself."""
    out = {}
    for rec in sorted(recs, key=lambda r: r.created_at):
        if rec.comparable and rec.metrics is not None:
            out[rec.spec.backend] = rec
    return out


def agreement_sentence(title: str, by_backend: dict) -> tuple[str, bool]:
    """Whether the backends of one case end at the same held-out accuracy (within ACCURACY_TOLERANCE) with
    their workers holding one model: (the sentence, whether something is wrong)."""
    finals = {b: r.metrics.final_accuracy for b, r in by_backend.items()}
    split = [b for b, r in by_backend.items() if r.metrics.replicas_agree is False]
    problems = []
    if split:
        problems.append(
            f"{', '.join(split)}: the workers ended with different parameters (gradients not averaged, "
            "or initial parameters not broadcast)"
        )
    if len(finals) >= 2:
        ordered = sorted(finals.values())
        middle = ordered[len(ordered) // 2]
        off = [b for b, a in finals.items() if abs(a - middle) > ACCURACY_TOLERANCE]
        spread = ", ".join(f"{b} {a:.1%}" for b, a in sorted(finals.items()))
        if off:
            problems.append(
                f"{', '.join(off)} ended more than {ACCURACY_TOLERANCE * 100:.0f} points from the others "
                f"({spread}): the same model, data, seed and lr rule should reach the same accuracy; "
                "check its averaging and broadcast"
            )
        else:
            return (
                f"{title}: the backends reach the same held-out accuracy ({spread}; within "
                f"{ACCURACY_TOLERANCE * 100:.0f} points)" + ("; " + "; ".join(problems) if problems else "") + ".",
                bool(problems),
            )
    return (f"{title}: " + "; ".join(problems) + ".", True) if problems else ("", False)


def times_sentence(title: str, recs: list) -> str:
    """Each backend's time to the target in one case: its one run, or the median and range of its runs."""
    runs: dict[str, list] = {}
    for rec in recs:
        if rec.comparable and rec.metrics is not None:
            runs.setdefault(rec.spec.backend, []).append(rec.metrics)
    parts = []
    for backend, ms in runs.items():
        times = sorted(m.time_to_target_s for m in ms if m.reached)
        missed = len(ms) - len(times)
        if not times:
            parts.append((float("inf"), f"{backend} did not reach it (best {max(m.best_accuracy for m in ms):.1%})"))
            continue
        epochs = median(m.epochs_to_target for m in ms if m.reached)
        spread = f"median of {len(times)} runs, {times[0]:.2f} to {times[-1]:.2f}; " if len(times) > 1 else ""
        parts.append(
            (
                median(times),
                f"{backend} {median(times):.2f} s ({spread}{epochs:.2f} epochs"
                + (f"; {missed} run(s) did not reach it" if missed else "")
                + ")",
            )
        )
    return f"Time to accuracy, {title}: " + ", ".join(text for _, text in sorted(parts)) + "."


def world_sentences(records: list) -> list[str]:
    """How time to target changes with the world size, per backend and lr rule, where several sizes ran."""
    groups: dict[tuple, dict[int, list]] = {}
    for rec in records:
        if rec.comparable and rec.metrics is not None:
            s, c = rec.spec, rec.spec.converge
            key = (s.backend, s.workload, s.data, c.target, c.lr_scaling)
            groups.setdefault(key, {}).setdefault(s.world_size, []).append(rec.metrics)
    out = []
    for (backend, workload, data, target, rule), by_world in sorted(groups.items()):
        if len(by_world) < 2:
            continue
        cells = []
        for n, ms in sorted(by_world.items()):
            hit = [m for m in ms if m.reached]
            cells.append(
                f"world {n}: "
                + (
                    f"{median(m.time_to_target_s for m in hit):.2f} s, "
                    f"{median(m.epochs_to_target for m in hit):.2f} epochs"
                    + (f" (median of {len(hit)})" if len(hit) > 1 else "")
                    if hit
                    else f"not reached (best {max(m.best_accuracy for m in ms):.1%})"
                )
            )
        out.append(f"{backend}, {workload} on {data} to {target:.0%} with {rule} lr scaling: " + "; ".join(cells) + ".")
    return out


def longest_pause(ms: list) -> tuple[float, float]:
    """(the longest training time between two evaluations in any of these runs, the median such interval): a stall
    shows as one interval many times the others."""
    gaps = [b.train_time_s - a.train_time_s for m in ms for a, b in zip(m.curve, m.curve[1:])]
    return (max(gaps), median(gaps)) if gaps else (0.0, 0.0)


def not_weighed(cases: dict[tuple, list]) -> str:
    """Why the answer does not weigh time to accuracy, in one line, with the evidence of the widest gap between the
    primary pair at 2 or more workers: where both reach the target at the same step in every run, the time to it is
    those steps at each one's speed (training throughput, which the answer weighs where measured like for like), so
    the gap is the speed of these runs, their conditions and their pauses; and too few runs a side to decide it."""
    first, second = PRIMARY
    widest = None
    for recs in cases.values():
        runs = {
            b: [r for r in recs if r.spec.backend == b and r.comparable and r.metrics and r.metrics.reached]
            for b in PRIMARY
        }
        if recs[0].spec.world_size < 2 or not all(runs.values()):
            continue
        times = {b: median(r.metrics.time_to_target_s for r in rs) for b, rs in runs.items()}
        gap = max(times.values()) / max(min(times.values()), 1e-9)
        if widest is None or gap > widest[0]:
            widest = (gap, recs, runs, times)
    if widest is None:
        return ""
    _, recs, runs, times = widest
    slow, fast = sorted(PRIMARY, key=lambda b: -times[b])
    n = {b: len(rs) for b, rs in runs.items()}
    steps = {r.metrics.steps_to_target for rs in runs.values() for r in rs}
    target = f"{recs[0].spec.converge.target:.0%}"
    if len(steps) == 1:
        how = (
            f"{first} and {second} reached {target} at the same step ({steps.pop()}) in all {n[first]} + {n[second]} "
            "runs, so the time to it is that many steps at each one's speed: training throughput, which the answer "
            "weighs where it is measured like for like"
        )
    else:
        how = (
            f"{first} and {second} reached {target} at different steps ({', '.join(map(str, sorted(steps)))}), "
            "which the held-out accuracy check above reports"
        )
    pair = runs[first] + runs[second]
    distorted = distortion({"device": pair[-1].spec.device, "cpu_bind": pair[-1].spec.cpu_bind}, pair)
    speed = {b: median(r.metrics.samples_per_s for r in rs) for b, rs in runs.items()}
    pause, usual = longest_pause([r.metrics for r in runs[slow]])
    evidence = (
        f"{case_title(recs[0])}: {slow} {times[slow]:.2f} s against {fast}'s {times[fast]:.2f} s (medians) is "
        f"{slow}'s speed in these runs ({speed[slow]:,.0f} against {speed[fast]:,.0f} samples/s)"
    )
    if pause > 3 * usual > 0:
        evidence += f" with a pause of up to {pause:.2f} s between two evaluations (its median interval {usual:.2f} s)"
    fewest = min(n.values())
    decided = runs_to_decide()
    return (
        f"Not weighed in the answer: {how}"
        + (f"; these runs were {distorted}, which the scorecard shades as distorting a comparison" if distorted else "")
        + f". {evidence}"
        + (
            f"; {fewest} run(s) a side, fewer than the {decided} an exact test needs to call a gap at 5%."
            if fewest < decided
            else "."
        )
    )


def curves_png(title: str, by_backend: dict, target: float) -> str | None:
    """Held-out accuracy against training time and against samples seen, one line per backend."""
    plt = pyplot()
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for backend, rec in sorted(by_backend.items()):
        curve = rec.metrics.curve
        colour = colour_of(backend)
        ax_t.plot([p.train_time_s for p in curve], [p.accuracy for p in curve], marker=".", label=backend, color=colour)
        ax_s.plot([p.samples for p in curve], [p.accuracy for p in curve], marker=".", label=backend, color=colour)
    for ax in (ax_t, ax_s):
        ax.axhline(target, color="black", linestyle=":", linewidth=1)
    ax_t.set_xlabel("training time, s (evaluation excluded)")
    ax_s.set_xlabel("samples seen (all workers)")
    ax_t.set_ylabel("held-out accuracy")
    ax_t.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    return figure_png(fig)


def report_part(frame, context) -> ReportPart | None:
    if frame.empty:
        return None
    records = list(frame.sort_values("created_at")["record"])
    cases: dict[tuple, list] = {}
    for rec in records:
        cases.setdefault(case_key(rec), []).append(rec)
    warnings, blocks = [], []
    for recs in cases.values():
        title = case_title(recs[0])
        blocks.append(Heading(title))
        by_backend = latest_ok(recs)
        if by_backend:
            times = times_sentence(title, recs)
            agree, wrong = agreement_sentence(title, by_backend)
            if agree and wrong:
                warnings.append(agree)
            # a disagreement is said once, under the verdict (fairness); agreement here, by its figures
            blocks += [
                Paragraph(times),
                *([Paragraph(agree)] if agree and not wrong else []),
                Plot(f"held-out accuracy, {title}", curves_png(title, by_backend, recs[0].spec.converge.target)),
            ]
        # every run's figures, one line until opened: the sentences above carry what they add up to
        blocks.append(Folded(f"each run of {title} ({len(recs)})", [Table(COLUMNS, [run_row(r) for r in recs])]))
    across = world_sentences(records)
    why = not_weighed(cases)
    method = [
        "Time to accuracy (",
        code("bench converge"),
        "): every backend trains the same model from the same "
        "seed on the same training part for the same number of epochs, with the same lr rule (",
        code("--lr-scaling linear"),
        ": the lr times the world size, reached by a linear warm-up); the first "
        "worker evaluates the held-out part every few steps with its training clock stopped. Time to target is "
        "the training time at the first evaluation at or above the target, so it is known to within one "
        "evaluation interval. A time to accuracy is one event per run: with several runs of a backend the "
        "sentence gives their median and range, the figure draws the latest. "
        f"Backends agree when their final accuracies are within {ACCURACY_TOLERANCE * 100:.0f} "
        "points and every worker ends with the same parameters.",
    ]
    section = Section(
        "converge",
        "Time to accuracy",
        45,
        [*([Paragraph(why, "note")] if why else []), *map(Paragraph, across), Paragraph(method, "note"), *blocks],
        nav="Accuracy",
    )
    return ReportPart(
        fairness=warnings,
        method=[method],
        shown=[r for recs in cases.values() for r in latest_ok(recs).values()],
        sections=[section],
    )


def comparisons(frame) -> dict:
    """None across launches: each backend's time to accuracy is one run here."""
    return {}
