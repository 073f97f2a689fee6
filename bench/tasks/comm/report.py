"""The report's view of communication sweeps: a row per backend, world size, dtype and op (bus
bandwidth, the fitted alpha-beta model, the share of the machine's limit), busbw-against-size plots,
and which primary backend's allreduce reached the higher peak bus bandwidth."""

from __future__ import annotations

from bench.core.registry import PRIMARY
from bench.core.spec import placement_text
from bench.core.stats import ratio_of_cases
from bench.rank.collectives import bus_factor, format_bytes
from bench.report.sections import (Paragraph, Plot, ReportPart, Section, Table, code, figure_png, fmt, left, pyplot,
                                   right)
from bench.results.frame import blank_single_machine, comparable_runs
from bench.tasks.comm.results import PLACE, case_launches, matched_sizes, mean_of

# The smallest message at which allreduce is bandwidth-bound, over CPU loopback (gloo) and on GPUs (nccl-tests'
# usual range): docs/method.md, "Communication".
BANDWIDTH_BOUND_BYTES = {"cpu": 16 * 2**20, "cuda": 64 * 2**20}
COLUMNS = [left("backend"), right("ranks"), left("dtype"), left("op"), right("launches"), right("avg busbw GB/s"),
           right("peak busbw GB/s"), right("peak / limit"), left("model"), right("a (us)"), right("1/b (GB/s)"),
           right("R²"), left("runs")]


def sweep_rows(cases: dict[tuple, list]) -> list[list]:
    """A table row per op of each case: busbw figures are means over its launches; the alpha-beta model is
    fitted to its latest launch."""
    rows = []
    def order(item):  # by machine and pinning, then world size, backend, dtype
        hardware, bind, backend, world, dtype = item[0]
        return hardware, bind, world, backend, dtype

    for (hardware, bind, backend, world, dtype), recs in sorted(cases.items(), key=order):
        latest = recs[-1].metrics
        fit, limit = latest.fit or {}, (latest.ceiling or {}).get("limit_gbps")
        for op in latest.avg_busbw_gbps:
            avg = mean_of(r.metrics.avg_busbw_gbps[op] for r in recs if op in r.metrics.avg_busbw_gbps)
            peak = mean_of(max(x.busbw_gbps for x in r.metrics.rows if x.op == op) for r in recs
                         if any(x.op == op for x in r.metrics.rows))
            modelled = op == "allreduce" and bool(fit)
            rows.append([backend + placement_text(hardware, bind), world, dtype, op, len(recs), fmt(avg, ".3f"),
                         fmt(peak, ".3f"),
                         fmt(peak / limit if limit else None, ".1%"), latest.model if modelled else "-",
                         fmt(fit["alpha_s"] * 1e6, ".1f") if modelled else "-",
                         fmt(fit["bandwidth_gbps"], ".2f") if modelled else "-",
                         fmt(fit["r2_weighted"], ".3f") if modelled else "-", ", ".join(r.run_id for r in recs)])
    return rows


def matched_size_claims(ok) -> list[str]:
    """Which primary backend's allreduce reached the higher bus bandwidth, per world size and dtype, at the
    largest message size every launch of both ran (a claim about bandwidth made at a size both measured,
    never peak against peak), across launches."""
    lines = []
    for (hardware, bind, world, dtype), (size, values, device) in matched_sizes(ok).items():
        est = ratio_of_cases([values[0]], [values[1]])
        top, other = (0, 1) if est.ratio >= 1 else (1, 0)
        means = [sum(v) / len(v) for v in values]
        where = (f"At {format_bytes(size)}B ({world} ranks, {dtype}{placement_text(hardware, bind)}, the largest "
                 "message both ran)")
        means_text = (f"{means[top]:.2f} vs {means[other]:.2f} GB/s busbw, means of {len(values[top])} + "
                      f"{len(values[other])} launches")
        if est.significant:
            gap = max(est.ratio, 1 / est.ratio) - 1
            lines.append(f"{where}, {PRIMARY[top]}'s allreduce reached the higher bus bandwidth by {gap:.0%} "
                         f"({means_text}).")
        elif est.replicated:
            lines.append(f"{where}, the allreduce bus bandwidths do not differ significantly ({means_text}; a "
                         f"difference beyond ±{est.resolution:.0%} would have been detected).")
        else:
            lines.append(f"{where}, {PRIMARY[top]}'s allreduce was ahead ({means_text}), which a single launch "
                         "on a side cannot tell from launch-to-launch drift.")
        bound = BANDWIDTH_BOUND_BYTES.get(device)
        if bound and size < bound:
            lines.append(f"That size is below {format_bytes(bound)}B, where bandwidth rather than latency "
                         f"decides; `--max-bytes {format_bytes(bound)}` or more measures it.")
    return lines


def busbw_png(world: int, dtype: str, group, where: str = "") -> str:
    """Measured allreduce busbw against message size for each backend, its alpha-beta model, and the
    machine's limit."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    limits, limit_name = [], ""
    for r in group.itertuples():
        m = r.record.metrics
        ar = [x for x in m.rows if x.op == "allreduce"]
        if not ar:
            continue
        sizes = [x.size for x in ar]
        line, = ax.plot(sizes, [x.busbw_gbps for x in ar], marker="o", ms=3, label=f"{r.backend} measured")
        if m.fit:
            factor = bus_factor("allreduce", world)
            ax.plot(sizes, [s / (t * 1e-6) / 1e9 * factor for s, t in zip(sizes, m.fit["predicted_time_us"])],
                    linestyle=":", color=line.get_color(), label=f"{r.backend} alpha-beta model")
        if m.ceiling:
            limits.append(m.ceiling["limit_gbps"])
            limit_name = m.ceiling["limit_name"]
    if limits:
        ax.axhline(sum(limits) / len(limits), color="grey", linestyle="--", linewidth=1,
                   label=f"machine limit ({limit_name})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("allreduce busbw (GB/s)")
    ax.set_title(f"allreduce, {world} ranks, {dtype}{where}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return figure_png(fig)


def method() -> list:
    return [["Communication follows nccl-tests: algbw = S / t, busbw = algbw x 2(n-1)/n (allreduce), t the "
             "mean per op and the max over ranks, GB/s = 1e9 bytes/s; each size checked for wrong elements."]]


def report_part(frame, context) -> ReportPart:
    """The communication sweeps' part of the page (`frame`: this task's runs only)."""
    ok = comparable_runs(frame)
    if ok.empty:
        blocks = [Paragraph(["No communication sweep in this selection (", code("bench allreduce"), ", or a ",
                             code("bench sweep"), " without ", code("--no-comm"), ", records one)."])]
        return ReportPart(method=method(), sections=[Section("comm", "Communication", 20, blocks)])
    cases = case_launches(ok)
    latest = blank_single_machine(ok)
    latest = latest[latest["run_id"].isin([recs[-1].run_id for recs in cases.values()])]
    blocks = [Paragraph("Busbw figures are means over the launches of each case (each launch: its own mean and "
                        "peak); the alpha-beta model and the figure show its latest launch.", "note"),
              Table(COLUMNS, sweep_rows(cases))]
    for (hardware, bind, world, dtype), group in latest.groupby([*PLACE, "world_size", "dtype"]):
        blocks.append(Plot("allreduce busbw vs message size",
                           busbw_png(world, dtype, group, placement_text(hardware, bind))))
    recommendation = matched_size_claims(ok)
    return ReportPart(recommendation=recommendation, method=method(), shown=list(ok["record"]),
                      sections=[Section("comm", "Communication", 20, blocks)])
