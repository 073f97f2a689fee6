"""train: the measured training loop (warm-up, then timed windows), under any backend.

Method (docs/method.md, "Windows and throughput" and "Uncertainty"): W untimed warm-up steps, then R
windows of K steps timed on every rank after a barrier; a window's time is the max over ranks and
throughput = global batch x K / window time; the mean over windows with its t interval.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from bench.core.codec import Figure, Record, float_of
from bench.core.console import note
from bench.core.errors import UsageError
from bench.core.records import RunError, RunStatus, Startup, Summary
from bench.core.registry import get_backend
from bench.core.spec import (
    DEFAULTS,
    RunSpec,
    across_hosts,
    check_placement,
    numerics_note,
    numerics_words,
    placement_text,
    resolve_cpu_bind,
    resolve_numerics,
)
from bench.core.stats import summarize
from bench.harness.outcome import joined_rank_map, process_status, read_results, startup, workers_and_others
from bench.harness.workload_check import workload_of
from bench.rank.inject import parse_inject, parse_step_delay
from bench.tasks.base import Conclusion, Task


def build_spec(
    *,
    backend: str,
    workload: str,
    world_size: int,
    device: str,
    batch_size: int | None = None,
    image_size: int | None = None,
    threads: int | None = None,
    oversubscribe: bool = False,
    inject: str | dict | None = None,
    step_delay: str | dict | None = None,
    backend_options: dict | None = None,
    cluster: dict | None = None,
    **options,
) -> RunSpec:
    """A training run's spec: defaults resolved from the workload and the machine, and a one-line error
    for what cannot run."""
    from workloads.data.names import DataError
    from workloads.data.sources import check_source, real_classes

    plugin = get_backend(backend)
    numerics = resolve_numerics(  # refused before the slower checks below (a workload's, a backend's probe)
        plugin,
        device,
        options.pop("precision", None),
        options.pop("channels_last", None),
        options.pop("no_cudnn_benchmark", None),
    )
    workload, wl, source = workload_of(
        workload,
        with_data=options.get("data") == "workload",
        check_timeout=options.pop("check_timeout", None),
        timeout=options.get("timeout"),
    )
    size = wl.size(device)
    timeout = options["timeout"] if options.get("timeout") is not None else DEFAULTS["timeout"]
    threads, resolved_options, roles = check_placement(
        plugin, world_size, device, threads, oversubscribe, backend_options, timeout, cluster
    )

    for name in ("warmup_steps", "steps_per_window", "windows", "timeout", "lr"):
        if name in options and options[name] is None:
            del options[name]
    if "save_model" in options:
        options["save_model"] = check_save_model(options["save_model"])
    spec_opts = {**DEFAULTS, "steps_per_window": size.window_steps, **options}
    batch_size = size.batch if batch_size is None else batch_size
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: the per-worker batch must be at least 1")
    if image_size is None:
        image_size = size.image
    elif wl.fixed_image and image_size != size.image:
        raise UsageError(f"workload {workload} takes {size.image}x{size.image} inputs only; drop --image-size")
    elif image_size < 16:
        raise UsageError(f"--image-size {image_size}: use 16 pixels or more")
    if spec_opts["warmup_steps"] < 1:
        raise UsageError("--warmup-steps must be at least 1: the first step (lazy initialisation) is never timed")
    if spec_opts["steps_per_window"] < 1:
        raise UsageError("--steps-per-window must be at least 1")
    if spec_opts["windows"] < 2:
        raise UsageError("--windows must be at least 2: a confidence interval needs two windows or more")
    spec_opts.update(numerics)
    spec_opts["cpu_bind"] = resolve_cpu_bind(
        spec_opts["cpu_bind"], device, oversubscribe, cluster, plugin.places_on_this_host(resolved_options)
    )

    try:
        check_source(
            spec_opts["data"],
            spec_opts.get("data_dir"),
            world=world_size,
            batch=batch_size,
            workload=wl,
            image=image_size,
        )
    except DataError as exc:
        raise UsageError(str(exc)) from None
    if spec_opts.get("data_dir"):
        spec_opts["data_dir"] = os.path.abspath(spec_opts["data_dir"])
    classes = (
        size.synthetic_classes
        if spec_opts["data"] == "synthetic"
        else real_classes(spec_opts["data"], spec_opts.get("data_dir"), wl)
    )
    check_loader(spec_opts)

    processes = sum(roles.values())

    if isinstance(inject, str) or inject is None:
        inject = parse_inject(inject)
    if inject and inject["rank"] >= processes:
        raise UsageError(f"--inject names rank {inject['rank']}, the run has ranks 0..{processes - 1}")

    if isinstance(step_delay, str) or step_delay is None:
        step_delay = parse_step_delay(step_delay)

    return RunSpec(
        backend=backend,
        workload=workload,
        workload_source=source,
        world_size=world_size,
        device=device,
        batch_size=batch_size,
        image_size=image_size,
        num_classes=classes,
        threads=threads,
        inject=inject,
        step_delay=step_delay,
        backend_options=resolved_options,
        roles=roles,
        **across_hosts(cluster),
        backward_passes=plugin.backward_passes(resolved_options),
        **spec_opts,
    )


def check_loader(spec_opts: dict) -> None:
    """--loader and --loader-workers: the image folder is always read through a DataLoader, the other sources
    through one only when asked; loader processes need a DataLoader."""
    from workloads.data.names import LOADERS, READ_BY_LOADER

    loader = spec_opts.setdefault("loader", "memory")
    if loader not in LOADERS:
        raise UsageError(f"--loader {loader!r}: choose one of {', '.join(LOADERS)}")
    if spec_opts["data"] in READ_BY_LOADER:
        spec_opts["loader"] = "dataloader"  # read from files or the user's data sets: no in-memory path
    if spec_opts.get("loader_workers", 0) < 0:
        raise UsageError("--loader-workers must be 0 or more")
    if spec_opts.get("loader_workers") and spec_opts["loader"] != "dataloader":
        raise UsageError(
            "--loader-workers needs a DataLoader: add --loader dataloader (or use --data imagefolder or workload)"
        )


def input_limited(wait_share: float | None) -> bool | None:
    """Whether the input pipeline limits throughput: the training loop waited for batches for at least
    INPUT_BOUND_SHARE of its step time (docs/method.md, "Input pipeline")."""
    return None if wait_share is None else wait_share >= INPUT_BOUND_SHARE


INPUT_BOUND_SHARE = 0.2


@dataclass
class RankFigures(Record):
    """One worker's own figures (stragglers show here)."""

    rank: int
    throughput: Summary
    step_time_mean_s: Figure
    peak_rss_bytes: int
    cuda_peak_bytes: int | None
    loss_first: float
    loss_last: float
    param_checksum: float
    threads: dict
    input_wait_share: Figure | None = None  # time waiting for batches / window time (a DataLoader feeds the run)


@dataclass
class TrainMetrics(Record):
    throughput: Summary  # samples/s per window: global batch x K / the slowest rank's window time
    window_times_s: list[Figure]
    step_time_s: Summary
    per_rank: list[RankFigures]
    straggler_ratio: Figure | None  # slowest / fastest rank's mean step time
    startup: Startup
    peak_rss_bytes_max: int
    param_count: int
    loss_last: float
    other_roles: list[dict] = field(default_factory=list)  # processes that do not train (PS servers)
    input_wait_share: Figure | None = None  # the largest worker's share of step time spent waiting for input
    # the first worker's warm-up, timed in parts (bench.rank.profile.summarize_steps); None before schema 9
    profile: dict | None = None

    @property
    def input_limited(self) -> bool | None:
        return input_limited(self.input_wait_share)


class ProgressPrinter:
    """Prints a line whenever rank 0 finishes a phase, read from its progress file."""

    def __init__(self, spec: RunSpec, run_dir, prefix: str = "  "):
        self.spec, self.run_dir, self.prefix = spec, run_dir, prefix
        self.last = None

    def __call__(self):
        window = self.run_dir.latest("progress").get(0, {}).get("window")
        if window is None or window == self.last:
            return None
        self.last = window
        text = "warm-up done" if window == 0 else f"window {window}/{self.spec.windows}"
        note(f"{self.prefix}{text}")  # a line that cannot be written must not end the run
        return None


def check_save_model(path: str | None) -> str | None:
    """--save-model as an absolute path whose folder exists and can be written (refused in one line otherwise)."""
    if path is None:
        return None
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if not path or os.path.isdir(full):
        raise UsageError(f"--save-model {path!r}: give a file path, such as model.pt")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError(f"--save-model {path}: the folder {folder} does not exist or cannot be written")
    return full


def train_metrics(spec: RunSpec, results: dict, launched_at: float, run_dir=None) -> TrainMetrics:
    """Throughput and timing metrics (docs/method.md, "Windows and throughput"). Only workers count;
    other roles (parameter servers) are reported beside them."""
    workers, others = workers_and_others(results)
    ranks = sorted(workers)
    k = spec.steps_per_window
    per_rank_windows = [workers[r].output["window_times"] for r in ranks]
    window_times = [max(ws) for ws in zip(*per_rank_windows)]  # a window's time: the max over ranks
    throughput = [spec.global_batch * k / t for t in window_times]
    per_rank = []
    for r in ranks:
        res, out = workers[r], workers[r].output
        rank_thr = [spec.samples_per_step * k / t for t in out["window_times"]]
        per_rank.append(
            RankFigures(
                rank=r,
                throughput=Summary(**summarize(rank_thr)),
                step_time_mean_s=sum(out["window_times"]) / (len(out["window_times"]) * k),
                peak_rss_bytes=res.peak_rss_bytes,
                cuda_peak_bytes=out["cuda_peak_bytes"],
                loss_first=float_of(out["loss_first"]),
                loss_last=float_of(out["window_losses"][-1]),
                param_checksum=float_of(out["param_checksum"]),
                threads=out["threads"],
                input_wait_share=(
                    sum(out["window_input_wait_s"]) / sum(out["window_times"])
                    if out.get("window_input_wait_s") is not None
                    else None
                ),
            )
        )
    slowest = max(p.step_time_mean_s for p in per_rank)
    fastest = min(p.step_time_mean_s for p in per_rank)
    return TrainMetrics(
        throughput=Summary(**summarize(throughput), unit="samples/s", per_window=throughput),
        window_times_s=window_times,
        step_time_s=Summary(**summarize([t / k for t in window_times])),
        per_rank=per_rank,
        # spread of per-rank step time: a straggler shows as a ratio well above 1
        straggler_ratio=slowest / fastest if fastest > 0 else None,
        startup=startup([workers[r] for r in ranks], launched_at, run_dir, spec),
        peak_rss_bytes_max=max(p.peak_rss_bytes for p in per_rank),
        param_count=workers[ranks[0]].output["param_count"],
        loss_last=per_rank[0].loss_last,
        profile=workers[ranks[0]].output.get("profile"),
        input_wait_share=max((p.input_wait_share for p in per_rank if p.input_wait_share is not None), default=None),
        other_roles=[
            {
                "rank": r,
                "role": res.rank_info.role,
                "served": res.output["served"],
                "peak_rss_bytes": res.peak_rss_bytes,
            }
            for r, res in sorted(others.items())
        ],
    )


def loader_words(spec) -> str:
    """How the data reach the model, when not held on the device."""
    if spec.loader != "dataloader":
        return ""
    return f" through a DataLoader ({spec.loader_workers} loader process(es)/worker)"


def input_words(m) -> str | None:
    """What the input pipeline cost a run fed by a DataLoader, and whether it limits throughput."""
    if m.input_wait_share is None:
        return None
    verdict = (
        "input limits throughput"
        if m.input_limited
        else "input does not limit throughput: compute and communication do"
    )
    return f"input wait: {m.input_wait_share:.0%} of step time (slowest worker): {verdict}"


def fmt_throughput(thr: Summary | None) -> str:
    if thr is None or thr.mean is None:
        return "-"
    mean, half = thr.mean, thr.ci_half_width
    pct = f" ± {100 * half / mean:.1f}%" if half == half and half is not None and mean else ""
    return f"{mean:,.0f} samples/s{pct}{' (unstable)' if thr.unstable else ''}"


def placement_words(spec) -> str:
    transport = get_backend(spec.backend).transport(spec.device, spec.backend_options)
    return (
        f"{spec.world_size} GPU(s), {transport}"
        if spec.device == "cuda"
        else f"{spec.world_size} CPU process(es), {transport}"
    )


def conclude_training(spec, run_dir, outcome, metrics_of) -> Conclusion:
    """A run whose workers train (and whose other roles serve them): its status, and its metrics_of(spec, results,
    launched_at, run_dir) when every process ended cleanly: `ok`, or `diverged` where a worker saw a loss or its
    parameters become non-finite (its figures are kept; every view leaves a run that is not ok out)."""
    status, error = process_status(spec, run_dir, outcome)
    metrics = None
    if status == RunStatus.OK:
        results = read_results(run_dir)
        metrics = metrics_of(spec, results, outcome.launched_at, run_dir)
        error = divergence(workers_and_others(results)[0])
        status = RunStatus.DIVERGED if error else status
    return Conclusion(status=status, error=error, metrics=metrics, rank_map=joined_rank_map(run_dir))


# what each value a rank checks is, in the error's words
CHECKED = {"loss": "the loss", "held-out loss": "the held-out loss", "parameters": "the parameters' checksum"}


def divergence(workers: dict) -> RunError | None:
    """The error of a run whose workers saw a non-finite value (the `non_finite` of their output, from
    bench.rank.training.first_non_finite), or None: the earliest step seen, on the lowest rank that saw it then."""
    seen = {r: res.output["non_finite"] for r, res in workers.items() if res.output.get("non_finite")}
    if not seen:
        return None
    step = min(n["step"] for n in seen.values())
    first = sorted(r for r, n in seen.items() if n["step"] == step)
    n = seen[first[0]]
    if n["finite_at"] == step - 1:
        when = f"at step {step}"
    elif n["finite_at"] is not None:  # checks between are not made: inside timed windows, or between evaluations
        when = f"by step {step} (finite at step {n['finite_at']}, the check before)"
    else:
        when = f"by step {step}"
    who = f"rank {first[0]}" if len(first) == 1 else f"ranks {', '.join(map(str, first))}"
    later = f"; {len(seen)} of {len(workers)} workers by their end" if len(seen) > len(first) else ""
    return RunError(
        message=f"{who}: {CHECKED.get(n['what'], n['what'])} became {n['value']} {when}{later}",
        rank=first[0],
        step=step,
    )


def non_finite(value) -> bool:
    """Whether a figure read from a record is a number that is not finite (a word of bench.core.codec.NON_FINITE)."""
    value = float_of(value)
    return isinstance(value, (int, float)) and not math.isfinite(value)


def diverged_v6(record: dict, sightings) -> dict:
    """A schema-6 record (bench.core.records._v6_to_v7) of an ok run, `diverged` if one of its figures is non-finite:
    sightings(metrics) gives (step, rank, what, value) of the figures it kept; the earliest non-finite one is its
    error."""
    if record.get("status") != RunStatus.OK.value or not isinstance(record.get("metrics"), dict):
        return record
    try:
        bad = sorted((s for s in sightings(record["metrics"]) if non_finite(s[3])), key=lambda s: s[0])
    except (KeyError, TypeError, AttributeError, ValueError):
        return record  # not shaped as v6 wrote it: decoding the record says what is wrong
    if not bad:
        return record
    step, rank, what, value = bad[0]
    who = f"rank {rank}: " if rank is not None else ""
    return dict(
        record,
        status=RunStatus.DIVERGED.value,
        error={
            "message": f"{who}{CHECKED[what]} was {float_of(value)!r} by step {step} (found when this schema-6 "
            "record was read: it kept no earlier check)",
            "rank": rank,
            "step": step,
        },
    )


class TrainTask(Task):
    name = "train"
    label = "training"
    model_input = "step"
    metrics_type = TrainMetrics
    columns = (
        "throughput",
        "ci_low",
        "ci_high",
        "rel_stdev",
        "unstable",
        "step_time_s",
        "startup_s",
        "rendezvous_s",
        "peak_rss_mb",
        "input_wait_share",
    )

    # ------------------------------------------------------------ parent side
    def describe(self, spec) -> str:
        return (
            f"{spec.backend} {spec.workload}, {placement_words(spec)}, batch {spec.batch_size}/worker, "
            f"{spec.threads} thread(s)/worker{placement_text('', spec.cpu_bind)}, {spec.data} data"
            f"{loader_words(spec)}, {spec.image_size}px"
            f"{numerics_note(numerics_words(spec.precision, spec.channels_last, spec.cudnn_benchmark))}, "
            f"{spec.warmup_steps} warm-up + {spec.windows} x {spec.steps_per_window} timed steps"
        )

    def progress(self, spec, run_dir):
        return ProgressPrinter(spec, run_dir)

    def conclude(self, spec, run_dir, outcome, before):
        return conclude_training(spec, run_dir, outcome, train_metrics)

    def upgrade(self, from_version, record):
        def sightings(m):  # each worker's last loss and final parameters, at the run's last step
            spec = record["spec"]
            end = spec["warmup_steps"] + spec["windows"] * spec["steps_per_window"]
            return [
                (end, row["rank"], what, row[key])
                for row in m["per_rank"]
                for what, key in (("loss", "loss_last"), ("parameters", "param_checksum"))
            ]

        if from_version == 8 and isinstance(record.get("metrics"), dict):  # v9: the warm-up's profile (none before)
            return dict(record, metrics=dict(record["metrics"], profile=None))
        return diverged_v6(record, sightings) if from_version == 6 else record

    # ------------------------------------------------------------ views
    def case(self, spec) -> str:
        return spec.workload

    def ok_figure(self, record) -> str:
        return fmt_throughput(record.metrics.throughput)

    def list_figure(self, record) -> str:
        return fmt_throughput(record.metrics.throughput if record.metrics else None)

    def summary_lines(self, record) -> list[str]:
        lines = [f"status: {record.status}"]
        error = record.error
        if error:
            lines.append(f"error: {error.message}")
            for row in error.ranks or []:
                lines.append(f"  rank {row['rank']}: {row['state']}")
            if error.tail:
                lines.append("error output (tail):")
                lines += ["  " + line for line in error.tail.splitlines()]
        m = record.metrics
        if m:
            thr, step, start = m.throughput, m.step_time_s, m.startup
            lines.append(
                f"throughput: {fmt_throughput(thr)} ({thr.confidence:.0%} CI {thr.ci_low:,.0f} to "
                f"{thr.ci_high:,.0f}, {thr.n} windows)"
            )
            lines.append(f"step time: {1000 * step.mean:.2f} ms (max over ranks per window)")
            lines.append(
                f"startup: {start.launch_to_first_step_s:.2f} s to first step, rendezvous "
                f"{start.rendezvous_s:.2f} s"
                + "".join(f", {name} {s:.2f} s" for name, s in start.launcher_phases.items())
            )
            lines.append(
                f"peak memory: {m.peak_rss_bytes_max / 2**20:,.0f} MiB RSS (largest rank); "
                f"straggler ratio {m.straggler_ratio:.3f}"
            )
            if input_words(m):
                lines.append(input_words(m))
            for row in m.per_rank:
                lines.append(
                    f"  rank {row.rank}: {fmt_throughput(row.throughput)}, {1000 * row.step_time_mean_s:.2f} ms/step"
                )
            if record.spec.save_model:
                lines.append(f"model saved to {record.spec.save_model} (state_dict of the first worker)")
        return lines

    def frame_columns(self, record) -> dict:
        m = record.metrics
        if m is None:
            return {}
        return {
            "throughput": m.throughput.mean,
            "ci_low": m.throughput.ci_low,
            "ci_high": m.throughput.ci_high,
            "rel_stdev": m.throughput.rel_stdev,
            "unstable": m.throughput.unstable,
            "step_time_s": m.step_time_s.mean,
            "startup_s": m.startup.launch_to_first_step_s,
            "rendezvous_s": m.startup.rendezvous_s,
            "peak_rss_mb": m.peak_rss_bytes_max / 2**20,
            "input_wait_share": m.input_wait_share,
        }


TASK = TrainTask()
