"""What one process of a convergence run does (bench.rank.entry runs it): a worker trains the planned steps, the
first worker evaluating on the held-out set; a parameter server serves them as in a training run. Loaded only
inside a run's processes."""

from __future__ import annotations

import time

import torch

from bench.rank.network import build_model, save_model
from bench.rank.training import Numerics, first_non_finite, optimizer_step, param_sums
from bench.tasks.train.rank import run_training_rank
from workloads import get_workload
from workloads.data.holdout import converge_data
from workloads.data.sources import open_batches


def evaluate(model, held, device, loss_fn) -> tuple[float, float]:
    """(accuracy, mean loss per sample) of `model` (without its data-parallel wrapper) on the held-out set."""
    was_training = model.training
    model.eval()
    correct, loss, n = 0, 0.0, 0
    with torch.no_grad():
        for x, y in held.batches():
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss += loss_fn(logits, y).item() * len(y)
            correct += int((logits.argmax(1) == y).sum())
            n += len(y)
    model.train(was_training)
    return correct / n, loss / n


def set_lr(optimizer, lr: float) -> None:
    """The schedule's lr on the workers' optimizer (a parameter server's workers have none: their servers apply it)."""
    for group in getattr(optimizer, "param_groups", ()):
        group["lr"] = lr


def converge_rank(joined, inject=None) -> dict:
    """One worker's run: train the planned steps, the first worker evaluating (bench converge takes no --inject)."""

    spec, run_dir, info, c = joined.spec, joined.run_dir, joined.info, joined.spec.converge
    affinity = joined.affinity
    device, sync = joined.device, joined.sync
    workload = get_workload(spec.workload)
    numerics = Numerics(spec, device.type)
    model, optimizer = build_model(spec, device)
    model, optimizer = joined.group.wrap(model, optimizer, spec)
    plain = getattr(model, "module", model)
    train_part, held = converge_data(
        spec.data,
        spec.data_dir,
        holdout=c.holdout,
        seed=spec.seed,
        channels=workload.channels,
        image=spec.image_size,
        workload=workload,
    )
    batches = open_batches(
        spec.data,
        batch=spec.batch_size,
        channels=workload.channels,
        image=spec.image_size,
        classes=spec.num_classes,
        seed=spec.seed,
        rank=info.worker_index,
        world=info.world_size,
        device=device,
        data_dir=spec.data_dir,
        loader=spec.loader,
        loader_workers=spec.loader_workers,
        dataset=train_part,
        workload=workload,
    )
    evaluator = info.worker_index == 0
    loss_fn = workload.make_loss()
    passes = spec.backward_passes
    curve, train_time, eval_time = [], 0.0, 0.0
    checks = []  # (step, what, value): the losses read where the device is synchronised already
    t_segment = None
    for step in range(c.total_steps):
        lr = spec.lr_at(step)
        set_lr(optimizer, lr)
        loss = optimizer_step(model, optimizer, loss_fn, batches.__next__, passes, numerics=numerics)
        if step == 0:
            sync()
            joined.first_step_end = time.time()
            t_segment = time.perf_counter()
            checks.append((1, "loss", loss.item()))
        done = step + 1
        if done % c.eval_every == 0 or done == c.total_steps:
            sync()
            now = time.perf_counter()
            train_time += now - t_segment
            checks.append((done, "loss", loss.item()))
            if evaluator:
                accuracy, held_loss = evaluate(plain, held, device, loss_fn)
                checks.append((done, "held-out loss", held_loss))
                curve.append(
                    {
                        "step": done,
                        "epoch": done / c.steps_per_epoch,
                        "samples": done * spec.global_batch,
                        "train_time_s": train_time,
                        "accuracy": accuracy,
                        "loss": held_loss,
                        "lr": lr,
                    }
                )
                run_dir.write(
                    joined.file_rank,
                    joined.attempt,
                    "progress",
                    {"steps": done, "accuracy": accuracy, "time": time.time()},
                )
            t_segment = time.perf_counter()
            eval_time += t_segment - now
    checksum = param_sums(plain).total
    saved = save_model(plain, spec.save_model) if spec.save_model and evaluator else None
    return {
        "curve": curve if evaluator else None,
        "train_time_s": train_time,
        "eval_time_s": eval_time,
        "held_out": held.describe,
        "param_checksum": checksum,
        "saved_model": saved,
        "non_finite": first_non_finite(checks, checksum, c.total_steps),
        "threads": {"torch": torch.get_num_threads(), "affinity": affinity},
    }


def run_rank(spec, run_dir, file_rank, attempt, t_process_start):
    return run_training_rank(spec, run_dir, file_rank, attempt, t_process_start, converge_rank)
