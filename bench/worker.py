"""The one training loop every backend runs: `python -m bench.worker RUN_DIR` (started by bench.guard).

Method (DESIGN, "Definitions"): W warm-up steps, never timed (the first includes lazy
initialisation); then R windows of K steps. Before each window all ranks meet at a barrier and the
device is synchronised, so every rank times the same K steps; a window's time is taken per rank here
and the max over ranks is taken by the parent. Nothing but the step itself runs inside a window.
The worker measures and writes its own files; it never decides a run's status.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

from bench.backends import get_backend
from bench.rundir import RunDir
from bench.spec import RunSpec


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def bind_cpus(spec, local_rank: int) -> list[int] | None:
    """--cpu-bind cores: local rank r takes cores [r*T, (r+1)*T) of those this process may use."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if spec.cpu_bind == "cores":
        start = (local_rank * spec.threads) % len(cores)
        chosen = [cores[(start + i) % len(cores)] for i in range(spec.threads)]
        os.sched_setaffinity(0, chosen)
        return chosen
    return cores


def fire_fault(kind: str, step: int) -> None:
    """Test-only faults (--inject): what a real hang, exception or OOM kill looks like to the harness."""
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "crash":
        raise RuntimeError(f"injected crash at step {step}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


class StepLoop:
    """The harness's part of one optimizer step: a test-only fault or delay, and the step count.

    It runs inside every timed window, so it is kept to an integer comparison and an addition
    (tests/benchmarks measures it)."""

    def __init__(self, core, fault: dict | None = None, done: int = 0):
        self.core, self.done, self.delay_s = core, done, 0.0
        self.fault_step = fault["step"] if fault else -1
        self.fault_kind = fault["kind"] if fault else None

    def __call__(self):
        if self.done == self.fault_step:
            fire_fault(self.fault_kind, self.done)
        out = self.core()
        if self.delay_s:
            time.sleep(self.delay_s)
        self.done += 1
        return out


def timed_windows(step, windows: int, steps_per_window: int, barrier, sync, on_window) -> tuple[list, list]:
    """R windows of K steps: (each window's time on this rank, each window's last step output).

    All ranks meet at the barrier and the device is synchronised before a window starts, so every rank
    times the same K steps; nothing but the steps runs between the two clock readings."""
    window_times, last = [], []
    for window in range(windows):
        barrier()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps_per_window):
            out = step()
        sync()
        window_times.append(time.perf_counter() - t0)
        last.append(out)
        on_window(window + 1)
    return window_times, last


def step_delay_seconds(delay: dict, warmup_times: list[float], step, sync) -> float:
    """--inject-delay: a fixed duration, or a share of the warm-up's median step time."""
    if "seconds" in delay:
        return delay["seconds"]
    if not warmup_times:  # a one-step warm-up: time one more untimed step
        t0 = time.perf_counter()
        step()
        sync()
        warmup_times = [time.perf_counter() - t0]
    return delay["fraction"] * sorted(warmup_times)[len(warmup_times) // 2]


def join_group(spec: RunSpec, run_dir: RunDir, file_rank: int, attempt: int):
    """Set the threads, run the backend's rendezvous, record who this rank is:
    (backend, rank info, init start, init end)."""
    import torch

    torch.set_num_threads(spec.threads)
    backend = get_backend(spec.backend)
    t_init_start = time.time()
    info = backend.init(spec)  # rendezvous and process-group set-up
    t_init_end = time.time()
    run_dir.write(file_rank, attempt, "joined", {**info.to_dict(), "pid": os.getpid(), "time": t_init_end})
    return backend, info, t_init_start, t_init_end


def build_model(spec: RunSpec, device):
    """The workload's model and SGD optimizer, with the same initial parameters in every process of every
    backend (first or replacement)."""
    import torch

    from workloads import WORKLOADS

    torch.manual_seed(spec.seed)
    model = WORKLOADS[spec.workload].build(spec.num_classes, spec.image_size).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)


def save_params(model, path) -> None:
    """A model's parameters on the CPU, for equivalence checks (--save-params)."""
    import torch

    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)


def train(spec: RunSpec, run_dir: RunDir, file_rank: int, attempt: int, t_process_start: float) -> dict:
    """Run the measured loop; file_rank is the rank the launcher gave (names this rank's files)."""
    import torch
    import torch.nn as nn

    from workloads import WORKLOADS
    from workloads.data import open_batches

    backend, info, t_init_start, t_init_end = join_group(spec, run_dir, file_rank, attempt)
    affinity = bind_cpus(spec, info.local_rank)
    cuda = spec.device == "cuda"
    device = torch.device("cuda", info.local_rank) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def other_result(**fields):
        """The result of a rank that does not train: a server, or any rank of a communication sweep."""
        backend.shutdown()
        return {"rank_info": info.to_dict(), "pid": os.getpid(), **fields,
                "times": {"process_start": t_process_start, "init_start": t_init_start,
                          "init_end": t_init_end, "end": time.time()},
                "peak_rss_bytes": peak_rss_bytes(), "threads": {"torch": torch.get_num_threads()}}

    if info.role != "worker":  # a parameter server: the backend's loop, not the training loop
        fault = spec.inject if spec.inject and spec.inject["rank"] == info.rank else None
        return other_result(served=backend.serve(spec, info, fault))
    if spec.task == "comm":  # a communication sweep: the backend's own collectives, no model
        from bench.comm import run_sweep

        return other_result(comm_rows=run_sweep(spec, backend, info, device, sync))

    workload = WORKLOADS[spec.workload]
    model, optimizer = build_model(spec, device)
    model, optimizer = backend.wrap(model, optimizer, spec)
    batches = open_batches(spec.data, batch=spec.batch_size, channels=workload.channels,
                           image=spec.image_size, classes=spec.num_classes, seed=spec.seed,
                           rank=info.rank, world=info.world_size, device=device, data_dir=spec.data_dir)
    loss_fn = nn.CrossEntropyLoss()
    inject = spec.inject if spec.inject and spec.inject["rank"] == info.rank else None
    passes = spec.backward_passes  # micro-batches per optimizer step; the loss is scaled to match one big batch
    scale = 1.0 / passes

    def optimizer_step():
        optimizer.zero_grad()  # set_to_none=True, torch's default; Horovod's wrapper takes no argument
        for _ in range(passes):
            x, y = next(batches)
            loss = loss_fn(model(x), y)
            (loss * scale if passes > 1 else loss).backward()
        optimizer.step()
        return loss

    step = StepLoop(optimizer_step, inject)

    def progress(window: int):
        run_dir.write(file_rank, attempt, "progress",
                      {"steps": step.done, "window": window, "time": time.time()})

    loss = step()
    sync()
    t_first_step = time.time()
    loss_first = loss.item()
    warmup_times = []
    for _ in range(spec.warmup_steps - 1):
        t0 = time.perf_counter()
        loss = step()
        sync()
        warmup_times.append(time.perf_counter() - t0)
    if spec.step_delay:
        step.delay_s = step_delay_seconds(spec.step_delay, warmup_times, step, sync)
    progress(0)

    window_times, last_losses = timed_windows(step, spec.windows, spec.steps_per_window, backend.barrier,
                                              sync, progress)
    window_losses = [loss.item() for loss in last_losses]
    t_end = time.time()

    plain = getattr(model, "module", model)  # the model without its data-parallel wrapper
    with torch.no_grad():
        params = [p.detach().double() for p in plain.parameters()]
        checksum = float(sum(p.sum() for p in params))
        abs_checksum = float(sum(p.abs().sum() for p in params))
    if spec.save_params:
        save_params(plain, run_dir.ranks / f"rank{file_rank}.a{attempt}.params.pt")

    result = {
        "rank_info": info.to_dict(),
        "pid": os.getpid(),
        "times": {"process_start": t_process_start, "init_start": t_init_start,
                  "init_end": t_init_end, "first_step_end": t_first_step, "end": t_end},
        "window_times": window_times,
        "window_losses": window_losses,
        "loss_first": loss_first,
        "steps": step.done,
        "step_delay_s": step.delay_s,
        "param_count": sum(p.numel() for p in params),
        "param_checksum": checksum,
        "param_abs_checksum": abs_checksum,
        "peak_rss_bytes": peak_rss_bytes(),
        "cuda_peak_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "threads": {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "affinity": affinity},
    }
    backend.shutdown()
    return result


class FaultContext:
    """What a backend's elastic loop needs from the harness in a fault run: the training step for a
    given step number and rank, the journal, the fault point, and the checksum that proves a resumed
    process holds the committed parameters. The backend owns only restart, restore and commit."""

    def __init__(self, spec: RunSpec, run_dir: RunDir, journal, info, model, optimizer, device):
        import torch.nn as nn

        self.spec, self.run_dir, self.journal = spec, run_dir, journal
        self.model, self.optimizer, self.device = model, optimizer, device
        self.rank_at_start, self.host = info.rank, info.host
        self.total_steps = spec.fault["total_steps"]
        self.checkpoint_every = spec.fault["checkpoint_every"]
        self.loss_fn = nn.CrossEntropyLoss()
        self._batches: dict[int, object] = {}
        self.resumed_at = 0
        self.waiting_since: float | None = None

    def keep_going(self, step: int, size: int) -> bool:
        """Train to total_steps. A scale-up run also goes on until the joined worker has trained
        checkpoint_every steps with the others (or, if it never comes, for --recovery-timeout)."""
        if step < self.total_steps:
            return True
        if self.spec.fault["scenario"] != "join":
            return False
        if size > self.spec.world_size:
            return step < self.resumed_at + self.checkpoint_every
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        return time.monotonic() - self.waiting_since < self.spec.fault["recovery_timeout"]

    def batch(self, step: int, rank: int):
        """The batch of step `step` for rank `rank`: the same after any restart or rank change."""
        from workloads import WORKLOADS
        from workloads.data import SyntheticBatches

        if rank not in self._batches:
            spec = self.spec
            self._batches[rank] = SyntheticBatches(
                batch=spec.batch_size, channels=WORKLOADS[spec.workload].channels, image=spec.image_size,
                classes=spec.num_classes, seed=spec.seed, rank=rank, device=self.device)
        return self._batches[rank].at(step)

    def train_step(self, model, optimizer, step: int, rank: int):
        """Step number `step` (0-based) on this rank, with the fault point before it."""
        from bench.fault import fault_due, wait_for_fault

        if fault_due(self.run_dir.path, self.spec, self.rank_at_start, rank, step):
            wait_for_fault(self.run_dir.path, self.journal, step, rank)
        x, y = self.batch(step, rank)
        optimizer.zero_grad()
        loss = self.loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    def checksum(self) -> float:
        import torch

        with torch.no_grad():
            return float(sum(p.detach().double().sum() for p in self.model.parameters()))

    def resumed(self, step: int, rank: int, size: int, local_rank: int, restart_count: int) -> None:
        self.resumed_at = step
        self.journal.write("resumed", step=step, rank=rank, size=size, local_rank=local_rank,
                           restart_count=restart_count, pid=os.getpid(), host=self.host, checksum=self.checksum())
        if self.spec.save_params and step > 0:
            save_params(self.model, self.run_dir.path / f"resumed-step{step}-pid{os.getpid()}.params.pt")

    def stepped(self, step: int, rank: int, size: int) -> None:
        self.journal.write("step", step=step, rank=rank, size=size)

    def committed(self, step: int, rank: int) -> None:
        self.journal.write("commit", step=step, rank=rank, checksum=self.checksum())


def train_through_faults(spec: RunSpec, run_dir: RunDir, file_rank: int, attempt: int,
                         t_process_start: float) -> dict:
    """A fault run (bench.fault): the backend's elastic loop over FaultContext's steps."""
    import torch

    from bench.fault import Journal

    journal = Journal(run_dir.journal_file(file_rank, attempt))
    journal.write("start", pid=os.getpid())
    backend, info, t_init_start, t_init_end = join_group(spec, run_dir, file_rank, attempt)
    model, optimizer = build_model(spec, torch.device("cpu"))
    ctx = FaultContext(spec, run_dir, journal, info, model, optimizer, torch.device("cpu"))
    final_step = backend.run_elastic(ctx)
    journal.write("finished", step=final_step)
    result = {"rank_info": info.to_dict(), "pid": os.getpid(), "steps": final_step, "param_checksum": ctx.checksum(),
              "times": {"process_start": t_process_start, "init_start": t_init_start, "init_end": t_init_end,
                        "end": time.time()}, "peak_rss_bytes": peak_rss_bytes()}
    if spec.save_params:
        save_params(model, run_dir.ranks / f"rank{file_rank}.a{attempt}.params.pt")
    backend.shutdown()
    return result


def main(argv: list[str]) -> int:
    t_process_start = time.time()
    run_dir = RunDir(argv[0])
    spec = RunSpec.from_dict(json.loads(run_dir.spec_file.read_text()))
    rank, attempt = int(os.environ.get("BENCH_RANK", 0)), int(os.environ.get("BENCH_ATTEMPT", 0))
    run_dir.write(rank, attempt, "start", {"pid": os.getpid(), "time": t_process_start})
    try:
        run = train_through_faults if spec.task == "fault" else train
        result = run(spec, run_dir, rank, attempt, t_process_start)
    except BaseException as exc:
        # When it failed, not when it exited: a rank that fails because a peer died fails later than the
        # peer did, though it may exit first; the parent orders failures by this time.
        run_dir.write(rank, attempt, "error", {"time": time.time(), "type": type(exc).__name__,
                                               "message": str(exc)[:2000]})
        raise
    run_dir.write(rank, attempt, "result", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
