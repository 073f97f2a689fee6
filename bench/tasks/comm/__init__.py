"""comm: a communication sweep in nccl-tests' conventions, through each backend's own collectives
(docs/method.md, "Communication"). No model: the same placement, threads and launchers as training."""

from __future__ import annotations

from dataclasses import dataclass

from bench.core.codec import Figure, Record, decode
from bench.core.errors import UsageError
from bench.core.records import TRAINING_FIELDS, RunError, RunStatus, Startup
from bench.core.registry import get_backend
from bench.core.spec import DEFAULTS, RunSpec, across_hosts, check_placement, resolve_cpu_bind
from bench.harness.outcome import joined_rank_map, process_status, read_results, startup, workers_and_others
from bench.rank.collectives import DTYPES, OPS, average_busbw, combine, fit_alpha_beta, format_table, measure_ceiling
from bench.tasks.base import Conclusion, Task
from bench.tasks.comm.settings import CommSettings


@dataclass
class CommRow(Record):
    """One (op, message size) of a sweep, as nccl-tests prints it."""

    op: str
    size: int  # bytes of the whole buffer (see bench.rank.collectives)
    count: int
    type: str
    redop: str
    time_us: Figure  # mean per op, max over ranks
    algbw_gbps: Figure
    busbw_gbps: Figure
    wrong: int
    per_rank_time_us: list[Figure]
    window_time_us: list[Figure] | None = None  # per timed chunk, max over ranks
    busbw_fraction_of_limit: Figure | None = None


@dataclass
class CommMetrics(Record):
    avg_busbw_gbps: dict[str, Figure | None]
    wrong: int
    model: str  # the cost model fitted: "ring", "parameter server"
    fit: dict | None  # bench.rank.collectives.fit_alpha_beta
    rows: list[CommRow]
    startup: Startup
    peak_rss_bytes_max: int
    ceiling: dict | None = None  # bench.rank.collectives.measure_ceiling, measured just before the launch


def build_spec(
    *,
    backend: str,
    world_size: int,
    device: str,
    ops: list[str],
    dtype: str = "float32",
    min_bytes: int = 4,
    max_bytes: int = 64 * 2**20,
    warmup_iters: int = 5,
    iters: int = 20,
    threads: int | None = None,
    oversubscribe: bool = False,
    timeout: float | None = None,
    backend_options: dict | None = None,
    sweep_id: str | None = None,
    cluster: dict | None = None,
    cpu_bind: str | None = None,
) -> RunSpec:
    """A communication sweep: no model, the same placement, threads and launchers as training runs."""
    plugin = get_backend(backend)
    if not plugin.comm_ops:
        raise UsageError(f"backend {backend} has no collectives to time; choose one of the distributed backends")
    if not ops:
        raise UsageError(f"--ops names no collective; choose from {', '.join(OPS)}")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise UsageError(f"unknown op {unknown[0]!r}; choose from {', '.join(OPS)}")
    missing = [op for op in ops if op not in plugin.comm_ops]
    if missing:
        raise UsageError(
            f"backend {backend} has no {missing[0]} (it offers {', '.join(plugin.comm_ops)}); drop it from --ops"
        )
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype not in plugin.comm_dtypes:
        raise UsageError(f"backend {backend} cannot reduce {dtype} here; use --dtype {' or '.join(plugin.comm_dtypes)}")
    if min_bytes < 1 or max_bytes < min_bytes:
        raise UsageError(f"--min-bytes {min_bytes} and --max-bytes {max_bytes}: need 1 <= min <= max")
    if warmup_iters < 0 or iters < 1:
        raise UsageError("--warmup-iters must be 0 or more and --iters at least 1")
    timeout = DEFAULTS["timeout"] if timeout is None else timeout
    threads, resolved, roles = check_placement(
        plugin, world_size, device, threads, oversubscribe, backend_options, timeout, cluster
    )
    return RunSpec(
        backend=backend,
        workload=None,
        world_size=world_size,
        device=device,
        batch_size=None,
        image_size=None,
        num_classes=None,
        threads=threads,
        steps_per_window=None,
        warmup_steps=None,
        windows=None,
        timeout=timeout,
        backend_options=resolved,
        cpu_bind=resolve_cpu_bind(cpu_bind, device, oversubscribe, cluster, plugin.places_on_this_host(resolved)),
        roles=roles,
        task="comm",
        sweep_id=sweep_id,
        **across_hosts(cluster),
        comm=CommSettings(
            ops=list(ops), dtype=dtype, min_bytes=min_bytes, max_bytes=max_bytes, warmup_iters=warmup_iters, iters=iters
        ),
    )


def comm_metrics(spec: RunSpec, results: dict, launched_at: float, ceiling: dict | None, run_dir=None) -> CommMetrics:
    """A sweep's rows (time: max over ranks; #wrong: summed), the alpha-beta fit of its allreduce rows to
    the backend's cost model, and each row's busbw against the ceiling measured before the launch."""
    workers, _ = workers_and_others(results)
    rows = combine(spec, {r: res.output["comm_rows"] for r, res in workers.items()})
    if ceiling:
        for row in rows:
            row["busbw_fraction_of_limit"] = row["busbw_gbps"] / ceiling["limit_gbps"]
    model, alpha_coef, beta_coef = get_backend(spec.backend).cost_model(spec.world_size, spec.backend_options)
    fit = fit_alpha_beta([r for r in rows if r["op"] == "allreduce"], alpha_coef, beta_coef)
    return CommMetrics(
        avg_busbw_gbps={op: average_busbw(rows, op) for op in spec.comm.ops},
        wrong=sum(r["wrong"] for r in rows),
        model=model,
        fit=fit,
        rows=[decode(CommRow, r) for r in rows],
        startup=startup(list(results.values()), launched_at, run_dir, spec),
        peak_rss_bytes_max=max(res.peak_rss_bytes for res in results.values()),
        ceiling=ceiling,
    )


def fmt_busbw(metrics: CommMetrics | None) -> str:
    if metrics is None:
        return "-"
    return "avg busbw " + ", ".join(f"{op} {v:.3f} GB/s" for op, v in metrics.avg_busbw_gbps.items() if v is not None)


class CommTask(Task):
    name = "comm"
    label = "communication sweep"
    model_input = "collective"
    metrics_type = CommMetrics
    settings_type = CommSettings
    columns = ("rendezvous_s", "peak_rss_mb", "dtype")

    # ------------------------------------------------------------ parent side
    def describe(self, spec) -> str:
        c = spec.comm
        return (
            f"{spec.backend}, {spec.world_size} rank(s) ({spec.device}), {', '.join(c.ops)}, {c.dtype}, "
            f"{c.min_bytes} to {c.max_bytes} bytes, {c.warmup_iters} warm-up + {c.iters} timed ops"
        )

    def before_launch(self, spec):
        """The machine's limit, measured in the parent just before launch: same run, nothing else running."""
        return {"ceiling": measure_ceiling(spec.device)}

    def conclude(self, spec, run_dir, outcome, before):
        status, error = process_status(spec, run_dir, outcome)
        metrics = None
        if status == RunStatus.OK:
            metrics = comm_metrics(
                spec, read_results(run_dir), outcome.launched_at, (before or {}).get("ceiling"), run_dir
            )
            if metrics.wrong:
                status = RunStatus.FAILED
                error = RunError(message=f"{metrics.wrong} wrong elements: a collective returned wrong results")
        return Conclusion(status=status, error=error, metrics=metrics, rank_map=joined_rank_map(run_dir))

    def upgrade(self, from_version, record):
        if from_version == 1 and record.get("metrics") is not None:  # metrics.comm and the rows, together
            metrics = dict(record["metrics"])
            record["metrics"] = {**metrics.pop("comm"), **metrics, "rows": record.get("allreduce") or []}
        if from_version == 5:  # v5 wrote placeholders where a sweep has no training values
            record["spec"] = {**record["spec"], **{name: None for name in TRAINING_FIELDS}}
        return record

    # ------------------------------------------------------------ views
    def ok_figure(self, record) -> str:
        return fmt_busbw(record.metrics)

    def list_figure(self, record) -> str:
        return fmt_busbw(record.metrics)

    def summary_lines(self, record) -> list[str]:
        if not record.ok:
            return super().summary_lines(record)
        m = record.metrics
        lines = format_table(m.rows, m.ceiling).splitlines()
        if m.fit:
            lines.append(
                f"# alpha-beta fit ({m.model}): a = {m.fit['alpha_s'] * 1e6:.1f} us, "
                f"1/b = {m.fit['bandwidth_gbps']:.2f} GB/s, weighted R^2 = {m.fit['r2_weighted']:.3f}"
            )
        return lines

    def frame_columns(self, record) -> dict:
        out = {"dtype": record.spec.comm.dtype}
        if record.metrics is not None:
            out.update(
                rendezvous_s=record.metrics.startup.rendezvous_s, peak_rss_mb=record.metrics.peak_rss_bytes_max / 2**20
            )
        return out


TASK = CommTask()
