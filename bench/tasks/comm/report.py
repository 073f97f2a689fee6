"""The report's view of communication sweeps: a row per backend, world size, dtype and op (bus
bandwidth, the fitted alpha-beta model, the share of the machine's limit), busbw-against-size plots,
and which primary backend's allreduce reached the higher peak bus bandwidth."""

from __future__ import annotations

from bench.core.registry import PRIMARY
from bench.core.spec import placement_text
from bench.core.stats import Family, ratio_of_cases
from bench.rank.collectives import bus_factor, format_bytes
from bench.report.sections import (
    Paragraph,
    Plot,
    ReportPart,
    ScoreRow,
    Section,
    Table,
    code,
    colour_of,
    figure_png,
    fmt,
    judged_outcome,
    left,
    positive,
    pyplot,
    right,
)
from bench.results.frame import blank_single_machine, comparable_runs
from bench.tasks.comm.results import PLACE, case_launches, matched_key, matched_sizes, mean_of

# The smallest message at which allreduce is bandwidth-bound, over CPU loopback (gloo) and on GPUs (nccl-tests'
# usual range): docs/method.md, "Communication".
BANDWIDTH_BOUND_BYTES = {"cpu": 16 * 2**20, "cuda": 64 * 2**20}
COLUMNS = [
    left("backend"),
    right("ranks"),
    left("dtype"),
    left("op"),
    right("launches"),
    right("avg busbw GB/s"),
    right("peak busbw GB/s"),
    right("peak / limit"),
    left("model"),
    right("latency (us)"),
    right("bandwidth (GB/s)"),
    right("R²"),
]


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
            peak = mean_of(
                max(x.busbw_gbps for x in r.metrics.rows if x.op == op)
                for r in recs
                if any(x.op == op for x in r.metrics.rows)
            )
            modelled = op == "allreduce" and bool(fit)
            rows.append(
                [
                    backend + placement_text(hardware, bind),
                    world,
                    dtype,
                    op,
                    len(recs),
                    fmt(avg, ".3f"),
                    fmt(peak, ".3f"),
                    fmt(peak / limit if limit else None, ".1%"),
                    latest.model if modelled else "-",
                    fmt(fit["alpha_s"] * 1e6, ".1f") if modelled else "-",
                    fmt(fit["bandwidth_gbps"], ".2f") if modelled else "-",
                    fmt(fit["r2_weighted"], ".3f") if modelled else "-",
                ]
            )
    return rows


def runs_table(cases: dict[tuple, list]) -> Table:
    """The run ids behind the rows, collapsed: `bench list` finds them."""
    rows = [
        [backend + placement_text(hardware, bind), world, dtype, ", ".join(r.run_id for r in recs)]
        for (hardware, bind, backend, world, dtype), recs in sorted(cases.items(), key=lambda kv: str(kv[0]))
    ]
    return Table(
        [left("backend"), right("ranks"), left("dtype"), left("runs")],
        rows,
        details=f"The runs behind these rows ({sum(len(recs) for recs in cases.values())})",
    )


def matched_size_rows(ok, family=None) -> tuple[list[ScoreRow], list[str]]:
    """The primary pair's allreduce bus bandwidth per world size and dtype, at the largest message size every
    launch of both ran (a claim about bandwidth made at a size both measured, never peak against peak), across
    launches: the scorecard's rows, and the notes for this section."""
    first, second = PRIMARY
    rows, lines = [], []
    for place, (size, values, device) in matched_sizes(ok).items():
        hardware, bind, world, dtype = place
        est = ratio_of_cases([values[0]], [values[1]])
        key = matched_key(place, size)
        judgement = (family or Family({key: est})).judge(key, est)
        said = judged_outcome(judgement, first, second)
        condition = (
            f"{format_bytes(size)}B messages (the largest both ran), {world} ranks, {dtype}, {device}"
            f"{placement_text(hardware, bind)}"
        )
        rows.append(
            ScoreRow(
                "allreduce bus bandwidth",
                condition,
                {b: f"{mean_of(v):.2f} GB/s" for b, v in zip(PRIMARY, values)},
                launches=f"{len(values[0])} + {len(values[1])}",
                default=bind == "cores",
                artefact="" if bind == "cores" or device != "cpu" else "unpinned ranks on one host",
                **said,
            )
        )
        bound = BANDWIDTH_BOUND_BYTES.get(device)
        if bound and size < bound:
            lines.append(
                f"At {condition}: that size is below {format_bytes(bound)}B, where bandwidth rather than "
                f"latency decides; `--max-bytes {format_bytes(bound)}` or more measures it."
            )
    return rows, lines


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
        colour = colour_of(r.backend)
        ax.plot(sizes, [x.busbw_gbps for x in ar], marker="o", ms=3, label=f"{r.backend} measured", color=colour)
        # the model's times where the fit has them (a record's fit is kept as it was written) and they are times
        model = [(s, t) for s, t in zip(sizes, (m.fit or {}).get("predicted_time_us") or []) if positive(t)]
        if model:
            factor = bus_factor("allreduce", world)
            ax.plot(
                [s for s, _ in model],
                [s / (t * 1e-6) / 1e9 * factor for s, t in model],
                linestyle=":",
                color=colour,
                label=f"{r.backend} latency-bandwidth model",
            )
        if m.ceiling:
            limits.append(m.ceiling["limit_gbps"])
            limit_name = m.ceiling["limit_name"]
    if limits:
        ax.axhline(
            sum(limits) / len(limits), color="grey", linestyle="--", linewidth=1, label=f"machine limit ({limit_name})"
        )
    ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("allreduce busbw (GB/s)")
    ax.set_title(f"allreduce, {world} ranks, {dtype}{where}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return figure_png(fig)


def method() -> list:
    return [
        [
            "Communication follows nccl-tests: algbw = S / t, busbw = algbw x 2(n-1)/n (allreduce), t the "
            "mean per op and the max over ranks, GB/s = 1e9 bytes/s; each size checked for wrong elements."
        ]
    ]


def report_part(frame, context) -> ReportPart:
    """The communication sweeps' part of the page (`frame`: this task's runs only)."""
    ok = comparable_runs(frame)
    if ok.empty:
        blocks = [
            Paragraph(
                [
                    "No communication sweep in this selection (",
                    code("bench allreduce"),
                    ", or a ",
                    code("bench sweep"),
                    " without ",
                    code("--no-comm"),
                    ", records one).",
                ]
            )
        ]
        return ReportPart(method=method(), sections=[Section("comm", "Communication", 20, blocks)])
    cases = case_launches(ok)
    latest = blank_single_machine(ok)
    latest = latest[latest["run_id"].isin([recs[-1].run_id for recs in cases.values()])]
    blocks = [
        Paragraph(
            "Busbw figures are means over the launches of each case (each launch: its own mean and "
            "peak). The latency-bandwidth model (alpha-beta: an operation on S bytes takes latency + S / "
            "bandwidth) and the figure show its latest launch.",
            "note",
        ),
        Table(COLUMNS, sweep_rows(cases)),
        runs_table(cases),
    ]
    for (hardware, bind, world, dtype), group in latest.groupby([*PLACE, "world_size", "dtype"]):
        blocks.append(
            Plot("allreduce busbw vs message size", busbw_png(world, dtype, group, placement_text(hardware, bind)))
        )
    rows, notes = matched_size_rows(ok, getattr(context, "family", None))
    return ReportPart(
        scorecard=rows,
        method=method(),
        shown=list(ok["record"]),
        sections=[Section("comm", "Communication", 20, [*map(Paragraph, notes), *blocks])],
    )
