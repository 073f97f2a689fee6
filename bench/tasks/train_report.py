"""The report's view of training runs: the verdict (the primary pair per conditions and world size, and
the reference backends against the better of them), the recommendation, throughput and scaling,
where the time goes (exposed communication against the plain loop) and startup."""

from __future__ import annotations

from bench import stats
from bench.backends import PLAIN_LOOP, PRIMARY
from bench.frame import CONDITIONS, with_efficiency
from bench.sections import (Cell, Figure, Heading, Paragraph, ReportPart, Section, Table, code, em,
                            env_differences, figure_png, fmt, left, pct, pyplot, right, strong)

SIGNIFICANCE = 0.05  # two backends differ when Welch's t-test gives p below this


def latest_cases(ok):
    """The latest ok run of each (conditions, backend, world size)."""
    return ok.sort_values("created_at").groupby([*CONDITIONS, "backend", "world_size"]).tail(1)


def compare(a_row, b_row) -> dict:
    """Welch's t-test on two runs' per-window throughputs, and the relative difference of means."""
    from scipy.stats import ttest_ind

    a = a_row.record.metrics.throughput.per_window
    b = b_row.record.metrics.throughput.per_window
    p = float(ttest_ind(a, b, equal_var=False).pvalue) if len(a) > 1 and len(b) > 1 else float("nan")
    return {"ratio": a_row.throughput / b_row.throughput, "p": p, "n": (len(a), len(b)),
            "significant": bool(p == p and p < SIGNIFICANCE)}


def _cond_title(cond: dict) -> str:
    passes = f" x {cond['backward_passes']} passes" if cond["backward_passes"] != 1 else ""
    return (f"{cond['workload']} on {cond['device']}: batch {cond['batch_size']}{passes}/worker, "
            f"{cond['threads']} thread(s)/worker, {cond['data']} data, {cond['image_size']}px")


# ---------------------------------------------------------------- verdict and recommendation
def verdict(cases) -> tuple[list[str], list[str], list[dict]]:
    """Sentences per workload and world size, fairness notes, and the comparisons behind them."""
    sentences, fairness, comparisons = [], [], []
    first, second = PRIMARY
    for key, group in cases.groupby([*CONDITIONS, "world_size"], sort=True):
        cond = dict(zip([*CONDITIONS, "world_size"], key))
        rows = {r.backend: r for r in group.itertuples()}
        where = (f"{cond['workload']}, {cond['world_size']} worker(s) on {cond['device']} "
                 f"(batch {cond['batch_size']}/worker, {cond['threads']} thread(s)/worker, {cond['data']} data)")
        if all(b in rows for b in PRIMARY):
            e, h = rows[first], rows[second]
            c = compare(e, h)
            faster, slower = (e, h) if c["ratio"] >= 1 else (h, e)
            gap = (max(c["ratio"], 1 / c["ratio"]) - 1) * 100
            figures = (f"{first} {e.throughput:,.0f} vs {second} {h.throughput:,.0f} samples/s; "
                       f"Welch's t-test p = {c['p']:.3g} over {c['n'][0]} + {c['n'][1]} windows")
            flags = [r.backend for r in (e, h) if r.unstable]
            caution = f" Caution: {', '.join(flags)} unstable." if flags else ""
            if c["significant"]:
                sentences.append(f"{where}: {faster.backend} is faster by {gap:.1f}% ({figures}).{caution}")
            else:
                sentences.append(f"{where}: no significant difference ({faster.backend} ahead by {gap:.1f}%, "
                                 f"{figures}).{caution}")
            comparisons.append({"cond": cond, "winner": faster.backend if c["significant"] else None,
                                "pct": gap, "p": c["p"]})
            differs = env_differences([e.record, h.record])
            if differs:
                fairness.append(f"{where}: the {first} and {second} runs differ in {', '.join(differs)}; "
                                "their comparison is not like for like.")
        for other in sorted(set(rows) - set(PRIMARY) - {PLAIN_LOOP}):  # reference backends (the PS)
            best = max((rows[b] for b in PRIMARY if b in rows), key=lambda r: r.throughput, default=None)
            if best is None:
                continue
            c = compare(rows[other], best)
            rel = (1 - c["ratio"]) * 100
            word = "slower" if rel > 0 else "faster"
            sig = "" if c["significant"] else ", not a significant difference"
            opts = ", ".join(f"{k}={v}" for k, v in rows[other].record.spec.backend_options.items())
            sentences.append(f"{where}: the {other} baseline ({opts}) is {abs(rel):.1f}% {word} than "
                             f"{best.backend} (p = {c['p']:.3g}{sig}).")
    return sentences, fairness, comparisons


def recommendation(comparisons: list[dict], cases) -> list[str]:
    lines = []
    if not comparisons:
        return [f"Run both {' and '.join(PRIMARY)} under the same conditions (bench sweep) for a recommendation."]
    # At one worker nothing is distributed: those comparisons measure the wrappers' overhead only, so
    # the choice rests on the multi-worker cases when there are any.
    distributed = [c for c in comparisons if c["cond"]["world_size"] > 1]
    single = [c for c in comparisons if c["cond"]["world_size"] == 1]
    basis = distributed or comparisons
    wins = {b: [c for c in basis if c["winner"] == b] for b in PRIMARY}
    ties = [c for c in basis if c["winner"] is None]
    total = len(basis)
    scope = "multi-worker " if distributed else ""
    for backend, won in wins.items():
        if won:
            where = "; ".join(f"{c['cond']['workload']} at {c['cond']['world_size']} worker(s) (+{c['pct']:.1f}%)"
                              for c in won)
            lines.append(f"{backend} was significantly faster in {len(won)} of {total} {scope}comparison(s): "
                         f"{where}.")
    if ties:
        lines.append(f"{len(ties)} of {total} {scope}comparison(s) showed no significant difference.")
    leader, other = sorted(PRIMARY, key=lambda b: -len(wins[b]))
    if len(wins[leader]) > len(wins[other]):
        lines.append(f"For throughput on this hardware, choose {leader}.")
    else:
        lines.append("Throughput does not separate them here: choose on operations (launcher, elasticity, "
                     "ecosystem).")
    if distributed and single:
        overhead = {b: sum(c["winner"] == b for c in single) for b in PRIMARY}
        lines.append("At one worker, where only the wrapper's overhead is measured: " +
                     ", ".join(f"{b} faster in {k} of {len(single)}" for b, k in overhead.items()) + ".")
    start = cases[cases["backend"].isin(PRIMARY)].groupby("backend")["startup_s"].median()
    if len(start) == 2:
        quick, slow = start.idxmin(), start.idxmax()
        lines.append(f"{quick} reached its first step sooner (median {start[quick]:.1f} s vs "
                     f"{start[slow]:.1f} s for {slow}).")
    return lines


# ---------------------------------------------------------------- sections
def throughput_blocks(ok) -> list:
    """Per conditions: the latest run of each backend and world size, and a figure of throughput and
    scaling efficiency."""
    if ok.empty:
        return [Paragraph("No successful training run in this selection.")]
    plt = pyplot()
    ci = f"{pct(stats.CONFIDENCE)} CI"
    columns = [left("backend"), right("world"), right("samples/s"), right(ci), right("sd/mean"),
               right("efficiency"), right("vs plain loop"), right("step ms"), right("straggler ratio"),
               right("peak RSS MiB"), left("run")]
    blocks = []
    for key, group in ok.groupby(CONDITIONS, sort=True):
        cond = dict(zip(CONDITIONS, key))
        latest = group.sort_values("created_at").groupby(["backend", "world_size"]).tail(1)
        latest = latest.sort_values(["backend", "world_size"])
        rows = [[r.backend, r.world_size,
                 Cell(f"{fmt(r.throughput, ',.0f')} (unstable)", "warn") if r.unstable
                 else fmt(r.throughput, ",.0f"),
                 f"{fmt(r.ci_low, ',.0f')} to {fmt(r.ci_high, ',.0f')}", fmt(r.rel_stdev, ".1%"),
                 fmt(r.efficiency, ".1%"), fmt(r.efficiency_vs_plain, ".1%"),
                 fmt(r.step_time_s * 1000 if r.step_time_s else None, ".2f"),
                 fmt(r.record.metrics.straggler_ratio, ".3f"), fmt(r.peak_rss_mb, ",.0f"), r.run_id]
                for r in latest.itertuples()]
        fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.6))
        sizes = sorted(latest["world_size"].unique())
        for backend, g in latest.groupby("backend"):
            err = [g["throughput"] - g["ci_low"], g["ci_high"] - g["throughput"]]
            ax_thr.errorbar(g["world_size"], g["throughput"], yerr=err, marker="o", capsize=3, label=backend)
            if g["efficiency"].notna().any():
                ax_eff.plot(g["world_size"], g["efficiency"], marker="o", label=backend)
        ax_eff.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
        for ax, title in ((ax_thr, f"throughput (samples/s, {ci})"), (ax_eff, "scaling efficiency")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.set_xlabel("world size (workers)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        ax_eff.set_ylim(bottom=0)
        fig.tight_layout()
        title = _cond_title(cond)
        blocks += [Heading(title), Table(columns, rows),
                   Figure(f"throughput and scaling efficiency of {title}", figure_png(fig))]
    return blocks


def exposed_blocks(cases) -> list:
    """Step time against the plain loop's under the same conditions: the communication not hidden."""
    rows, shares = [], []
    if not cases.empty:
        plain = cases[(cases["backend"] == PLAIN_LOOP) & (cases["world_size"] == 1)].set_index(CONDITIONS)["step_time_s"]
        for r in cases[cases["backend"] != PLAIN_LOOP].sort_values(["workload", "backend", "world_size"]).itertuples():
            base = plain.get(tuple(getattr(r, c) for c in CONDITIONS))
            if base is None or not r.step_time_s:
                continue
            exposed = r.step_time_s - base
            rows.append([r.workload, r.backend, r.world_size, fmt(r.step_time_s * 1000, ".2f"),
                         fmt(base * 1000, ".2f"), fmt(exposed * 1000, ".2f"), fmt(exposed / r.step_time_s, ".1%")])
            shares.append((f"{r.workload}\n{r.backend} x{r.world_size}", exposed / r.step_time_s))
    if not rows:
        return [Paragraph(["Needs a plain single-process run (backend ", em(PLAIN_LOOP), ") under the same "
                           "conditions as the distributed runs; ", code("bench sweep"), " records one unless ",
                           code("--no-plain-loop"), "."])]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows)), 3.6))
    ax.bar(range(len(rows)), [100 * share for _, share in shares], color="#5b8db8")
    ax.set_xticks(range(len(rows)), [label for label, _ in shares], fontsize=7)
    ax.set_ylabel("exposed communication (% of step)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    columns = [left("workload"), left("backend"), right("world"), right("step ms"), right("plain loop step ms"),
               right("exposed communication ms"), right("share of the step")]
    return [Table(columns, rows), Figure("exposed communication share", figure_png(fig))]


def startup_blocks(cases) -> list:
    if cases.empty:
        return [Paragraph("No successful training run in this selection.")]
    rows = [[r.workload, r.backend, r.world_size, fmt(r.record.metrics.startup.launch_to_process_s, ".2f"),
             fmt(r.record.metrics.startup.rendezvous_s, ".3f"), fmt(r.startup_s, ".2f"), r.run_id]
            for r in cases.sort_values(["workload", "backend", "world_size"]).itertuples()]
    columns = [left("workload"), left("backend"), right("world"), right("launch to processes s"),
               right("rendezvous s"), right("launch to first step s"), left("run")]
    return [Table(columns, rows)]


def method() -> list:
    """The Methodology bullets for training runs; the figures come from the code that applies them."""
    return [
        [strong("Windows."), " After W warm-up steps (never timed), each rank times K consecutive steps per "
         "window, for R windows; all ranks meet at a barrier and the device is synchronised before each window, "
         "outside the timed region. A window's time is the max over ranks. Throughput = global batch x K / "
         "window time (samples/s)."],
        [strong("Uncertainty."), f" Mean over windows with a {pct(stats.CONFIDENCE)} confidence interval of the "
         f"mean (Student's t). A result is unstable when its standard deviation exceeds "
         f"{pct(stats.UNSTABLE_REL_STDEV)} of its mean or it has fewer than {stats.MIN_STABLE_WINDOWS} windows "
         f"(pyperf's rules). Two backends differ significantly when Welch's t-test on their per-window "
         f"throughputs gives p < {SIGNIFICANCE:g}."],
        [strong("Scaling."), " Weak scaling (fixed per-worker batch). Efficiency E(N) = thr(N) / (N x thr(1)), "
         "thr(1) the same backend at one worker under the same conditions; also against the plain "
         "single-process loop."],
        [strong("Exposed communication"), " = step time at N workers - step time of the plain loop (one "
         "process, no wrapper) at the same per-worker batch, as a share of the step."],
        [strong("Startup"), ": launch to worker processes, rendezvous (process-group initialisation), launch "
         "to the end of the first step (max over ranks)."],
    ]


def report_part(frame, context) -> ReportPart:
    """The training runs' part of the page (`frame`: this task's runs only)."""
    ok = with_efficiency(frame)
    cases = latest_cases(ok) if not ok.empty else ok
    sentences, fairness, comparisons = verdict(cases) if not cases.empty else ([], [], [])
    unstable = [f"{r.run_id}: {r.backend} {r.workload} world {r.world_size}, sd/mean {r.rel_stdev:.1%} over "
                f"{r.record.metrics.throughput.n} windows"
                for r in ok[ok["unstable"] == True].itertuples()]  # noqa: E712 (pandas)
    no_verdict = "" if sentences else (
        f"No workload and world size has ok runs of both {' and '.join(PRIMARY)} under the same conditions "
        f"in this selection, so there is nothing to compare; `bench sweep --backend {','.join(PRIMARY)}` "
        "records them.")
    return ReportPart(
        verdict=sentences, no_verdict=no_verdict, fairness=fairness,
        recommendation=recommendation(comparisons, cases), unstable=unstable, method=method(),
        shown=list(cases["record"]),
        sections=[Section("throughput", "Throughput and scaling", 10, throughput_blocks(ok), nav="Throughput"),
                  Section("time", "Where the time goes", 30, exposed_blocks(cases)),
                  Section("startup", "Startup and rendezvous", 40, startup_blocks(cases), nav="Startup")])
