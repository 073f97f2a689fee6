"""What one process of a training run does (bench.rank.entry runs it): a worker's warm-up and timed windows, and
the loop of a process that serves the workers (a parameter server). Loaded only inside a run's processes."""

from __future__ import annotations

import os
import time

from bench.rank.inject import fire_injected, injected_for
from bench.rank.kit import GroupMember, StepLoop, step_delay_seconds, thread_affinities, timed_windows
from bench.rank.network import initial_model
from bench.rank.training import first_non_finite
from workloads import get_workload


def train_rank(joined, inject: dict | None) -> dict:
    """The measured loop on one worker: warm-up, then the timed windows; its output for the result file."""
    spec, run_dir, info = joined.spec, joined.run_dir, joined.info
    affinity = joined.affinity
    workload = get_workload(spec.workload)
    training = joined.group.training(joined, workload)  # the framework's side: model, optimizer, batches, step
    sync, timed_input = training.sync, training.timed_input
    input_waits = []  # input wait per timed window (a DataLoader feeds the run)
    step = StepLoop(training.step, inject)

    def progress(window: int):
        if timed_input is not None:  # the wait since the last window ended: this window's, once timing began
            input_waits.append(timed_input.wait_s)
            timed_input.wait_s = 0.0
        run_dir.write(
            joined.file_rank, joined.attempt, "progress", {"steps": step.done, "window": window, "time": time.time()}
        )

    loss = step()
    sync()
    joined.first_step_end = time.time()
    loss_first = training.value(loss)
    # (step, "loss", value): every warm-up step's loss (untimed, and synchronised already), then each window's
    # last; nothing inside a timed window reads a loss, which would add a device sync per step
    checks = [(step.done, "loss", loss_first)]
    warmup_times = []
    # the warm-up after the first step is profiled where the framework can (bench.rank.profile); the windows run
    # the plain step
    profiler, profiled_step = training.profiled()
    if profiled_step is not None:
        step.core = profiled_step
    for _ in range(spec.warmup_steps - 1):
        t0 = time.perf_counter()
        loss = step()
        sync()
        warmup_times.append(time.perf_counter() - t0)
        checks.append((step.done, "loss", training.value(loss)))
    step.core = training.step
    profile = profiler.close() if profiler is not None else None
    if spec.step_delay:
        step.delay_s = step_delay_seconds(spec.step_delay, warmup_times, step, sync)
    progress(0)

    before_windows = step.done
    window_times, last_losses = timed_windows(
        step, spec.windows, spec.steps_per_window, joined.group.barrier, sync, progress
    )
    placed = thread_affinities()  # every thread the run started is alive now: where each may run
    window_losses = [training.value(loss) for loss in last_losses]
    checks += [(before_windows + (w + 1) * spec.steps_per_window, "loss", v) for w, v in enumerate(window_losses)]
    window_input_wait = input_waits[1:] if timed_input is not None else None  # [0] is the warm-up's

    sums = training.param_sums()
    if spec.save_params:
        training.save_params(run_dir.params_file(joined.file_rank, joined.attempt))
    saved = training.save_model(spec.save_model) if spec.save_model and info.worker_index == 0 else None
    return {
        "saved_model": saved,
        "window_times": window_times,
        "window_losses": window_losses,
        "window_input_wait_s": window_input_wait,
        "loss_first": loss_first,
        "steps": step.done,
        "step_delay_s": step.delay_s,
        "profile": profile,
        "param_count": sums.count,
        "param_checksum": sums.total,
        "param_abs_checksum": sums.absolute,
        "non_finite": first_non_finite(checks, sums.total, step.done),
        "cuda_peak_bytes": training.device_peak_bytes(),
        "threads": {
            **training.threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "affinity": affinity,
            "process_threads": len(placed),
            "threads_off_affinity": sum(c != affinity for c in placed.values()),
        },
    }


def run_training_rank(spec, run_dir, file_rank, attempt, t_process_start, loop):
    """One process of a training run: join, then a worker runs loop(joined, inject) and any other role (a
    parameter server) serves the workers' steps (serve_parameters)."""
    joined = GroupMember(spec, run_dir, file_rank, attempt, t_process_start)
    inject = injected_for(spec, joined.info.rank)
    if joined.info.role != "worker":
        return joined.result({"served": serve_parameters(joined, inject)})
    return joined.result(loop(joined, inject))


def serve_parameters(joined, inject: dict | None) -> dict:
    """A parameter server's loop over the run's steps: it owns a shard of the same initial parameters as every
    worker of every backend, and applies the same optimizer (SGD with the run's lr, its schedule and momentum) to
    the gradients the workers push (the backend's protocol: ProcessGroup.server). Returns its counters, with the
    time spent applying updates."""
    import torch  # here, not at the top: a TensorFlow backend's workers load this module too

    spec = joined.spec
    server = joined.group.server(spec, joined.info)
    weights = torch.nn.Parameter(server.shard(initial_model(spec, "cpu")))
    optimizer = torch.optim.SGD([weights], lr=spec.lr, momentum=spec.momentum)
    steps, workers = spec.total_steps, len(server.workers)
    scheduled = spec.lr_at(0) != spec.lr_at(steps - 1)  # the optimizer's lr follows the run's schedule
    busy = 0.0
    server.start(weights.data)
    for step in range(steps):
        if inject and step == inject["step"]:
            fire_injected(inject["kind"], step)
        for _ in range(server.updates_per_step):
            pushed = server.receive()
            t0 = time.perf_counter()
            weights.grad = pushed / workers
            if scheduled:
                optimizer.param_groups[0]["lr"] = spec.lr_at(step)
            optimizer.step()
            busy += time.perf_counter() - t0
            server.answer(weights.data)
    server.answer_held_back(weights.data)
    return {**server.counters(), "update_s": busy}


def run_rank(spec, run_dir, file_rank, attempt, t_process_start):
    return run_training_rank(spec, run_dir, file_rank, attempt, t_process_start, train_rank)
