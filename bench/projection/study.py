"""The tables of docs/studies/projection.md, made from its store by the same code `bench predict` runs, so that the
study's figures are generated, never typed (tests/test_projection.py checks the page against them;
`python scripts/projection_study.py --markdown STORE` prints them)."""

from __future__ import annotations

from bench.core.registry import PROJECTED
from bench.projection.clusters import profile
from bench.projection.fit import cases_in, fit_backends
from bench.projection.model import Point, project, with_compute
from bench.projection.validate import Validation

SHOWN_AT = (8, 64, 1024)  # the worker counts the projection tables give
# the GPU projection's compute: the one-GPU ResNet18 step of docs/studies/gpu-h200.md (elastic, 4,418 samples/s at
# batch 64 per GPU: 14.5 ms)
GPU_COMPUTE_MS = 14.5
GPU_BATCH = 64


def pct(x: float) -> str:
    return f"{x:.1%}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def validation_summary(v: Validation) -> list[str]:
    """The judged points' errors, over all and per backend."""
    lines = [
        "| | judged points | median absolute error | worst | worst with the nominal link |",
        "|---|--:|--:|--:|--:|",
    ]
    judged = v.judged
    nominal = [abs(r.nominal_error) for r in judged]
    lines.append(
        f"| all | {len(judged)} of {len(v.rows)} | **{pct(v.median_error)}** (nominal link: "
        f"{pct(v.nominal_median_error)}) | {pct(v.worst_error)} | {pct(max(nominal))} |"
    )
    for backend in sorted({r.backend for r in judged}):
        part = Validation([r for r in judged if r.backend == backend], [], [])
        worst_nominal = max(abs(r.nominal_error) for r in part.rows)
        lines.append(
            f"| {backend} | {len(part.rows)} | {pct(part.median_error)} | {pct(part.worst_error)} | "
            f"{pct(worst_nominal)} |"
        )
    return lines


def validation_rows(v: Validation) -> list[str]:
    """Every point, predicted against measured."""
    lines = [
        "| workload | backend | hosts | link | measured ms (95%), launches | predicted ms (95%) | error "
        "| error, nominal link | judged |",
        "|---|---|--:|---|--:|--:|--:|--:|---|",
    ]
    for r in v.rows:
        lines.append(
            f"| {r.workload} | {r.backend} | {r.hosts} | {r.link} | {ms(r.measured.mean)} ({ms(r.measured_low)}-"
            f"{ms(r.measured_high)}), {len(r.runs)} | {ms(r.point.step)} ({ms(r.point.step_low)}-"
            f"{ms(r.point.step_high)}) | {r.error:+.1%} | {r.nominal_error:+.1%} | "
            f"{'no: ' + r.left_out if r.left_out else 'yes'} |"
        )
    return lines


def efficiency_cell(p: Point | None) -> str:
    if p is None:
        return "-"
    low, high = f"{p.efficiency_low:.0%}", f"{p.efficiency_high:.0%}"
    return f"{p.efficiency:.0%}" if low == high else f"{p.efficiency:.0%} ({low[:-1]}-{high})"


def projection_rows(records: list, cluster_name: str, gpu: bool = False) -> list[str]:
    """Each stored workload and backend projected to a profile: efficiency at SHOWN_AT workers, as `bench predict
    --cluster NAME` gives it (with `gpu`, `--compute-ms GPU_COMPUTE_MS --compute-batch GPU_BATCH`)."""
    lines = [
        "| workload | backend | " + " | ".join(f"{n:,} {'GPUs' if gpu else 'workers'}" for n in SHOWN_AT) + " |",
        "|---|---|" + "--:|" * len(SHOWN_AT),
    ]
    for case in cases_in(records):
        if gpu and case.workload != "resnet18":
            continue
        fitted, _ = fit_backends(records, PROJECTED, case)
        per_host = max(i.fit_world for i in fitted.values())
        cluster = profile(cluster_name, per_host)
        for backend, inputs in fitted.items():
            if gpu:
                inputs = with_compute(inputs, GPU_COMPUTE_MS / 1e3, cluster.device, "a GPU's step")
            at = {p.workers: p for p in project(inputs, cluster, cluster.worker_counts())}
            lines.append(
                f"| {case.workload} | {backend} | " + " | ".join(efficiency_cell(at.get(n)) for n in SHOWN_AT) + " |"
            )
    return lines


def tables(records: list, v: Validation) -> list[list[str]]:
    """The study's generated tables, in the page's order."""
    return [
        validation_summary(v),
        validation_rows(v),
        projection_rows(records, "cpu-10g"),
        projection_rows(records, "ib-100g", gpu=True),
    ]
