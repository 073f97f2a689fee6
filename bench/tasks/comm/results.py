"""What the communication task's stored runs say: its cases, the comparisons at a matched message size the page
and `bench agreement` make, and the figures the regression gate compares (bench.results.figures)."""

from __future__ import annotations

from bench.core.registry import PRIMARY
from bench.core.spec import placement_text
from bench.core.stats import ratio_of_cases
from bench.rank.collectives import format_bytes
from bench.results.figures import Figure, case_of, group_runs, not_ok_entry
from bench.results.frame import blank_single_machine, comparable_runs, pooled_launches


def gate_figures(records: list, all_records: list) -> tuple[dict, dict]:
    """busbw_fraction of each backend and world size: allreduce busbw at the largest message, per
    timed chunk, over the limit measured in that run."""

    def largest(rec):
        return max((r for r in rec.metrics.rows if r.op == "allreduce"), key=lambda r: r.size)

    def value(rec, per_window):
        row, limit = largest(rec), rec.metrics.ceiling["limit_gbps"]
        chunks = [row.busbw_gbps * row.time_us / t / limit for t in row.window_time_us]
        return chunks if per_window else sum(chunks) / len(chunks)

    def measured(rec):
        return rec.metrics.ceiling is not None and any(
            r.op == "allreduce" and r.window_time_us for r in rec.metrics.rows
        )

    runs, ok = group_runs(records, lambda r: (r.spec.backend, r.spec.world_size))
    out, not_ok = {}, {}
    for (backend, n), rs in sorted(runs.items(), key=lambda kv: str(kv[0])):
        key = f"busbw_fraction {backend} n={n}"
        good = [r for r in ok[(backend, n)] if measured(r)]
        if good:
            out[key] = Figure(key, "busbw_fraction", [case_of(good, value)], [1])
        else:
            not_ok[key] = not_ok_entry(rs)
    return out, not_ok


# A case: one machine (blank on a page of one), pinned or not, backend, world size, dtype. Runs of two machines,
# or pinned and unpinned runs, are never one case nor compared.
PLACE = ["hardware", "cpu_bind"]


def case_launches(ok) -> dict[tuple, list]:
    """The launches of each case from its latest sweep, oldest first."""
    return pooled_launches(blank_single_machine(ok), [*PLACE, "backend", "world_size", "dtype"])


def mean_of(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def busbw_at(record, size: int) -> float | None:
    rows = [x.busbw_gbps for x in record.metrics.rows if x.op == "allreduce" and x.size == size]
    return rows[0] if rows and rows[0] > 0 else None


def matched_sizes(ok) -> dict[tuple, tuple[int, list[list[float]], str]]:
    """Per (machine, pinning, world size, dtype) where both primary backends have allreduce launches: the largest
    message every launch of both ran, each side's busbw at that size per launch, and the device."""
    launches = pooled_launches(
        blank_single_machine(ok)[ok["backend"].isin(PRIMARY)], [*PLACE, "world_size", "dtype", "backend"]
    )
    out = {}
    for place in sorted({k[:-1] for k in launches}):
        sides = [launches.get((*place, b)) for b in PRIMARY]
        if not all(sides):
            continue
        common = set.intersection(
            *({x.size for x in rec.metrics.rows if x.op == "allreduce"} for recs in sides for rec in recs)
        )
        if not common:
            continue
        size = max(common)
        values = [[busbw_at(rec, size) for rec in recs] for recs in sides]
        if all(v is not None for vs in values for v in vs):
            out[place] = (size, values, sides[0][-1].spec.device)
    return out


def matched_key(place: tuple, size: int) -> str:
    """The name of the busbw comparison of the primary pair at a matched size (page, family, `bench agreement`)."""
    hardware, bind, world, dtype = place
    first, second = PRIMARY
    return (
        f"allreduce busbw {first} / {second} at {format_bytes(size)}B, {world} ranks {dtype}"
        f"{placement_text(hardware, bind)}"
    )


def comparisons(frame) -> dict:
    """The comparison the communication view makes (bench.tasks.base.Task.comparisons): the first primary
    backend's allreduce busbw over the second's at the matched size, across launches."""
    ok = comparable_runs(frame)
    return {
        matched_key(place, size): ratio_of_cases([values[0]], [values[1]])
        for place, (size, values, _) in matched_sizes(ok).items()
    }
