"""converge: time to accuracy. Each backend trains the same model on a real data set for a fixed number of
epochs, evaluating held-out accuracy every E steps; the time, epochs and samples to a target accuracy are
read off that curve (docs/method.md, "Time to accuracy").

Every backend runs the full --epochs, so final accuracies are compared at the same point; the learning rate
follows the same rule everywhere (--lr-scaling none|linear with a linear warm-up, RunSpec.lr_at), applied by
whoever steps the optimizer (the workers, or a parameter server). The first worker evaluates; its training
clock stops while it does, so evaluation (identical for every backend) never counts as training time. The
clock starts when the first optimizer step has ended: that step holds every process's lazy initialisation
(the suite never times it) and is counted in start-up, as for training runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench.core.codec import Figure, Record, decode, float_of
from bench.core.console import note
from bench.core.errors import UsageError
from bench.core.records import Startup
from bench.core.registry import get_backend
from bench.harness.outcome import startup, workers_and_others
from bench.harness.workload_check import workload_of
from bench.tasks.base import Task
from bench.tasks.converge.settings import ConvergeSettings
from bench.tasks.train import build_spec as train_spec
from bench.tasks.train import conclude_training, diverged_v6, placement_words

LR_SCALINGS = ("none", "linear")
CONVERGE_DEFAULTS = dict(
    data="digits", target=0.9, epochs=8, holdout=0.2, lr_scaling="linear", warmup_epochs=1.0, evals_per_epoch=2
)
REPLICA_TOLERANCE = 1e-6  # relative: workers' parameter checksums closer than this hold the same model
ACCURACY_TOLERANCE = 0.02  # backends "reach the same accuracy" when their final accuracies are this close


def build_spec(
    *,
    target: float | None = None,
    epochs: int | None = None,
    eval_every: int | None = None,
    lr_scaling: str | None = None,
    warmup_epochs: float | None = None,
    holdout: float | None = None,
    **train_options,
):
    """A converge run's spec: a training spec (the same placement, data and fairness rules) with its plan of
    steps, evaluations and learning rate."""
    from workloads.data.holdout import training_samples
    from workloads.data.names import DataError

    c = {
        k: v
        for k, v in dict(
            target=target, epochs=epochs, lr_scaling=lr_scaling, warmup_epochs=warmup_epochs, holdout=holdout
        ).items()
        if v is not None
    }
    c = {**{k: CONVERGE_DEFAULTS[k] for k in ("target", "epochs", "lr_scaling", "warmup_epochs", "holdout")}, **c}
    if not 0.0 < c["target"] <= 1.0:
        raise UsageError(f"--target {c['target']}: give a held-out accuracy between 0 and 1, such as 0.9")
    if c["epochs"] < 1:
        raise UsageError("--epochs must be at least 1")
    if c["lr_scaling"] not in LR_SCALINGS:
        raise UsageError(f"--lr-scaling {c['lr_scaling']!r}: choose one of {', '.join(LR_SCALINGS)}")
    if c["warmup_epochs"] < 0 or c["warmup_epochs"] > c["epochs"]:
        raise UsageError(f"--warmup-epochs {c['warmup_epochs']}: between 0 and --epochs ({c['epochs']})")
    if train_options.get("inject") or train_options.get("step_delay"):
        raise UsageError("bench converge takes no --inject or --inject-delay: it measures training as it is")
    train_options.setdefault("data", CONVERGE_DEFAULTS["data"])
    backend = train_options.get("backend")
    if backend is not None and "converge" not in get_backend(backend).tasks:
        raise UsageError(f"backend {backend} takes no converge runs (it takes {', '.join(get_backend(backend).tasks)})")
    spec = train_spec(**train_options)
    if spec.data == "synthetic":
        raise UsageError("time to accuracy needs a real data set: --data digits (always here), mnist or imagefolder")
    try:
        samples = training_samples(
            spec.data,
            spec.data_dir,
            holdout=c["holdout"],
            seed=spec.seed,
            workload=workload_of(spec.workload, with_data=spec.data == "workload")[1],
            image=spec.image_size,
        )
    except DataError as exc:
        raise UsageError(str(exc)) from None
    per_rank = samples // spec.world_size
    steps_per_epoch = per_rank // spec.samples_per_step
    if steps_per_epoch < 1:
        raise UsageError(
            f"the training part holds {samples} samples: too few for {spec.world_size} worker(s) x "
            f"batch {spec.samples_per_step}; lower --batch-size or the world size"
        )
    if eval_every is not None and eval_every < 1:
        raise UsageError("--eval-every must be at least 1 step")
    c.update(
        steps_per_epoch=steps_per_epoch,
        total_steps=steps_per_epoch * c["epochs"],
        eval_every=eval_every or max(1, steps_per_epoch // CONVERGE_DEFAULTS["evals_per_epoch"]),
        warmup_steps=round(c["warmup_epochs"] * steps_per_epoch),
        training_samples=samples,
    )
    if c["lr_scaling"] == "none":
        c["warmup_steps"] = 0  # nothing to ramp to
    return dataclasses.replace(
        spec, task="converge", converge=ConvergeSettings(**c), warmup_steps=0, windows=0, steps_per_window=0
    )


# ---------------------------------------------------------------- records
@dataclass
class CurvePoint(Record):
    """One evaluation: where training was and what the first worker's model scored on the held-out set."""

    step: int  # optimizer steps done
    epoch: Figure  # passes over the training part
    samples: int  # samples seen by all workers together
    train_time_s: Figure  # training only (evaluation excluded), from the end of the first step
    accuracy: Figure
    loss: float  # (NaN, say, where the run diverged)
    lr: Figure


@dataclass
class ConvergeMetrics(Record):
    target: Figure
    reached: bool
    time_to_target_s: Figure | None  # training time at the first evaluation at or above the target
    steps_to_target: int | None
    epochs_to_target: Figure | None
    samples_to_target: int | None
    final_accuracy: Figure
    final_loss: float
    best_accuracy: Figure
    train_time_s: Figure
    eval_time_s: Figure
    samples_per_s: Figure  # samples seen / training time (evaluation excluded)
    held_out: str
    lr_peak: Figure
    curve: list[CurvePoint]
    replicas_agree: bool | None  # every worker ended with the same parameters (None: asynchronous updates)
    param_checksums: list[float]
    startup: Startup
    peak_rss_bytes_max: int
    other_roles: list[dict] = field(default_factory=list)


def first_at_target(curve: list[CurvePoint], target: float) -> CurvePoint | None:
    return next((p for p in curve if p.accuracy >= target), None)


def converge_metrics(spec, results: dict, launched_at: float, run_dir=None) -> ConvergeMetrics:
    workers, others = workers_and_others(results)
    ranks = sorted(workers)
    out = next(workers[r].output for r in ranks if workers[r].output.get("curve") is not None)
    curve = [decode(CurvePoint, p) for p in out["curve"]]
    hit = first_at_target(curve, spec.converge.target)
    checksums = [float_of(workers[r].output["param_checksum"]) for r in ranks]
    scale = max(1e-12, max(abs(c) for c in checksums))
    last = curve[-1]
    return ConvergeMetrics(
        target=spec.converge.target,
        reached=hit is not None,
        time_to_target_s=hit.train_time_s if hit else None,
        steps_to_target=hit.step if hit else None,
        epochs_to_target=hit.epoch if hit else None,
        samples_to_target=hit.samples if hit else None,
        final_accuracy=last.accuracy,
        final_loss=last.loss,
        best_accuracy=max(p.accuracy for p in curve),
        train_time_s=out["train_time_s"],
        eval_time_s=out["eval_time_s"],
        samples_per_s=last.samples / out["train_time_s"] if out["train_time_s"] > 0 else 0.0,
        held_out=out["held_out"],
        lr_peak=spec.lr_at(spec.total_steps),
        curve=curve,
        replicas_agree=(
            (max(checksums) - min(checksums)) / scale <= REPLICA_TOLERANCE
            if get_backend(spec.backend).synchronous(spec.backend_options)
            else None
        ),
        param_checksums=checksums,
        startup=startup([workers[r] for r in ranks], launched_at, run_dir, spec),
        peak_rss_bytes_max=max(workers[r].peak_rss_bytes for r in ranks),
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


class ConvergeProgress:
    """A line per evaluation, from the first worker's progress file."""

    def __init__(self, spec, run_dir):
        self.spec, self.run_dir, self.last = spec, run_dir, None

    def __call__(self):
        p = self.run_dir.latest("progress").get(0, {})
        if not p or p.get("steps") == self.last:
            return None
        self.last = p["steps"]
        c = self.spec.converge
        note(
            f"  step {p['steps']}/{c.total_steps} (epoch {p['steps'] / c.steps_per_epoch:.1f}): "
            f"held-out accuracy {p['accuracy']:.3f}"
        )  # a line that cannot be written must not end the run
        return None


def fmt_target(m) -> str:
    if m.reached:
        return (
            f"{m.target:.0%} reached in {m.time_to_target_s:.2f} s of training ({m.epochs_to_target:.2f} "
            f"epochs, {m.samples_to_target:,} samples)"
        )
    return f"{m.target:.0%} not reached (best {m.best_accuracy:.1%})"


class ConvergeTask(Task):
    name = "converge"
    label = "time to accuracy"
    metrics_type = ConvergeMetrics
    settings_type = ConvergeSettings
    columns = ("target", "reached", "time_to_target_s", "epochs_to_target", "final_accuracy", "lr_scaling")

    def describe(self, spec) -> str:
        c = spec.converge
        return (
            f"{spec.backend} {spec.workload} on {spec.data}, {placement_words(spec)}, batch {spec.batch_size}/worker, "
            f"{c.epochs} epochs x {c.steps_per_epoch} steps, held-out accuracy every {c.eval_every} "
            f"steps, target {c.target:.0%}, lr {spec.lr:g} "
            + (
                f"(linear scaling to {spec.lr_at(c.total_steps):g} over {c.warmup_steps} warm-up steps)"
                if c.lr_scaling == "linear"
                else "(not scaled)"
            )
        )

    def progress(self, spec, run_dir):
        return ConvergeProgress(spec, run_dir)

    def conclude(self, spec, run_dir, outcome, before):
        return conclude_training(spec, run_dir, outcome, converge_metrics)

    def upgrade(self, from_version, record):
        def sightings(m):  # the first worker's held-out losses, and each worker's final parameters
            workers = [r for r in record["rank_map"] if r.get("role", "worker") == "worker"]
            ranks = sorted(r["rank"] for r in workers)  # the checksums' order (converge_metrics)
            ranks = ranks if len(ranks) == len(m["param_checksums"]) else [None] * len(m["param_checksums"])
            first = next(
                (r["rank"] for r in workers if (r["rank"] if r.get("role_rank") is None else r["role_rank"]) == 0), None
            )
            end = record["spec"]["converge"]["total_steps"]
            return [(p["step"], first, "held-out loss", p["loss"]) for p in m["curve"]] + [
                (end, rank, "parameters", v) for rank, v in zip(ranks, m["param_checksums"])
            ]

        return diverged_v6(record, sightings) if from_version == 6 else record

    def case(self, spec) -> str:
        return f"{spec.workload} to {spec.converge.target:.0%} on {spec.data}"

    def kind(self, spec) -> str:
        return "time to accuracy"

    def ok_figure(self, record) -> str:
        return fmt_target(record.metrics)

    def list_figure(self, record) -> str:
        return fmt_target(record.metrics) if record.metrics else "-"

    def summary_lines(self, record) -> list[str]:
        lines = super().summary_lines(record)
        m = record.metrics
        if m:
            lines.append(f"target: {fmt_target(m)}")
            lines.append(
                f"final held-out accuracy {m.final_accuracy:.1%}, loss {m.final_loss:.4f} (held out: {m.held_out})"
            )
            lines.append(
                f"training {m.train_time_s:.2f} s ({m.samples_per_s:,.0f} samples/s), evaluation "
                f"{m.eval_time_s:.2f} s (not counted); peak lr {m.lr_peak:g}"
            )
            if m.replicas_agree is False:
                lines.append(
                    "WARNING: the workers ended with different parameters (checksums "
                    f"{', '.join(f'{c:.6g}' for c in m.param_checksums)}): gradients were not averaged "
                    "or the initial parameters not broadcast alike"
                )
            if record.spec.save_model:
                lines.append(f"model saved to {record.spec.save_model} (state_dict of the first worker)")
        return lines

    def frame_columns(self, record) -> dict:
        m, c = record.metrics, record.spec.converge
        base = {"target": c.target, "lr_scaling": c.lr_scaling}
        if m is None:
            return base
        return {
            **base,
            "reached": m.reached,
            "time_to_target_s": m.time_to_target_s,
            "epochs_to_target": m.epochs_to_target,
            "final_accuracy": m.final_accuracy,
        }


TASK = ConvergeTask()
