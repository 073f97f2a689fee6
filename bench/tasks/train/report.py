"""The report's view of training runs: the verdict (the primary pair per conditions and world size, and
the reference backends against the better of them), the recommendation, throughput and scaling,
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
from bench.core.registry import BACKEND_MODULES, PLAIN_LOOP, PRIMARY, get_backend
from bench.core.spec import pinned_words
from bench.report.sections import (Cell, Heading, Paragraph, Plot, ReportPart, Section, Table, code, em,
                                   env_differences, figure_png, fmt, left, pct, pyplot, right, strong)
from bench.results.frame import CONDITIONS, comparable_runs
from bench.tasks.train import INPUT_BOUND_SHARE, input_limited
from bench.tasks.train.results import TrainingCase, difference, network_words, replicated_cases

REPEAT_HINT = "bench sweep --repeats 3"  # what to run when a comparison rests on one launch a side


def _cond_title(cond: dict) -> str:
    passes = f" x {cond['backward_passes']} passes" if cond["backward_passes"] != 1 else ""
    fed = "" if cond.get("input", "on device") == "on device" else f" through a {cond['input']}"
    return (f"{cond['workload']} on {cond['device']}: batch {cond['batch_size']}{passes}/worker, "
            f"{cond['threads']} thread(s)/worker{pinned_words(cond.get('cpu_bind'))}, {cond['data']} data{fed}, {cond['image_size']}px{network_words(cond)}")


def _launches(a: TrainingCase, b: TrainingCase) -> str:
    return f"{a.launches} + {b.launches} launch{'es' if a.launches + b.launches > 1 else ''}"


def difference_text(d: dict) -> str:
    """The figures behind a comparison, in words."""
    f, s = d["faster"], d["slower"]
    if not d["replicated"]:
        return f"{f.backend} {f.throughput:,.0f} vs {s.backend} {s.throughput:,.0f} samples/s, {_launches(f, s)}"
    means = (f"{f.backend} {f.throughput:,.0f} vs {s.backend} {s.throughput:,.0f} samples/s, means of "
             f"{_launches(f, s)}")
    return (f"{means}; {pct(d['estimate'].confidence)} interval {d['low']:+.1%} to {d['high']:+.1%}, "
            f"p = {d['p']:.2g}; a difference beyond ±{d['resolution']:.1%} would have been detected")


# ---------------------------------------------------------------- verdict and recommendation
def verdict(cases: list[TrainingCase]) -> tuple[list[str], list[str], list[dict]]:
    """Sentences per workload and world size, fairness notes, and the comparisons behind them."""
    sentences, fairness, comparisons = [], [], []
    first, second = PRIMARY
    groups: dict[tuple, dict[str, TrainingCase]] = {}
    for c in cases:
        groups.setdefault((*(c.cond[k] for k in CONDITIONS), c.world_size), {})[c.backend] = c
    for key in sorted(groups, key=str):
        rows = groups[key]
        cond = {**dict(zip(CONDITIONS, key)), "world_size": key[-1]}
        where = (f"{cond['workload']}, {cond['world_size']} worker(s) on {cond['device']} "
                 f"(batch {cond['batch_size']}/worker, {cond['threads']} thread(s)/worker{pinned_words(cond.get('cpu_bind'))}, "
                 f"{cond['data']} data"
                 f"{network_words(cond)})")
        if all(b in rows for b in PRIMARY):
            e, h = rows[first], rows[second]
            d = difference(e, h)
            caution = [c.backend for c in (e, h) if c.unstable]
            caution = f" Caution: {', '.join(caution)} unstable." if caution else ""
            if d["significant"]:
                sentences.append(f"{where}: {d['faster'].backend} is faster by {d['gap']:.1%} "
                                 f"({difference_text(d)}).{caution}")
            elif d["replicated"]:
                sentences.append(f"{where}: no significant difference ({d['faster'].backend} ahead by "
                                 f"{d['gap']:.1%}; {difference_text(d)}).{caution}")
            else:
                sentences.append(f"{where}: cannot tell with a single launch on a side ({d['faster'].backend} "
                                 f"ahead by {d['gap']:.1%}: {difference_text(d)}), as launches of one case differ "
                                 f"by several percent; `{REPEAT_HINT}` replicates it.")
            comparisons.append({"cond": cond, "winner": d["faster"].backend if d["significant"] else None,
                                "pct": d["gap"] * 100, "p": d["p"], "replicated": d["replicated"],
                                "resolution": d["resolution"]})
            differs = env_differences([e.latest, h.latest])
            if differs:
                fairness.append(f"{where}: the {first} and {second} runs differ in {', '.join(differs)}; "
                                "their comparison is not like for like.")
        primaries = [rows[b] for b in PRIMARY if b in rows]
        for other in sorted(set(rows) - set(PRIMARY) - {PLAIN_LOOP}):  # reference backends (the PS, Ray)
            if not primaries:
                continue
            counterpart = get_backend(other).counterpart if other in BACKEND_MODULES else None
            best = rows[counterpart] if counterpart in rows else max(primaries, key=lambda c: c.throughput)
            d = difference(rows[other], best)
            est = d["estimate"]
            rel = 1 - est.ratio
            word = "slower" if rel > 0 else "faster"
            if d["significant"]:
                sig = f"{pct(est.confidence)} interval {1 - est.high:+.1%} to {1 - est.low:+.1%}"
            elif d["replicated"]:
                sig = f"not a significant difference; beyond ±{d['resolution']:.1%} would have been detected"
            else:
                sig = "cannot tell from a single launch on a side"
            opts = ", ".join(f"{k}={v}" for k, v in rows[other].latest.spec.backend_options.items())
            what = f"the {other} baseline ({opts})" if best.backend != counterpart else \
                f"{other} ({opts + '; ' if opts else ''}the same data-parallel path as {counterpart}, under its own " \
                "runtime)"
            sentences.append(f"{where}: {what} is {abs(rel):.1%} {word} than "
                             f"{best.backend} ({_launches(rows[other], best)}, {sig}).")
    return sentences, fairness, comparisons


# What sets apart the ways a page's runs were made, each with its own recommendation: the machine, the
# workers' pinning, the network.
SETTING = ("hardware", "cpu_bind", "network")


def setting_label(cond: dict) -> str:
    """'Pinned, on one host' (and the machine, where a page names it): a setting of recommendation()."""
    pinned = "Pinned" if cond.get("cpu_bind") == "cores" else "Unpinned"
    one_host = cond.get("network", "one host") == "one host"
    return pinned + (", on one host" if one_host else "") + network_words(cond)  # _network: across which hosts, the machine


def recommendation(comparisons: list[dict], cases: list[TrainingCase]) -> list[str]:
    """The choice the comparisons support, for each setting apart (machine, pinning, network: a page may hold runs
    made several ways, and one way's wins must not decide another's), then the startup sentence."""
    if not comparisons:
        return [f"Run both {' and '.join(PRIMARY)} under the same conditions (bench sweep) for a recommendation."]
    settings: dict[tuple, list[dict]] = {}
    for c in comparisons:
        settings.setdefault(tuple(c["cond"].get(k) for k in SETTING), []).append(c)
    lines = []
    for key in sorted(settings, key=lambda k: (k[1] != "cores", str(k))):  # the pinned default first
        said = setting_recommendation(settings[key])
        if len(settings) > 1:
            said = [f"{setting_label(settings[key][0]['cond'])}: {said[0]}", *said[1:]]
        lines += said
    return lines + startup_sentence(cases)


def setting_recommendation(comparisons: list[dict]) -> list[str]:
    """The wins, ties and single-launch comparisons of one setting, and the choice of backend they support."""
    lines = []
    # At one worker nothing is distributed: those comparisons measure the wrappers' overhead only, so
    # the choice rests on the multi-worker cases when there are any.
    distributed = [c for c in comparisons if c["cond"]["world_size"] > 1]
    single = [c for c in comparisons if c["cond"]["world_size"] == 1]
    basis = distributed or comparisons
    wins = {b: [c for c in basis if c["winner"] == b] for b in PRIMARY}
    ties = [c for c in basis if c["winner"] is None and c["replicated"]]
    unknown = [c for c in basis if not c["replicated"]]
    total = len(basis)
    scope = "multi-worker " if distributed else ""
    for backend, won in wins.items():
        if won:
            where = "; ".join(f"{c['cond']['workload']} at {c['cond']['world_size']} worker(s) (+{c['pct']:.1f}%)"
                              for c in won)
            lines.append(f"{backend} was significantly faster in {len(won)} of {total} {scope}comparison(s): "
                         f"{where}.")
    if ties:
        lines.append(f"{len(ties)} of {total} {scope}comparison(s) showed no significant difference (each could "
                     f"have detected {min(c['resolution'] for c in ties):.0%} or more).")
    if unknown:
        lines.append(f"{len(unknown)} of {total} {scope}comparison(s) rest on a single launch on a side and cannot "
                     f"tell; `{REPEAT_HINT}` replicates them.")
    leader, other = sorted(PRIMARY, key=lambda b: -len(wins[b]))
    if len(wins[leader]) > len(wins[other]):
        lines.append(f"For throughput on this hardware, choose {leader}.")
    elif unknown and not any(wins.values()):
        lines.append("No comparison is replicated yet: no recommendation on throughput.")
    else:
        lines.append("Throughput does not separate them here: choose on operations (launcher, elasticity, "
                     "ecosystem).")
    if distributed and single:
        overhead = {b: sum(c["winner"] == b for c in single) for b in PRIMARY}
        lines.append("At one worker, where only the wrapper's overhead is measured: " +
                     ", ".join(f"{b} significantly faster in {k} of {len(single)}" for b, k in overhead.items()) + ".")
    return lines


def startup_sentence(cases: list[TrainingCase]) -> list[str]:
    """Which primary backend reaches its first step sooner: every launch's launch-to-first-step time of the
    cases both ran (same conditions and world size), compared across launches like throughput."""
    both = {(tuple(c.cond.values()), c.world_size) for c in cases if c.backend == PRIMARY[0]} & \
        {(tuple(c.cond.values()), c.world_size) for c in cases if c.backend == PRIMARY[1]}
    times = {b: [r.metrics.startup.launch_to_first_step_s for c in cases if c.backend == b
                 and (tuple(c.cond.values()), c.world_size) in both for r in c.records
                 if r.metrics.startup.launch_to_first_step_s] for b in PRIMARY}
    if not all(times.values()):
        return []
    est = stats.ratio_of_cases([times[PRIMARY[0]]], [times[PRIMARY[1]]])
    quick, slow = (PRIMARY[0], PRIMARY[1]) if est.ratio < 1 else (PRIMARY[1], PRIMARY[0])
    medians = (f"median {statistics.median(times[quick]):.1f} s vs {statistics.median(times[slow]):.1f} s for "
               f"{slow}, {len(times[quick])} + {len(times[slow])} launches")
    if est.significant:
        return [f"{quick} reached its first step sooner ({medians})."]
    return [f"Startup to the first step did not differ significantly ({quick} {medians})."]


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
    columns = [left("backend"), right("world"), right("launches"), right("samples/s"), right(ci),
               right("sd/mean"), right(f"efficiency ({ci})"), right(f"vs plain loop ({ci})"), right("step ms"),
               right("straggler ratio"), right("peak RSS MiB"), left("runs")]
    blocks = [Paragraph(["Each row is the mean over launches of the case (each launch: its mean over windows); "
                         "the interval and sd/mean are across launches, or over the windows of a single launch "
                         "where the case has one. Efficiency and vs plain loop are ratios of case means with "
                         "their interval across launches."], "note")]
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
            rows.append([c.backend, c.world_size, c.launches, Cell(thr, "warn") if c.unstable else thr,
                         f"{fmt(low, ',.0f')} to {fmt(high, ',.0f')}", fmt(c.spread, ".1%"),
                         _estimate_cell(c.efficiency), _estimate_cell(c.vs_plain),
                         fmt(c.step_time_s * 1000 if c.step_time_s else None, ".2f"),
                         fmt(c.latest.metrics.straggler_ratio, ".3f"),
                         fmt(max(r.metrics.peak_rss_bytes_max for r in c.records) / 2**20, ",.0f"), c.run_ids])
        fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.6))
        sizes = sorted({c.world_size for c in group})
        for backend in sorted({c.backend for c in group}):
            mine = [c for c in group if c.backend == backend]
            xs = [c.world_size for c in mine]
            means = [c.throughput for c in mine]
            err = [[m - c.interval[0] for m, c in zip(means, mine)], [c.interval[1] - m for m, c in zip(means, mine)]]
            ax_thr.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=backend)
            eff = [(c.world_size, c.efficiency) for c in mine if c.efficiency is not None]
            if eff:
                ax_eff.errorbar([x for x, _ in eff], [e.ratio for _, e in eff],
                                yerr=[[e.ratio - e.low if e.replicated else 0 for _, e in eff],
                                      [e.high - e.ratio if e.replicated else 0 for _, e in eff]],
                                marker="o", capsize=3, label=backend)
        ax_eff.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
        for ax, title in ((ax_thr, f"throughput (samples/s, {ci} across launches)"), (ax_eff, "scaling efficiency")):
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
                   Plot(f"throughput and scaling efficiency of {title}", figure_png(fig))]
    return blocks


def exposed_blocks(cases: list[TrainingCase]) -> list:
    """Step time against the plain loop's under the same conditions: the communication not hidden.
    Its share of the step is 1 - vs plain loop (step time is global batch / throughput), so it carries
    that ratio's interval across launches."""
    rows, shares = [], []
    plain = {tuple(c.cond[k] for k in CONDITIONS): c for c in cases if c.backend == PLAIN_LOOP and c.world_size == 1}
    for c in sorted(cases, key=lambda c: (c.cond["workload"], c.backend, c.world_size)):
        base = plain.get(tuple(c.cond[k] for k in CONDITIONS))
        if c.backend == PLAIN_LOOP or base is None or c.vs_plain is None:
            continue
        est = c.vs_plain
        share = 1 - est.ratio
        interval = f"{1 - est.high:.1%} to {1 - est.low:.1%}" if est.replicated else "- (1 launch)"
        rows.append([c.cond["workload"], c.backend, c.world_size, f"{c.launches} + {base.launches}",
                     fmt(c.step_time_s * 1000, ".2f"), fmt(base.step_time_s * 1000, ".2f"),
                     fmt((c.step_time_s - base.step_time_s) * 1000, ".2f"), fmt(share, ".1%"), interval])
        shares.append((f"{c.cond['workload']}\n{c.backend} x{c.world_size}", est))
    if not rows:
        return [Paragraph(["Needs a plain single-process run (backend ", em(PLAIN_LOOP), ") under the same "
                           "conditions as the distributed runs; ", code("bench sweep"), " records one unless ",
                           code("--no-plain-loop"), "."])]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows)), 3.6))
    heights = [100 * (1 - e.ratio) for _, e in shares]
    # the share's interval is 1 - (the ratio's): its lower error comes from the ratio's upper end
    err = [[100 * (e.high - e.ratio) if e.replicated else 0 for _, e in shares],
           [100 * (e.ratio - e.low) if e.replicated else 0 for _, e in shares]]
    ax.bar(range(len(rows)), heights, yerr=err, capsize=3, color="#5b8db8")
    ax.set_xticks(range(len(rows)), [label for label, _ in shares], fontsize=7)
    ax.set_ylabel("exposed communication (% of step)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    ci = f"{pct(stats.CONFIDENCE)} CI"
    columns = [left("workload"), left("backend"), right("world"), right("launches (+ plain)"), right("step ms"),
               right("plain loop step ms"), right("exposed communication ms"), right("share of the step"),
               right(ci)]
    return [Table(columns, rows), Plot("exposed communication share", figure_png(fig))]


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
    table = [[c.cond["workload"], c.backend, c.world_size, c.cond["input"], c.launches, f"{share:.0%}",
              Cell("input limits throughput", "warn") if input_limited(share) else "compute and communication"]
             for c, share in rows]
    limited = [f"{c.backend} {c.cond['workload']} world {c.world_size} through a {c.cond['input']}: input limits "
               f"throughput (its workers waited for batches {share:.0%} of each step)"
               for c, share in rows if input_limited(share)]
    columns = [left("workload"), left("backend"), right("world"), left("input"), right("launches"),
               right("input wait (share of step)"), left("what limits throughput")]
    note = ["Runs fed through ", code("--loader dataloader"), " (or an image folder): the share of each timed step "
            "the slowest worker spent waiting for its next batch (median over launches). From "
            f"{INPUT_BOUND_SHARE:.0%} on, input, not communication, limits throughput: a faster collective would "
            "change little. Runs with data held on the device never wait."]
    return [Heading("Input pipeline"), Paragraph(note, "note"), Table(columns, table)], limited


def startup_blocks(cases: list[TrainingCase]) -> list:
    if not cases:
        return [Paragraph("No successful training run in this selection.")]
    rows = []
    for c in sorted(cases, key=lambda c: (c.cond["workload"], c.backend, c.world_size)):
        ups = [r.metrics.startup for r in c.records]
        rows.append([c.cond["workload"], c.backend, c.world_size, c.launches,
                     fmt(statistics.median(u.launch_to_process_s for u in ups), ".2f"),
                     fmt(statistics.median(u.rendezvous_s for u in ups), ".3f"), fmt(c.startup_s, ".2f"),
                     launcher_phases(ups), c.run_ids])
    columns = [left("workload"), left("backend"), right("world"), right("launches"), right("launch to processes s"),
               right("rendezvous s"), right("launch to first step s"), left("launcher's own phases s"), left("runs")]
    return [Paragraph("Medians over the launches of each case. The launcher's own phases are those a launcher "
                      "reports of its start-up (starting a runtime, placing the workers), within launch to first "
                      "step.", "note"), Table(columns, rows)]


def launcher_phases(ups: list) -> str:
    """Each start-up phase the launcher reported, in its order, as the median over the launches that have it."""
    phases = list(dict.fromkeys(phase for u in ups for phase in u.launcher_phases))
    return ", ".join(f"{phase} {statistics.median(u.launcher_phases[phase] for u in ups if phase in u.launcher_phases):.2f}"
                     for phase in phases) or "-"


# ---------------------------------------------------------------- across shaped links
def _link(case: TrainingCase) -> tuple[float, str]:
    """(bytes/s, label) of the link a case's hosts were shaped to; an unshaped link sorts last."""
    link = case.latest.spec.link
    return (link["rate_bytes_per_s"], link["rate"] + (f" {link['delay']}" if link["delay"] else "")) if link \
        else (math.inf, "unlimited")


def link_groups(cases: list[TrainingCase]) -> dict[tuple, list[TrainingCase]]:
    """Cases across hosts under the same conditions but for the link, where two or more links were measured."""
    groups: dict[tuple, list[TrainingCase]] = {}
    for c in cases:
        if c.latest.spec.hosts:
            key = (*(c.cond[k] for k in CONDITIONS if k != "network"), len(c.latest.spec.hosts))
            groups.setdefault(key, []).append(c)
    return {k: g for k, g in groups.items() if len({_link(c) for c in g}) >= 2}


def link_verdicts(group: list[TrainingCase]) -> tuple[list[tuple[str, dict | None]], str]:
    """The primary pair at the largest world size, link by link from the slowest: [(link, difference or None)],
    and the sentence saying at which link, if any, the verdict changes."""
    first, second = PRIMARY
    top = max(c.world_size for c in group)
    at: dict[tuple, dict[str, TrainingCase]] = {}
    for c in group:
        if c.world_size == top:
            at.setdefault(_link(c), {})[c.backend] = c
    steps = [(label, difference(rows[first], rows[second]) if first in rows and second in rows else None)
             for (_, label), rows in sorted(at.items())]
    won = [(label, d["faster"].backend) for label, d in steps if d and d["significant"]]
    winners = {w for _, w in won}
    where = f"{group[0].cond['workload']} at {top} workers across {len(group[0].latest.spec.hosts)} hosts"
    if len(winners) > 1:
        change = next(i for i in range(1, len(won)) if won[i][1] != won[i - 1][1])
        (slow_label, slow_w), (fast_label, fast_w) = won[change - 1], won[change]
        sentence = (f"{where}: the verdict changes between links {slow_label} and {fast_label}: {slow_w} is "
                    f"faster at {slow_label}, {fast_w} at {fast_label}.")
    elif winners:
        sentence = (f"{where}: {won[0][1]} is faster at every link where the difference is significant "
                    f"({', '.join(label for label, _ in won)} of {len(steps)} measured); no crossover in that range.")
    else:
        sentence = f"{where}: no link measured shows a significant difference between {first} and {second}."
    return steps, sentence


def _standing(d: dict | None) -> str:
    """What a difference between the pair can be called: never "significant" on one launch a side."""
    if d is None:
        return "not both backends"
    if not d["replicated"]:
        return "cannot tell: one launch on a side"
    return "significant" if d["significant"] else f"not significant (could detect ±{d['resolution']:.0%})"


def link_blocks(cases: list[TrainingCase]) -> tuple[list, list[str]]:
    """Throughput and efficiency against the link per backend, and where the verdict changes (with the
    sentences for the verdict)."""
    groups = link_groups(cases)
    if not groups:
        return [Paragraph(["Needs runs across hosts at two or more links: ", code("bench sweep --hosts H1,H2 "
                           "--links 1gbit,10gbit,unlimited"), "."])], []
    plt = pyplot()
    blocks, sentences = [], []
    for key in sorted(groups, key=str):
        group = groups[key]
        steps, sentence = link_verdicts(group)
        sentences.append(sentence)
        top = max(c.world_size for c in group)
        links = sorted({_link(c) for c in group})
        finite = [rate for rate, _ in links if math.isfinite(rate)]
        where_x = {link: (link[0] if math.isfinite(link[0]) else max(finite) * 4) * 8 / 1e9 for link in links}
        fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(10, 3.6))
        rows = []
        for backend in sorted({c.backend for c in group}):
            mine = sorted((c for c in group if c.backend == backend and c.world_size == top), key=_link)
            xs = [where_x[_link(c)] for c in mine]
            ax_thr.errorbar(xs, [c.throughput for c in mine],
                            yerr=[[c.throughput - c.interval[0] for c in mine],
                                  [c.interval[1] - c.throughput for c in mine]], marker="o", capsize=3, label=backend)
            eff = [(where_x[_link(c)], c.efficiency) for c in mine if c.efficiency is not None]
            if eff:
                ax_eff.plot([x for x, _ in eff], [e.ratio for _, e in eff], marker="o", label=backend)
            for c in mine:
                rows.append([_link(c)[1], backend, top, c.launches, fmt(c.throughput, ",.0f"),
                             _estimate_cell(c.efficiency)])
        for ax, title in ((ax_thr, f"throughput at {top} workers (samples/s)"), (ax_eff, "scaling efficiency")):
            ax.set_xscale("log")
            ax.set_xticks([where_x[link] for link in links], [label for _, label in links], fontsize=8)
            ax.set_xlabel("link (every host's, shaped with tc)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        ax_eff.set_ylim(bottom=0)
        fig.tight_layout()
        title = _cond_title({**dict(zip([k for k in CONDITIONS if k != "network"], key)), "network": "one host"})
        verdict_rows = [[label, d["faster"].backend if d else "-", f"{d['gap']:.1%}" if d else "-", _standing(d)]
                        for label, d in steps]
        blocks += [Heading(f"{title}, across {key[-1]} hosts"), Paragraph(sentence),
                   Table([left("link"), left("ahead"), right("by"), left("across launches")], verdict_rows),
                   Table([left("link"), left("backend"), right("world"), right("launches"), right("samples/s"),
                          right("efficiency")], rows),
                   Plot(f"throughput and efficiency against the link, {title}", figure_png(fig))]
    return blocks, sentences


def method() -> list:
    """The Methodology bullets for training runs; the figures come from the code that applies them."""
    return [
        [strong("Windows."), " After W warm-up steps (never timed), each rank times K consecutive steps per "
         "window, for R windows; all ranks meet at a barrier and the device is synchronised before each window, "
         "outside the timed region. A window's time is the max over ranks. Throughput = global batch x K / "
         "window time (samples/s); a launch's throughput is its mean over windows."],
        [strong("Launches are the unit of replication."), " A sweep launches every case several times in "
         "interleaved rounds. A case's figure is the mean over its launches with a "
         f"{pct(stats.CONFIDENCE)} confidence interval across launches (Student's t). Two cases are compared by "
         "the ratio of their geometric means with a Welch t interval on the log scale; a difference is "
         f"significant when that interval excludes 1 (p < {SIGNIFICANCE:g}), and each comparison states the "
         "smallest difference it could have detected (the interval's half-width). A comparison with a single "
         f"launch on a side says it cannot tell. Windows of one launch describe that launch only."],
        [strong("Uncertainty of one launch."), f" Mean over windows with a {pct(stats.CONFIDENCE)} confidence "
         f"interval of the mean (Student's t). A result is unstable when its standard deviation exceeds "
         f"{pct(stats.UNSTABLE_REL_STDEV)} of its mean or it has fewer than {stats.MIN_STABLE_WINDOWS} windows "
         f"(pyperf's rules); a case is unstable when a launch is, or its launches spread by more than that."],
        [strong("Scaling."), " Weak scaling (fixed per-worker batch). Efficiency E(N) = thr(N) / (N x thr(1)), "
         "thr(1) the same backend at one worker under the same conditions; also against the plain "
         "single-process loop. Both are ratios of case means, with their interval across launches."],
        [strong("Placement."), " CPU workers on one host are pinned by default (--cpu-bind auto): the worker of "
         "local rank r and every thread it runs, the backend's own included, on cores [r x T, (r+1) x T). "
         "Unpinned, a backend's helper threads (Horovod's background loop, gloo's I/O) run on the other "
         "workers' cores. Pinned and unpinned runs are never compared; each case's title says which it is."],
        [strong("Exposed communication"), " = step time at N workers - step time of the plain loop (one "
         "process, no wrapper) at the same per-worker batch, as a share of the step (= 1 - vs plain loop)."],
        [strong("Startup"), ": launch to worker processes, rendezvous (process-group initialisation), launch "
         "to the end of the first step (max over ranks); medians over launches. One backend reaches its first "
         "step sooner only when every launch's time of the cases both ran differs significantly across "
         "launches, as throughput is compared."],
    ]


LINK_METHOD = [[strong("Across hosts."), " Processes fill the hosts in order, slot by slot; every backend uses one "
                "interface. A shaped link is every host's sending side limited with tc for the run (a token "
                "bucket for a rate, netem when a delay is given) and undone after it; the verdict at each link "
                "compares the pair at the largest world size across launches, as everywhere on this page, and "
                "the verdict changes between two links only where both are significant and disagree."]]


SIGNIFICANCE = round(1 - stats.CONFIDENCE, 10)  # stated in the method: p below this is significant


def report_part(frame, context) -> ReportPart:
    """The training runs' part of the page (`frame`: this task's runs only)."""
    ok = comparable_runs(frame)
    cases = replicated_cases(ok) if not ok.empty else []
    sentences, fairness, comparisons = verdict(cases) if cases else ([], [], [])
    links, crossovers = link_blocks(cases)
    sentences = sentences + crossovers
    inputs, input_limited_notes = input_blocks(cases)
    across_hosts = any(c.latest.spec.hosts for c in cases)
    unstable = [f"{r.run_id}: {r.backend} {r.workload} world {r.world_size}, sd/mean {r.rel_stdev:.1%} over "
                f"{r.record.metrics.throughput.n} windows"
                for r in ok[ok["unstable"] == True].itertuples()]  # noqa: E712 (pandas)
    unstable += [f"{c.backend} {c.cond['workload']} world {c.world_size}: its {c.launches} launches spread "
                 f"{c.spread:.1%} (sd/mean)" for c in cases
                 if c.launches >= stats.MIN_LAUNCHES and c.spread > stats.UNSTABLE_REL_STDEV]
    no_verdict = "" if sentences else (
        f"No workload and world size has ok runs of both {' and '.join(PRIMARY)} under the same conditions "
        f"in this selection, so there is nothing to compare; `bench sweep --backend {','.join(PRIMARY)}` "
        "records them.")
    return ReportPart(
        verdict=sentences, no_verdict=no_verdict, fairness=fairness, verdict_notes=input_limited_notes,
        recommendation=recommendation(comparisons, cases), unstable=unstable,
        method=method() + (LINK_METHOD if across_hosts else []),
        shown=[r for c in cases for r in c.records],
        sections=[Section("throughput", "Throughput and scaling", 10, throughput_blocks(cases), nav="Throughput"),
                  Section("time", "Where the time goes", 30, exposed_blocks(cases) + inputs),
                  Section("startup", "Startup and rendezvous", 40, startup_blocks(cases), nav="Startup"),
                  *([Section("links", "Across hosts: the link", 20, links, nav="Links")] if across_hosts else [])])
